"""Train a tiny torch model for one epoch on a dataset augmented on the fly, stop mid-epoch, and resume
from the saved step: the resumed run ends with exactly the weights of an uninterrupted one."""

import numpy as np
import torch

import lakecompute as lc
from lakecompute.testing.data import CLASS_NAMES, make_shapes_dataset

BATCH = 32
WORKERS = 2  # batches depend on the loader's worker count: a resumed run must use the same
STOP_AT = 7  # the step after which the first run "crashes"


@lc.compute
def flip_and_shift(sample_in, sample_out, rng):
    """Mirror half the images and shift each by a few pixels; float CxHxW in [0, 1] for the model.

    The same code runs offline with eval(); here it runs in the loader workers. ``rng`` is derived from
    (seed, epoch, sample index), so a sample gets the same augmentation after a resume, on any worker.
    """
    image = sample_in.images.numpy()
    if rng.random() < 0.5:
        image = image[:, ::-1]
    image = np.roll(image, tuple(rng.integers(-3, 4, 2)), axis=(0, 1))
    sample_out.append(
        {
            "images": image.transpose(2, 0, 1).astype(np.float32) / 255,
            "labels": sample_in.labels.numpy().astype(np.int64),
        }
    )


def new_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.LazyLinear(len(CLASS_NAMES)),
    )
    model(torch.zeros(1, 3, 32, 32))  # materialise the lazy layer before an optimizer sees it
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def loader(ds, start_from_step=0):
    """The epoch's DataLoader from step start_from_step: every run passes the same other options."""
    return ds.pytorch(
        BATCH,
        shuffle=True,
        seed=1,
        epoch=0,
        start_from_step=start_from_step,
        transform=flip_and_shift(),
        num_workers=WORKERS,
    )


def train(ds, model, optimizer, start_from_step=0, stop_at=None):
    """One epoch (or its steps start_from_step .. stop_at); returns the losses and the steps done."""
    losses = []
    step = start_from_step
    for step, batch in enumerate(loader(ds, start_from_step), start=start_from_step):
        loss = torch.nn.functional.cross_entropy(model(batch["images"]), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if stop_at is not None and step + 1 == stop_at:
            break
    return losses, step + 1


def main():
    torch.set_num_threads(1)  # bit-identical float sums between the two runs
    # 512 samples: each of the 2 loader workers is dealt 256, exactly 8 batches of 32.
    ds = make_shapes_dataset("./shapes", n=512, size=(32, 32))
    print(f"{len(ds)} samples; {len(loader(ds))} steps of {BATCH} per epoch ({WORKERS} loader workers)")

    # The uninterrupted run.
    full, optimizer = new_model()
    losses, _ = train(ds, full, optimizer)
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f"one epoch: mean loss {first:.2f} over the first 3 steps, {last:.2f} over the last 3")

    # The same epoch, stopped after STOP_AT steps with a checkpoint, then resumed as a new process would.
    model, optimizer = new_model()
    _, done = train(ds, model, optimizer, stop_at=STOP_AT)
    torch.save({"step": done, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")

    checkpoint = torch.load("ckpt.pt")
    resumed, optimizer = new_model()
    resumed.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    train(ds, resumed, optimizer, start_from_step=checkpoint["step"])
    same = all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters(), strict=True))
    print(f"resumed at step {checkpoint['step']}: weights identical to the uninterrupted run: {same}")
    assert same


if __name__ == "__main__":
    main()
