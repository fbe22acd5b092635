"""An embedding column inside an Accelerate (or torchrun) job: every process calls the same eval, which
is split among the processes and committed once — the seed's "map on every process, gather, add the
column" as one call. It runs as one process too:

    python examples/08_accelerate.py
    accelerate launch --num_processes 2 examples/08_accelerate.py     # or: torchrun --nproc_per_node 2 ...

Each process runs its share with the model on its own device (``devices="cuda"``: process k of a machine
takes GPU k; on CPUs, the CPU). The processes need not share anything but the dataset's folder.
"""

import numpy as np
import torch
from accelerate import Accelerator
from torchvision.models import resnet18

import lakecompute as lc
from lakecompute.testing.data import make_shapes_dataset


@lc.compute
class Embed:
    def __init__(self, weights_path):
        torch.set_num_threads(1)
        self.device = torch.device(lc.worker_device())  # this process's GPU with devices="cuda"
        model = resnet18(weights=None)
        model.fc = torch.nn.Identity()
        model.load_state_dict(torch.load(weights_path, weights_only=True))
        self.model = model.eval().to(self.device)

    def __call__(self, batch, sample_out):
        x = torch.from_numpy(batch.images.numpy()).to(self.device).permute(0, 3, 1, 2).float() / 255
        with torch.inference_mode():
            sample_out.embedding.extend(self.model(x).cpu().numpy())


def main():
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    # Changes to the dataset are made by one process; the others open it once it is there.
    if accelerator.is_main_process:
        ds = make_shapes_dataset("./shapes", n=256, size=(32, 32))
        ds.create_tensor("embedding", htype="embedding", dtype="float32")
        torch.manual_seed(0)
        model = resnet18(weights=None)
        model.fc = torch.nn.Identity()
        torch.save(model.state_dict(), "./model.pt")
    accelerator.wait_for_everyone()
    ds = lc.load("./shapes")

    # Called on every process with the same arguments: one eval, split among them, committed once.
    devices = "cuda" if accelerator.device.type == "cuda" else None
    result = Embed(weights_path="./model.pt").eval(
        ds, batch_size=32, skip_ok=True, devices=devices, checkpoint_interval=64,
        progressbar=accelerator.is_main_process,
    )  # fmt: skip
    print(
        f"process {accelerator.process_index} of {accelerator.num_processes}: "
        f"{result.outputs['embedding']} embeddings at version {result.version}, "
        f"column {ds.embedding.numpy().shape}",
        flush=True,
    )
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        assert np.isfinite(ds.embedding.numpy()).all()
        # Checkpoints (in place, they change nothing readers see) aside, one commit made the column visible.
        log = [v["message"] for v in ds.log()]
        commits = [m for m in log if m.startswith("eval") and "checkpoint" not in m]
        print(f"{len(commits)} commit made it visible: {commits[-1]}")


if __name__ == "__main__":
    main()
