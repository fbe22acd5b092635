"""The API lane: the viewer on port 0 in this process, every /api/ route checked against the Python API
(info, samples, sample/N, count, log, diff, and the pictures), so what the page shows is what Python says."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

import lakecompute as lc
from lakecompute.viewer import Viewer, serve
from lakecompute.viewer._select import value_clause
from lakecompute.viz import target_tensors
from tests.viewer.scene import BOX, CLASSES, SIZE, N, as_json, fetch, get_json, make_scene


def _png(body: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(body))
    assert img.format == "PNG"
    return np.asarray(img.convert("RGB"))


def test_info_is_what_python_says(scene: lc.Dataset, viewer: Viewer) -> None:
    """/api/info: version, id, rows, branches, tags and every tensor's htype, dtype, length, compression
    and info are the Python API's."""
    ds = lc.load(scene.path, read_only=True)
    info = get_json(viewer.url, "/api/info")
    assert (info["version"], info["id"], info["length"]) == (ds.version, ds.id, len(ds))
    assert (info["branches"], info["tags"]) == (ds.branches, ds.tags) == (["experiment", "main"], {"v1.0": 2})
    assert list(info["tensors"]) == list(ds.tensors)
    for name, t in ds.tensors.items():
        got = info["tensors"][name]
        assert (got["htype"], got["dtype"], got["length"]) == (t.htype, str(t.dtype), len(t))
        assert (got["sample_compression"], got["chunk_compression"]) == (
            t.sample_compression,
            t.chunk_compression,
        )
        assert got["info"] == as_json(dict(t.info))
    assert (info["images"], info["image"], info["labels"]) == (["images"], "images", ["labels", "categories"])
    assert info["targets"] == target_tensors(ds, "images") == ["masks", "polygons", "boxes", "keypoints"]


@pytest.mark.parametrize("spec", ["main", "experiment", "v1.0", "3"])
def test_info_at_a_branch_a_tag_or_a_number(scene: lc.Dataset, viewer: Viewer, spec: str) -> None:
    """?version= takes a branch, a tag or a number: the version Python opens for it."""
    want = lc.load(scene.path, version=int(spec) if spec.isdigit() else spec, read_only=True)
    assert get_json(viewer.url, f"/api/info?version={spec}")["version"] == want.version


def test_samples_pages_are_the_rows_with_their_class_names(scene: lc.Dataset, viewer: Viewer) -> None:
    """/api/samples: offset and limit page through the rows in order; captions are the class names
    Python reads (per-object labels as a list); past the end a page is empty."""
    ds = lc.load(scene.path, read_only=True)
    data = get_json(viewer.url, "/api/samples?offset=5&limit=7")
    assert (data["total"], data["offset"], data["limit"], data["expr"]) == (N, 5, 7, None)
    assert [r["index"] for r in data["rows"]] == list(range(5, 12))
    for r in data["rows"]:
        i = r["index"]
        assert r["captions"]["labels"] == [CLASSES[int(ds.labels[i].numpy())]]
        assert r["captions"]["categories"] == [CLASSES[int(c)] for c in ds.categories[i].numpy()]
    assert [r["index"] for r in get_json(viewer.url, "/api/samples?offset=20&limit=10")["rows"]] == [
        20,
        21,
        22,
        23,
    ]
    assert get_json(viewer.url, "/api/samples?offset=1000")["rows"] == []
    assert len(get_json(viewer.url, "/api/samples")["rows"]) == N  # the default page holds 48


def test_thumbnails_draw_the_box_at_its_edge(scene: lc.Dataset, viewer: Viewer) -> None:
    """A row's thumbnail is a PNG of the image with its targets drawn: row 0's box outline runs down
    x = 6 in class 0's colour, the image shows beside it; it may be cached for good."""
    row = get_json(viewer.url, "/api/samples?limit=1")["rows"][0]
    reply = fetch(viewer.url, row["thumb"])
    assert (reply.status, reply.headers["content-type"]) == (200, "image/png")
    assert "immutable" in reply.headers["cache-control"]
    pixels = _png(reply.body)
    assert pixels.shape == (SIZE, SIZE, 3)
    x1, y1, _, y2 = (int(v) for v in BOX)
    red = [230, 25, 75]  # viz's palette, class 0 (row 0's box is a cat)
    assert all(pixels[y, x1].tolist() == red for y in range(y1 + 2, int(y2) - 2))
    stored = lc.load(scene.path, read_only=True).images[0].numpy()
    assert pixels[30, x1 + 3].tolist() == stored[30, x1 + 3].tolist() != red


