"""When samples fail: skip and report them with ignore_errors=True; when a run dies part-way:
rerun it with checkpoint_interval and it resumes after the last checkpoint, writing every output
exactly once."""

import os

import numpy as np

import lakecompute as lc
from lakecompute.testing.data import make_shapes_dataset


@lc.compute
def brighten(sample_in, sample_out):
    image = sample_in.images.numpy()
    if image.mean() < 60:
        raise ValueError(f"image too dark to brighten (mean {image.mean():.0f})")
    sample_out.append(
        {"images": np.clip(image * 1.2, 0, 255).astype(np.uint8), "labels": sample_in.labels.numpy()}
    )


@lc.compute
def fetch(sample_in, sample_out, outage_file):
    # Stands in for a call to a remote service that goes down while the eval runs.
    if sample_in >= 130 and os.path.exists(outage_file):
        raise ConnectionError("service unavailable")
    sample_out.squares.append(sample_in * sample_in)


def main():
    # 1. ignore_errors: failing samples are skipped and listed in the result.
    ds = make_shapes_dataset("./shapes", n=100, size=(24, 24))
    out = lc.like("./shapes-bright", ds, overwrite=True)
    result = brighten().eval(ds, out, num_workers=2, ignore_errors=True)
    print(f"{result.inputs} inputs, {len(out)} written, {len(result.failed)} skipped")
    for failure in result.failed[:3]:
        print(f"  data_in[{failure.index}]: {failure.error_type}: {failure.message}")
    assert len(out) + len(result.failed) == 100

    # 2. checkpoint_interval: a run that fails at input 130 keeps what its checkpoints committed.
    numbers = list(range(200))
    squares = lc.empty("./squares", overwrite=True)
    squares.create_tensor("squares", dtype="int64")
    with open("./outage", "w"):
        pass
    try:
        # In the calling process (num_workers=0) so that the failure point is the same on every run of
        # this example; a rerun resumes whatever the scheduler or number of workers of either run.
        fetch(outage_file="./outage").eval(numbers, squares, num_workers=0, checkpoint_interval=50)
    except lc.TransformError as err:
        print(
            f"first run failed at data_in[{err.index}]: {err.__cause__!r}; {len(squares)} outputs committed"
        )
    for entry in squares.log():
        print(f"  version {entry['version']}: {entry['message']}")

    # The service is back: the same eval resumes after the last checkpoint.
    os.remove("./outage")
    result = fetch(outage_file="./outage").eval(numbers, squares, num_workers=2, checkpoint_interval=50)
    print(f"second run: {result}")
    assert result.resumed_from == 100  # the checkpoints at 50 and 100 were kept
    assert squares.squares.numpy().tolist() == [n * n for n in numbers]  # every output exactly once


if __name__ == "__main__":
    main()
