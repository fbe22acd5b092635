"""Add an embedding column computed by a model that each worker loads once (seed: Accelerate's
"distributed datasets mapping"). The model is a small numpy network saved to a file."""

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
        # Runs once per worker (and once in the caller, which checks the first sample first).
        self.weights = np.load(weights_path)

    def __call__(self, sample_in, sample_out):
        images = sample_in.images.numpy()  # with batch_size=32: a stacked batch of images
        x = images.reshape(len(images), -1).astype(np.float32) / 255
        emb = np.tanh(x @ self.weights)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        sample_out.extend({"images": images, "labels": sample_in.labels.numpy(), "embedding": emb})


def main():
    ds = make_shapes_dataset("./shapes", n=200, size=(32, 32))
    train_model("./model.npy", input_size=32 * 32 * 3)

    # The output: the input's tensors plus the new column, in the input's order.
    out = lc.like("./shapes-embedded", ds, overwrite=True)
    out.create_tensor("embedding", htype="embedding", dtype="float32")
    result = Embed(weights_path="./model.npy").eval(ds, out, num_workers=2, batch_size=32)
    print(result)

    emb = out.embedding.numpy()
    assert emb.shape == (200, DIM)
    assert np.array_equal(out.images.numpy(), ds.images.numpy())
    # Use it: the nearest neighbour of each sample by cosine similarity.
    sims = emb @ emb.T
    np.fill_diagonal(sims, -np.inf)
    nearest = sims.argmax(axis=1)
    labels = out.labels.numpy()
    agree = float((labels[nearest] == labels).mean())
    print(f"embedding {emb.shape}; nearest neighbour has the same label for {agree:.0%} of samples")


if __name__ == "__main__":
    main()
