"""Ingest a folder of images of mixed formats and sizes, then augment it: three outputs per input."""

import numpy as np
from PIL import Image

import lakecompute as lc
from lakecompute.demo import write_image_folder
from lakecompute.viz import contact_sheet

SIZE = 48


@lc.compute
def augment(sample_in, sample_out, copies, rng):
    # rng: a numpy Generator per input sample, derived from eval's seed and the sample's index, so
    # the output is the same whatever worker runs it (and after a resume).
    image = Image.fromarray(sample_in.images.numpy())
    for _ in range(copies):
        w, h = image.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        crop = image.crop((x, y, x + cw, y + ch)).resize((SIZE, SIZE))
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(crop).astype(np.float32) * rng.uniform(0.7, 1.3)  # brightness jitter
        sample_out.append(
            {"images": pixels.clip(0, 255).astype(np.uint8), "labels": sample_in.labels.numpy()}
        )


def main():
    # PNG, JPEG, WebP and BMP files in class folders; every third image is larger.
    write_image_folder("./shapes-files", n=60, size=(40, 40), vary_size=True)
    ds = lc.ingest_classification("./shapes-files", "./shapes", image_compression="png", overwrite=True)
    ds.summary()  # images have shape (60, None, None, 3): sizes vary

    out = lc.like("./shapes-augmented", ds, overwrite=True)
    result = augment(copies=3).eval(ds, out, num_workers=2, seed=0)
    assert result.outputs == {"images": 180, "labels": 180}
    # The same seed gives the same augmentations, whatever the number of workers.
    again = lc.like("./shapes-augmented-again", ds, overwrite=True)
    augment(copies=3).eval(ds, again, num_workers=0, seed=0, progressbar=False)
    assert np.array_equal(again.images.numpy(), out.images.numpy())
    assert out.images.shape == (180, SIZE, SIZE, 3)
    out.summary()

    contact_sheet(out, cols=9, rows=3).save("augmented.png")
    print("wrote augmented.png")


if __name__ == "__main__":
    main()
