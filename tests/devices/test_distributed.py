"""Evals inside a torch.distributed job: two gloo ranks under torchrun (real processes) call the same eval,
which is split among them, written once per input, in order, and committed once; killed, it resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.schedulers import visible_devices

pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("dist_script.py")


def torchrun(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """Run dist_script.py on two local ranks (with ``env`` added to the environment); its exit code, the JSON
    lines the ranks printed (by rank), and what it wrote to stderr."""
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "OMP_NUM_THREADS": "1", **(env or {})}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*launch, str(SCRIPT), *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=str(ROOT),
    )  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, sorted(lines, key=lambda d: d["rank"]), proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_eval_on_two_ranks_adds_a_column_once(tmp_path: Path, workers: int) -> None:
    """An in-place eval called on both ranks (computing in the rank's own process, or on two worker processes
    of each rank) is split between them, written once per input in order, and made visible by one commit;
    both ranks return the same result and see it."""
    path = str(tmp_path / "ds")
    code, results, err = torchrun("column", path, "48", "--workers", str(workers))
    assert code == 0, err
    assert [r["rank"] for r in results] == [0, 1]
    first, second = results
    assert first == {**second, "rank": 0}  # the same result, version and view on both ranks
    assert first["outputs"]["y"] == 48
    assert first["seen"] == 48
    ds = lc.load(path)
    np.testing.assert_array_equal(ds.y.numpy(), 2 * np.arange(48))
    assert set(ds.rank.numpy().tolist()) == {0, 1}  # both ranks did work
    log = ds.log()
    evals = [v for v in log if v["message"].startswith("eval ")]
    assert len(evals) == 1  # one commit
    assert evals[0]["version"] == first["version"] == ds.version


@pytest.mark.timeout(300)
def test_batched_eval_on_two_ranks_adds_a_column_once(tmp_path: Path) -> None:
    """A batched in-place eval on both ranks (the second rank's first batch runs beside the preflight's):
    every input written once, in order, by one commit, and both ranks did work."""
    path = str(tmp_path / "ds")
    code, results, err = torchrun("column", path, "48", "--batch", "4")
    assert code == 0, err
    first, second = results
    assert first == {**second, "rank": 0}
    assert first["outputs"]["y"] == 48
    ds = lc.load(path)
    np.testing.assert_array_equal(ds.y.numpy(), 2 * np.arange(48))
    assert set(ds.rank.numpy().tolist()) == {0, 1}
    assert len([v for v in ds.log() if v["message"].startswith("eval ")]) == 1


@pytest.mark.timeout(400)
def test_eval_on_two_ranks_resumes_after_a_rank_is_killed(tmp_path: Path) -> None:
    """When rank 1 is killed mid-eval, torchrun stops the job and the checkpoints stay: the same job run again
    resumes there, and every input is written once, in order."""
    path, marker = str(tmp_path / "out"), str(tmp_path / "killed")
    args = ("list", path, "64", "--interval", "8", "--kill-at", "40", "--marker", marker)
    code, _, _ = torchrun(*args)
    assert code != 0
    assert os.path.exists(marker)  # rank 1 did die
    kept = lc.load(path).y.numpy().tolist()
    assert len(kept) % 8 == 0
    assert len(kept) <= 40
    assert kept == [2 * i for i in range(len(kept))]
    code, results, err = torchrun(*args)
    assert code == 0, err
    assert [r["resumed_from"] for r in results] == [len(kept), len(kept)]
    np.testing.assert_array_equal(lc.load(path).y.numpy(), 2 * np.arange(64))


@pytest.mark.timeout(300)
def test_ranks_calling_different_evals_are_refused(tmp_path: Path) -> None:
    """Ranks that call eval with different inputs both get an InvalidArgumentError naming the difference,
    and nothing is written."""
    path = str(tmp_path / "out")
    code, results, err = torchrun("mismatch", path, "16")
    assert code == 0, err
    assert [r.get("error") for r in results] == ["InvalidArgumentError"] * 2
    assert results[0]["message"] == results[1]["message"]
    assert "Rank 1 called eval with data_in a list (17 rows" in results[0]["message"]
    assert "rank 0 with a list (16 rows" in results[0]["message"]
    assert len(lc.load(path).y) == 0


@pytest.mark.timeout(300)
def test_ranks_with_other_lists_of_one_length_are_refused(tmp_path: Path) -> None:
    """Ranks whose lists have the same length but other values are told apart by a digest of their content:
    both refuse with the same InvalidArgumentError naming data_in, and nothing is written (they used to
    both succeed, the output mixing rank 1's values under rank 0's record)."""
    path = str(tmp_path / "out")
    code, results, err = torchrun("samelength", path, "16")
    assert code == 0, err
    assert [r.get("error") for r in results] == ["InvalidArgumentError"] * 2, results
    assert results[0]["message"] == results[1]["message"]
    message = results[0]["message"]
    assert "Rank 1 called eval with data_in a list (16 rows, content digest" in message
    assert "same input, value for value" in message
    assert len(lc.load(path).y) == 0


@pytest.mark.timeout(300)
def test_a_rank_refusing_its_options_refuses_on_every_rank(tmp_path: Path) -> None:
    """Rank 1 alone passes a bad option: both ranks raise its InvalidArgumentError at once (rank 0 used to
    wait for rank 1 until the timeout), and the next eval, called alike on both, runs: the ranks stay in
    step."""
    path = str(tmp_path / "out")
    code, lines, err = torchrun("badoption", path, "16", env={"LAKECOMPUTE_DISTRIBUTED_TIMEOUT": "60"})
    assert code == 0, err
    refused = [line for line in lines if "refused" in line]
    assert [r["refused"] for r in refused] == ["InvalidArgumentError"] * 2, lines
    assert refused[0]["message"] == refused[1]["message"]
    assert "num_workers" in refused[0]["message"]
    results = [line for line in lines if "inputs" in line]
    assert [r["inputs"] for r in results] == [16, 16]
    np.testing.assert_array_equal(lc.load(path).y.numpy(), 2 * np.arange(16))


@pytest.mark.timeout(400)
def test_accelerate_example_on_two_processes(tmp_path: Path) -> None:
    """examples/08_accelerate.py (the docs' Accelerate recipe) under torchrun with two processes: both return
    the same result, and one commit made the column visible."""
    pytest.importorskip("accelerate")
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "OMP_NUM_THREADS": "1"}
    if len(visible_devices()) == 1:
        # Accelerate puts process k on GPU k: with one GPU, process 1 fails in Accelerate's own barrier
        # ("invalid device ordinal", seen on an H200 machine). Both run on the CPU, as on a machine without.
        env["CUDA_VISIBLE_DEVICES"] = ""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*launch, str(ROOT / "examples" / "08_accelerate.py")],
        env=env, capture_output=True, text=True, timeout=360, check=False, cwd=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for k in (0, 1):
        assert f"process {k} of 2: 256 embeddings at version 6, column (256, 512)" in proc.stdout
    assert "1 commit made it visible: eval Embed (in place)" in proc.stdout
    assert lc.load(str(tmp_path / "shapes")).embedding.numpy().shape == (256, 512)


def _pythonpath() -> str:
    """This checkout first, then the PYTHONPATH this test was given (where the dependencies may be)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
