"""The Deep Lake tutorial "Data Processing Using Parallel Computing", with lakecompute.

Flip a dataset into a new one, flip another in place, chain flip and resize with lc.compose,
and find the input that broke a transform with lc.TransformError: in a list by its index, in a view
of a dataset by its index in the view or its row in the dataset (either works).
"""

from pathlib import Path

import numpy as np
from PIL import Image

import lakecompute as lc
from lakecompute.demo import write_image_folder
from lakecompute.testing.data import CLASS_NAMES, make_images


@lc.compute
def flip_vertical(sample_in, sample_out):
    # sample_in: an element of data_in (a row of the dataset); sample_out: where outputs go.
    sample_out.append(
        {"labels": sample_in.labels.numpy(), "images": np.flip(sample_in.images.numpy(), axis=0)}
    )
    return sample_out


@lc.compute
def resize(sample_in, sample_out, new_size):
    # Extra arguments are bound when the function is called: resize(new_size=(64, 64)).
    sample_out.labels.append(sample_in.labels.numpy())
    sample_out.images.append(np.array(Image.fromarray(sample_in.images.numpy()).resize(new_size)))
    return sample_out


@lc.compute
def flip_nonblank(sample_in, sample_out):
    # Refuses blank images: sample_in.index is the position in data_in, sample_in.row the dataset row.
    image = sample_in.images.numpy()
    if not image.any():
        raise ValueError(f"blank image at dataset row {sample_in.row}")
    sample_out.append({"labels": sample_in.labels.numpy(), "images": np.flip(image, axis=0)})


@lc.compute
def load_file(sample_in, sample_out):
    # sample_in is a file path here: data_in can be any list.
    path = Path(sample_in)
    sample_out.images.append(np.asarray(Image.open(path).convert("RGB")))
    sample_out.labels.append(CLASS_NAMES.index(path.parent.name))


def main():
    ds_mnist = make_mnist()
    new_dataset(ds_mnist)
    ds = in_place()
    pipeline(ds_mnist)
    recover(ds)
    recover_view(ds_mnist)


def make_mnist():
    # An MNIST stand-in: 28x28 greyscale images of circles, squares and triangles.
    images, labels = make_images(200, size=(28, 28), rgb=False)
    ds_mnist = lc.empty("./mnist", overwrite=True)
    with ds_mnist:
        ds_mnist.create_tensor("images", htype="image", sample_compression="png")
        ds_mnist.create_tensor("labels", htype="class_label", class_names=CLASS_NAMES)
        ds_mnist.extend({"images": images, "labels": labels})
    return ds_mnist


def new_dataset(ds_mnist):
    # 1. Transformations on new datasets: the first 100 samples, flipped, into a dataset like the input.
    ds_mnist_flipped = lc.like("./mnist_flipped", ds_mnist, overwrite=True)
    flip_vertical().eval(ds_mnist[0:100], ds_mnist_flipped, num_workers=2)
    assert np.array_equal(ds_mnist_flipped.images[0].numpy(), np.flip(ds_mnist.images[0].numpy(), axis=0))
    print(f"flipped: {len(ds_mnist_flipped)} samples in {ds_mnist_flipped.path}")


def in_place():
    # 2. Transformations on existing datasets: ingest a folder of images, then flip it in place.
    write_image_folder("./animals", n=30, size=(48, 48))
    ds = lc.ingest_classification("./animals", "./animals_lc", overwrite=True)
    cat = ds.images[0].numpy()
    flip_vertical().eval(ds, num_workers=2)  # no data_out: ds is replaced in one commit
    assert np.array_equal(ds.images[0].numpy(), np.flip(cat, axis=0))
    before = lc.load("./animals_lc", version=ds.version - 1)  # the old content is still there, read-only
    assert np.array_equal(before.images[0].numpy(), cat)
    print(f"in place: {ds.path} is now version {ds.version}")
    return ds


def pipeline(ds_mnist):
    # 3. Dataset processing pipelines.
    flip_resize = lc.compose([flip_vertical(), resize(new_size=(64, 64))])
    ds_mnist_pipe = lc.like("./mnist_pipeline", ds_mnist, overwrite=True)
    result = flip_resize.eval(ds_mnist[0:100], ds_mnist_pipe, num_workers=2)
    assert ds_mnist_pipe.images.shape == (100, 64, 64)
    print(f"pipeline: {result}")


def recover(ds):
    # 4. Recovering from errors: a broken file among the inputs.
    files = sorted(str(p) for p in Path("./animals").rglob("*.*"))
    Path("./animals/circle/broken.png").write_bytes(b"not a png")
    files.insert(3, "./animals/circle/broken.png")
    out = lc.like("./from_files", ds, overwrite=True)
    try:
        load_file().eval(files, out, num_workers=2)
    except lc.TransformError as e:
        failed_idx = e.index
        failed_sample = e.sample
        print(f"failed on data_in[{failed_idx}] = {failed_sample!r}: {e.__cause__!r}")
        assert len(out) == 0  # nothing of the failed eval was committed
        del files[failed_idx]  # remove the problematic sample and run again
    load_file().eval(files, out, num_workers=2)
    print(f"after removing it: {len(out)} samples")


def recover_view(ds_mnist):
    # 5. The same recipe over a view of a dataset: two blank images at rows 70 and 120 of ds_mnist[50:150].
    blank = np.zeros((28, 28), np.uint8)
    with ds_mnist:
        ds_mnist.images[70] = blank
        ds_mnist.images[120] = blank
    rows = list(range(50, 150))
    out = lc.like("./mnist_nonblank", ds_mnist, overwrite=True)
    removed = []
    while True:
        try:
            flip_nonblank().eval(ds_mnist[rows], out, num_workers=2)
            break
        except lc.TransformError as e:
            # e.index is the position in the view (data_in), e.row the dataset row: rows[e.index] == e.row.
            print(f"view: failed on data_in[{e.index}] (dataset row {e.row}): {e.__cause__!r}")
            rows.remove(e.row)  # by dataset row; `del rows[e.index]` removes the same one
            removed.append(e.row)
    print(f"after removing rows {removed}: {len(out)} samples")


if __name__ == "__main__":
    main()