def test_sample_is_every_tensor_as_python_reads_it(scene: lc.Dataset, viewer: Viewer) -> None:
    """/api/sample/N: every tensor's value is Python's read of row N (text, json, polygons, boxes,
    class names); images give their shape and the URL of the stored file."""
    ds = lc.load(scene.path, read_only=True)
    data = get_json(viewer.url, "/api/sample/7")
    assert (data["index"], data["position"], data["prev"], data["next"], data["total"]) == (7, 7, 6, 8, N)
    t = data["tensors"]
    assert t["caption"]["value"] == ds.caption[7].text() == "row 7"
    assert t["meta"]["value"] == ds.meta[7].data() == {"i": 7, "odd": True}
    assert t["polygons"]["value"] == [
        [part.tolist() for part in obj] for obj in ds.polygons[7].numpy(aslist=True)
    ]
    assert t["boxes"]["value"] == ds.boxes[7].numpy().tolist()
    assert t["score"]["value"] == pytest.approx(float(ds.score[7].numpy()))
    assert (t["labels"]["value"], t["labels"]["names"]) == (int(ds.labels[7].numpy()), ["dog"])
    assert t["categories"]["names"] == ["dog"]
    assert t["keypoints"]["value"] == ds.keypoints[7].numpy().tolist()
    assert (t["masks"]["shape"], t["masks"]["value"]) == ([SIZE, SIZE, 1], ds.masks[7].numpy().tolist())
    assert (t["images"]["image"], t["images"]["shape"], t["images"]["htype"]) == (
        True,
        [SIZE, SIZE, 3],
        "image",
    )
    stored = fetch(viewer.url, t["images"]["url"])
    assert (stored.status, stored.headers["content-type"]) == (200, "image/png")
    assert stored.body == ds.images[7].tobytes()  # the stored file, byte for byte
    drawn = _png(fetch(viewer.url, t["images"]["overlay_url"]).body)
    assert drawn.shape == (SIZE, SIZE, 3)
    assert not np.array_equal(drawn, ds.images[7].numpy())
    first, last = get_json(viewer.url, "/api/sample/0"), get_json(viewer.url, f"/api/sample/{N - 1}")
    assert (first["prev"], first["next"], last["prev"], last["next"]) == (None, 1, N - 2, None)


def test_images_stored_as_arrays_come_as_png(tmp_path: object) -> None:
    """An image tensor without a sample compression is served as a lossless PNG of its array."""
    ds = lc.empty(f"{tmp_path}/raw", overwrite=True)
    ds.create_tensor("images", htype="image")
    pixels = np.random.default_rng(0).integers(0, 255, (5, 7, 3), dtype=np.uint8)
    ds.images.append(pixels)
    with serve(ds.path, open_browser=False) as v:
        url = get_json(v.url, "/api/sample/0")["tensors"]["images"]["url"]
        np.testing.assert_array_equal(_png(fetch(v.url, url).body), pixels)


def test_log_is_python_log_of_every_branch(scene: lc.Dataset, viewer: Viewer) -> None:
    """/api/log is ds.log(all_branches=True): versions, parents, branches, tags and the eval that made
    the branch's version."""
    ds = lc.load(scene.path, read_only=True)
    data = get_json(viewer.url, "/api/log")
    assert data["entries"] == as_json(ds.log(all_branches=True))
    made = [e for e in data["entries"] if e["branch"] == "experiment"]
    assert [e["eval"]["label"] for e in made] == ["flip_images"]
    assert (data["branches"], data["tags"]) == (ds.branches, ds.tags)


def test_diff_is_python_diff_with_replaced_rows_on_both_sides(scene: lc.Dataset, viewer: Viewer) -> None:
    """/api/diff?a=&b=: ds.diff(a, b) as it is, rows counted per tensor, and the replaced rows with the
    old and the new thumbnail (which differ: the branch flipped every image)."""
    ds = lc.load(scene.path, read_only=True)
    data = get_json(viewer.url, "/api/diff?a=main&b=experiment&limit=5")
    d = ds.diff("main", "experiment")
    assert (data["a"], data["b"], data["text"]) == (d.a, d.b, str(d))
    assert data["diff"] == as_json(d.to_dict())
    assert data["counts"]["images"] == {"appended": 0, "replaced": N, "removed": 0}
    assert data["counts"]["labels"] == {"appended": 0, "replaced": 1, "removed": 0}
    assert data["replaced"]["total"] == N
    rows = data["replaced"]["rows"]
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4]
    old, new = _png(fetch(viewer.url, rows[1]["old"]).body), _png(fetch(viewer.url, rows[1]["new"]).body)
    np.testing.assert_array_equal(old[::-1, 2], new[:, 2])  # flipped (column 2 is clear of targets)
    assert not np.array_equal(old[:, 2], new[:, 2])
    assert (
        get_json(viewer.url, "/api/diff?a=main&b=experiment&offset=22")["replaced"]["rows"][0]["index"] == 22
    )


