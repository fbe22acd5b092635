"""A Parquet footer is read by us before pyarrow's metadata objects touch it: pyarrow builds a column
chunk's metadata in a call that cannot raise, and a footer parquet-cpp refuses there (a level histogram
of the wrong length, which files from other writers carry) ended the process with std::terminate. Such
a file is now a DatasetCorruptError naming the column chunk; the footer reader answers any bytes with
facts or a FooterError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakecompute.tables._thrift import FooterError, read_footer

REPO = Path(__file__).resolve().parents[2]
I32, I64, BINARY, LIST, STRUCT = 5, 6, 8, 9, 12


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))  # zigzag


def _text(s: str) -> bytes:
    return _varint(len(s)) + s.encode()


def _list(kind: int, items: list[bytes]) -> bytes:
    head = bytes([len(items) << 4 | kind]) if len(items) < 15 else bytes([0xF0 | kind]) + _varint(len(items))
    return head + b"".join(items)


def _struct(*fields: tuple[int, int, bytes]) -> bytes:
    """Thrift compact protocol: each field a header (id delta and type) and its value, then a stop byte."""
    out, last = bytearray(), 0
    for field, kind, value in sorted(fields):
        out += bytes([(field - last) << 4 | kind]) + value
        last = field
    return bytes(out) + b"\x00"


def _parquet(definition_histogram: list[int], *chunk_fields: tuple[int, int, bytes]) -> bytes:
    """A file of one optional int64 column of 3 values (their pages are not real: the footer is refused,
    or the read that follows fails, first), its chunk's size statistics holding ``definition_histogram``."""
    data = b"\x00" * 10
    sizes = _struct((3, LIST, _list(I64, [_int(n) for n in definition_histogram])))
    chunk_meta = _struct(
        (1, I32, _int(2)), (2, LIST, _list(I32, [_int(0)])), (3, LIST, _list(BINARY, [_text("a")])),
        (4, I32, _int(0)), (5, I64, _int(3)), (6, I64, _int(10)), (7, I64, _int(10)), (9, I64, _int(4)),
        (16, STRUCT, sizes),
    )  # fmt: skip
    chunk = _struct((2, I64, _int(4)), (3, STRUCT, chunk_meta), *chunk_fields)
    group = _struct((1, LIST, _list(STRUCT, [chunk])), (2, I64, _int(10)), (3, I64, _int(3)))
    root = _struct((4, BINARY, _text("schema")), (5, I32, _int(1)))
    leaf = _struct((1, I32, _int(2)), (3, I32, _int(1)), (4, BINARY, _text("a")))
    footer = _struct(
        (1, I32, _int(1)), (2, LIST, _list(STRUCT, [root, leaf])), (3, I64, _int(3)),
        (4, LIST, _list(STRUCT, [group])),
    )  # fmt: skip
    return b"PAR1" + data + footer + len(footer).to_bytes(4, "little") + b"PAR1"


_READ = """
import sys
import lakecompute as lc
try:
    source = lc.read_parquet(sys.argv[1])
    source.read_rows(0, len(source))
except lc.LakeComputeError as exc:
    print(type(exc).__name__, exc)
"""


def _read_in_a_process(path: Path) -> str:
    """read_parquet in a process of its own: were the footer to reach pyarrow's column chunk metadata, the
    abort would end that process, not the test run."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_level_histogram_of_the_wrong_length_is_a_damaged_file_not_an_abort(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(_parquet([0, 3, 0]))  # an optional column has 2 definition levels: 3 values is a lie
    assert pq.read_metadata(bad).num_rows == 3  # pyarrow opens the footer; its chunk metadata would abort
    out = _read_in_a_process(bad)
    assert out.startswith("DatasetCorruptError")
    assert "row group 0, column 0 has a definition level histogram of 3 values for 2 levels" in out
    fine = tmp_path / "fine.parquet"
    fine.write_bytes(_parquet([0, 3]))  # the footer passes; the made-up pages then fail the read
    out = _read_in_a_process(fine)
    assert out.startswith("DatasetCorruptError")
    assert "level histogram" not in out


@pytest.mark.parametrize(
    ("field", "why"),
    [
        ((1, BINARY, _text("/etc/passwd")), "names another file to read its bytes from"),
        ((8, STRUCT, _struct()), "is encrypted"),
    ],
    ids=["file_path", "crypto_metadata"],
)
def test_a_chunk_in_another_file_or_encrypted_is_refused(
    tmp_path: Path, field: tuple[int, int, bytes], why: str
) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(_parquet([0, 3], field))
    out = _read_in_a_process(path)
    assert out.startswith("DatasetCorruptError")
    assert f"row group 0, column 0 {why}" in out


def test_the_footer_facts_are_those_pyarrow_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table({"a": list(range(1000)), "b": [None if i % 3 else str(i) for i in range(1000)]})
    pq.write_table(table, path, row_group_size=300)
    meta = pq.read_metadata(path)
    length, groups = read_footer(str(path), path.stat().st_size)
    assert length == meta.serialized_size
    assert [g.num_rows for g in groups] == [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    for g, group in enumerate(groups):
        for c, chunk in enumerate(group.chunks):
            theirs = meta.row_group(g).column(c)
            assert (chunk.num_values, chunk.compressed_size, chunk.data_page_offset) == (
                theirs.num_values,
                theirs.total_compressed_size,
                theirs.data_page_offset,
            )
            assert chunk.dictionary_page_offset == theirs.dictionary_page_offset
            assert not chunk.encrypted
            assert not chunk.elsewhere


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("footer") / "t.parquet"
    pq.write_table(
        pa.table({"a": list(range(50)), "s": [f"v{i}" for i in range(50)]}), path, row_group_size=7
    )
    return path.read_bytes()


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_any_damaged_footer_gives_facts_or_a_footer_error(written: bytes, data: st.DataObject) -> None:
    """Bytes flipped, overwritten or cut anywhere in the footer (its length and magic included)."""
    footer_start = len(written) - 8 - int.from_bytes(written[-8:-4], "little")
    damaged = bytearray(written)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(footer_start, len(damaged) - 1))
        damaged[at : at + 1] = data.draw(st.binary(min_size=0, max_size=3))
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".parquet") as f:
        f.write(bytes(damaged))
        f.flush()
        try:
            length, groups = read_footer(f.name, len(damaged))
        except FooterError:
            return
    assert 0 <= length <= len(damaged) - 12
    assert all(isinstance(chunk.encrypted, bool) for group in groups for chunk in group.chunks)
