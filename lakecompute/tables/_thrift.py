"""A Parquet file's footer read by us, before pyarrow's metadata objects touch it.

pyarrow builds a column chunk's metadata object (``FileMetaData.row_group(g).column(c)``) in a call that
cannot raise: a footer that parquet-cpp refuses there (a level histogram of the wrong length, say, which
files written by other versions of it carry) ends the process with ``std::terminate``, where reading
the same file raises an error. So the facts a read needs from the footer (each row group's rows, each
column chunk's byte range) are taken from its Thrift bytes here, and checked, before anything else reads
them; pyarrow then only reads row groups, which reports what it refuses.

The footer is Thrift's compact protocol (``FileMetaData`` of parquet.thrift). Only what is needed is
kept: integers, lists and structs by field id; text and bytes are skipped over. Sizes are checked
against the bytes left before anything is built, and nesting is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ChunkFacts", "FooterError", "GroupFacts", "read_footer"]

_MAGIC: Final = b"PAR1"
_DEPTH: Final = 32  # parquet.thrift nests a few levels; a deeper footer is not one
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_INTEGERS: Final = frozenset((_I16, _I32, _I64))  # zigzag varints
_SIZES: Final = {_BYTE: 1, _DOUBLE: 8}  # fixed sizes of the other numbers


class FooterError(ValueError):
    """The footer is not a Parquet footer this module can read (the message says where)."""


@dataclass(frozen=True, slots=True)
class ChunkFacts:
    """What a column chunk's metadata claims (None: not set)."""

    num_values: Any
    compressed_size: Any
    data_page_offset: Any
    dictionary_page_offset: Any
    histogram_sizes: tuple[int | None, int | None]  # repetition, definition level histograms' lengths
    encrypted: bool
    elsewhere: bool  # its bytes in another file (ColumnChunk.file_path)


@dataclass(frozen=True, slots=True)
class GroupFacts:
    num_rows: Any
    chunks: tuple[ChunkFacts, ...]


def read_footer(path: str, size: int) -> tuple[int, list[GroupFacts]]:
    """The footer's length and its row groups' facts, read from the end of the file at ``path``.

    Raises:
        FooterError: no Parquet footer there, or one that does not parse.
        OSError: the file cannot be read.
    """
    if size < 12:
        raise FooterError(f"{size} bytes hold no Parquet footer")
    with open(path, "rb") as f:
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != _MAGIC or length > size - 12:
            raise FooterError("the file does not end with a Parquet footer")
        f.seek(size - 8 - length)
        data = f.read(length)
    if len(data) != length:
        raise FooterError("the file is shorter than its footer says")
    try:
        meta, _ = _Reader(data).struct(0, 0)
    except IndexError as exc:
        raise FooterError("the footer ends inside a value") from exc
    return length, [_group(g) for g in _list_of(meta, 4, _STRUCT)]


def _group(fields: dict[int, Any]) -> GroupFacts:
    return GroupFacts(fields.get(3), tuple(_chunk(c) for c in _list_of(fields, 1, _STRUCT)))


def _chunk(fields: dict[int, Any]) -> ChunkFacts:
    meta = fields.get(3)
    if not isinstance(meta, dict):
        meta = {}
    stats = meta.get(16)
    sizes: tuple[int | None, int | None] = (None, None)
    if isinstance(stats, dict):
        sizes = (_length(stats.get(2)), _length(stats.get(3)))
    encrypted = 8 in fields or 9 in fields
    return ChunkFacts(meta.get(5), meta.get(7), meta.get(9), meta.get(11), sizes, encrypted, 1 in fields)


def _length(value: Any) -> int | None:
    return len(value[1]) if isinstance(value, tuple) else None


def _list_of(fields: dict[int, Any], field: int, kind: int) -> list[Any]:
    value = fields.get(field)
    if value is None:
        return []
    if not isinstance(value, tuple) or value[0] != kind:
        raise FooterError(f"field {field} is not a list of the kind parquet.thrift says")
    return list(value[1])


class _Reader:
    """Thrift compact protocol over a buffer: structs as {field id: value}, lists as (element type,
    values), integers as int, text and bytes as None. A byte read past the end is an IndexError, which
    `read_footer` reports as a footer that ends inside a value."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _skip(self, pos: int, n: int) -> int:
        if n < 0 or pos + n > len(self.data):
            raise FooterError(f"the footer ends inside a value (byte {pos})")
        return pos + n

    def varint(self, pos: int) -> tuple[int, int]:
        data = self.data
        byte = data[pos]
        if byte < 0x80:  # most numbers of a footer: one byte
            return byte, pos + 1
        value, shift = byte & 0x7F, 7
        for end in range(pos + 1, pos + 10):
            byte = data[end]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, end + 1
            shift += 7
        raise FooterError(f"a number of more than 10 bytes at byte {pos}")

    def value(self, kind: int, pos: int, depth: int) -> tuple[Any, int]:
        if kind in _INTEGERS:
            n, pos = self.varint(pos)
            return (n >> 1) ^ -(n & 1), pos
        if kind == _STRUCT:
            return self.struct(pos, depth + 1)
        if kind in (_LIST, _SET):
            return self.list(pos, depth + 1)
        if kind == _MAP:
            return self.map(pos, depth + 1)
        return self.scalar(kind, pos)

    def scalar(self, kind: int, pos: int) -> tuple[Any, int]:
        """A boolean, or a skipped byte, double or binary."""
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE, pos
        if kind in _SIZES:
            return None, self._skip(pos, _SIZES[kind])
        if kind != _BINARY:
            raise FooterError(f"an unknown value type {kind} at byte {pos}")
        n, pos = self.varint(pos)
        return None, self._skip(pos, n)

    def list(self, pos: int, depth: int) -> tuple[Any, int]:
        head = self.data[pos]
        pos += 1
        n, kind = head >> 4, head & 0x0F
        if n == 15:
            n, pos = self.varint(pos)
        self._skip(pos, n)  # every element takes a byte at least
        if depth > _DEPTH:
            raise FooterError(f"lists and structs nested more than {_DEPTH} deep")
        if kind in (_TRUE, _FALSE):  # a list's booleans are a byte each
            return (_TRUE, [self.data[pos + i] == _TRUE for i in range(n)]), pos + n
        values = []
        for _ in range(n):
            item, pos = self.value(kind, pos, depth)
            values.append(item)
        return (kind, values), pos

    def map(self, pos: int, depth: int) -> tuple[Any, int]:
        n, pos = self.varint(pos)
        if n == 0:
            return None, pos
        self._skip(pos, 1 + n)
        kinds = self.data[pos]
        pos += 1
        for _ in range(n):
            _, pos = self.value(kinds >> 4, pos, depth)
            _, pos = self.value(kinds & 0x0F, pos, depth)
        return None, pos

    def struct(self, pos: int, depth: int) -> tuple[dict[int, Any], int]:
        if depth > _DEPTH:
            raise FooterError(f"lists and structs nested more than {_DEPTH} deep")
        data = self.data
        fields: dict[int, Any] = {}
        field = 0
        while True:
            head = data[pos]
            pos += 1
            kind = head & 0x0F
            if kind == _STOP:
                return fields, pos
            if head >> 4:
                field += head >> 4
            else:
                n, pos = self.varint(pos)
                field = (n >> 1) ^ -(n & 1)
            fields[field], pos = self.value(kind, pos, depth)
