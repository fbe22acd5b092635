"""The viewer's HTTP server: the standard library's ``HTTPServer``, a thread per request, read-only, local by
default.

What it answers is a fixed table: the pages (``/``, ``/sample/N``, ``/versions``, ``/diff``: one static
page whose script reads the URL), the page's own assets by exact name (``/static/viewer.js``, ...: read from
the package data once, at start), and the JSON API under ``/api/`` (`lakecompute.viewer._app`). A path is
matched as sent, so a percent-encoded or double-encoded ``..`` matches nothing and is a 404; no request
path or parameter is ever joined to a file system path.

The rules it keeps (DESIGN §8, "Local servers are read-only and stay local"):

* GET and HEAD only: any other method is answered 405 before its body is read, and nothing writes.
* Bound to loopback unless told otherwise; then requests must name the server by a loopback name in their
  ``Host`` header (a web page that rebinds its own domain name to 127.0.0.1 gets a 400, not the data).
* Every response carries a Content-Security-Policy that lets the page load nothing from anywhere but the
  server itself, and no CORS header, so other sites' pages cannot read its answers.
* Errors are answers: a bad parameter is a 400, a missing row, tensor or version a 404, damaged data a 500
  whose body is `DatasetCorruptError`'s message; the server goes on serving.
"""

from __future__ import annotations

import json
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from lakecompute.errors import (
    DatasetCorruptError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    LakeComputeError,
    RefNotFoundError,
    SampleIndexError,
    TensorDoesNotExistError,
)
from lakecompute.threads import RequestThreads
from lakecompute.viewer._app import ViewerApp
from lakecompute.viewer._params import Params, parse_query

__all__ = ["ASSETS", "PAGES", "Reply", "ViewerServer", "load_assets"]

#: The page's files in the package data, and the media type each is served as.
ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
}

#: The paths of the pages (all served by index.html, whose script reads the URL).
PAGES: Final = re.compile(r"/|/versions|/diff|/sample/[0-9]{1,15}")

