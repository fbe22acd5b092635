"""Add an embedding column, computed by a model each worker loads once, to a dataset in place (seed:
Accelerate's "distributed datasets mapping"). The images are not copied: only the new column is written.
The model is a small numpy network saved to a file."""

import numpy as np

import lakecompute as lc
from lakecompute.testing.data import make_shapes_dataset

DIM = 16


def train_model(path, input_size):
    """Stand-in for a real model: a fixed random projection, saved like a checkpoint."""
    rng = np.random.default_rng(0)
    np.save(path, rng.normal(0, 1 / np.sqrt(input_size), (input_size, DIM)).astype(np.float32))


@lc.compute
class Embed:
    def __init__(self, weights_path):
        # Runs once per worker (with num_workers=0, once in this process); never in both.
        self.weights = np.load(weights_path)

    def __call__(self, sample_in, sample_out):
        images = sample_in.images.numpy()  # with batch_size=32: a stacked batch of images
        x = images.reshape(len(images), -1).astype(np.float32) / 255
        emb = np.tanh(x @ self.weights)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        sample_out.embedding.extend(emb)  # only the new column: images and labels stay as they are


def main():
    ds = make_shapes_dataset("./shapes", n=200, size=(32, 32))
    train_model("./model.npy", input_size=32 * 32 * 3)

    images_before = ds.images.numpy()

    # A new, empty column, filled in place over the dataset's rows; skip_ok: the function writes
    # only it, and the other tensors keep their content (nothing of them is rewritten).
    ds.create_tensor("embedding", htype="embedding", dtype="float32")
    result = Embed(weights_path="./model.npy").eval(ds, num_workers=2, batch_size=32, skip_ok=True)
    print(result)

    emb = ds.embedding.numpy()
    assert emb.shape == (200, DIM)
    assert np.array_equal(ds.images.numpy(), images_before)
    # Use it: the nearest neighbour of each sample by cosine similarity.
    sims = emb @ emb.T
    np.fill_diagonal(sims, -np.inf)
    nearest = sims.argmax(axis=1)
    labels = ds.labels.numpy()
    agree = float((labels[nearest] == labels).mean())
    print(f"embedding {emb.shape}; nearest neighbour has the same label for {agree:.0%} of samples")


if __name__ == "__main__":
    main()