def test_diff_without_a_is_what_the_version_changed(scene: lc.Dataset, viewer: Viewer) -> None:
    """Without a=, the diff is what the version's own commit changed (main's last: row 5's label)."""
    data = get_json(viewer.url, "/api/diff")
    assert data["diff"] == as_json(lc.load(scene.path, read_only=True).diff().to_dict())
    assert [r["index"] for r in data["replaced"]["rows"]] == [5]
    assert data["replaced"]["rows"][0]["old_captions"]["labels"] == ["bird"]
    assert data["replaced"]["rows"][0]["new_captions"]["labels"] == ["cat"]


def test_samples_with_an_expression_are_the_rows_python_keeps(scene: lc.Dataset, viewer: Viewer) -> None:
    """?expr= pages through exactly the rows ds.filter(expr) keeps."""
    ds = lc.load(scene.path, read_only=True)
    expr = "labels == 'dog'"
    view = ds.filter(expr)
    data = get_json(viewer.url, f"/api/samples?expr={quote(expr)}&limit=5&offset=1")
    assert data["total"] == len(view)
    assert [r["index"] for r in data["rows"]] == [int(p) for p in view.positions[1:6]]


def test_sample_neighbours_stay_within_the_expression(scene: lc.Dataset, viewer: Viewer) -> None:
    """The previous and next rows of a sample page are the expression's neighbours."""
    ds = lc.load(scene.path, read_only=True)
    expr = "labels == 'dog'"
    kept = [int(p) for p in ds.filter(expr).positions]
    data = get_json(viewer.url, f"/api/sample/{kept[2]}?expr={quote(expr)}")
    assert (data["position"], data["prev"], data["next"], data["total"]) == (2, kept[1], kept[3], len(kept))


@pytest.mark.parametrize("tensor", ["labels", "categories"])
def test_count_is_count_values(scene: lc.Dataset, viewer: Viewer, tensor: str) -> None:
    """/api/count is ds.count_values(tensor), over the rows an expression keeps when one is given, with
    a clause per value that selects it."""
    ds = lc.load(scene.path, read_only=True)
    data = get_json(viewer.url, f"/api/count?tensor={tensor}")
    assert dict(map(tuple, data["counts"])) == as_json(ds.count_values(tensor))
    for (value, n), clause in zip(data["counts"], data["clauses"], strict=True):
        assert clause == str(lc.col(tensor) == value) == f"{tensor} == '{value}'"
        assert len(ds.filter(clause)) == n  # one object per row in the scene: rows and objects agree
    expr = "score > 0.5"
    narrowed = get_json(viewer.url, f"/api/count?tensor={tensor}&expr={quote(expr)}")
    assert dict(map(tuple, narrowed["counts"])) == as_json(ds.filter(expr).count_values(tensor))


def test_a_branch_that_moves_shows_its_new_head(own_scene: lc.Dataset) -> None:
    """A viewer started on a branch shows the branch's newest version at every page load."""
    with serve(own_scene.path, branch="experiment", open_browser=False) as v:
        before = get_json(v.url, "/api/info")["version"]
        writer = lc.load(own_scene.path, branch="experiment")
        writer.caption[0] = "changed"
        info = get_json(v.url, "/api/info")
        assert (before, info["version"]) == (3, writer.version)
        assert get_json(v.url, "/api/sample/0")["tensors"]["caption"]["value"] == "changed"
        assert get_json(v.url, "/api/info?version=main")["version"] == lc.load(own_scene.path).version


def test_a_dataset_replaced_at_its_path_is_not_mixed_with_the_old(own_scene: lc.Dataset) -> None:
    """Pages show the dataset at the path now (a new id); a picture URL of the old one is refused with
    DatasetReplacedError, never served from the new dataset's rows of the same version."""
    with serve(own_scene.path, open_browser=False) as v:
        old = get_json(v.url, "/api/samples?limit=2")
        make_scene(own_scene.path)  # overwrite: a new dataset, the same version numbers
        new = get_json(v.url, "/api/info")
        assert new["id"] != old["id"]
        assert new["version"] == old["version"]
        reply = fetch(v.url, old["rows"][1]["thumb"])
        assert (reply.status, reply.json()["error"]) == (404, "DatasetReplacedError")
        assert get_json(v.url, "/api/samples?limit=1")["id"] == new["id"]


