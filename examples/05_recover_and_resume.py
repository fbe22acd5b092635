"""When samples fail: skip and report them with ignore_errors=True; when a run dies part-way:
rerun it with checkpoint_interval and it resumes after the last checkpoint, writing every output
exactly once; when it failed on a bug: fix the bug and rerun, and it resumes the same way."""

import os
import warnings

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


# The bug: sizes come in "small", "medium" and "large", and "large" was forgotten.
SCALE = {"small": 1, "medium": 10}


@lc.compute
def to_number(sample_in, sample_out):
    sample_out.values.append(SCALE[sample_in])


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

    # 3. Fix the bug and rerun: the first "large" size (input 74) fails the run; 70 outputs are kept.
    sizes = ["small", "medium"] * 37 + ["large"] * 26
    values = lc.empty("./values", overwrite=True)
    values.create_tensor("values", dtype="int64")
    try:
        to_number().eval(sizes, values, num_workers=0, checkpoint_interval=10)
    except lc.TransformError as err:
        print(f"buggy run failed at data_in[{err.index}]: {err.__cause__!r}; {len(values)} outputs kept")
    SCALE["large"] = 100  # the fix (editing the function's code instead works the same way)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = to_number().eval(sizes, values, num_workers=2, checkpoint_interval=10)
    print(f"fixed run: resumed_from={result.resumed_from}; warned: {caught[0].message}")
    assert values.values.numpy().tolist() == [SCALE[s] for s in sizes]  # each output once, none twice


if __name__ == "__main__":
    main()
