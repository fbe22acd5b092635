"""The viewer's attacks: read-only (GET and HEAD only), local (loopback, Host checked, a warning
otherwise), nothing served outside the dataset and the page's own files (traversal in paths and in
parameters, encoded or not), absurd parameters refused with a message, damaged data answered with
DatasetCorruptError's message while the server goes on serving."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

import pytest

import lakecompute as lc
from lakecompute.storage import TEMP_PREFIX
from lakecompute.testing.internals import dataset_core
from lakecompute.versioned._segments import DATA_CHUNK
from lakecompute.viewer import Viewer, serve
from tests.viewer.scene import damage_chunks, fetch, get_json

SECRET = "the-secret-file-content"


def _tree_digest(root: str) -> str:
    """A digest of every file under ``root`` (names, and bytes but a lease's): equal when nothing was
    written. (The scene's own handle, in this process, committed it: the keeper rewrites that lease's
    expiry every few seconds for minutes after, whatever the viewer does; a new lease would show.)"""
    h = hashlib.sha256()
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and path.relative_to(root).parts[0] == "leases":
            if not path.name.startswith(TEMP_PREFIX):  # a renewal's file on its way to its name
                h.update(str(path.relative_to(root)).encode() + b"\0")
        elif path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "BREW"])
def test_every_method_but_get_and_head_is_refused(scene: lc.Dataset, viewer: Viewer, method: str) -> None:
    """Any method other than GET and HEAD is a 405 naming the allowed ones, and nothing is written."""
    before = _tree_digest(scene.path)
    for target in ["/api/info", "/api/samples", "/", "/static/viewer.js", "/nowhere"]:
        reply = fetch(viewer.url, target, method)
        assert reply.status == 405, (method, target)
        assert reply.headers["allow"] == "GET, HEAD"
        assert (
            reply.json()["message"] == f"The viewer is read-only: {method} is not allowed; use GET or HEAD."
        )
    assert _tree_digest(scene.path) == before
    assert get_json(viewer.url, "/api/info")["length"] == len(scene)  # and it goes on serving


def test_head_answers_as_get_without_a_body(viewer: Viewer) -> None:
    """HEAD gets GET's status and headers, and no body."""
    get, head = fetch(viewer.url, "/api/info"), fetch(viewer.url, "/api/info", "HEAD")
    assert (head.status, head.body) == (200, b"")
    assert head.headers["content-length"] == str(len(get.body))
    assert head.headers["content-type"] == get.headers["content-type"]


def test_every_answer_forbids_requests_elsewhere(viewer: Viewer) -> None:
    """Pages, assets, JSON and errors carry a policy that lets the page load nothing but from the server
    itself, and no CORS header (another site's page cannot read the answers)."""
    for target in ["/", "/static/viewer.js", "/api/info", "/api/nowhere", "/api/samples?limit=0"]:
        headers = fetch(viewer.url, target).headers
        policy = headers["content-security-policy"]
        for rule in ("default-src 'none'", "connect-src 'self'", "img-src 'self' data:", "script-src 'self'"):
            assert rule in policy
        assert headers["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in headers


def test_binds_loopback_by_default(viewer: Viewer) -> None:
    """The default address is 127.0.0.1, and the URL says so."""
    assert viewer.server.server_address[0] == "127.0.0.1"
    assert viewer.url.startswith("http://127.0.0.1:")


def test_other_hosts_warn(scene: lc.Dataset) -> None:
    """Binding an address other machines can reach warns that they can read the dataset; the Host
    header is then not checked."""
    with pytest.warns(lc.LakeComputeWarning, match=r"other machines can reach: anyone who can reach it"):
        v = serve(scene.path, host="0.0.0.0", open_browser=False)
    with v:
        assert v.server.server_address[0] == "0.0.0.0"
        port = v.server.server_address[1]
        assert (
            fetch(f"http://127.0.0.1:{port}/", "/api/info", headers={"Host": f"box.lan:{port}"}).status == 200
        )


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1", "127.0.0.1:1", "", "localhost.evil:{port}"]
)
def test_a_host_header_that_is_not_loopback_is_refused(viewer: Viewer, host: str) -> None:
    """A request naming the server by another name (a page that rebound its domain to 127.0.0.1) gets a
    400, not the data; localhost and 127.0.0.1 with the port are served."""
    port = viewer.server.server_address[1]
    reply = fetch(viewer.url, "/api/info", headers={"Host": host.format(port=port)})
    assert reply.status == 400
    assert reply.json()["error"] == "BadHost"
    for ok in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert fetch(viewer.url, "/api/info", headers={"Host": ok}).status == 200


TRAVERSALS = [
    "/static/../../pyproject.toml",
    "/static/%2e%2e/%2e%2e/pyproject.toml",
    "/static/%252e%252e/%252e%252e/pyproject.toml",
    "/static/..%2f..%2f..%2fsecret.txt",
    "/static/..%252f..%252fsecret.txt",
    "/static//etc/passwd",
    "//etc/passwd",
    "/../../secret.txt",
    "/api/../../secret.txt",
    "/api/sample/..%2f1",
    "/static/viewer.js/../../secret.txt",
    "/static/VIEWER.JS",
    "/static/viewer.js%00.txt",
    "/versions/../secret.txt",
    "/sample/1/../../secret.txt",
    "/zarr.json",
    "/versions/0000000001.json",
    "/refs/branches/main.json",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_nothing_outside_the_page_is_served(scene: lc.Dataset, viewer: Viewer, target: str) -> None:
    """Paths that climb out, encoded once or twice, or that name the dataset's own files, are 404s:
    only the page, its assets and the API are served, matched as sent."""
    (Path(scene.path).parent / "secret.txt").write_text(SECRET)
    reply = fetch(viewer.url, target)
    assert reply.status == 404, target
    assert reply.json()["error"] == "NotFound"
    assert SECRET.encode() not in reply.body
    assert b"[project]" not in reply.body


@pytest.mark.parametrize(
    "query",
    [
        "version=../../x",
        "version=" + quote("../../x"),
        "version=%252e%252e%252fx",
        "version=main/../../x",
        "version=refs/branches/main",
        "a=..%2F..%2Fsecret&b=main",
        "b=/etc/passwd",
    ],
)
def test_traversal_in_a_version_is_refused(viewer: Viewer, query: str) -> None:
    """A version parameter that is not a number or a valid branch or tag name never reaches storage."""
    route = "/api/diff" if query.startswith(("a=", "b=")) else "/api/info"
    reply = fetch(viewer.url, f"{route}?{query}")
    assert reply.status == 400, query
    assert "expected a version number, branch or tag name" in reply.json()["message"]


@pytest.mark.parametrize("tensor", ["../../secret.txt", "%2e%2e%2fsecret", "images/../labels", "/etc/passwd"])
def test_traversal_in_a_tensor_is_a_missing_tensor(scene: lc.Dataset, viewer: Viewer, tensor: str) -> None:
    """A tensor parameter is a name looked up among the tensors, never a path."""
    info = get_json(viewer.url, "/api/info")
    reply = fetch(
        viewer.url, f"/api/thumb?id={info['id']}&version={info['version']}&tensor={quote(tensor)}&row=0"
    )
    assert (reply.status, reply.json()["error"]) == (404, "TensorDoesNotExistError")


ABSURD = [
    ("/api/samples?limit=1000000000", "'limit': expected a whole number from 1 to 500. Got '1000000000'."),
    ("/api/samples?limit=0", "'limit': expected a whole number from 1 to 500. Got '0'."),
    ("/api/samples?offset=-1", "'offset': expected a whole number from 0 to"),
    ("/api/samples?offset=1e3", "Got '1e3'"),
    ("/api/samples?offset=abc", "Got 'abc'"),
    ("/api/samples?offset=" + quote("\uff11\uff12"), "Got '\uff11\uff12'"),
    ("/api/samples?offset=1_0", "Got '1_0'"),
    ("/api/samples?offset=+3", "Got ' 3'"),
    ("/api/samples?offset=%203", "Got ' 3'"),
    ("/api/samples?offset=" + "9" * 40, "expected a whole number"),
    ("/api/samples?offset=1&offset=2", "'offset' is given twice"),
    (
        "/api/samples?ofset=1",
        "Unknown query parameter 'ofset'. This page takes: expr, limit, offset, version.",
    ),
    ("/api/samples?offset=%ff", "not UTF-8"),
    ("/api/samples?expr=%00", "NUL"),
    ("/api/samples?" + "&".join(f"x{i}=1" for i in range(40)), "at most 16 query parameters"),
    ("/api/samples?expr=" + "a" * 40_000, "at most 32768 bytes"),
    ("/api/samples?expr=" + "a" * 20_000, "'expr' is 20000 characters long; the most is 16384."),
    ("/api/count", "'tensor' is required"),
    ("/api/thumb?tensor=images&row=0", "/api/thumb needs id= and version="),
    ("/api/image?id=x&version=1&tensor=images&row=0&overlays=yes", "'overlays': expected 1 or 0"),
]


@pytest.mark.parametrize(("target", "message"), ABSURD)
def test_absurd_parameters_are_a_400_with_a_message(viewer: Viewer, target: str, message: str) -> None:
    """Out-of-range, malformed, repeated, unknown, oversized and non-UTF-8 parameters get a 400 whose
    message says what is wrong; the server goes on serving."""
    reply = fetch(viewer.url, target)
    assert reply.status == 400, (target, reply.body[:200])
    body = reply.json()
    assert body["error"] == "InvalidArgumentError"
    assert message in body["message"]
    assert get_json(viewer.url, "/api/info")["length"] > 0


def test_a_request_line_too_long_is_refused_as_json(viewer: Viewer) -> None:
    """http.server's own refusal of a request line past 64 KiB comes as JSON with the same headers."""
    reply = fetch(viewer.url, "/api/samples?expr=" + "a" * 70_000)
    assert reply.status == 414
    assert reply.json()["error"] == "Request-URI Too Long"
    assert "default-src 'none'" in reply.headers["content-security-policy"]
    assert get_json(viewer.url, "/api/info")["length"] > 0


@pytest.mark.parametrize(
    "target", ["/api/sample/24", "/api/sample/999999999999999", "/api/sample/0000000000000001000"]
)
def test_rows_past_the_end_are_a_404(viewer: Viewer, target: str) -> None:
    """A row past the end is a 404 naming the number of rows (a path of 16 digits or more: no route)."""
    reply = fetch(viewer.url, target)
    assert reply.status == 404
    assert reply.json()["error"] in ("SampleIndexError", "NotFound")


def test_unknown_versions_are_a_404(viewer: Viewer) -> None:
    """A branch or tag that does not exist, or a version number never committed, is a 404."""
    assert fetch(viewer.url, "/api/info?version=nope").json()["error"] == "RefNotFoundError"
    assert fetch(viewer.url, "/api/info?version=999").status == 404


def test_damaged_images_answer_with_the_error_and_serving_goes_on(own_scene: lc.Dataset) -> None:
    """Damaged image chunks: a thumbnail or image is a 500 whose body is DatasetCorruptError's message,
    the sample page shows the message in place of the image, and every other route still answers."""
    ds = lc.load(own_scene.path)
    damage_chunks(ds, "images")
    with serve(ds.path, open_browser=False) as v:
        rows = get_json(v.url, "/api/samples?limit=3")["rows"]
        reply = fetch(v.url, rows[0]["thumb"])
        assert reply.status == 500
        body = reply.json()
        assert body["error"] == "DatasetCorruptError"
        with pytest.raises(lc.DatasetCorruptError) as python:
            ds.images[0].numpy()
        assert body["message"] == str(python.value)
        entry = get_json(v.url, "/api/sample/0")["tensors"]["images"]
        assert (entry["error"], entry["message"]) == ("DatasetCorruptError", str(python.value))
        assert get_json(v.url, "/api/sample/0")["tensors"]["caption"]["value"] == "row 0"
        assert get_json(v.url, "/api/log")["entries"]


def test_damaged_labels_leave_the_grid_without_their_captions(own_scene: lc.Dataset) -> None:
    """Damaged label chunks: a page of samples still comes, with the error's message and without the
    damaged tensor's captions."""
    ds = lc.load(own_scene.path)
    damage_chunks(ds, "labels")
    with serve(ds.path, open_browser=False) as v:
        data = get_json(v.url, "/api/samples?limit=4")
        assert [r["index"] for r in data["rows"]] == [0, 1, 2, 3]
        assert [(e["tensor"], e["error"]) for e in data["errors"]] == [("labels", "DatasetCorruptError")]
        assert all("labels" not in r["captions"] and r["captions"]["categories"] for r in data["rows"])


def test_a_chunk_linked_outside_the_dataset_is_not_served(own_scene: lc.Dataset) -> None:
    """An image chunk replaced by a symbolic link to a file outside the dataset: the thumbnail and the
    image are refused as damaged data, and nothing of the file reaches the answer."""
    ds = lc.load(own_scene.path)
    secret = Path(own_scene.path).parent / "secret.txt"
    secret.write_text(SECRET * 1000)
    (frag,) = dataset_core(ds).txn.head.tensors["images"].fragments
    chunk = Path(ds.path) / f"segments/{frag.seg}/data/c/{frag.off // DATA_CHUNK}"
    chunk.unlink()
    chunk.symlink_to(secret)
    with serve(ds.path, open_browser=False) as v:
        row = get_json(v.url, "/api/samples?limit=1")["rows"][0]
        sample = get_json(v.url, "/api/sample/0")["tensors"]["images"]
        for target in (row["thumb"], sample["url"], sample["overlay_url"]):
            reply = fetch(v.url, target)
            assert reply.status == 500
            assert reply.json()["error"] == "DatasetCorruptError"
            assert SECRET.encode() not in reply.body


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('touch pwned')",
        "labels.__class__",
        "open('/etc/passwd')",
        "labels == 'cat'; import os",
        "labels == ",
        "nosuchtensor == 1",
        "(" * 500 + "labels == 'cat'" + ")" * 500,
    ],
)
def test_hostile_expressions_are_parsed_and_refused(scene: lc.Dataset, viewer: Viewer, expr: str) -> None:
    """An expression in a URL is parsed by the library, never run: text that is not the language, or
    names what is not there, is a 400 with the parser's message (ExpressionError), and nothing happens."""
    before = _tree_digest(scene.path)
    for route in ("/api/samples", "/api/sample/0", "/api/count?tensor=labels&"):
        sep = "" if route.endswith("&") else "?"
        reply = fetch(viewer.url, f"{route}{sep}expr={quote(expr)}")
        assert reply.status == 400, (route, reply.body[:200])
        body = reply.json()
        assert body["error"] == "ExpressionError"
        with pytest.raises(lc.ExpressionError) as python:
            scene.filter(expr.strip())  # the URL's text is taken stripped
        assert body["message"] == str(python.value)
    assert _tree_digest(scene.path) == before
    assert not Path("pwned").exists()
