"""A webhook receiver on 127.0.0.1, a real HTTP server: tests/test_notify.py and scripts/notify_trial.py post to it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import berth

__all__ = ["Received", "Receiver"]


class Received:
    """One request as the receiver got it: its headers, its body, whether its signature held, when."""

    def __init__(self, headers: dict[str, str], body: bytes, valid: bool):
        self.headers = headers
        self.body = body
        self.valid = valid
        self.at = time.monotonic()
        self.payload: dict[str, Any] = json.loads(body)

    @property
    def id(self) -> str:
        """The notice's idempotency id."""
        return str(self.payload["berth"]["id"])


class Receiver:
    """Answers each POST with `status` (after `hold` is set, when a test holds it), verifying the signature.

    `start()` may be called again after `stop()` on the same port: a receiver that restarts.
    """

    def __init__(self, secret: str, *, port: int = 0, status: int = 200):
        self.secret = secret
        self.port = port
        self.status = status
        self.statuses: list[int] = []  # answered first, in order, before `status`
        self.hold: threading.Event | None = None
        self.got: list[Received] = []
        self.arrived = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def ids(self) -> set[str]:
        """The distinct notice ids received with a valid signature."""
        with self.arrived:
            return {r.id for r in self.got if r.valid}

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                signature = self.headers.get("Berth-Signature", "")
                valid = berth.verify_webhook(body, signature, secret=receiver.secret)
                with receiver.arrived:
                    receiver.got.append(Received(dict(self.headers.items()), body, valid))
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.status
                    receiver.arrived.notify_all()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        """Whether `count` distinct valid notices have arrived within `timeout` seconds."""
        end = time.monotonic() + timeout
        with self.arrived:
            while len({r.id for r in self.got if r.valid}) < count:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.arrived.wait(left)
            return True

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold is not None:
            self.hold.set()
        self.stop()
