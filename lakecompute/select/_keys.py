"""Keys of the counts of json values that keep JSON's types apart.

Python holds ``True == 1`` (with equal hashes) and has no hash for a list, so a plain dict of counts would
merge a json ``true`` with the number 1 and could key a list only by its text, which a string can equal.
`JsonValue` wraps the json values that need it (bools, lists, dicts); numbers, strings and None stay plain.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JsonValue", "json_key", "plain_value"]


class JsonValue:
    """A json bool, list or dict as a key of ``count_values``: equal only to the same JSON value, as a
    filter compares (``true`` is not 1; a list is not its text), and to that value as Python holds it
    (``counts[True]`` finds the count of ``true``). Lists and dicts are equal when their JSON texts (keys
    sorted) are."""

    __slots__ = ("text", "value")

    def __init__(self, value: bool | list[Any] | dict[str, Any]) -> None:
        self.value = value
        self.text = json.dumps(value, sort_keys=True)
        """The value's JSON text (keys sorted)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JsonValue):
            return self.text == other.text
        if isinstance(self.value, bool):
            return isinstance(other, bool) and other == self.value
        return isinstance(other, type(self.value)) and _text(other) == self.text

    def __hash__(self) -> int:
        return hash(self.value) if isinstance(self.value, bool) else hash(self.text)

    def __repr__(self) -> str:
        return repr(self.value)


def _text(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return None


def json_key(value: Any) -> Any:
    """A json value as a key of counts: bools, lists and dicts as `JsonValue`, the others as they are."""
    return JsonValue(value) if isinstance(value, (bool, list, dict)) else value


def plain_value(key: Any) -> Any:
    """A key of counts as the value it stands for."""
    return key.value if isinstance(key, JsonValue) else key
