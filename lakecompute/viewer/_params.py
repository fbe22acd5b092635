"""The viewer's query strings, parsed: every value a URL carries is checked here before anything reads it.

A URL comes from anyone who can reach the server (or from a link someone was sent), so its parameters are
untrusted text: a query string is at most `MAX_QUERY` bytes of at most `MAX_FIELDS` fields, each named at
most once, each known to the route; numbers are plain ASCII digits within bounds (``limit=10**9``,
``offset=-1``, ``1_000``, ``١٢``, ``0x10`` are refused); a version is a number or a branch or tag name
that follows the ref rules (so ``../..`` never reaches storage); an expression is text of at most
`MAX_EXPR` characters, handed to the expression parser (parsed there, never run). Every refusal is an
`InvalidArgumentError` whose message names the parameter, what it got and what it takes, which the server
answers with 400.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final

from lakecompute.errors import InvalidArgumentError, LakeComputeError
from lakecompute.specs import MAX_TENSOR_NAME
from lakecompute.versioned import parse_ref_name

__all__ = [
    "MAX_EXPR",
    "MAX_FIELDS",
    "MAX_LIMIT",
    "MAX_NUMBER",
    "MAX_QUERY",
    "Params",
    "parse_query",
]

#: The longest query string read, in bytes as sent (percent-encoded); a request line past 64 KiB is refused
#: by http.server itself (414).
MAX_QUERY: Final = 32 * 1024
#: The most fields one query string may have.
MAX_FIELDS: Final = 16
#: The longest expression text, in characters.
MAX_EXPR: Final = 16 * 1024
#: The most rows one page of samples may ask for.
MAX_LIMIT: Final = 500
#: The largest number any parameter takes (rows, offsets and versions are far below it).
MAX_NUMBER: Final = 10**15

_DIGITS: Final = re.compile(r"[0-9]{1,16}")


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:60]) + "..."


def parse_query(raw: str, allowed: Collection[str]) -> Params:
    """The fields of the query string ``raw`` (as sent, after ``?``), checked against the route's names.

    Raises:
        InvalidArgumentError: too long, too many fields, a field twice, a field the route does not take,
            text that is not UTF-8 once decoded, or a NUL character.
    """
    if len(raw) > MAX_QUERY:
        raise InvalidArgumentError(
            f"Expected a query string of at most {MAX_QUERY} bytes. Got {len(raw)}; ask for less."
        )
    try:
        pairs = urllib.parse.parse_qsl(
            raw, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS
        )
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            "The query string is not UTF-8 text once its %-escapes are decoded."
        ) from None
    except ValueError:  # max_num_fields
        raise InvalidArgumentError(f"Expected at most {MAX_FIELDS} query parameters. Got more.") from None
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise InvalidArgumentError(f"Unknown query parameter {_shown(name)}. This page takes: {known}.")
        if name in values:
            raise InvalidArgumentError(f"Query parameter {name!r} is given twice; give it once.")
        if "\x00" in value:
            raise InvalidArgumentError(f"Query parameter {name!r} holds a NUL character.")
        values[name] = value
    return Params(values)


@dataclass(frozen=True, slots=True)
class Params:
    """A request's query parameters, checked by name (see `parse_query`), read with typed getters.

    Attributes:
        values: each parameter's text, decoded.
    """

    values: Mapping[str, str]

    def number(self, name: str, default: int, low: int = 0, high: int = MAX_NUMBER) -> int:
        """Parameter ``name`` as an int in ``low..high`` (``default`` when absent).

        Raises:
            InvalidArgumentError: not plain digits, or out of range.
        """
        text = self.values.get(name)
        if text is None:
            return default
        return parse_number(name, text, low, high)

    def version(self, name: str = "version") -> int | str | None:
        """Parameter ``name`` as a version: a number, or a branch or tag name (None when absent or empty).

        Raises:
            InvalidArgumentError: neither a number nor a valid ref name.
        """
        text = self.values.get(name)
        if not text:
            return None
        if text.isascii() and text.isdigit():
            return parse_number(name, text, 0, MAX_NUMBER)
        try:
            return parse_ref_name("version", text)
        except LakeComputeError as exc:
            raise InvalidArgumentError(
                f"Query parameter {name!r}: expected a version number, branch or tag name. Got "
                f"{_shown(text)}. {exc}"
            ) from None

    def text(self, name: str, limit: int = MAX_EXPR) -> str | None:
        """Parameter ``name``'s text, stripped (None when absent or blank).

        Raises:
            InvalidArgumentError: longer than ``limit`` characters.
        """
        text = (self.values.get(name) or "").strip()
        if len(text) > limit:
            raise InvalidArgumentError(
                f"Query parameter {name!r} is {len(text)} characters long; the most is {limit}."
            )
        return text or None

    def tensor(self, name: str = "tensor") -> str:
        """Parameter ``name``: a tensor name (whether the dataset has it is checked where it is read).

        Raises:
            InvalidArgumentError: absent or empty, or longer than a tensor name can be.
        """
        text = self.text(name, MAX_TENSOR_NAME)
        if text is None:
            raise InvalidArgumentError(f"Query parameter {name!r} is required: the name of a tensor.")
        return text

    def flag(self, name: str) -> bool:
        """Parameter ``name`` as a flag: ``1`` (or ``true``) is on; absent, ``0`` or ``false`` is off.

        Raises:
            InvalidArgumentError: anything else.
        """
        text = self.values.get(name, "0")
        if text not in ("0", "1", "true", "false"):
            raise InvalidArgumentError(f"Query parameter {name!r}: expected 1 or 0. Got {_shown(text)}.")
        return text in ("1", "true")


def parse_number(name: str, text: str, low: int = 0, high: int = MAX_NUMBER) -> int:
    """``text`` (from a URL) as an int in ``low..high``: plain ASCII digits only.

    Raises:
        InvalidArgumentError: anything else (a sign, spaces, ``_``, other scripts' digits, too many
            digits, out of range), naming ``name`` and the range.
    """
    if not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        raise InvalidArgumentError(
            f"Query parameter {name!r}: expected a whole number from {low} to {high}. Got {_shown(text)}."
        )
    return int(text)
