"""Train a tiny torch model for one epoch from an augmented dataset, stop mid-epoch, and resume from the
saved step: the resumed run ends with exactly the weights of an uninterrupted one."""

import numpy as np
import torch

import lakecompute as lc
from lakecompute.testing.data import CLASS_NAMES, make_shapes_dataset

BATCH = 32
STOP_AT = 7  # the step after which the first run "crashes"


@lc.compute
def flip_and_shift(sample_in, sample_out, seed):
    """Two augmented copies of each image: mirrored or not, shifted by a few pixels."""
    image = sample_in.images.numpy()
    rng = np.random.default_rng([seed, sample_in.index])  # per sample: the same for any worker count
    for _ in range(2):
        out = image[:, ::-1] if rng.random() < 0.5 else image
        out = np.roll(out, tuple(rng.integers(-3, 4, 2)), axis=(0, 1))
        sample_out.append({"images": np.ascontiguousarray(out), "labels": sample_in.labels.numpy()})


def to_float(batch):
    """On the fly, in the loader workers: uint8 HxWxC images to float CxHxW in [0, 1]."""
    images = batch["images"].astype(np.float32).transpose(0, 3, 1, 2) / 255
    return {"images": images, "labels": batch["labels"].astype(np.int64)}


def new_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.LazyLinear(len(CLASS_NAMES)),
    )


def train(ds, model, optimizer, start_from_step=0, stop_at=None):
    """One epoch (or its steps start_from_step .. stop_at); returns the mean loss and the last step done."""
    loader = ds.pytorch(
        BATCH,
        shuffle=True,
        seed=1,
        epoch=0,
        start_from_step=start_from_step,
        transform=to_float,
        num_workers=2,
    )
    losses = []
    step = start_from_step
    for step, batch in enumerate(loader, start=start_from_step):
        loss = torch.nn.functional.cross_entropy(model(batch["images"]), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if stop_at is not None and step + 1 == stop_at:
            break
    return float(np.mean(losses)), step + 1


def main():
    torch.set_num_threads(1)  # bit-identical float sums between the two runs
    source = make_shapes_dataset("./shapes", n=240, size=(32, 32))
    augmented = lc.like("./shapes-augmented", source, overwrite=True)
    flip_and_shift(seed=0).eval(source, augmented, num_workers=2)
    print(f"augmented: {len(augmented)} samples; {len(augmented.pytorch(BATCH))} steps of {BATCH} per epoch")

    # The uninterrupted run.
    full = new_model()
    full(torch.zeros(1, 3, 32, 32))  # materialise the lazy layer before the optimizer sees it
    optimizer = torch.optim.SGD(full.parameters(), lr=0.1)
    loss, _ = train(augmented, full, optimizer)
    print(f"one epoch: mean loss {loss:.3f}")

    # The same epoch, stopped after STOP_AT steps with a checkpoint, then resumed in a new "process".
    model = new_model()
    model(torch.zeros(1, 3, 32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _, done = train(augmented, model, optimizer, stop_at=STOP_AT)
    torch.save({"step": done, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")

    checkpoint = torch.load("ckpt.pt")
    resumed = new_model()
    resumed(torch.zeros(1, 3, 32, 32))
    resumed.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.SGD(resumed.parameters(), lr=0.1)
    optimizer.load_state_dict(checkpoint["optimizer"])
    train(augmented, resumed, optimizer, start_from_step=checkpoint["step"])
    same = all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters(), strict=True))
    print(f"resumed at step {checkpoint['step']}: weights identical to the uninterrupted run: {same}")
    assert same


if __name__ == "__main__":
    main()
