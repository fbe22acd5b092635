"""Starting and stopping the viewer: `serve` (behind ``lakecompute view`` and ``ds.view()``) and its handle,
`Viewer`."""

from __future__ import annotations

import ipaddress
import sys
import webbrowser
from typing import Any
from urllib.parse import urlencode

from lakecompute.errors import InvalidArgumentError, warn
from lakecompute.parsing import parse_count, parse_flag
from lakecompute.threads import start_thread
from lakecompute.viewer._app import ViewerApp
from lakecompute.viewer._server import ViewerServer
from lakecompute.viewer._source import DatasetSource

__all__ = ["Viewer", "in_notebook", "is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython with a kernel; IPython is never imported here)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


class Viewer:
    """A running viewer (see `serve`): its address, and how to stop it.

    Attributes:
        url: the page's address, with the expression asked for, if any.
        server: the HTTP server (its ``app`` answers the routes).
    """

    def __init__(self, server: ViewerServer, url: str) -> None:
        self.server = server
        self.url = url
        self._thread = start_thread("viewer", server.serve_forever)

    @property
    def running(self) -> bool:
        """Whether the server still answers."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving and free the port (requests in progress finish on their own threads)."""
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join()
        self.server.server_close()

    def wait(self) -> None:
        """Serve until interrupted (Ctrl-C), then stop: what a script calls to keep the viewer open."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "serving" if self.running else "stopped"
        return f"Viewer(url={self.url!r}, {state})"

    def iframe(self, height: int = 760) -> str:
        """The viewer as an inline frame (what a notebook shows)."""
        return (
            f'<iframe src="{self.url}" width="100%" height="{height}" style="border:1px solid #ddd"></iframe>'
        )


def _default_version(version: int | str | None, branch: str | None) -> int | str | None:
    if version is not None and branch is not None:
        raise InvalidArgumentError(
            f"Pass either version= ({version!r}) or branch= ({branch!r}) to the viewer, not both."
        )
    return version if version is not None else branch


def serve(
    path: str,
    *,
    version: int | str | None = None,
    branch: str | None = None,
    storage_options: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool | None = None,
    expr: str | None = None,
    verbose: bool = False,
) -> Viewer:
    """Start the viewer on the dataset at ``path`` in a background thread, and return its handle.

    Args:
        path: the dataset (a folder, ``s3://...``, ``mem://...``).
        version: the version pages show unless their URL names another: a number or a tag.
        branch: or the newest version of this branch (default: main).
        storage_options: passed through to the object-store client (S3).
        host: the address to bind: loopback (``127.0.0.1``) unless you mean other machines to reach it,
            which warns: anyone who can reach it can read the dataset.
        port: the port (0: any free one; the handle's ``url`` says which).
        open_browser: open the page in the browser (default: yes, unless in a notebook, which shows it
            in an inline frame instead).
        expr: an expression (API.md §7) the first page opens with.
        verbose: log every request on stderr.

    Returns:
        The running `Viewer`: ``.url``, ``.stop()``, ``.wait()``.

    Raises:
        DatasetNotFoundError: no dataset at ``path``, or no such version.
        RefNotFoundError: no such branch or tag.
        InvalidArgumentError: both ``version`` and ``branch``, or a port out of range.
        OSError: the port is taken.
    """
    port = parse_count("port", port)
    if port > 65535:
        raise InvalidArgumentError(f"Expected a port from 0 to 65535. Got {port}.")
    loopback = is_loopback(host)
    source = DatasetSource(path, storage_options, _default_version(version, branch))
    server = ViewerServer((host, port), ViewerApp(source), loopback=loopback, verbose=verbose)
    url = server.url + ("?" + urlencode({"expr": expr}) if expr else "")
    if not loopback:
        warn(
            f"The viewer at {url} is bound to {host!r}, which other machines can reach: anyone who can "
            "reach it can read the dataset. Bind 127.0.0.1 (the default) unless you mean to share it."
        )
    viewer = Viewer(server, url)
    notebook = in_notebook()
    opening = parse_flag("open_browser", not notebook if open_browser is None else open_browser)
    if opening and not webbrowser.open(url):
        warn(f"No web browser was found to open the viewer: open {url} yourself.")
    if notebook:
        from IPython.display import HTML, display  # in a notebook, IPython is there

        display(HTML(viewer.iframe()))  # type: ignore[no-untyped-call]  # IPython's display is untyped
    return viewer
