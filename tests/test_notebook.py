"""A dataset shown in a real notebook: a Jupyter kernel runs the cells and its HTML output is checked."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from PIL import Image
from traitlets.config import Config

import lakecompute as lc
from lakecompute.testing.data import CLASS_NAMES, make_images


def _sorted_shapes(path: Path) -> lc.Dataset:
    """15 images of 16x16 stored class by class: 0-4 circles, 5-9 squares, 10-14 triangles."""
    images, labels = make_images(60, (16, 16), seed=3)
    keep = np.concatenate([np.flatnonzero(labels == c)[:5] for c in range(3)])
    ds = lc.empty(str(path), overwrite=True)
    with ds:
        ds.create_tensor("images", htype="image", sample_compression="png")
        ds.create_tensor("labels", htype="class_label", class_names=CLASS_NAMES)
        ds.create_tensor("caption", htype="text")
        ds.extend({"images": images[keep], "labels": labels[keep], "caption": [f"c{i}" for i in keep]})
    return ds


def _run_notebook(tmp_path: Path, *cells: str) -> list[dict[str, str]]:
    """Execute ``cells`` in a fresh kernel in ``tmp_path``; the rich output (mime type -> data) of each."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # IPC sockets (files in tmp_path) rather than TCP: the kernel then has no unencrypted traffic to warn of.
    config = Config({"KernelManager": {"transport": "ipc", "ip": str(tmp_path / "kernel")}})
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", config=config, resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    outputs = []
    for cell in nb.cells:
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert len(results) == 1, cell.outputs
        outputs.append(dict(results[0].data))
    return outputs


def _thumbnails(page: str) -> list[tuple[str, str, np.ndarray]]:
    """(alt text, caption, pixels) of every thumbnail in an HTML view."""
    found = re.findall(
        r'<img src="data:image/png;base64,([^"]+)" width="\d+" height="\d+" alt="([^"]+)">'
        r"<figcaption>([^<]*)</figcaption>",
        page,
    )
    return [
        (alt, caption, np.asarray(Image.open(io.BytesIO(base64.b64decode(data)))))
        for data, alt, caption in found
    ]


@pytest.mark.timeout(240)
def test_notebook_dataset_html(tmp_path: Path) -> None:
    """A dataset and a view display as a summary table plus thumbnails spread over every class."""
    ds = _sorted_shapes(tmp_path / "shapes")
    dataset_out, view_out = _run_notebook(
        tmp_path,
        "import lakecompute as lc\nds = lc.load('shapes')\nds",
        "ds[5:15]",
    )
    page = dataset_out["text/html"]
    assert dataset_out["text/plain"] == (
        f"Dataset(path='shapes', version={ds.version}, tensors=['images', 'labels', 'caption'], samples=15)"
    )
    assert f"Dataset(path=&#x27;shapes&#x27;, version={ds.version}, samples=15)" in page
    assert (
        "<tr><td>images</td><td>image</td><td>uint8</td><td>(15, 16, 16, 3)</td><td>png</td><td>15</td></tr>"
        in page
    )
    assert (
        "<tr><td>caption</td><td>text</td><td>object</td><td>(15)</td><td>None</td><td>15</td></tr>" in page
    )
    assert "labels: circle, square, triangle" in page
    thumbs = _thumbnails(page)
    expected = [0, 2, 4, 5, 7, 9, 11, 13]  # three circles, three squares, two triangles, spread out
    assert [alt for alt, _, _ in thumbs] == [f"images[{i}]" for i in expected]
    assert [caption for _, caption, _ in thumbs] == [f"{i}: {CLASS_NAMES[i // 5]}" for i in expected]
    for i, (_, _, pixels) in zip(expected, thumbs, strict=True):
        assert np.array_equal(pixels, ds.images[i].numpy())

    page = view_out["text/html"]
    assert "DatasetView(path=&#x27;shapes&#x27;" in page
    assert "samples=10)" in page
    assert "<td>(10, 16, 16, 3)</td><td>png</td><td>10</td>" in page
    view_expected = [5, 6, 8, 9, 10, 11, 13, 14]  # only squares and triangles are in the view
    assert [alt for alt, _, _ in _thumbnails(page)] == [f"images[{i}]" for i in view_expected]
