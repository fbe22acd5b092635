"""Property tests of the viewer's query parsing: any query string, near-valid or not, ends in checked
parameters or an InvalidArgumentError (the server's 400), never a raw exception; numbers are exactly the
plain ASCII digit strings in range; what a page writes into a URL reads back as written."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakecompute as lc
from lakecompute.viewer import Viewer, parse_query
from lakecompute.viewer._params import MAX_LIMIT, MAX_NUMBER, Params
from lakecompute.viewer._server import Reply

ALLOWED = frozenset({"version", "expr", "offset", "limit", "tensor", "overlays", "a", "b"})

_NEAR_NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(
        [
            "",
            " 1",
            "1 ",
            "+1",
            "1_000",
            "\u0661\u0662",
            "\uff11\uff12",
            "0x10",
            "1e3",
            "1.0",
            "007",
            "9" * 17,
            "nan",
        ]
    ),
    st.text(alphabet="0123456789-+_. e", max_size=20),
)
_NEAR_NAMES = st.one_of(
    st.sampled_from(
        ["main", "v1.0", "experiment", "..", "../x", "a/b", ".hidden", "-x", "x.", "a" * 200, "ü"]
    ),
    st.text(max_size=40),
)
_VALUES = st.one_of(_NEAR_NUMBERS, _NEAR_NAMES, st.text(max_size=300))


def _read_everything(params: Params) -> None:
    """Call every getter: each returns its typed value or raises InvalidArgumentError."""
    getters = [
        lambda: params.number("offset", 0),
        lambda: params.number("limit", 48, 1, MAX_LIMIT),
        lambda: params.version(),
        lambda: params.version("a"),
        lambda: params.text("expr"),
        lambda: params.tensor(),
        lambda: params.flag("overlays"),
    ]
    for get in getters:
        try:
            get()
        except lc.InvalidArgumentError:
            pass


@given(st.text(max_size=500))
def test_any_query_string_parses_or_is_refused(raw: str) -> None:
    """Arbitrary text as a query string: parsed or an InvalidArgumentError, whatever it holds."""
    try:
        params = parse_query(raw, ALLOWED)
    except lc.InvalidArgumentError:
        return
    _read_everything(params)


@given(st.dictionaries(st.sampled_from(sorted(ALLOWED)), _VALUES, max_size=8))
def test_near_valid_parameters_give_values_or_library_errors(fields: dict[str, str]) -> None:
    """Near-valid values of known parameters: every getter gives a typed value or InvalidArgumentError."""
    try:
        params = parse_query(urlencode(fields), ALLOWED)
    except lc.InvalidArgumentError:
        assert any("\x00" in v for v in fields.values())
        return
    assert dict(params.values) == fields  # what a page writes reads back as written
    _read_everything(params)


@given(_NEAR_NUMBERS)
def test_numbers_are_plain_digits_in_range(text: str) -> None:
    """A number is accepted exactly when it is ASCII digits (at most 16) within the range."""
    params = parse_query(urlencode({"offset": text}), ALLOWED)
    plain = re.fullmatch(r"[0-9]{1,16}", text) is not None and int(text) <= MAX_NUMBER
    if plain:
        assert params.number("offset", 0) == int(text)
    else:
        with pytest.raises(lc.InvalidArgumentError, match="'offset': expected a whole number"):
            params.number("offset", 0)


@given(_NEAR_NAMES)
def test_versions_are_numbers_or_valid_ref_names(text: str) -> None:
    """A version is a number, a valid branch or tag name, or refused: never a path."""
    try:
        params = parse_query(urlencode({"version": text}), ALLOWED)
        version = params.version()
    except lc.InvalidArgumentError:
        return
    if isinstance(version, str):
        assert "/" not in version
        assert ".." not in version
        assert not version.startswith((".", "-"))
        assert version == text


@settings(max_examples=150)
@given(
    st.one_of(
        st.sampled_from(
            [
                "/",
                "/api/info",
                "/api/samples",
                "/api/sample/3",
                "/api/count",
                "/api/log",
                "/api/diff",
                "/api/thumb",
                "/api/image",
                "/static/viewer.js",
                "/sample/1",
                "/versions",
                "/diff",
            ]
        ),
        st.text(max_size=60).map(lambda t: "/" + t),
    ),
    st.one_of(
        st.dictionaries(st.sampled_from(sorted(ALLOWED | {"id", "row", "page"})), _VALUES, max_size=5).map(
            urlencode
        ),
        st.text(max_size=200),
    ),
)
def test_any_request_is_answered_or_refused_by_the_library(viewer: Viewer, path: str, query: str) -> None:
    """Any path and query against the running server's routes: an answer, or a LakeComputeError (which
    the server answers with its status), never a raw exception."""
    try:
        reply = viewer.server.route(path, query)
    except lc.LakeComputeError:
        return
    assert isinstance(reply, Reply)
    assert reply.status in (200, 404)
