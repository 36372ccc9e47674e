"""A fault-injecting HTTP proxy for loopback test servers.

It relays each request to a real upstream (moto, fake-gcs-server, the GCS
fake) and can, once per queued fault, answer 429 or 503 instead, drop the connection
before forwarding, or forward the request and then drop or 503 the response
(the request took effect; the client never learns it). It counts the requests
it relays, so a test can prove which calls a client retried. A request that names its operation
in an `X-Amz-Target` header (DynamoDB's) is seen, and matched, as `{path}#{target}`.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["Fault", "FaultyProxy"]

ACTIONS = ("429", "503", "slowdown", "throttle", "serverbusy", "reset", "503_after", "reset_after")


@dataclass
class Fault:
    """One injected failure: the first request whose method matches (and path passes `when`)."""

    method: str
    action: str
    when: Callable[[str], bool] | None = None


class FaultyProxy:
    """`with FaultyProxy(upstream) as proxy:` point a client at `proxy.url`; `proxy.fail(...)`."""

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, method: str, action: str, when: Callable[[str], bool] | None = None) -> None:
        """Queue a fault for the next matching request."""
        assert action in ACTIONS, action
        with self._lock:
            self._faults.append(Fault(method.upper(), action, when))

    def count(self, method: str, when: Callable[[str], bool] | None = None) -> int:
        """How many `method` requests (whose path passes `when`) reached the proxy."""
        with self._lock:
            return sum(1 for m, p in self.seen if m == method.upper() and (when is None or when(p)))

    def reset_counts(self) -> None:
        with self._lock:
            self.seen.clear()

    def _take(self, method: str, path: str) -> str | None:
        with self._lock:
            self.seen.append((method, path))
            for i, fault in enumerate(self._faults):
                if fault.method == method and (fault.when is None or fault.when(path)):
                    del self._faults[i]
                    return fault.action
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                target = self.headers.get("X-Amz-Target")
                action = proxy._take(self.command, f"{self.path}#{target}" if target else self.path)
                if action == "reset":
                    self._drop()
                    return
                if action == "slowdown":  # S3's throttle, with its XML error body
                    xml = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self._answer(503, xml, [("Content-Type", "application/xml")])
                    return
                if action == "throttle":  # DynamoDB's, with its JSON error body
                    kind = b"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
                    body = b'{"__type":"' + kind + b'","message":"The level of configured provisioned throughput '
                    body += b'for the table was exceeded."}'
                    self._answer(400, body, [("Content-Type", "application/x-amz-json-1.0")])
                    return
                if action == "serverbusy":  # Azure Storage's throttle: refused before it was applied
                    xml = b"<Error><Code>ServerBusy</Code><Message>The server is busy.</Message></Error>"
                    self._answer(503, xml, [("Content-Type", "application/xml"), ("x-ms-error-code", "ServerBusy")])
                    return
                if action in ("429", "503"):
                    self._answer(int(action), b"injected", [("Content-Type", "text/plain")])
                    return
                upstream = http.client.HTTPConnection(proxy._host, proxy._port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    status, out = response.status, response.getheaders()
                except OSError:
                    self._drop()
                    return
                finally:
                    upstream.close()
                if action == "reset_after":
                    self._drop()
                    return
                if action == "503_after":
                    self._answer(503, b"injected", [("Content-Type", "text/plain")])
                    return
                head = self.command == "HEAD"
                dropped = (
                    ("transfer-encoding", "connection")
                    if head
                    else ("transfer-encoding", "connection", "content-length")
                )
                kept = [(k, v) for k, v in out if k.lower() not in dropped]
                self._answer(status, data, kept, head=head)

            def _answer(self, status: int, data: bytes, headers: list[tuple[str, str]], head: bool = False) -> None:
                self.send_response_only(status)
                for k, v in headers:
                    self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def _drop(self) -> None:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _relay

        return Handler
