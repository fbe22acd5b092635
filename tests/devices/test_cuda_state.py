"""The caller's CUDA state: our code never initialises CUDA (nor imports torch.cuda state) in the caller, a
caller that initialised CUDA gets workers that are not forked from it (or a clear error), and a worker's
CUDA out-of-memory is a TransformError naming the batch with batch_size advice."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.errors import RemoteError
from lakecompute.schedulers import ProcessedScheduler, cuda_initialised, is_device_oom
from tests.devices.device_probe import parent_of

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _ints(tmp_path: Path, name: str = "out") -> lc.Dataset:
    out = lc.empty(str(tmp_path / name), overwrite=True)
    out.create_tensor("x", dtype="int64")
    return out


_SCRIPT = """
import os, sys
os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
if sys.argv[1] == "torch":
    import torch
import numpy as np
import lakecompute as lc
from tests.devices.device_probe import parent_of

out = lc.empty(sys.argv[2], overwrite=True)
out.create_tensor("x", dtype="int64")
parent_of().eval(list(range(16)), out, num_workers=2, devices="cuda", progressbar=False)
assert len(out.x) == 16
state = "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized()
print("imported-torch", "torch" in sys.modules, "initialised", state,
      "cuda-modules", sorted(m for m in sys.modules if m.startswith("torch.cuda") and m != "torch.cuda"))
"""


@pytest.mark.timeout(180)
def test_eval_with_devices_never_touches_cuda_in_the_caller(tmp_path: Path) -> None:
    """An eval with devices, in a fresh process, leaves torch unimported when the caller did not import it,
    and CUDA uninitialised (no torch.cuda submodule loaded by us) when it did."""
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    outputs = {}
    for caller in ("plain", "torch"):
        proc = subprocess.run(
            [sys.executable, "-c", _SCRIPT, caller, str(tmp_path / caller)],
            env=env, capture_output=True, text=True, timeout=150, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outputs[caller] = proc.stdout.strip().splitlines()[-1]
    assert outputs["plain"] == "imported-torch False initialised False cuda-modules []"
    assert outputs["torch"].startswith("imported-torch True initialised False cuda-modules")
    listing = "import sys, torch; print(sorted(m for m in sys.modules if m.startswith('torch.cuda.')))"
    with_torch = subprocess.run(
        [sys.executable, "-c", listing],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    assert outputs["torch"].endswith(with_torch)  # no torch.cuda module beyond what `import torch` loads


def test_package_never_names_torch_cuda() -> None:
    """No module of lakecompute names torch.cuda in code (comments and docstrings aside): the caller's CUDA
    state is read only through the attribute torch itself sets up (see cuda_initialised)."""
    found = []
    for path in sorted((ROOT / "lakecompute").rglob("*.py")):
        tokens = [
            t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            if t.type in (tokenize.NAME, tokenize.OP)
        ]  # fmt: skip
        for a, b, c in zip(tokens, tokens[1:], tokens[2:], strict=False):
            if (a.string, b.string, c.string) == ("torch", ".", "cuda"):
                found.append(f"{path.relative_to(ROOT)}:{a.start[0]}")
    assert found == []


def test_cuda_initialised_reads_torchs_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda_initialised() is torch.cuda.is_initialized() when torch is imported, False when torch is not."""
    assert cuda_initialised() is False  # a CPU run: torch never initialised CUDA here
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert cuda_initialised() is True
    monkeypatch.delitem(sys.modules, "torch")
    assert cuda_initialised() is False


@pytest.mark.timeout(120)
def test_eval_after_cuda_was_initialised_does_not_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the caller has initialised CUDA, the default processed scheduler starts its workers from the fork
    server, whose children are not this process's: none of them is forked from a process holding CUDA."""
    forked = _ints(tmp_path, "forked")
    parent_of().eval(list(range(8)), forked, num_workers=2, progressbar=False)
    assert set(forked.x.numpy().tolist()) == {os.getpid()}  # without CUDA: forked from here, as before
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    out = _ints(tmp_path)
    parent_of().eval(list(range(8)), out, num_workers=2, progressbar=False)
    parents = set(out.x.numpy().tolist())
    assert len(out.x) == 8
    assert os.getpid() not in parents  # the fork server's children


