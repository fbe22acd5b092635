"""The viewer on a dataset in object storage (a local moto server): the same pages and pictures as on disk."""

from __future__ import annotations

from typing import Any

import lakecompute as lc
from lakecompute.viewer import serve
from tests.viewer.scene import N, as_json, fetch, get_json, make_scene


def test_viewer_serves_an_s3_dataset(bucket: str, storage_options: dict[str, Any]) -> None:
    """info, samples, a sample's stored image, a thumbnail, the log and a diff of an s3:// dataset are
    what Python reads there."""
    url = f"s3://{bucket}/scene"
    make_scene(url, storage_options)
    ds = lc.load(url, storage_options=storage_options, read_only=True)
    with serve(url, storage_options=storage_options, open_browser=False) as v:
        info = get_json(v.url, "/api/info")
        assert (info["path"], info["version"], info["length"], info["id"]) == (url, ds.version, N, ds.id)
        rows = get_json(v.url, "/api/samples?limit=3")["rows"]
        thumb = fetch(v.url, rows[2]["thumb"])
        assert (thumb.status, thumb.headers["content-type"]) == (200, "image/png")
        image = get_json(v.url, "/api/sample/2")["tensors"]["images"]
        assert fetch(v.url, image["url"]).body == ds.images[2].tobytes()
        assert get_json(v.url, "/api/log")["entries"] == as_json(ds.log(all_branches=True))
        diff = get_json(v.url, "/api/diff?a=main&b=experiment&limit=2")
        assert diff["diff"] == as_json(ds.diff("main", "experiment").to_dict())
        assert fetch(v.url, diff["replaced"]["rows"][1]["old"]).status == 200
