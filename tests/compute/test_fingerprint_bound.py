"""Fingerprints cover everything a function binds: defaults, keyword-only defaults, closure cells, bound
methods' objects, class attributes and read globals; what has no identity warns once, naming it."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

import lakecompute as lc
from tests.helpers import make_out


def _y(tmp_path: Path) -> list[int]:
    return [int(v) for v in lc.load(str(tmp_path / "out")).y.numpy()]


def _out(tmp_path: Path) -> lc.Dataset:
    return make_out(tmp_path / "out", y={"dtype": "int64"})


def test_loop_idiom_default_makes_a_new_eval(tmp_path: Path) -> None:
    """`def f(sample_in, sample_out, s=i)` in a loop: each i is its own eval, none skipped as done."""
    out = _out(tmp_path)
    for i in (10, 20, 30):

        @lc.compute
        def add(sample_in: Any, sample_out: Any, s: int = i) -> None:
            sample_out.y.append(int(sample_in) + s)

        add().eval([0, 1], out, progressbar=False)
    assert _y(tmp_path) == [10, 11, 20, 21, 30, 31]


def test_keyword_only_default_makes_a_new_eval(tmp_path: Path) -> None:
    """Keyword-only defaults are covered like positional ones."""
    out = _out(tmp_path)
    for i in (1, 2):

        @lc.compute
        def add(sample_in: Any, sample_out: Any, *, s: int = i) -> None:
            sample_out.y.append(int(sample_in) * s)

        add().eval([3], out, progressbar=False)
    assert _y(tmp_path) == [3, 6]


def test_same_default_is_the_same_eval(tmp_path: Path) -> None:
    """Rebuilding the function with the same default is the same eval: the rerun is a no-op."""
    out = _out(tmp_path)
    for _ in range(2):

        @lc.compute
        def add(sample_in: Any, sample_out: Any, s: int = 5) -> None:
            sample_out.y.append(int(sample_in) + s)

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            add().eval([1], out, progressbar=False)
    assert [str(w.message) for w in seen if "already completed" in str(w.message)]
    assert _y(tmp_path) == [6]


def test_default_of_a_helper_the_function_calls_is_covered(tmp_path: Path) -> None:
    """A helper read through a closure brings its own defaults: changing them makes a new eval."""
    out = _out(tmp_path)
    for i in (1, 2):

        def helper(v: int, k: int = i) -> int:
            return v * 100 + k

        @lc.compute
        def use(sample_in: Any, sample_out: Any) -> None:
            sample_out.y.append(helper(int(sample_in)))

        use().eval([1], out, progressbar=False)
    assert _y(tmp_path) == [101, 102]


class Scaler:
    """A plain class whose bound method is the compute's argument."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __lakecompute_fingerprint__(self) -> int:
        return self.k

    def apply(self, v: int) -> int:
        return v * self.k


@lc.compute
def apply_with(sample_in: Any, sample_out: Any, fn: Any) -> None:
    sample_out.y.append(fn(int(sample_in)))


def test_bound_method_argument_covers_its_object(tmp_path: Path) -> None:
    """`fn=Scaler(2).apply` and `fn=Scaler(3).apply` differ in the object bound: two evals."""
    out = _out(tmp_path)
    apply_with(fn=Scaler(2).apply).eval([1, 2], out, progressbar=False)
    apply_with(fn=Scaler(3).apply).eval([1, 2], out, progressbar=False)
    assert _y(tmp_path) == [2, 4, 3, 6]


def test_class_attribute_of_a_class_compute_is_covered(tmp_path: Path) -> None:
    """A class compute whose class attribute differs (built in a loop) is a new eval."""
    out = _out(tmp_path)
    for i in (7, 8):

        @lc.compute
        class Add:
            amount = i

            def __call__(self, sample_in: Any, sample_out: Any) -> None:
                sample_out.y.append(int(sample_in) + self.amount)

        Add().eval([0], out, progressbar=False)
    assert _y(tmp_path) == [7, 8]


def test_init_default_of_a_class_compute_is_covered(tmp_path: Path) -> None:
    """`__init__(self, k=i)` of a class compute built in a loop: a new eval for each i."""
    out = _out(tmp_path)
    for i in (1, 2):

        @lc.compute
        class Mul:
            def __init__(self, k: int = i) -> None:
                self.k = k

            def __call__(self, sample_in: Any, sample_out: Any) -> None:
                sample_out.y.append(int(sample_in) * self.k)

        Mul().eval([5], out, progressbar=False)
    assert _y(tmp_path) == [5, 10]


class Model:
    """An object without a stable identity (no __lakecompute_fingerprint__), like a model."""

    def __init__(self, k: int) -> None:
        self.k = k


