"""The disk cache's parts on their own: the size parser (property-tested), the options, entries written
and read back whole, damage, pins, the bound, ``lakecompute cache info|clear``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.errors import InvalidArgumentError, InvalidTypeError, LakeComputeError
from lakecompute.parsing import parse_size
from lakecompute.storage import CACHE_DIR_ENV, CacheSpec, DiskCache, cache_spec

ROOT = Path(__file__).resolve().parents[2]
UNITS = ["", "b", "B", "kb", "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB", "PiB", "gB", "Gib"]


@pytest.mark.parametrize(
    ("text", "size"),
    [("20GB", 20 * 10**9), ("500 MB", 500 * 10**6), ("1.5GiB", 3 * 2**29), ("4096", 4096), (" 7 b ", 7),
     ("0.1GB", 10**8), (".5KiB", 512), ("3.", 3), (12, 12), (np.int64(5), 5), ("0", 0)],
)  # fmt: skip
def test_parse_size_reads_counts_and_units(text: object, size: int) -> None:
    got = parse_size("cache_size", text)
    assert got == size
    assert type(got) is int


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [("20 GBs", InvalidArgumentError, "units B, KB"), ("-1GB", InvalidArgumentError, "'-1GB'"),
     (-1, InvalidArgumentError, ">= 0"), ("", InvalidArgumentError, "Got ''"),
     ("1e9", InvalidArgumentError, "1e9"), (1.5, InvalidTypeError, "float"), (True, InvalidTypeError, "bool"),
     ("9" * 30, InvalidArgumentError, "8 EiB"), ("x" * 100, InvalidArgumentError, "xxxx")],
)  # fmt: skip
def test_parse_size_refuses_what_is_not_a_size(value: object, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match="cache_size") as caught:
        parse_size("cache_size", value)
    assert words in str(caught.value)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.builds(
            lambda sign, whole, dot, frac, space, unit, tail: f"{sign}{whole}{dot}{frac}{space}{unit}{tail}",
            st.sampled_from(["", "", "-", "+"]),
            st.text("0123456789", max_size=25),
            st.sampled_from(["", "", ".", ","]),
            st.text("0123456789", max_size=25),
            st.sampled_from(["", " ", "\t", "\n"]),
            st.sampled_from(UNITS),
            st.sampled_from(["", "", "s", " ", "\x00", "é"]),
        ),
        st.text(max_size=70),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True),
        st.none(),
    )
)
def test_near_valid_sizes_give_a_size_or_a_library_error(value: object) -> None:
    try:
        size = parse_size("cache_size", value)
    except LakeComputeError:
        return
    assert isinstance(size, int)
    assert 0 <= size < 2**63


def test_cache_spec_takes_the_folder_from_the_argument_the_handle_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert cache_spec() is None
    assert cache_spec(tmp_path, "1GB") == CacheSpec(str(tmp_path), 10**9)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "env"))
    assert cache_spec() == CacheSpec(str(tmp_path / "env"), 20 * 10**9)
    handle = CacheSpec(str(tmp_path / "h"), 5)
    assert cache_spec(None, None, inherit=handle) == handle
    assert cache_spec(None, 9, inherit=handle) == CacheSpec(str(tmp_path / "h"), 9)
    assert cache_spec(tmp_path, 0) is None  # a bound of 0: no cache
    with pytest.raises(InvalidTypeError, match="cache_dir"):
        cache_spec(3)
    with pytest.raises(InvalidArgumentError, match="cache_dir"):
        cache_spec("")


def _entry_bytes(n: int, seed: int = 0) -> bytes:
    import google_crc32c

    body = np.random.default_rng(seed).bytes(n)
    return body + int(google_crc32c.value(body)).to_bytes(4, "little")


def test_entries_are_read_back_whole_and_checked(tmp_path: Path) -> None:
    cache = DiskCache(CacheSpec(str(tmp_path), 10**6))
    payload = _entry_bytes(1000)
    cache.write("a" * 32, "seg/data/c/0", 500, payload, "{}")
    assert cache.read("a" * 32, "seg/data/c/0", 500) == payload[:-4]  # verified: without its crc32c
    assert cache.read("a" * 32, "seg/data/c/0", 400) == payload[:-4]  # holds more than needed
    assert cache.read("a" * 32, "seg/data/c/0", 501) is None  # holds too few items: fetched again
    assert cache.read("b" * 32, "seg/data/c/0", 1) is None  # another dataset's namespace
    (path,) = [p for p in (tmp_path / "lakecompute-cache").rglob("*") if p.is_file() and len(p.name) == 38]
    data = bytearray(path.read_bytes())
    data[-10] ^= 1
    path.write_bytes(data)
    assert cache.read("a" * 32, "seg/data/c/0", 1) is None
    assert not path.exists()  # the damaged entry is removed


def test_the_bound_evicts_least_recently_used_and_passes_pinned_entries_by(tmp_path: Path) -> None:
    import fcntl

    cache = DiskCache(CacheSpec(str(tmp_path), 5500))
    ns = "c" * 32
    cache.write(ns, "k0", 1, _entry_bytes(1000, 0), "{}")
    (pinned,) = [p for p in (tmp_path / "lakecompute-cache").rglob("*") if p.is_file() and len(p.name) == 38]
    for i in range(1, 5):
        cache.write(ns, f"k{i}", 1, _entry_bytes(1000, i), "{}")
    assert all(cache.read(ns, f"k{i}", 1) is not None for i in (0, 2, 3, 4))  # k1 least recently used
    # k0 is the next to go after k1, but a reader holds it
    with open(pinned, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # as a reader holds it
        cache.write(ns, "k5", 1, _entry_bytes(1000, 5), "{}")
        assert os.path.exists(pinned)
    assert cache.read(ns, "k1", 1) is None
    assert cache.read(ns, "k0", 1) is not None
    assert cache.read(ns, "k2", 1) is None  # evicted in k0's place
    assert cache.read(ns, "k5", 1) is not None
    assert cache.info().nbytes <= 5500


def test_the_cli_says_what_the_cache_holds_and_clears_it(tmp_path: Path) -> None:
    cache = DiskCache(CacheSpec(str(tmp_path), 10**6))
    cache.write("d" * 32, "k", 1, _entry_bytes(2000), '{"location": "s3://b/ds", "dataset_id": "abc"}')
    env = {**os.environ, "PYTHONPATH": str(ROOT), CACHE_DIR_ENV: str(tmp_path)}

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "lakecompute", "cache", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    shown = cli("info")
    assert "1 chunk" in shown
    assert "s3://b/ds" in shown
    assert str(tmp_path) in shown
    cleared = cli("clear", "--cache-dir", str(tmp_path))
    assert "removed 1" in cleared
    assert "0 chunks" in cli("info")
    assert cache.read("d" * 32, "k", 1) is None


def test_a_local_dataset_is_not_cached(tmp_path: Path) -> None:
    ds = lc.empty(str(tmp_path / "ds"))
    with ds:
        ds.create_tensor("x", dtype="int64")
        ds.x.extend(np.arange(10))
    again = lc.load(str(tmp_path / "ds"), cache_dir=tmp_path / "cache")
    assert again.x.numpy().tolist() == list(range(10))
    assert not (tmp_path / "cache").exists()


def test_clear_and_eviction_never_remove_anything_outside_the_cache(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ("a" * 38)).write_bytes(b"x" * 5000)  # named like an entry
    (outside / "keep.txt").write_text("mine")
    cache = DiskCache(CacheSpec(str(tmp_path / "c"), 3000))
    ns = "e" * 32
    cache.write(ns, "k", 1, _entry_bytes(1000), "{}")
    root = tmp_path / "c" / "lakecompute-cache"
    os.symlink(outside, root / ("f" * 32))  # a namespace that is a link
    os.symlink(outside, root / ns / "zz")  # a fan folder that is a link
    (root / ns / "notes.txt").write_text("a user's file")
    for i in range(4):  # evictions
        cache.write(ns, f"k{i}", 1, _entry_bytes(1000, i), "{}")
    cache.clear()
    assert sorted(p.name for p in outside.iterdir()) == ["a" * 38, "keep.txt"]
    assert (root / ns / "notes.txt").read_text() == "a user's file"


def test_abandoned_partial_tells_a_killed_writers_file_from_a_live_ones() -> None:
    from lakecompute.localfiles import abandoned_partial

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)  # a process that has exited
    assert abandoned_partial(f".{'a' * 38}.{pid}.k2j4h1.partial") is True
    assert abandoned_partial(f".{'a' * 38}.{os.getpid()}.k2j4h1.partial") is False
    for name in ("a" * 38, f".{'a' * 38}.x.k2j4h1.partial", ".partial", "lock", f"{'a' * 38}.1.k.partial"):
        assert abandoned_partial(name) is None, name


def test_entries_are_read_into_a_reused_buffer_without_losing_earlier_views(tmp_path: Path) -> None:
    """A read returns a read-only view of the thread's buffer: the same buffer again for an entry that fits
    in it, a larger new one for an entry that does not (a view taken before stays whole)."""
    cache = DiskCache(CacheSpec(str(tmp_path), 10**7))
    small, other, large = _entry_bytes(1000, 1), _entry_bytes(900, 2), _entry_bytes(5000, 3)
    for key, payload in (("s", small), ("o", other), ("l", large)):
        cache.write("a" * 32, key, 1, payload, "{}")
    first = cache.read("a" * 32, "s", 1)
    assert first is not None
    assert first == small[:-4]
    assert first.readonly
    with pytest.raises(TypeError):
        first[0] = 0  # type: ignore[index]  # a caller cannot change what the next reader is given
    second = cache.read("a" * 32, "o", 1)
    assert second is not None
    assert second == other[:-4]
    assert first.obj is second.obj  # the same buffer, reused: no new pages for every entry read
    grown = cache.read("a" * 32, "l", 1)
    assert grown is not None
    assert grown == large[:-4]
    assert grown.obj is not second.obj
    assert second == other[:-4]  # the view taken before the buffer grew still holds its bytes


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 300)), max_size=40),
    st.integers(1, 700),
)
def test_chunks_covered_are_the_chunks_the_runs_touch(runs: list[tuple[int, int]], size: int) -> None:
    """`chunks_covered` (a mask for runs within one chunk or across one edge, else each run's range) equals
    the chunks counted item by item (a run of 0 items counts its start's chunk)."""
    from lakecompute.storage._remote import chunks_covered

    starts = np.array([s for s, _ in runs], dtype=np.int64)
    lengths = np.array([n for _, n in runs], dtype=np.int64)
    expected = sorted({(s + k) // size for s, n in runs for k in range(max(n, 1))})
    assert chunks_covered(starts, lengths, size) == expected


def test_a_lock_that_is_a_link_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious user data\n")
    root = tmp_path / "cache" / "lakecompute-cache"
    root.mkdir(parents=True)
    os.symlink(victim, root / "lock")
    cache = DiskCache(CacheSpec(str(tmp_path / "cache"), 10**6))
    with pytest.warns(lc.LakeComputeWarning, match="not used from now on"):
        cache.write("a" * 32, "k", 1, _entry_bytes(1000), "{}")
    assert victim.read_bytes() == b"precious user data\n"
    assert not cache.writable  # caching off, as for a folder that cannot be written
    assert cache.read("a" * 32, "k", 1) is None


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _fan(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()[:2]


def test_the_cache_never_reads_or_writes_through_a_link_in_its_folder(tmp_path: Path) -> None:
    cache = DiskCache(CacheSpec(str(tmp_path / "c"), 10_000))
    root = tmp_path / "c" / "lakecompute-cache"
    ns, other = "a" * 32, "b" * 32
    cache.write(ns, "k0", 1, _entry_bytes(1000), "{}")  # valid entries, then their folders moved out
    cache.write(other, "k0", 1, _entry_bytes(1000), "{}")
    os.rename(root / ns, tmp_path / "out-ns")
    os.symlink(tmp_path / "out-ns", root / ns)  # a namespace that is a link
    os.rename(root / other / _fan("k0"), tmp_path / "out-fan")
    os.symlink(tmp_path / "out-fan", root / other / _fan("k0"))  # a fan folder that is a link
    before = {name: _tree(tmp_path / name) for name in ("out-ns", "out-fan")}
    same_fan = [f"k{i}" for i in range(2000) if _fan(f"k{i}") == _fan("k0")][:20]
    for key in same_fan:
        assert cache.read(ns, key, 1) is None
        assert not cache.holds(ns, key, 1)
        assert cache.read(other, key, 1) is None
        assert not cache.holds(other, key, 1)
        cache.write(ns, key, 1, _entry_bytes(1000, 1), "{}")
        cache.write(other, key, 1, _entry_bytes(1000, 2), "{}")
    assert {name: _tree(tmp_path / name) for name in ("out-ns", "out-fan")} == before
    assert cache.read(ns, "k0", 1) is None
    assert cache.read(other, "k0", 1) is None
    assert cache.writable
    assert cache.info().nbytes == 0  # nothing written elsewhere in the cache either


def test_a_cache_folder_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "c").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "c" / "lakecompute-cache")
    cache = DiskCache(CacheSpec(str(tmp_path / "c"), 10**6))
    with pytest.warns(lc.LakeComputeWarning, match="not used from now on"):
        cache.write("a" * 32, "k", 1, _entry_bytes(1000), "{}")
    assert list((tmp_path / "out").iterdir()) == []
    assert cache.info().entries == 0
    assert cache.clear().removed == 0


def test_eviction_removes_the_folders_it_empties_and_clear_empties_the_cache(tmp_path: Path) -> None:
    cache = DiskCache(CacheSpec(str(tmp_path), 10_000))
    root = tmp_path / "lakecompute-cache"
    for i in range(100):  # one chunk per dataset: each eviction empties a namespace
        note = f'{{"location": "s3://b/ds", "dataset_id": "{i}"}}'
        cache.write(f"{i:032x}", "seg/data/c/0", 1, _entry_bytes(1000, i), note)
    info = cache.info()
    namespaces = [p for p in root.iterdir() if p.is_dir()]
    assert len(namespaces) == len(info.datasets) == info.entries < 10  # the folders of held datasets only
    assert {d.location for d in info.datasets} == {"s3://b/ds"}  # each with its note
    for ns in namespaces:
        (fan,) = [p for p in ns.iterdir() if p.is_dir()]
        assert len(list(fan.iterdir())) == 1
    cache.clear()
    assert sorted(os.listdir(root)) == ["CACHEDIR.TAG", "lock"]


def test_a_writer_whose_folder_another_process_removed_makes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    cache = DiskCache(CacheSpec(str(tmp_path), 10**6))
    namespace = os.path.join(str(tmp_path), "lakecompute-cache", "a" * 32)
    mkstemp = tempfile.mkstemp
    removed: list[str] = []

    def pruned_first(*args: Any, **kwargs: Any) -> Any:  # another process's eviction prunes the folders
        folder = kwargs.get("dir") or ""  # the entry's fan folder, made just before its file is written
        if os.path.dirname(folder) == namespace and len(removed) < 2:
            removed.append(folder)
            os.rmdir(folder)
            os.rmdir(namespace)
        return mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", pruned_first)
    cache.write("a" * 32, "k", 1, _entry_bytes(1000), "{}")
    assert len(removed) == 2
    assert cache.writable  # not turned off
    assert cache.read("a" * 32, "k", 1) is not None