def test_explicit_fork_after_cuda_was_initialised_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit start_method='fork' in a caller that initialised CUDA is refused with an error saying why
    and what to use, before any worker starts."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(lc.InvalidArgumentError) as info:
        list(ProcessedScheduler(2, start_method="fork").run(lambda task, progress: task, [1, 2]))
    assert "Cannot re-initialize CUDA in forked subprocess" in str(info.value)
    assert "start_method='forkserver' or 'spawn'" in str(info.value)


# -- out of device memory ----------------------------------------------------------------------------


@lc.compute
def oom_on_batch(batch: Any, sample_out: Any, at: int) -> None:
    """Raise torch's own CUDA out-of-memory error on the batch that holds input ``at``."""
    x = np.atleast_1d(np.asarray(batch))
    if at in x.tolist():
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
        )
    sample_out.x.extend(x * 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("num_workers", "scheduler"), [(0, "serial"), (2, "processed")])
def test_eval_cuda_oom_is_a_transform_error_naming_the_batch(
    tmp_path: Path, num_workers: int, scheduler: str
) -> None:
    """A CUDA out-of-memory error in the function is a TransformError at the batch's first input, whose
    message names the batch and advises a smaller batch_size; the original error is its cause."""
    out = _ints(tmp_path)
    with pytest.raises(lc.TransformError) as info:
        oom_on_batch(at=45).eval(list(range(64)), out, num_workers=num_workers, scheduler=scheduler,
                                 batch_size=8, progressbar=False)  # fmt: skip
    err = info.value
    assert err.index == 40
    message = str(err)
    assert message.startswith(
        "Transform 'oom_on_batch' failed on data_in[40]: OutOfMemoryError: CUDA out of memory"
    )
    assert "The device ran out of memory on the batch data_in[40:48] (batch_size=8). Pass a smaller " \
        "batch_size (such as 4), put fewer workers on each device" in message  # fmt: skip
    assert type(err.__cause__) is torch.cuda.OutOfMemoryError
    assert len(lc.load(out.path).x) == 0


def test_eval_cuda_oom_on_one_sample_advises_without_batch(tmp_path: Path) -> None:
    """Without batch_size the advice names the sample and no batch_size."""
    with pytest.raises(lc.TransformError, match=r"The device ran out of memory on data_in\[3\]\. Free what"):
        oom_on_batch(at=3).eval(list(range(6)), _ints(tmp_path), progressbar=False)


def test_other_errors_get_no_device_advice(tmp_path: Path) -> None:
    """A failure that is not out of device memory carries no device advice."""

    @lc.compute
    def fail(x: Any, sample_out: Any) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(lc.TransformError) as info:
        fail().eval([1], _ints(tmp_path), progressbar=False)
    assert "ran out of memory" not in str(info.value)


@pytest.mark.parametrize(
    ("exc", "oom"),
    [(torch.cuda.OutOfMemoryError("x"), True),
     (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"), True),
     (RemoteError("torch.OutOfMemoryError", "x", "tb"), True),
     (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
     (MemoryError("host memory"), False),
     (ValueError("out of memory budget"), False)],
)  # fmt: skip
def test_is_device_oom(exc: BaseException, oom: bool) -> None:
    """torch's OutOfMemoryError (also standing in as a RemoteError) and CUDA's own message are device OOM;
    other errors, host MemoryError included, are not."""
    assert is_device_oom(exc) is oom


def test_is_device_oom_follows_the_cause_chain() -> None:
    """An OOM wrapped by user code (raise ... from) is still found."""
    outer = RuntimeError("embedding failed")
    outer.__cause__ = torch.cuda.OutOfMemoryError("inner")
    assert is_device_oom(outer)


def _pythonpath() -> str:
    """This checkout first, then the PYTHONPATH this test was given (where the dependencies may be)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