@lc.compute
def predict(sample_in: Any, sample_out: Any, model: Any) -> None:
    sample_out.y.append(int(sample_in) * model.k)


def test_unfingerprintable_argument_warns_once_naming_it_and_rerun(tmp_path: Path) -> None:
    """A model object bound as an argument warns once per eval, naming it and rerun=True; the eval is
    recorded by the object's type, so the same call again is a no-op and rerun=True writes again."""
    out = _out(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        predict(model=Model(2)).eval([1, 2], out, progressbar=False)
    messages = [str(w.message) for w in seen if issubclass(w.category, lc.LakeComputeWarning)]
    assert len(messages) == 1, messages
    assert "argument 'model' of predict (a Model)" in messages[0]
    assert "rerun=True" in messages[0]
    assert seen[0].filename == __file__  # it points at the caller's line
    with pytest.warns(lc.LakeComputeWarning) as again:
        predict(model=Model(3)).eval([1, 2], out, progressbar=False)
    assert any("already completed" in str(w.message) for w in again)
    assert _y(tmp_path) == [2, 4]  # the second model was taken for the first, as the warning said
    with pytest.warns(lc.LakeComputeWarning, match="cannot fingerprint argument 'model'"):
        predict(model=Model(3)).eval([1, 2], out, rerun=True, progressbar=False)
    assert _y(tmp_path) == [2, 4, 3, 6]


LOCK = threading.Lock()


@lc.compute
def reads_global_lock(sample_in: Any, sample_out: Any) -> None:
    with LOCK:
        sample_out.y.append(int(sample_in))


def test_unfingerprintable_global_and_closure_are_named(tmp_path: Path) -> None:
    """A global and a captured variable without identity are each named in the one warning."""
    out = _out(tmp_path)
    event = threading.Event()

    @lc.compute
    def both(sample_in: Any, sample_out: Any) -> None:
        event.is_set()
        with LOCK:
            sample_out.y.append(int(sample_in))

    with pytest.warns(lc.LakeComputeWarning) as seen:
        both().eval([1], out, progressbar=False)
    (message,) = [str(w.message) for w in seen]
    assert "variable 'event' captured by" in message
    assert "global 'LOCK' read by" in message
    assert "(a Event)" in message
    assert "(a lock)" in message


@lc.compute
def flaky(sample_in: Any, sample_out: Any, model: Any) -> None:
    if int(sample_in) == int(os.environ.get("LC_TEST_FAIL_AT", "-1")):
        raise RuntimeError("boom")
    sample_out.y.append(int(sample_in) * model.k)


def test_unfingerprintable_argument_checkpoints_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint_interval with a model object bound works (it used to be refused): a failed run resumes
    after its last checkpoint."""
    out = _out(tmp_path)
    monkeypatch.setenv("LC_TEST_FAIL_AT", "7")
    kw: dict[str, Any] = {"checkpoint_interval": 4, "progressbar": False}
    with pytest.warns(lc.LakeComputeWarning), pytest.raises(lc.TransformError):
        flaky(model=Model(1)).eval(list(range(10)), out, **kw)
    assert _y(tmp_path) == [0, 1, 2, 3]
    monkeypatch.delenv("LC_TEST_FAIL_AT")
    with pytest.warns(lc.LakeComputeWarning, match="cannot fingerprint") as seen:
        result = flaky(model=Model(1)).eval(list(range(10)), out, **kw)
    assert len(seen) == 1  # the same eval: no "changed code" warning
    assert result.resumed_from == 4
    assert _y(tmp_path) == list(range(10))


def test_fingerprint_eval_differs_in_defaults_only() -> None:
    """The digest itself: two functions with one source and other defaults fingerprint differently."""
    from lakecompute.compute._fingerprint import fingerprint_code

    def make(i: int) -> Any:
        @lc.compute
        def f(sample_in: Any, sample_out: Any, s: int = i, *, t: tuple[int, ...] = (1, 2)) -> None:
            sample_out.y.append(s)

        return f

    pipelines = [lc.compose([make(1)()]), lc.compose([make(2)()]), lc.compose([make(1)()])]
    digests = [fingerprint_code(p) for p in pipelines]
    assert digests[0] != digests[1]
    assert digests[0] == digests[2]


def _exec_compute(body: str) -> Any:
    """A compute function made by ``exec``: no source to read, only its compiled code."""
    namespace: dict[str, Any] = {"lc": lc, "math": math}
    exec(f"@lc.compute\ndef f(sample_in, sample_out):\n{body}", namespace)
    return namespace["f"]


def test_code_without_source_is_covered_by_its_names(tmp_path: Path) -> None:
    """exec'd functions that differ only in a name they read (math.sin, math.cos) are two evals; the
    same code again is the same eval."""
    out = make_out(tmp_path / "out", y={"dtype": "float64"})

    def run(fn: str) -> None:
        body = f"    sample_out.y.append(math.{fn}(sample_in))\n"
        _exec_compute(body)().eval([0.0], out, progressbar=False)

    run("sin")
    run("cos")
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        run("cos")
    assert lc.load(str(tmp_path / "out")).y.numpy().tolist() == [0.0, 1.0]


def test_nested_code_without_source_is_covered_by_its_names() -> None:
    """A function nested in exec'd code, differing only in a name or a variable, changes the digest."""
    from lakecompute.compute._fingerprint import fingerprint_code

    def digest(inner: str) -> str:
        f = _exec_compute(f"    def g(v):\n        {inner}\n    sample_out.y.append(g(sample_in))\n")
        return fingerprint_code(lc.compose([f()]))

    digests = [digest(body) for body in ("return math.sin(v)", "return math.cos(v)", "w = v; return w")]
    assert len(set(digests)) == 3
    assert digest("return math.sin(v)") == digests[0]


def test_code_without_source_has_one_digest_under_any_hash_seed() -> None:
    """A set literal is a frozenset constant, whose order changes with the hash seed: not the digest."""
    script = (
        "import lakecompute as lc\n"
        "from lakecompute.compute._fingerprint import fingerprint_code\n"
        "ns = {'lc': lc}\n"
        "exec('@lc.compute\\ndef f(sample_in, sample_out):\\n"
        '    sample_out.y.append(sample_in in {"ab", "cd", "ef", "gh", "ij"})\\n\', ns)\n'
        "print(fingerprint_code(lc.compose([ns['f']()])))\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(digests) == 1, digests


FACTOR = 10


class Base:
    """A user base class: its __call__ reads a global, its __init__ has a default."""

    offset = 0

    def __init__(self, k: int = 1) -> None:
        self.k = k

    def __call__(self, sample_in: Any, sample_out: Any) -> None:
        sample_out.y.append(int(sample_in) * FACTOR * self.k + self.offset)


@lc.compute
class Child(Base):
    pass


def test_what_a_class_compute_inherits_is_covered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A global read by an inherited __call__, an inherited class attribute and an inherited __init__'s
    default each make a new eval; the same again is a no-op."""
    out = _out(tmp_path)
    Child().eval([1, 2], out, progressbar=False)
    monkeypatch.setattr(sys.modules[__name__], "FACTOR", 20)
    Child().eval([1, 2], out, progressbar=False)
    monkeypatch.setattr(Base, "offset", 1)
    Child().eval([1], out, progressbar=False)
    monkeypatch.setattr(Base.__init__, "__defaults__", (2,))
    Child().eval([1], out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        Child().eval([1], out, progressbar=False)
    assert _y(tmp_path) == [10, 20, 20, 40, 21, 41]


usercfg: Any = None  # a module of the user's, set by the tests below


@lc.compute
def scaled_by_config(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(usercfg.shift(int(sample_in) * usercfg.SCALE))


@lc.compute
def passes_config_whole(sample_in: Any, sample_out: Any) -> None:
    sample_out.y.append(int(sample_in) * vars(usercfg)["SCALE"])


def _user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``usercfg``: a config module in a folder of the user's (not an installed package)."""
    path = tmp_path / "usercfg_for_fingerprints.py"
    path.write_text("SCALE = 10\nOFFSET = 0\n\ndef shift(v):\n    return v + OFFSET\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, path.stem, module)
    monkeypatch.setattr(sys.modules[__name__], "usercfg", module)
    return module


def test_what_is_read_through_a_user_module_is_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cfg.SCALE`` and a global of ``cfg.shift`` changing each make a new eval; the same is a no-op."""
    module = _user_module(tmp_path, monkeypatch)
    out = _out(tmp_path)
    scaled_by_config().eval([1, 2], out, progressbar=False)
    module.SCALE = 20
    scaled_by_config().eval([1, 2], out, progressbar=False)
    module.OFFSET = 1
    scaled_by_config().eval([1], out, progressbar=False)
    with pytest.warns(lc.LakeComputeWarning, match="already completed"):
        scaled_by_config().eval([1], out, progressbar=False)
    assert _y(tmp_path) == [10, 20, 20, 40, 21]


def test_a_user_module_used_whole_is_named_as_uncovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function that passes the module itself (what it reads from it is unknown) warns, naming it."""
    _user_module(tmp_path, monkeypatch)
    with pytest.warns(
        lc.LakeComputeWarning, match="cannot fingerprint module 'usercfg', which .* uses whole"
    ):
        passes_config_whole().eval([1], _out(tmp_path), progressbar=False)
    assert _y(tmp_path) == [10]