_SECURITY_HEADERS: Final = {
    # The page loads nothing from anywhere but this server: no CDN, no font, no request out.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}

_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


def load_assets() -> dict[str, bytes]:
    """The page's files from the package data (``lakecompute/viewer/static``)."""
    folder = resources.files("lakecompute.viewer") / "static"
    return {name: (folder / name).read_bytes() for name in ASSETS}


@dataclass(frozen=True, slots=True)
class Reply:
    """One response: status, body, media type, and caching.

    Attributes:
        status: the HTTP status.
        body: the bytes sent.
        media: the Content-Type.
        cache: the Cache-Control (API answers can change as branches move: not stored).
        headers: more headers.
    """

    status: int
    body: bytes
    media: str
    cache: str = "no-store"
    headers: dict[str, str] = field(default_factory=dict)


def _json(value: Any, status: int = 200) -> Reply:
    body = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
    return Reply(status, body, "application/json; charset=utf-8")


_STATUS: Final[tuple[tuple[type[Exception], int], ...]] = (
    (InvalidArgumentError, 400),
    (InvalidTypeError, 400),
    (TensorDoesNotExistError, 404),
    (RefNotFoundError, 404),
    (SampleIndexError, 404),
    (DatasetNotFoundError, 404),
    (DatasetCorruptError, 500),
)


def error_reply(exc: Exception) -> Reply:
    """The answer to a request that failed with ``exc``: its status, and its name and message as JSON."""
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
    return _json({"error": type(exc).__name__, "message": str(exc), "status": status}, status)


#: An API route: what it does with the app, its checked parameters and the path's match.
Route = Callable[[ViewerApp, Params, "re.Match[str]"], Reply]
_IMMUTABLE: Final = "private, max-age=31536000, immutable"  # a thumbnail URL names (id, version, row)


def _picture(data: bytes, media: str) -> Reply:
    return Reply(200, data, media, _IMMUTABLE)


#: Every API route: its path (matched whole), the parameters it takes, and what it answers.
API: Final[tuple[tuple[re.Pattern[str], frozenset[str], Route], ...]] = (
    (re.compile(r"/api/info"), frozenset({"version"}), lambda app, p, m: _json(app.info(p))),
    (
        re.compile(r"/api/samples"),
        frozenset({"version", "expr", "offset", "limit"}),
        lambda app, p, m: _json(app.samples(p)),
    ),
    (
        re.compile(r"/api/sample/([0-9]{1,15})"),
        frozenset({"version", "expr"}),
        lambda app, p, m: _json(app.sample(p, int(m.group(1)))),
    ),
    (
        re.compile(r"/api/count"),
        frozenset({"version", "expr", "tensor"}),
        lambda app, p, m: _json(app.count(p)),
    ),
    (re.compile(r"/api/log"), frozenset({"version"}), lambda app, p, m: _json(app.log(p))),
    (
        re.compile(r"/api/diff"),
        frozenset({"version", "a", "b", "offset", "limit"}),
        lambda app, p, m: _json(app.diff(p)),
    ),
    (
        re.compile(r"/api/thumb"),
        frozenset({"id", "version", "tensor", "row"}),
        lambda app, p, m: _picture(app.thumb(p), "image/png"),
    ),
    (
        re.compile(r"/api/image"),
        frozenset({"id", "version", "tensor", "row", "overlays"}),
        lambda app, p, m: _picture(*app.image(p)),
    ),
)


class _Handler(BaseHTTPRequestHandler):
    """One request: route it, answer it, never let it stop the server."""

    server: ViewerServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm the second waits for the client's
    # delayed ACK of the first (40 ms a response on Linux: a page of 48 thumbnails took 2.3 s).
    disable_nagle_algorithm = True
    server_version = "lakecompute-viewer"
    sys_version = ""
    ALLOWED: ClassVar[str] = "GET, HEAD"

    def do_GET(self) -> None:
        self._send(self._answer())

    def do_HEAD(self) -> None:
        self._send(self._answer(), body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server looks up do_<METHOD>; every method but GET and HEAD is refused the same way (a 405
        # naming the allowed ones), whatever it is: POST, PUT, DELETE, PATCH, OPTIONS, TRACE or made up.
        if name.startswith("do_"):
            return self._refuse_method
        raise AttributeError(name)

    def _refuse_method(self) -> None:
        self.close_connection = True  # the body, if any, is never read
        message = f"The viewer is read-only: {self.command} is not allowed; use GET or HEAD."
        reply = _json({"error": "MethodNotAllowed", "message": message, "status": 405}, 405)
        self._send(Reply(405, reply.body, reply.media, headers={"Allow": self.ALLOWED}))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (a request line too long, bad syntax) as JSON, with the same headers
        # as every other answer.
        self.close_connection = True
        text = message or HTTPStatus(code).phrase
        self._send(_json({"error": HTTPStatus(code).phrase, "message": text, "status": code}, code))

    def _answer(self) -> Reply:
        refused = self.server.check_host(self.headers.get("Host"))
        if refused is not None:
            return refused
        parts = urlsplit(self.path)
        try:
            return self.server.route(parts.path, parts.query)
        except LakeComputeError as exc:
            return error_reply(exc)
        except Exception as exc:  # a bug: answer it, report it, keep serving
            self.server.report(exc)
            return error_reply(exc)

    def _send(self, reply: Reply, body: bool = True) -> None:
        self.send_response(reply.status)
        headers = {
            "Content-Type": reply.media,
            "Content-Length": str(len(reply.body)),
            "Cache-Control": reply.cache,
            **_SECURITY_HEADERS,
            **reply.headers,
        }
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        if self.server.verbose:
            sys.stderr.write(f"lakecompute view: {self.address_string()} {format % args}\n")


class ViewerServer(RequestThreads, HTTPServer):
    """The viewer's server: ``HTTPServer`` answering each request on a thread of its own
    (`lakecompute.threads.RequestThreads`, as ``ThreadingHTTPServer``), with the routes of the module
    docstring.

    Args:
        address: ``(host, port)`` to bind (port 0: any free one).
        app: what the API routes answer.
        loopback: whether it is bound to a loopback address (then the Host header is checked).
        verbose: log every request on stderr.
    """

    block_on_close = False  # a request in progress never keeps the process alive (daemon threads)

    def __init__(
        self, address: tuple[str, int], app: ViewerApp, loopback: bool, verbose: bool = False
    ) -> None:
        self.app = app
        self.loopback = loopback
        self.verbose = verbose
        self.assets = load_assets()
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def check_host(self, host: str | None) -> Reply | None:
        """A 400 for a request that names the server by a name that is not loopback's (while bound to
        loopback), else None."""
        if not self.loopback:
            return None
        port = self.server_address[1]
        if host in {f"{name}:{port}" for name in _LOOPBACK_NAMES}:
            return None
        message = f"Expected a Host header naming this machine (127.0.0.1:{port}). Got {host!r:.80}."
        return _json({"error": "BadHost", "message": message, "status": 400}, 400)

    def route(self, path: str, query: str) -> Reply:
        """The answer for ``path`` (as sent) and its ``query`` string.

        Raises:
            LakeComputeError: a bad parameter, or what reading the dataset raised.
        """
        if PAGES.fullmatch(path):  # its parameters are the API's: checked there, shown on the page
            return Reply(200, self.assets["index.html"], ASSETS["index.html"])
        if path.startswith("/static/") and path[len("/static/") :] in ASSETS:
            name = path[len("/static/") :]
            return Reply(200, self.assets[name], ASSETS[name], "no-cache")
        for pattern, allowed, answer in API:
            match = pattern.fullmatch(path)
            if match is not None:
                return answer(self.app, parse_query(query, allowed), match)
        return _json(
            {"error": "NotFound", "message": f"Nothing is served at {path!r:.200}.", "status": 404}, 404
        )

    def report(self, exc: Exception) -> None:
        """Print an unexpected error's traceback on stderr (the request was answered 500)."""
        sys.stderr.write("lakecompute view: an unexpected error answering a request:\n")
        traceback.print_exception(exc, file=sys.stderr)

    @property
    def url(self) -> str:
        """The server's address as a URL (``http://127.0.0.1:PORT/``)."""
        host, port = self.server_address[:2]
        text = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{text}]" if ":" in text else text
        return f"http://{shown}:{port}/"
