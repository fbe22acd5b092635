"""Start and stop a local S3 endpoint (the moto server) for tests and benchmarks."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import wait_until

__all__ = ["MotoServer", "start_moto_server"]

KEY = "testing-key"
SECRET = "testing-secret"
REGION = "us-east-1"


@dataclass
class MotoServer:
    """A running moto server on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    endpoint: str

    def storage_options(self) -> dict[str, str]:
        """Options that reach this server with its fake credentials."""
        return {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET, "region": REGION}

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        import obstore

        bucket = name or f"lc-{uuid.uuid4().hex[:12]}"
        # moto creates a bucket on PUT /bucket; obstore has no bucket API, so ask with plain HTTP.
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        obstore.list_with_delimiter(self.store(bucket), None)
        return bucket

    def store(self, bucket: str) -> Any:
        """An obstore client of ``bucket`` on this server, past lakecompute (raw puts, gets and deletes)."""
        from obstore.store import S3Store

        return S3Store(
            bucket,
            endpoint=self.endpoint,
            access_key_id=KEY,
            secret_access_key=SECRET,
            region=REGION,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _moto_command() -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    if script.exists():
        return [str(script)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    return [sys.executable, "-m", "moto.server"]


def start_moto_server(timeout: float = 30.0) -> MotoServer:
    """Start ``moto_server -H 127.0.0.1 -p <free port>`` and wait until it answers."""
    port = _free_port()
    process = subprocess.Popen(
        [*_moto_command(), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(endpoint, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # it answers, even if with an error status
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"moto_server exited with code {process.returncode}") from None
            return False

    try:
        wait_until(answers, timeout, f"moto_server to answer on {endpoint}")
    except AssertionError:
        process.kill()
        raise
    return MotoServer(process, endpoint)
