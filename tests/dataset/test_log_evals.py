"""``ds.log(evals=True)`` and ``lakecompute log --evals`` fold an eval's checkpoint versions into one entry
(issue 39); the plain log keeps one entry per version."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from tests.helpers import make_out, run_cli


@lc.compute
def double(sample_in: Any, sample_out: Any) -> None:
    sample_out.x.append(2 * int(sample_in))


@lc.compute
def double_fails_on_request(sample_in: Any, sample_out: Any) -> None:
    """Raises on the input the environment names (not part of the fingerprint: a rerun is the same eval)."""
    if str(sample_in) == os.environ.get("LC_TEST_BAD_INPUT"):
        raise ValueError(f"input {int(sample_in)} is bad")
    sample_out.x.append(2 * int(sample_in))


def _evals(entries: list[dict[str, Any]]) -> list[tuple[int, str, list[int]]]:
    return [
        (e["version"], e["eval"]["status"], e["eval"].get("checkpoints", [])) for e in entries if "eval" in e
    ]


def test_an_evals_checkpoints_fold_into_its_last_version(tmp_path: Path) -> None:
    out = make_out(tmp_path / "out")
    out.x.append(-1)
    start = out.version
    double().eval(list(range(300)), out, checkpoint_interval=100, progressbar=False)
    out.x.append(-2)
    plain = out.log()
    assert _evals(plain) == [(start + 1, "running", []), (start + 2, "running", []), (start + 3, "done", [])]
    folded = out.log(evals=True)
    assert _evals(folded) == [(start + 3, "done", [start + 1, start + 2])]
    assert [e["version"] for e in folded] == [*range(start + 1), start + 3, start + 4]
    entry = folded[start + 1]
    assert entry["parents"] == [start]  # the first checkpoint's: the line of parents stays unbroken
    assert entry["samples"] == {"x": 301}
    assert folded[-1]["parents"] == [start + 3]


def test_an_unfinished_eval_folds_into_its_newest_checkpoint_and_its_resume_joins_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed checkpointed eval: one entry (its newest checkpoint, running); rerun, it resumes, and all of
    its versions fold into the one that finished it. Another eval after it is an entry of its own."""
    out = make_out(tmp_path / "out")
    monkeypatch.setenv("LC_TEST_BAD_INPUT", "250")
    with pytest.raises(lc.TransformError):
        double_fails_on_request().eval(list(range(300)), out, checkpoint_interval=100, progressbar=False)
    assert _evals(out.log(evals=True)) == [(3, "running", [2])]
    monkeypatch.delenv("LC_TEST_BAD_INPUT")
    result = double_fails_on_request().eval(list(range(300)), out, checkpoint_interval=100, progressbar=False)
    assert result.resumed_from == 200
    double().eval(list(range(5)), out, progressbar=False)
    reloaded = lc.load(str(tmp_path / "out"))
    statuses = [(v, s) for v, s, _ in _evals(reloaded.log())]
    assert statuses == [(2, "running"), (3, "running"), (4, "done"), (5, "done")]
    assert _evals(reloaded.log(evals=True)) == [(4, "done", [2, 3]), (5, "done", [])]


def test_log_evals_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = make_out(tmp_path / "out")
    double().eval(list(range(300)), out, checkpoint_interval=100, progressbar=False)
    code, text, _ = run_cli(capsys, "log", str(tmp_path / "out"), "--evals")
    assert code == 0
    lines = text.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["0", "1", "4"]
    assert "(+2 checkpoints: 2-3)" in lines[-1]
    code, text, _ = run_cli(capsys, "log", str(tmp_path / "out"))
    assert [line.split()[0] for line in text.splitlines()[1:]] == ["0", "1", "2", "3", "4"]
    code, text, _ = run_cli(capsys, "log", str(tmp_path / "out"), "--evals", "--graph")
    assert code == 0
    assert len(text.splitlines()) == 1 + 3