def test_diff_to_version_zero(scene: lc.Dataset, viewer: Viewer) -> None:
    """b=0 names version 0 (not "no b"): the diff from the data's version back to the empty start."""
    data = get_json(viewer.url, "/api/diff?a=2&b=0")
    assert (data["a"], data["b"]) == (2, 0)
    assert data["diff"] == as_json(lc.load(scene.path, read_only=True).diff(2, 0).to_dict())


def _holds(value: Any, wanted: Any) -> bool:
    """Whether a row's value is ``wanted`` as JSON has it (NaN is NaN; 1 is not True)."""
    if isinstance(wanted, float) and math.isnan(wanted):
        return isinstance(value, float) and math.isnan(value)
    if isinstance(wanted, (list, dict)):
        return json.dumps(value, sort_keys=True) == json.dumps(wanted, sort_keys=True)
    return (type(value) is type(wanted) or (_number(value) and _number(wanted))) and value == wanted


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_each_count_clause_selects_the_rows_counted(tmp_path: Path) -> None:
    """For every value /api/count gives, of numbers with NaN, per-object numbers, text with quotes, class
    labels with and without names, and json (dicts, lists, nested, bools beside numbers), its clause keeps
    exactly the rows that hold the value (per-object values: the rows where any object does); the values no
    text of the language selects (an empty json list or dict, a dict holding a null) have none."""
    ds = lc.empty(str(tmp_path / "ds"), overwrite=True)
    ds.create_tensor("score", dtype="float32")
    ds.create_tensor("scores", dtype="float32")
    ds.create_tensor("caption", htype="text")
    ds.create_tensor("labels", htype="class_label", class_names=["it's", 'a "b"'])
    ds.create_tensor("raw", htype="class_label")
    ds.create_tensor("meta", htype="json")
    nan = float("nan")
    metas: list[Any] = [
        {"k": 1}, [1, 2], {"k": True}, [1, [2, {"j": "x"}]], 1, True, [], {}, "", {"k": None}, [None, 1],
        {"k": 1}, [1, 2], "[1, 2]", None, {"k": 1.5, "s": "it's"}, [2.5], False, 0,
    ]  # fmt: skip
    rows = len(metas)
    ds.extend({
        "score": np.float32([nan if i % 3 == 0 else i % 4 / 2 for i in range(rows)]),
        "scores": [np.float32([nan, 0.5][: i % 3]) for i in range(rows)],
        "caption": [["it's", 'say "hi"', "back\\slash", "two\nlines", ""][i % 5] for i in range(rows)],
        "labels": [i % 2 for i in range(rows)],
        "raw": [i % 3 * 7 for i in range(rows)],
        "meta": metas,
    })  # fmt: skip
    ds.commit("the values")
    values = {
        "score": [float(v) for v in ds.score.numpy().reshape(-1)],
        "caption": [ds.caption[i].data() for i in range(rows)],
        "labels": [["it's", 'a "b"'][i % 2] for i in range(rows)],
        "raw": [i % 3 * 7 for i in range(rows)],
        "meta": metas,
    }
    with serve(ds.path, open_browser=False) as viewer:
        for tensor in ("score", "scores", "caption", "labels", "raw", "meta"):
            data = get_json(viewer.url, f"/api/count?tensor={tensor}")
            for (value, n), clause in zip(data["counts"], data["clauses"], strict=True):
                wanted = nan if value == "nan" and tensor in ("score", "scores") else value
                if tensor == "scores":
                    objects = [[float(x) for x in ds.scores[i].numpy()] for i in range(rows)]
                    kept = [i for i in range(rows) if any(_holds(x, wanted) for x in objects[i])]
                    assert n == sum(_holds(x, wanted) for row in objects for x in row)
                else:
                    kept = [i for i in range(rows) if _holds(values[tensor][i], wanted)]
                    assert n == len(kept), (tensor, value)
                if clause is None:
                    assert tensor == "meta"
                    assert value in ([], {}, {"k": None}), value
                    continue
                got = get_json(viewer.url, f"/api/samples?limit=100&expr={quote(clause)}")
                assert [r["index"] for r in got["rows"]] == kept, (tensor, value, clause)
    assert value_clause("meta", [nan]) == "(len(meta) == 1 and meta[0] != meta[0])"
