"""A loopback TCP proxy that injects server faults: cut connections, go down, lose a response.

It stands between a backend's client and a real server (PostgreSQL, Redis, a
moto or fake-gcs-server), so faults happen on the wire exactly as a network
or a crashing server would cause them, while the shared server keeps running.
`ProxyGroup` puts one in front of each node of a Redis Cluster.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import threading

__all__ = ["FaultProxy", "Proxy", "ProxyGroup"]


class _Arming:
    """The request whose response is to be lost: armed once, taken by the first request that matches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.patterns: tuple[bytes, ...] | None = None

    def take(self, data: bytes) -> bool:
        """Whether `data` (a request) is the one armed for; disarms when it is."""
        with self._lock:
            if self.patterns is None or not any(p in data for p in self.patterns):
                return False
            self.patterns = None
            return True


class FaultProxy:
    """Forward 127.0.0.1:`port` to `target`; `cut()`, `down()`/`up()` and `lose_next_response()` break it.

    Proxies given one `arming` share it: a response to lose is lost by whichever sees its request first.
    """

    def __init__(self, target_host: str, target_port: int, *, arming: _Arming | None = None):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._accepting = True
        self._closed = False
        self._arming = arming or _Arming()
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
        self._arming.patterns = patterns

    def lose_next_response(self) -> None:
        """The response to the next request on any connection is dropped and its connection cut."""
        self._arming.patterns = (b"",)

    def disarm(self) -> None:
        """No response is to be lost (one armed for and not reached yet is not)."""
        self._arming.patterns = None

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
                    if src is client and self._arming.take(data):
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


class ProxyGroup:
    """A `FaultProxy` in front of each node of a Redis Cluster, broken as one server's proxy is.

    `remap` is redis-py's `address_remap`: every node address the client learns (CLUSTER SLOTS,
    a MOVED redirect) is turned into its node's proxy, so no connection bypasses the faults; an
    address with no proxy (a node the group was not made for) is kept in `bypassed`. `cut()` cuts
    every connection, `down()` takes one node (chosen by `rng`) away until `up()`, and a response
    to lose is lost on whichever node first sees the request armed for.
    """

    def __init__(self, nodes: list[tuple[str, int]], rng: random.Random):
        arming = _Arming()
        self.rng = rng
        self.proxies = {port: FaultProxy(host, port, arming=arming) for host, port in nodes}
        self.bypassed: set[tuple[str, int]] = set()
        self.port = next(iter(self.proxies.values())).port  # a startup node, as `FaultProxy.port`

    @property
    def ports(self) -> list[int]:
        """Every node's proxy port."""
        return [proxy.port for proxy in self.proxies.values()]

    def remap(self, address: tuple[str, int]) -> tuple[str, int]:
        proxy = self.proxies.get(address[1])
        if proxy is None:
            self.bypassed.add(address)
            return address
        return "127.0.0.1", proxy.port

    def cut(self) -> int:
        return sum(proxy.cut() for proxy in self.proxies.values())

    def down(self) -> None:
        self.rng.choice(list(self.proxies.values())).down()

    def up(self) -> None:
        for proxy in self.proxies.values():
            proxy.up()

    def lose_response_to(self, *patterns: bytes) -> None:
        next(iter(self.proxies.values())).lose_response_to(*patterns)  # the arming they share

    def lose_next_response(self) -> None:
        next(iter(self.proxies.values())).lose_next_response()

    def disarm(self) -> None:
        next(iter(self.proxies.values())).disarm()

    @property
    def lost_responses(self) -> int:
        return sum(proxy.lost_responses for proxy in self.proxies.values())

    @property
    def received(self) -> dict[int, int]:
        """Bytes each node's proxy relayed to the client, by node port."""
        return {port: proxy.received for port, proxy in self.proxies.items()}

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def __enter__(self) -> ProxyGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Proxy = FaultProxy | ProxyGroup
"""What a fault trial breaks: one server's proxy, or a cluster's."""


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
