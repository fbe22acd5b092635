"""Starting and stopping the viewer: ``ds.view()`` in a script (the browser opened, a handle with .url and
.stop()) and in a notebook (an inline frame), and ``lakecompute view`` on the command line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config import Config

import lakecompute as lc
from lakecompute.viewer import serve
from tests.helpers import wait_until
from tests.viewer.scene import fetch, get_json

ROOT = Path(__file__).resolve().parents[2]


def _refused(url: str) -> bool:
    host, port = url.split("//")[1].rstrip("/").split(":")
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _browser(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose BROWSER (the variable Python's webbrowser reads) writes the URL it is given to
    a file, and that file."""
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    script.chmod(0o755)
    return {**_env(), "BROWSER": f"{script} %s"}, opened


def test_view_returns_a_handle_that_stops(scene: lc.Dataset) -> None:
    """ds.view() serves the version the handle reads; .stop() frees the port."""
    v = scene.view(open_browser=False)
    try:
        assert v.running
        assert v.url.startswith("http://127.0.0.1:")
        assert get_json(v.url, "/api/info")["version"] == scene.version
        assert repr(v) == f"Viewer(url={v.url!r}, serving)"
    finally:
        v.stop()
    assert not v.running
    assert _refused(v.url)
    assert repr(v) == f"Viewer(url={v.url!r}, stopped)"


def test_view_of_a_branch_or_a_version_shows_it(scene: lc.Dataset) -> None:
    """A handle on a branch opens the viewer on that branch; one opened at a version, on that version;
    an expression given goes into the URL."""
    on_branch = lc.load(scene.path, branch="experiment", read_only=True)
    with on_branch.view(open_browser=False) as v:
        assert get_json(v.url, "/api/info")["version"] == on_branch.version
        assert v.server.app.source.default == "experiment"
    with lc.load(scene.path, version="v1.0").view("labels == 'dog'", open_browser=False) as v:
        assert get_json(v.url, "/api/info")["version"] == 2
        assert v.url.endswith("/?expr=labels+%3D%3D+%27dog%27")


def test_serve_refuses_bad_arguments(scene: lc.Dataset, tmp_path: Path) -> None:
    """Both a version and a branch, a port out of range, a taken port and a missing dataset are errors."""
    with pytest.raises(lc.InvalidArgumentError, match=r"either version= .* or branch= .* not both"):
        serve(scene.path, version=2, branch="main", open_browser=False)
    with pytest.raises(lc.InvalidArgumentError, match=r"a port from 0 to 65535\. Got 70000"):
        serve(scene.path, port=70000, open_browser=False)
    with serve(scene.path, open_browser=False) as v, pytest.raises(OSError):
        serve(scene.path, port=v.server.server_address[1], open_browser=False)
    with pytest.raises(lc.DatasetNotFoundError):
        serve(str(tmp_path / "nothing"), open_browser=False)


@pytest.mark.timeout(120)
def test_view_in_a_script_opens_the_browser(scene: lc.Dataset, tmp_path: Path) -> None:
    """In a script ds.view() opens the page with the system's browser (webbrowser, which honours
    BROWSER) and returns the handle."""
    env, opened = _browser(tmp_path)
    code = (
        "import lakecompute as lc, urllib.request\n"
        f"v = lc.load({scene.path!r}).view()\n"
        "print(v.url, flush=True)\n"
        "urllib.request.urlopen(v.url + 'api/info').read()\n"
        "v.stop()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    url = out.stdout.strip()
    wait_until(lambda: opened.exists() and opened.read_text().strip(), what="the browser script to run")
    assert opened.read_text().strip() == url


@pytest.mark.timeout(240)
def test_view_in_a_notebook_is_an_inline_frame(scene: lc.Dataset, tmp_path: Path) -> None:
    """In a Jupyter kernel ds.view() shows the page in an inline frame and opens no browser."""
    env, opened = _browser(tmp_path)
    cells = [
        f"import lakecompute as lc\nv = lc.load({scene.path!r}).view()",
        "import json, urllib.request\njson.load(urllib.request.urlopen(v.url + 'api/info'))['length']",
        "v.stop(); v.running",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    config = Config({"KernelManager": {"transport": "ipc", "ip": str(tmp_path / "kernel")}})
    old = dict(os.environ)
    os.environ.update(env)  # the kernel inherits it
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3", config=config).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    (shown,) = [o for o in nb.cells[0].outputs if o.output_type == "display_data"]
    frame = shown["data"]["text/html"]
    assert frame.startswith('<iframe src="http://127.0.0.1:')
    assert 'width="100%"' in frame
    assert nb.cells[1].outputs[0]["data"]["text/plain"] == str(len(scene))
    assert nb.cells[2].outputs[0]["data"]["text/plain"] == "False"
    assert not opened.exists()


def _start_cli(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakecompute", "view", *args],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("Serving "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split(" at ")[1].split(" ")[0]


@pytest.mark.timeout(120)
def test_cli_view_serves_until_ctrl_c(scene: lc.Dataset) -> None:
    """lakecompute view PATH --no-browser prints the URL, serves, and stops on Ctrl-C with exit code 0."""
    proc, url = _start_cli(scene.path, "--no-browser", "--branch", "experiment")
    try:
        assert url.startswith("http://127.0.0.1:")
        assert get_json(url, "/api/info")["version"] == lc.load(scene.path, branch="experiment").version
        assert fetch(url, "/api/info", "POST").status == 405
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == "Stopped."
    assert _refused(url)


@pytest.mark.timeout(120)
def test_cli_view_on_another_host_warns(scene: lc.Dataset) -> None:
    """--host other than loopback prints a warning naming the risk, and serves that version."""
    proc, url = _start_cli(scene.path, "--no-browser", "--host", "0.0.0.0", "--version", "2")
    try:
        port = url.rstrip("/").rsplit(":", 1)[1]
        assert get_json(f"http://127.0.0.1:{port}/", "/api/info")["version"] == 2
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert err.startswith("lakecompute: warning: The viewer at http://0.0.0.0:")
    assert "anyone who can reach it can read the dataset" in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["{missing}"], 1, "No lakecompute dataset at"),
        (["{ds}", "--version", "2", "--branch", "main"], 1, "not both"),
        (["{ds}", "--branch", "nope"], 1, "nope"),
        (["{ds}", "--port", "70000"], 2, "--port: expected a port from 0 to 65535, got '70000'"),
    ],
)
def test_cli_view_errors(scene: lc.Dataset, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    """A missing dataset, both --version and --branch, an unknown branch or a bad port: one line, no
    traceback, the usual exit codes."""
    argv = [a.format(missing=tmp_path / "none", ds=scene.path) for a in args]
    out = subprocess.run(
        [sys.executable, "-m", "lakecompute", "view", *argv, "--no-browser"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == code
    assert message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(120)
def test_view_without_a_browser_says_where_it_is(scene: lc.Dataset, tmp_path: Path) -> None:
    """Where no browser can be started, ds.view() warns with the URL to open instead."""
    failing = tmp_path / "no-browser.sh"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    env = {**_env(), "BROWSER": f"{failing} %s"}
    code = (
        "import warnings, lakecompute as lc\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    v = lc.load({scene.path!r}).view()\n"
        "v.stop()\n"
        "print(v.url)\n"
        "print(*[str(w.message) for w in caught], sep='\\n')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    url, message = out.stdout.strip().splitlines()
    assert message == f"No web browser was found to open the viewer: open {url} yourself."
