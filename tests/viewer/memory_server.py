"""A viewer in a process of its own, for tests/viewer/test_memory.py: ``python memory_server.py PATH
THUMB_CACHE_BYTES`` prints its URL and serves until terminated."""

from __future__ import annotations

import sys

from lakecompute.viewer import Viewer, ViewerApp, ViewerServer
from lakecompute.viewer._source import DatasetSource

if __name__ == "__main__":
    app = ViewerApp(DatasetSource(sys.argv[1]), thumb_cache_bytes=int(sys.argv[2]))
    server = ViewerServer(("127.0.0.1", 0), app, loopback=True)
    viewer = Viewer(server, server.url)
    print(viewer.url, flush=True)
    viewer.wait()
