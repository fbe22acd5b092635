"""A counting proxy in front of the moto server: every request passes through it, and is counted by
method and key, so that tests (and the bench) see what a reader asked of S3 at the server's door."""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CountingProxy", "start_counting_proxy"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class CountingProxy:
    """A running proxy on 127.0.0.1 forwarding to ``target``.

    Attributes:
        endpoint: what clients use as their S3 endpoint.
        requests: ``(method, path)`` of every request, counted.
    """

    server: http.server.ThreadingHTTPServer
    endpoint: str
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Seconds each chunk GET waits before it is forwarded (a store farther away than the loopback).
    delay: float = 0.0
    #: The most chunk GETs in flight at once so far.
    most_in_flight: int = 0
    in_flight: int = 0

    def chunk_gets(self) -> int:
        """GET requests of chunk keys (``.../c/<n>``) so far."""
        with self.lock:
            return sum(n for (method, path), n in self.requests.items() if method == "GET" and "/c/" in path)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.most_in_flight = 0

    def storage_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` of the server behind, pointed at the proxy."""
        return {**options, "endpoint_url": self.endpoint}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_counting_proxy(target: str) -> CountingProxy:
    """Start a proxy on a free port of 127.0.0.1 that forwards every request to ``target``."""
    parsed = urllib.parse.urlsplit(target)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    holder: list[CountingProxy] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            proxy = holder[0]
            path = urllib.parse.urlsplit(self.path).path
            chunk = self.command == "GET" and "/c/" in path
            with proxy.lock:
                proxy.requests[(self.command, path)] += 1
                if chunk:
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
            try:
                if chunk and proxy.delay:
                    threading.Event().wait(proxy.delay)  # latency, not a wait on a condition
                self._pass_on(host, port)
            finally:
                if chunk:
                    with proxy.lock:
                        proxy.in_flight -= 1

        def _pass_on(self, host: str, port: int) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn = http.client.HTTPConnection(host, port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
            finally:
                conn.close()
            self.send_response(reply.status, reply.reason)
            for k, v in reply.getheaders():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    proxy = CountingProxy(server, f"http://127.0.0.1:{server.server_address[1]}")
    holder.append(proxy)
    threading.Thread(target=server.serve_forever, name="counting-proxy", daemon=True).start()
    return proxy
