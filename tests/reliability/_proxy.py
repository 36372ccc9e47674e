"""A loopback TCP proxy that injects server faults: cut connections, go down, lose a response.

It stands between a backend's client and a real server (PostgreSQL, Redis, a
moto or fake-gcs-server), so faults happen on the wire exactly as a network
or a crashing server would cause them, while the shared server keeps running.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["FaultProxy"]


class FaultProxy:
    """Forward 127.0.0.1:`port` to `target`; `cut()`, `down()`/`up()` and `lose_next_response()` break it."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._accepting = True
        self._closed = False
        self._lose: tuple[bytes, ...] | None = None
        self._doomed: set[tuple[socket.socket, socket.socket]] = set()
        self.lost_responses = 0
        self.cuts = 0
        self.received = 0  # bytes relayed from the server to its clients: what a call read
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._thread.start()

    # --- faults ------------------------------------------------------------------------

    def cut(self) -> int:
        """Close every open connection at once (both sides), as a dropped network would."""
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for a, b in pairs:
            _close(a)
            _close(b)
        self.cuts += len(pairs)
        return len(pairs)

    def down(self) -> None:
        """The server goes away: open connections are cut and new ones are refused (reset)."""
        self._accepting = False
        self.cut()

    def up(self) -> None:
        """The server is back."""
        self._accepting = True

    def lose_response_to(self, *patterns: bytes) -> None:
        """The response to the next request holding one of `patterns` is dropped and its connection cut.

        The request reaches the server and is carried out; the client never
        learns the outcome -- the "delete was sent, then the connection died" case.
        """
        self._lose = patterns

    def lose_next_response(self) -> None:
        """The response to the next request on any connection is dropped and its connection cut."""
        self._lose = (b"",)

    def close(self) -> None:
        """Stop the proxy and close everything."""
        self._closed = True
        self.cut()
        _close(self._listener)
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._accepting:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                _close(client)  # RST: connection refused, as near as a listener can say it
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        client, upstream = pair
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [], 1.0)
                if self._closed:
                    return
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    lose = self._lose
                    if src is client and lose is not None and any(p in data for p in lose):
                        self._lose = None
                        self._doomed.add(pair)
                    elif src is upstream and pair in self._doomed:
                        self._doomed.discard(pair)
                        self.lost_responses += 1
                        return
                    if src is upstream:
                        with self._lock:
                            self.received += len(data)
                    (upstream if src is client else client).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._pairs.discard(pair)
            _close(client)
            _close(upstream)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
