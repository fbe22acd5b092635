"""What the viewer's tests share: a small detection dataset with history, and a raw HTTP client.

The dataset (`make_scene`): 24 PNG images of 48x48 (a gradient with a shape of the row's class), a
class label per image, one box per image with its class (``categories``, per object), masks, keypoints,
polygons, a caption, a json value and a float score. Its history: the data commit tagged ``v1.0``, then a
branch ``experiment`` where an eval flipped every image in place, then on main one row's label replaced.

`fetch` sends a request exactly as written (no normalisation of ``..`` or of %-escapes), so the tests
see what the server does with hostile paths.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

import lakecompute as lc
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._segments import DATA_CHUNK

#: The screenshots docs/viewer.md shows (docs/images/...), by the page the browser tests take them of.
SCREENSHOTS = {
    "grid": "viewer-grid.png",
    "sample": "viewer-sample.png",
    "versions": "viewer-versions.png",
    "diff": "viewer-diff.png",
}

N = 24
SIZE = 48
CLASSES = ["cat", "dog", "bird"]
#: Row 0's box, in pixels (xyxy): its left edge is at x = 6.
BOX = (6.0, 8.0, 30.0, 40.0)


@lc.compute
def flip_images(sample_in: Any, sample_out: Any) -> None:
    """The eval the history's branch runs in place: every image flipped upside down."""
    sample_out.images.append(np.flip(sample_in.images.numpy(), axis=0))


def _image(i: int) -> np.ndarray:
    """A dusk gradient (top to bottom, so a flip shows) with a shape of the row's class in its box."""
    y = np.linspace(0.0, 1.0, SIZE)[:, None, None]
    img = np.broadcast_to(np.array([30, 40, 80]) + y * np.array([90, 70, 40]), (SIZE, SIZE, 3)).astype(
        np.uint8
    )
    img = img.copy()
    yy, xx = np.mgrid[:SIZE, :SIZE]
    x1, y1, x2, y2 = BOX[0] + i % 5 + 4, BOX[1] + 4, BOX[2] - 4, BOX[3] - 4
    cx, cy, r = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2
    inside = [
        (xx - cx) ** 2 + (yy - cy) ** 2 <= r**2,  # cat: a disc
        (xx >= x1) & (xx <= x2) & (yy >= y1) & (yy <= y2),  # dog: a square
        (yy >= y1) & (yy <= y2) & (np.abs(xx - cx) <= (yy - y1) / 2),  # bird: a triangle
    ][i % 3]
    img[inside] = (200, 180 - 5 * i, 60 + 6 * i)
    return img


def _row(i: int) -> dict[str, Any]:
    x1, y1, x2, y2 = BOX
    box = np.array([[x1 + i % 5, y1, x2, y2]], np.float32)
    mask = np.zeros((SIZE, SIZE, 1), bool)
    mask[36:44, 36:44] = True
    return {
        "images": _image(i),
        "labels": i % 3,
        "boxes": box,
        "categories": [i % 3],
        "masks": mask,
        "keypoints": np.array([[[40, 10, 2], [44, 14, 2]]], np.float32),
        "polygons": [[[20, 20, 28, 20, 24, 28]]],
        "caption": f"row {i}",
        "meta": {"i": i, "odd": bool(i % 2)},
        "score": np.float32(i / N),
    }


def make_scene(path: str, storage_options: dict[str, Any] | None = None) -> lc.Dataset:
    """The dataset of the module docstring at ``path``, on main."""
    ds = lc.empty(path, overwrite=True, storage_options=storage_options)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=CLASSES)
        ds.create_tensor("boxes", htype="bbox", format="xyxy")
        ds.create_tensor("categories", htype="class_label", class_names=CLASSES)
        ds.create_tensor("masks", htype="binary_mask")
        ds.create_tensor("keypoints", htype="keypoints", skeleton=[[1, 2]])
        ds.create_tensor("polygons", htype="polygon")
        ds.create_tensor("caption", htype="text")
        ds.create_tensor("meta", htype="json")
        ds.create_tensor("score", dtype="float32")
    with ds:
        for i in range(N):
            ds.append(_row(i))
    ds.tag("v1.0")
    ds.checkout("experiment", create=True)
    flip_images().eval(ds, num_workers=0, skip_ok=True, progressbar=False)
    ds.checkout("main")
    ds.labels[5] = 0
    return ds


@dataclass(frozen=True)
class Response:
    """What the server answered."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def fetch(base: str, target: str, method: str = "GET", headers: dict[str, str] | None = None) -> Response:
    """Send ``method target`` (sent as written) to the server at URL ``base``."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    try:
        conn.putrequest(method, target, skip_host=headers is not None and "Host" in headers)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        reply = conn.getresponse()
        return Response(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
    finally:
        conn.close()


def get_json(base: str, target: str) -> Any:
    """``GET target``, which must answer 200 with JSON."""
    reply = fetch(base, target)
    assert reply.status == 200, (target, reply.status, reply.body[:300])
    assert reply.headers["content-type"] == "application/json; charset=utf-8"
    return reply.json()


def as_json(value: Any) -> Any:
    """``value`` as it comes back from JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


def damage_chunks(ds: lc.Dataset, tensor: str) -> None:
    """Truncate every stored chunk that holds ``tensor``'s samples in ``ds``'s version."""
    for frag in dataset_core(ds).txn.head.tensors[tensor].fragments:
        for c in range(frag.off // DATA_CHUNK, (frag.off + max(frag.nbytes, 1) - 1) // DATA_CHUNK + 1):
            chunk = Path(ds.path) / f"segments/{frag.seg}/data/c/{c}"
            chunk.write_bytes(chunk.read_bytes()[:-3])
