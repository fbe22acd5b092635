"""The viewer: a dataset, its versions and their diffs in the browser, served from this machine.

``lakecompute view PATH`` and ``ds.view()`` start it (`serve`): a grid of thumbnails with boxes, masks,
polygons and keypoints drawn over them, a sidebar of each label tensor's counts and an expression box, a
page per sample, the versions graph, and the diff between two versions (docs/viewer.md). Every page's state
is in its URL, and every page has a JSON twin under ``/api/`` that answers what the Python API says.

It is the standard library's HTTP server and one static page from the package data: no build step, no
service, no request off the machine. It reads through read-only handles, answers GET and HEAD only, and
binds 127.0.0.1 unless told otherwise (see `lakecompute.viewer._server` for the rules it keeps).
"""

from lakecompute.viewer._app import PAGE_SIZE, ViewerApp
from lakecompute.viewer._launch import Viewer, serve
from lakecompute.viewer._params import MAX_LIMIT, parse_query
from lakecompute.viewer._server import ViewerServer

__all__ = ["MAX_LIMIT", "PAGE_SIZE", "Viewer", "ViewerApp", "ViewerServer", "parse_query", "serve"]
