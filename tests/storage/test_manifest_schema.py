"""Version manifests are checked against their schema on load: a tampered field is a DatasetCorruptError
naming the file and the field, never a raw exception, a huge allocation or a read outside the data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lakecompute as lc
from lakecompute.specs import htype_declaration
from lakecompute.versioned import Fragment
from lakecompute.versioned._schema import InvalidField

KEY = "versions/0000000002.json"
Body = dict[str, Any]


def _make(path: Path) -> lc.Dataset:
    """Version 2 of a dataset with a fixed-shape (x), ragged (r), PNG (img) and label tensor."""
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("x", dtype="int16")
        ds.create_tensor("r", dtype="int32")
        ds.create_tensor("img", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=["a", "b"])
    ds.extend(
        {
            "x": np.arange(6, dtype=np.int16).reshape(3, 2),
            "r": [np.arange(i + 1, dtype=np.int32) for i in range(3)],
            "img": [np.zeros((4, 4), np.uint8)] * 3,
            "labels": [0, 1, 0],
        }
    )
    assert ds.version == 2
    return ds


def _frag(body: Body, tensor: str, pos: int, value: Any) -> None:
    body["tensors"][tensor]["fragments"][0][pos] = value


def _rename(body: Body, old: str, new: str) -> None:
    body["tensors"][new] = body["tensors"].pop(old)


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# (what is tampered, how, the field the error must name, an excerpt of the reason)
CASES: list[tuple[str, Callable[[Body], Any], str | None, str]] = [
    # -- the file as a whole ----------------------------------------------------------------------
    ("format", lambda b: b.update(format="other/9"), "format", "expected 'lakecompute/1'"),
    ("version-type", lambda b: b.update(version="2"), "version", "expected an integer, got str"),
    ("version-bool", lambda b: b.update(version=True), "version", "expected an integer, got bool"),
    ("parent-range", lambda b: b.update(parent=7), "parent", "expected an integer in 0..1, got 7"),
    ("time-nan", lambda b: b.update(time=float("nan")), "time", "expected a number of seconds"),
    ("message-type", lambda b: b.update(message=["hi"]), "message", "expected a string, got list"),
    ("tensors-type", lambda b: b.update(tensors=[]), "tensors", "expected an object"),
    ("evals-type", lambda b: b.update(evals=[1]), "evals", "expected an object, got list"),
    ("evals-record", lambda b: b.update(evals={"abc": 3}), "evals.abc", "expected an object, got 3"),
    ("evals-deep", lambda b: b.update(evals={"abc": {"k": _deep(200)}}), "evals", "nested deeper than 64"),
    # -- names: matched whole, never a path ----------------------------------------------------------
    ("name-newline", lambda b: _rename(b, "x", "x\n"), "tensors", "invalid tensor name 'x\\n'"),
    ("name-path", lambda b: _rename(b, "x", "../../x"), "tensors", "invalid tensor name '../../x'"),
    # -- specs: known htypes, dtypes, compressions that fit together ----------------------------------
    ("htype", lambda b: b["tensors"]["x"].update(htype="video"), "tensors.x.htype", "expected one of"),
    ("dtype-object", lambda b: b["tensors"]["x"].update(dtype="object"), "tensors.x.dtype", "numeric dtype"),
    ("dtype-garbage", lambda b: b["tensors"]["x"].update(dtype="i4,i4"), "tensors.x.dtype", "numeric dtype"),
    (
        "image-float",
        lambda b: b["tensors"]["img"].update(dtype="float32"),
        "tensors.img",
        "must have dtype uint8",
    ),
    (
        "sample-compression",
        lambda b: b["tensors"]["img"].update(sample_compression="gif"),
        "tensors.img.sample_compression",
        "expected one of",
    ),
    (
        "sample-compression-list",
        lambda b: b["tensors"]["img"].update(sample_compression=["png"]),
        "tensors.img.sample_compression",
        "expected one of",
    ),
    (
        "chunk-compression",
        lambda b: b["tensors"]["x"].update(chunk_compression="rar"),
        "tensors.x.chunk_compression",
        "expected one of",
    ),
    (
        "class-names",
        lambda b: b["tensors"]["labels"]["info"].update(class_names=[1, 2]),
        "tensors.labels.info.class_names",
        "expected a list of strings",
    ),
    (
        "info-deep",
        lambda b: b["tensors"]["x"].update(info={"a": _deep(100)}),
        "tensors.x.info",
        "nested deeper",
    ),
    ("ndim", lambda b: b["tensors"]["x"].update(ndim=-1), "tensors.x.ndim", "expected an integer in 0..32"),
    ("length", lambda b: b["tensors"]["x"].update(length=99), "tensors.x.length", "hold 3 samples, got 99"),
    # -- fragments: inside their segments, consistent, never a path ------------------------------------
    ("frag-row", lambda b: b["tensors"]["x"]["fragments"][0].pop(), "tensors.x.fragments[0]", "10 values"),
    ("frag-seg-path", lambda b: _frag(b, "x", 0, "../../../etc"), "tensors.x.fragments[0].seg", "segment id"),
    (
        "frag-seg-typed",
        lambda b: _frag(b, "x", 0, "@tensors/../x/1-2-ab"),
        "tensors.x.fragments[0].seg",
        "segment id",
    ),
    ("frag-off-negative", lambda b: _frag(b, "x", 1, -1), "tensors.x.fragments[0].off", "got -1"),
    ("frag-off-float", lambda b: _frag(b, "x", 1, 0.5), "tensors.x.fragments[0].off", "got float"),
    ("frag-huge", lambda b: _frag(b, "x", 1, 10**30), "tensors.x.fragments[0].off", "expected an integer in"),
    ("frag-k-n", lambda b: _frag(b, "x", 8, 2), "tensors.x.fragments[0].n", "run past the fragment's 3"),
    ("frag-shape-negative", lambda b: _frag(b, "x", 5, [-2]), "tensors.x.fragments[0].shape[0]", "got -2"),
    ("frag-shape-nbytes", lambda b: _frag(b, "x", 5, [5]), "tensors.x.fragments[0].nbytes", "take 30 bytes"),
    (
        "frag-shape-rank",
        lambda b: _frag(b, "x", 5, [1, 2]),
        "tensors.x.fragments[0].shape",
        "expected 1 sizes",
    ),
    ("frag-dtype", lambda b: _frag(b, "x", 4, "O"), "tensors.x.fragments[0].dtype", "numeric dtype"),
    ("frag-ndim", lambda b: _frag(b, "r", 7, 2), "tensors.r.fragments[0].ndim", "have 1 dimensions, got 2"),
    (
        "frag-no-index",
        lambda b: _frag(b, "r", 6, None),
        "tensors.r.fragments[0].shape",
        "expected the sample",
    ),
    (
        "frag-index-end",
        lambda b: _frag(b, "r", 6, 2**56 - 1),
        "tensors.r.fragments[0].idx",
        "run past the segment's end",
    ),
    (
        "frag-blob-uniform",
        lambda b: b["tensors"]["img"]["fragments"][0].__setitem__(slice(5, 7), [[4, 4], None]),
        "tensors.img.fragments[0]",
        "",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_manifest_tampered_field_is_corrupt_naming_file_and_field(
    tmp_path: Path, mutate: Callable[[Body], Any], field: str | None, reason: str
) -> None:
    """A manifest with one tampered field does not load: DatasetCorruptError names the file and the field."""
    ds = _make(tmp_path / "ds")
    path = tmp_path / "ds" / KEY
    body = json.loads(path.read_text())
    mutate(body)
    path.write_text(json.dumps(body))
    with pytest.raises(lc.DatasetCorruptError) as info:
        lc.load(ds.path)
    err = info.value
    assert err.file == KEY
    assert err.field is not None
    assert err.field.startswith(field or "")
    assert reason in err.reason
    assert f"cannot read {KEY!r}" in str(err)
    assert f"field {err.field}" in str(err)
    assert "lc.load(path, version=N)" in str(err)
    # The earlier version, untouched, still opens.
    assert len(lc.load(ds.path, version=1).tensors) == 4


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"format": "lakecompute/1", "version": 1e999999, "tensors": {}}', "expected an integer"),
    ],
    ids=["garbage", "not-utf8", "deep", "list", "overflow"],
)
def test_manifest_unparsable_is_corrupt(tmp_path: Path, data: bytes, reason: str) -> None:
    """Bytes that are not a JSON object (or nest too deep to parse) raise DatasetCorruptError."""
    ds = _make(tmp_path / "ds")
    (tmp_path / "ds" / KEY).write_bytes(data)
    with pytest.raises(lc.DatasetCorruptError, match=r"cannot read 'versions/0000000002\.json'") as info:
        lc.load(ds.path)
    assert reason in info.value.reason


def test_manifest_of_every_htype_round_trips(tmp_path: Path) -> None:
    """Manifests written by lakecompute pass their own schema, for every htype and kind of fragment."""
    ds = _make(tmp_path / "ds")
    with ds:
        ds.create_tensor("t", htype="text")
        ds.create_tensor("j", htype="json")
        ds.create_tensor("e", htype="embedding")
        ds.create_tensor("raw", htype="image", chunk_compression=None)
    ds.extend(
        {
            "t": ["a", ""],
            "j": [{"a": [1]}, None],
            "e": np.ones((2, 3)),
            "raw": np.zeros((2, 2, 2, 3), np.uint8),
        },
        skip_ok=True,
    )
    ds.compact()
    again = lc.load(ds.path)
    assert again.t.text() == ["a", ""]
    assert again.j.data() == [{"a": [1]}, None]
    assert again.x.numpy().tolist() == [[0, 1], [2, 3], [4, 5]]


def test_fragment_from_json_names_the_field() -> None:
    """Fragment.from_json refuses a bad row with InvalidField (a ValueError) naming the value."""
    good = ["1700000000000-12-abcdef01", 0, 12, 3, "int16", [2], None, 1, 0, 3]
    assert Fragment.from_json(good).to_json() == good
    with pytest.raises(InvalidField, match=r"^k: expected an integer in 0\.\.") as info:
        Fragment.from_json([*good[:8], -1, 3])
    assert isinstance(info.value, ValueError)
    assert info.value.field == "k"


_VALUES: list[Any] = [
    None, True, -1, 0, 1, 3, 7, 2**40, 2**63, -(2**63), 10**30, 0.5, float("inf"), "", "x", "uint8", "O",
    "str", "json", "png", "../x", [], [1], [-1], [2, 2], {}, {"a": 1}, [[1]],
]  # fmt: skip


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in children:
        out.extend(_paths(value, (*prefix, key)))
    return out


def test_manifest_random_tampering_never_raises_raw_errors(tmp_path: Path) -> None:
    """300 random one- or two-field tamperings: loading and reading every tensor either works or raises
    a LakeComputeError (DatasetCorruptError), never a raw TypeError, ValueError or MemoryError."""
    import random

    _make(tmp_path / "ds")
    path = tmp_path / "ds" / KEY
    original = json.loads(path.read_text())
    fields = _paths(original)
    rng = random.Random(7)
    refused = 0
    for _ in range(300):
        body = json.loads(json.dumps(original))
        for _ in range(rng.randint(1, 2)):
            *parents, last = rng.choice(fields)
            node = body
            try:
                for key in parents:
                    node = node[key]
                node[last] = rng.choice(_VALUES)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change in this round removed the path
        path.write_text(json.dumps(body))
        try:
            ds = lc.load(str(tmp_path / "ds"))
            for tensor in ds.tensors.values():
                if not htype_declaration(tensor.htype).numeric:
                    tensor.data()
                else:
                    tensor.numpy(aslist=True)
        except lc.LakeComputeError:
            refused += 1
    assert refused > 150  # most tamperings break the schema; the others still read without raw errors
