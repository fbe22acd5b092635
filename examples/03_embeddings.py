"""Add an embedding column computed by a torch model to a dataset, in place and checkpointed (seed:
Accelerate's "distributed datasets mapping"). The images are not copied: only the new column is written.

The model is loaded once per worker, on that worker's device: with ``devices="cuda"`` each worker gets its
own GPU (round robin over the visible ones) and ``lc.worker_device()`` names it; without a GPU the workers
run on the CPU. Reading and decoding the next batch overlaps the model, so the device is kept busy.
"""

import numpy as np
import torch
from torchvision.models import resnet18

import lakecompute as lc
from lakecompute.testing.data import make_shapes_dataset


def train_model(path):
    """Stand-in for training: an untrained ResNet-18 without its classifier, saved like a checkpoint."""
    torch.manual_seed(0)
    model = resnet18(weights=None)
    model.fc = torch.nn.Identity()  # 512-d features instead of 1000 classes
    torch.save(model.state_dict(), path)


@lc.compute
class Embed:
    def __init__(self, weights_path):
        # Runs once per worker, on the device the eval placed it on ("cuda:0" in a worker process with
        # devices=, "cpu" without): the model loads once, never in this process when there are workers.
        self.device = torch.device(lc.worker_device())
        model = resnet18(weights=None)
        model.fc = torch.nn.Identity()
        model.load_state_dict(torch.load(weights_path, weights_only=True))
        self.model = model.eval().to(self.device)

    def __call__(self, batch, sample_out):
        images = torch.from_numpy(batch.images.numpy())  # with batch_size=32: (32, H, W, 3) uint8
        x = images.to(self.device).permute(0, 3, 1, 2).float() / 255
        with torch.inference_mode():
            emb = torch.nn.functional.normalize(self.model(x), dim=1)
        sample_out.embedding.extend(emb.cpu().numpy())  # only the new column: the others stay as they are


def main():
    ds = make_shapes_dataset("./shapes", n=200, size=(32, 32))
    train_model("./model.pt")
    images_before = ds.images.numpy()

    # A new, empty column, filled in place over the dataset's rows; skip_ok: the function writes only it,
    # and the other tensors keep their content (nothing of them is rewritten).
    ds.create_tensor("embedding", htype="embedding", dtype="float32")
    devices = "cuda" if torch.cuda.is_available() else None  # one GPU per worker when there are GPUs
    result = Embed(weights_path="./model.pt").eval(
        ds, num_workers=2, devices=devices, batch_size=32, skip_ok=True, checkpoint_interval=64
    )
    print(result)
    print(f"devices: {devices or 'cpu'}; stages (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in result.stages.items()))  # fmt: skip

    emb = ds.embedding.numpy()
    assert emb.shape == (200, 512)
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
