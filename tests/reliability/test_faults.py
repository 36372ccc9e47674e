"""Server faults on the network backends: connections dropped, the server gone, responses lost.

A loopback `FaultProxy` stands between the backend's client and the real
server, so the shared server keeps running while its connections die. Two
kinds of trial:

- a save / load / claim loop over a few keys while a fault thread cuts every
  connection, takes the "server" down for a moment, or loses the response to
  whatever request is in flight. Every call must return or raise
  `BackendError` (nothing else); the parent keeps, per key, the set of values
  the store may hold (a save or claim that raised may or may not have happened)
  and every result must be one of them: a claim never returns a run it should
  not, never returns None while an envelope is surely parked (silently lost),
  and never hands a run out twice. After recovery every key holds one of its
  possible values.
- the exact unknown-outcome case: the conditional delete of a claim reaches
  the server and is carried out, and the response is lost. The claim must raise
  `BackendError` -- never return the envelope as a win, never return None -- and
  a later load shows the envelope gone (docs/reliability.md: how a host resolves it).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pwd
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import berth
import berth.aio
from berth.backends import as_backend
from berth.testing import AwaitingStore, _Portal
from tests._azurite import connection_string
from tests._net import free_port, wait_port
from tests.conftest import unavailable
from tests.fakes.proxy import FaultyProxy

from ._common import Result, Timer, big_envelope, still_running
from ._proxy import FaultProxy, Proxy, ProxyGroup

KEYS = [f"fault/{i}" for i in range(8)]
Unset = object()


# --- how to reach each server through a proxy --------------------------------------------


class Server:
    """A network backend under test: its real address and how to open a store through a proxy."""

    def __init__(self, name: str, host: str, port: int, url: Callable[[int], str], options: dict[str, Any]):
        self.name, self.host, self.port, self._url, self.options = name, host, port, url, options

    def proxy(self, rng: random.Random) -> Proxy:
        """The proxy a trial breaks: one in front of the server."""
        return FaultProxy(self.host, self.port)

    def open(self, proxy: Proxy, identity: str, sealer: Any) -> berth.Store:
        """A store whose every connection goes through `proxy`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # redis' DurabilityWarning: this server runs without AOF on purpose
            return berth.open_store(self._url(proxy.port), identity=identity, sealer=sealer, **self.options)

    def check(self, proxy: Proxy, store: Any, result: Result) -> None:
        """After a trial, before `store` closes: what the trial must have seen of this server (nothing here)."""


class _AwaitedServer(Server):
    """The same server through berth.aio: every call awaited on an event loop in a thread (the portal
    that `berth.testing.AsyncStoreContract` drives the async store through), so a trial runs unchanged."""

    def __init__(self, inner: Server):
        super().__init__(f"{inner.name}, berth.aio", inner.host, inner.port, inner._url, inner.options)

    def open(self, proxy: Proxy, identity: str, sealer: Any) -> Any:
        options = dict(self.options)
        if self._url(proxy.port).startswith("redis"):
            options["check_durability"] = False  # this server runs without AOF on purpose
        store = berth.aio.open_store(self._url(proxy.port), identity=identity, sealer=sealer, **options)
        return _PortalStore(store, _Portal())


class _PortalStore(AwaitingStore):
    def close(self) -> None:
        try:
            super().close()
        finally:
            self._portal.close()


def postgres_server(dsn: str) -> Server:
    parts = urlsplit(dsn)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    user = f"{parts.username}@" if parts.username else ""

    def url(p: int) -> str:
        netloc = f"{user}127.0.0.1:{p}"
        return urlunsplit(
            parts._replace(netloc=netloc, query="table=reliability_frames&pool_timeout=3&connect_timeout=3")
        )

    return Server("postgresql", host, port, url, {})


def redis_server(redis_url: str) -> Server:
    parts = urlsplit(redis_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    db = parts.path or "/0"
    return Server(
        "redis", host, port, lambda p: f"redis://127.0.0.1:{p}{db}?prefix=reliability:", {"socket_timeout": 5.0}
    )


class _ClusterServer(Server):
    """A Redis Cluster through a `ProxyGroup`: a proxy in front of each node, every node address the
    client learns (CLUSTER SLOTS, MOVED) turned into its proxy by redis-py's `address_remap`."""

    def __init__(self, nodes: list[tuple[str, int]], userinfo: str):
        super().__init__("redis-cluster", *nodes[0], lambda p: "", {"socket_timeout": 5.0})
        self.nodes, self.userinfo = nodes, userinfo
        self.remap = True  # False: the client follows the addresses the nodes announce (a trial that cannot bite)

    def proxy(self, rng: random.Random) -> ProxyGroup:
        return ProxyGroup(self.nodes, rng)

    def open(self, proxy: Proxy, identity: str, sealer: Any) -> berth.Store:
        assert isinstance(proxy, ProxyGroup)
        hosts = ",".join(f"127.0.0.1:{port}" for port in proxy.ports)
        url = f"redis+cluster://{self.userinfo}{hosts}/?prefix=reliability:"
        remap = proxy.remap if self.remap else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DurabilityWarning: a test cluster without persistence
            return berth.open_store(url, identity=identity, sealer=sealer, address_remap=remap, **self.options)

    def check(self, proxy: Proxy, store: Any, result: Result) -> None:
        """No connection bypassed the proxies: every node address the client used or holds is a proxy's."""
        assert isinstance(proxy, ProxyGroup)
        held = {(node.host, node.port) for node in store.backend.client.get_nodes()}
        direct = proxy.bypassed | {a for a in held if a[1] not in proxy.ports}
        if direct:
            result.fail(f"the client reached nodes {sorted(direct)} directly, past the fault proxies")
        result.notes.append(f"bytes relayed by each node's proxy: {proxy.received}")


def redis_cluster_server(url: str) -> _ClusterServer:
    """Every node of the cluster at `url` (`redis+cluster://[auth@]host:port[,...]/`), by CLUSTER NODES."""
    import redis

    netloc = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    userinfo, at, hosts = netloc.rpartition("@")
    client = redis.Redis.from_url(f"redis://{userinfo}{at}{hosts.split(',')[0]}/0", socket_timeout=5)
    try:
        listing = client.execute_command("CLUSTER NODES")  # {"host:port": the node's fields}
    finally:
        client.close()
    nodes = [(host or "127.0.0.1", int(port)) for host, _, port in (a.rpartition(":") for a in listing)]
    return _ClusterServer(sorted(nodes), userinfo + at)


def s3_server(moto_url: str) -> Server:
    import boto3

    bucket = f"reliability-{uuid.uuid4().hex[:16]}"
    client = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    client.close()
    parts = urlsplit(moto_url)
    return Server(
        "s3",
        parts.hostname or "127.0.0.1",
        parts.port or 80,
        lambda p: f"s3://{bucket}/faults",
        {"region_name": "us-east-1", "read_timeout": 5.0, "connect_timeout": 2.0, "_endpoint_port": True},
    )


class _S3Server(Server):
    def open(self, proxy: Proxy, identity: str, sealer: Any) -> berth.Store:
        options = {k: v for k, v in self.options.items() if not k.startswith("_")}
        options["endpoint_url"] = f"http://127.0.0.1:{proxy.port}"
        return berth.open_store(self._url(proxy.port), identity=identity, sealer=sealer, **options)


class _GcsServer(Server):
    def open(self, proxy: Proxy, identity: str, sealer: Any) -> berth.Store:
        options = dict(self.options)
        options["endpoint"] = f"http://127.0.0.1:{proxy.port}"
        return berth.open_store(self._url(proxy.port), identity=identity, sealer=sealer, **options)


def gcs_server(fake: Any) -> Server:
    """A server on the in-process Cloud Storage fake (`tests.fakes.gcs.FakeGcs`, already started)."""
    bucket = f"reliability-{uuid.uuid4().hex[:16]}"
    fake.create_bucket(bucket)
    parts = urlsplit(fake.url)
    return _GcsServer(
        "gcs",
        parts.hostname or "127.0.0.1",
        parts.port or 80,
        lambda p: f"gs://{bucket}/faults",
        {"timeout": 5.0, "retry_timeout": 5.0},
    )


class _HttpServer(Server):
    """A server reached over HTTP: its throttle, the first request of each call and how many attempts it makes."""

    throttle = "503"
    attempts = 3
    exhausted = "throttled"  # what the BackendError of a call throttled past its retries says

    def first(self, op: str) -> str:
        return "POST"


class _AzblobServer(_HttpServer):
    """Azurite through a proxy: its throttle is Azure Storage's 503 `ServerBusy`."""

    throttle, attempts, exhausted = "serverbusy", 3, "ServerBusy"

    def first(self, op: str) -> str:
        return "PUT" if op == "save" else "GET"

    def open(self, proxy: Any, identity: str, sealer: Any) -> berth.Store:
        endpoint = f"http://127.0.0.1:{proxy.port}/devstoreaccount1"
        connection = connection_string(endpoint)
        return berth.open_store(self._url(proxy.port), identity=identity, sealer=sealer, connection_string=connection,
                                **self.options)  # fmt: skip


def azblob_server(azurite: str) -> _AzblobServer:
    """A fresh container on Azurite (`azurite`: its connection string); 3 attempts a call, 5 s timeouts."""
    from berth.backends.azblob import AzureBlobBackend

    container = f"reliability-{uuid.uuid4().hex[:16]}"
    setup = AzureBlobBackend(container, connection_string=azurite)
    setup.setup()
    setup.close()
    parts = urlsplit(azurite.split("BlobEndpoint=")[1].rstrip(";"))
    options = {"retry_total": 2, "retry_backoff": 0.05, "read_timeout": 5.0, "connection_timeout": 2.0}
    return _AzblobServer(
        "azblob", parts.hostname or "127.0.0.1", parts.port or 80, lambda p: f"azblob://{container}/faults", options
    )


class _DynamoDbServer(_HttpServer):
    """moto's DynamoDB through a proxy: its throttle is `ProvisionedThroughputExceededException`."""

    throttle, attempts, exhausted = "throttle", 3, "throttled, retry later"

    def open(self, proxy: Any, identity: str, sealer: Any) -> berth.Store:
        options = dict(self.options, endpoint_url=f"http://127.0.0.1:{proxy.port}")
        return berth.open_store(self._url(proxy.port), identity=identity, sealer=sealer, **options)


def dynamodb_server(moto_url: str) -> _DynamoDbServer:
    """A fresh table on moto's server, made as `berth setup` makes it; 3 attempts a call, 5 s timeouts."""
    from berth.backends.dynamodb import DynamoDbBackend

    table = DynamoDbBackend(f"reliability-{uuid.uuid4().hex[:16]}", endpoint_url=moto_url, region_name="us-east-1")
    table.setup()
    table.close()
    parts = urlsplit(moto_url)
    options = {"region_name": "us-east-1", "retry_attempts": 3, "read_timeout": 5.0, "connect_timeout": 2.0}
    return _DynamoDbServer(
        "dynamodb", parts.hostname or "127.0.0.1", parts.port or 80, lambda p: f"dynamodb://{table.table}", options
    )


# --- private servers that can be killed ---------------------------------------------------


class PrivateServer:
    """A server process of our own, on a free loopback port, that a trial may SIGKILL and restart."""

    name = ""

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def command(self) -> tuple[list[str], dict[str, Any]]:
        raise NotImplementedError

    def start(self) -> None:
        """Start (or restart) the server and wait until it accepts connections."""
        cmd, kwargs = self.command()
        deadline = time.monotonic() + 30
        while True:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kwargs
            )
            if wait_port("127.0.0.1", self.port, timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return
            # PostgreSQL's backends are sessions of their own: after a SIGKILL of the server they
            # outlive it until each notices, and a restart meanwhile exits at once ("pre-existing
            # shared memory block is still in use"). Start again once they are gone.
            if self.proc.poll() is None or time.monotonic() >= deadline:
                raise RuntimeError(f"private {self.name} did not start on port {self.port}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server and every process of its session: a crash, not a shutdown."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None
            time.sleep(0.05)

    def crash_and_restart(self, outage: float) -> None:
        with self.lock:
            self.kill()
            time.sleep(outage)
            self.start()

    def server(self) -> Server:
        raise NotImplementedError

    def close(self) -> None:
        self.kill()


class PrivateRedis(PrivateServer):
    """redis-server with an append-only file fsynced on every write (appendfsync always)."""

    name = "redis"

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def command(self) -> tuple[list[str], dict[str, Any]]:
        self.root.mkdir(parents=True, exist_ok=True)
        return [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "yes",
        ], {}  # fmt: skip

    def server(self) -> Server:
        return Server(
            "redis (private, AOF always)",
            "127.0.0.1",
            self.port,
            lambda p: f"redis://127.0.0.1:{p}/0?prefix=crash:",
            {"socket_timeout": 5.0},
        )


class PrivatePostgres(PrivateServer):
    """A PostgreSQL cluster of our own (initdb in a temporary directory), fsync on."""

    name = "postgresql"

    @staticmethod
    def bindir() -> Path | None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
        return found[-1].parent if found else None

    @classmethod
    def available(cls) -> bool:
        if cls.bindir() is None:
            return False
        if os.geteuid() != 0:
            return True
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False
        return True

    def __init__(self, root: Path):
        # a directory of its own under /tmp: the server runs as `postgres`, who cannot enter pytest's tmp_path
        super().__init__(Path(tempfile.mkdtemp(prefix="berth-reliability-pg-")))

    def _as_postgres(self) -> dict[str, Any]:
        if os.geteuid() != 0:
            return {"cwd": str(self.root)}
        pw = pwd.getpwnam("postgres")
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": str(self.root)}

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)

    def command(self) -> tuple[list[str], dict[str, Any]]:
        bindir = self.bindir()
        assert bindir is not None
        data = self.root / "data"
        if not data.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                pw = pwd.getpwnam("postgres")
                os.chown(self.root, pw.pw_uid, pw.pw_gid)
            subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **self._as_postgres(),
            )  # fmt: skip
        return [
            str(bindir / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(self.root),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "synchronous_commit=on",
            "-c", "shared_buffers=16MB", "-c", "max_connections=40",
        ], self._as_postgres()  # fmt: skip

    def server(self) -> Server:
        return Server(
            "postgresql (private)",
            "127.0.0.1",
            self.port,
            lambda p: f"postgresql://postgres@127.0.0.1:{p}/postgres?pool_timeout=3&connect_timeout=3",
            {},
        )


class _Crashes:
    """Schedules a SIGKILL of the private server (then a restart) a few milliseconds into a call."""

    def __init__(self, server: PrivateServer, rng: random.Random, *, rate: float):
        self.server, self.rng, self.rate = server, rng, rate
        self.counts = {"crash": 0}
        self._threads: list[threading.Thread] = []
        self.stuck: list[str] = []

    def maybe(self) -> None:
        if self.rng.random() >= self.rate or self.server.lock.locked():
            return
        self.counts["crash"] += 1
        delay, outage = self.rng.uniform(0, 0.004), self.rng.uniform(0.05, 0.3)

        def crash() -> None:
            time.sleep(delay)
            self.server.crash_and_restart(outage)

        thread = threading.Thread(target=crash, daemon=True)
        self._threads.append(thread)
        thread.start()

    @contextmanager
    def running(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.stuck = still_running(self._threads, 60)


# --- the fault loop ----------------------------------------------------------------------


class _Faults:
    """Schedules a fault a few milliseconds into a call, so it lands while the call is on the wire."""

    def __init__(self, proxy: Proxy, rng: random.Random, *, rate: float):
        self.proxy, self.rng, self.rate = proxy, rng, rate
        self.counts = {"cut": 0, "down": 0, "lost response": 0}
        self._timers: list[threading.Timer] = []
        self.stuck: list[str] = []

    def maybe(self) -> None:
        """With probability `rate`, break the proxy 0-4 ms from now."""
        if self.rng.random() >= self.rate:
            return
        r = self.rng.random()
        if r < 0.55:
            kind, action = "cut", self.proxy.cut
        elif r < 0.8:
            kind, action = "lost response", self.proxy.lose_next_response
        else:
            kind = "down"
            outage = self.rng.uniform(0.03, 0.15)

            def action() -> None:
                self.proxy.down()
                self._later(outage, self.proxy.up)

        self.counts[kind] += 1
        self._later(self.rng.uniform(0, 0.004), action)

    def _later(self, delay: float, action: Callable[[], Any]) -> None:
        timer = threading.Timer(delay, action)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    @contextmanager
    def running(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.stuck = still_running(list(self._timers), 5)
            self.proxy.up()
            self.proxy.disarm()


class _Ledger:
    """The save / load / claim calls of a trial and, per key, every value the store may hold after them.

    A save or claim that raised may or may not have happened, so its key may hold either value;
    every result must be one of them: a claim never returns a run it should not, never returns
    None while an envelope is surely parked (silently lost), and never hands a run out twice.
    """

    def __init__(self, result: Result):
        self.result = result
        self.maybe: dict[str, set[str | None]] = {k: {None} for k in KEYS}
        self.claimed: set[str] = set()
        self.errors = self.unknown_claims = self.seq = 0
        self.envelope = big_envelope(size=1500)

    def call(self, store: Any, op: str, key: str) -> None:
        """One call; its BackendError propagates, after the ledger took in that it may have happened."""
        result, maybe = self.result, self.maybe
        if op == "save":
            self.seq += 1
            run = f"r{self.seq}"
            try:
                store.save(key, self.envelope.replace(run_id=run))
            except berth.BackendError:
                maybe[key].add(run)  # it may have landed
                raise
            maybe[key] = {run}
        elif op == "claim":
            try:
                got = store.claim(key)
            except berth.BackendError:
                self.unknown_claims += 1
                maybe[key].add(None)  # it may have been deleted: a lost claim, never a win
                raise
            value = got.run_id if got else None
            if value not in maybe[key]:
                result.fail(f"call {result.trials}: claim of {key} gave {value}, store may hold {maybe[key]}")
            if value is not None:
                if value in self.claimed:
                    result.fail(f"call {result.trials}: {value} claimed twice")
                self.claimed.add(value)
            maybe[key] = {None}
        else:
            parked = store.load(key)
            value = parked.envelope.run_id if parked else None
            if value not in maybe[key]:
                result.fail(f"call {result.trials}: load of {key} saw {value}, store may hold {maybe[key]}")
            maybe[key] = {value}

    def recover(self, store: Any) -> None:
        """The server is reachable again: every key holds one of its possible values (then it is claimed)."""
        deadline = time.monotonic() + 30
        for key in KEYS:
            while True:
                try:
                    parked = store.load(key)
                    break
                except berth.BackendError:
                    if time.monotonic() > deadline:
                        self.result.fail(f"{key} still unreadable 30 s after the faults stopped")
                        parked = Unset
                        break
                    time.sleep(0.1)
            if parked is Unset:
                continue
            value = parked.envelope.run_id if parked else None
            if value not in self.maybe[key]:
                self.result.fail(f"after recovery {key} holds {value}; acknowledged calls allow only {self.maybe[key]}")
            if value is not None:
                store.claim(key)


def _op(rng: random.Random) -> tuple[str, str]:
    key = rng.choice(KEYS)
    r = rng.random()
    return key, "save" if r < 0.45 else "claim" if r < 0.8 else "load"


def run_faults(
    server: Server,
    *,
    calls: int,
    seed: int = 3,
    rate: float = 0.1,
    budget: float = 300.0,
    crashes: PrivateServer | None = None,
) -> Result:
    """`calls` save/load/claim calls under random faults; count calls whose outcome breaks the contract.

    With `crashes`, the faults are SIGKILLs of that private server (and restarts) instead of proxy faults.
    """
    title = "server crash: SIGKILL + restart mid save, load, claim" if crashes else None
    result = Result(title or "server faults: cut / down / lost response mid save, load, claim", server.name)
    rng = random.Random(seed)
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    identity = f"faults-{secrets.token_hex(4)}"
    ledger = _Ledger(result)
    timer = Timer(budget)
    with server.proxy(rng) as proxy:
        store = server.open(proxy, identity, sealer)
        faults: Any = _Crashes(crashes, rng, rate=rate) if crashes else _Faults(proxy, rng, rate=rate)
        with faults.running():
            while result.trials < calls and timer.left():
                result.trials += 1
                key, op = _op(rng)
                faults.maybe()
                try:
                    ledger.call(store, op, key)
                except berth.BackendError:
                    ledger.errors += 1
                    time.sleep(rng.uniform(0.01, 0.05))  # a host backs off before its next call
                except Exception as exc:  # noqa: BLE001 - anything but BackendError is a finding
                    result.fail(f"call {result.trials}: {op} {key} raised {type(exc).__name__}: {exc}")
        for name in faults.stuck:
            result.fail(f"fault thread {name} still running after its join timeout")
        ledger.recover(store)
        server.check(proxy, store, result)
        store.close()
    result.seconds = timer.elapsed()
    errors, unknown_claims = ledger.errors, ledger.unknown_claims
    result.counts = {"faults": sum(faults.counts.values()), "backend_errors": errors, "unknown_claims": unknown_claims}
    result.notes.insert(
        0,
        f"{result.trials} calls, {errors} raised BackendError ({unknown_claims} claims of unknown outcome); "
        f"faults: {faults.counts}; {len(ledger.claimed)} runs claimed",
    )
    return result


THROTTLE_TITLE = "server faults: throttled / dropped HTTP calls mid save, load, claim"


def run_throttles(
    server: _HttpServer, *, calls: int, seed: int = 5, rate: float = 0.2, budget: float = 300.0
) -> Result:
    """`calls` save/load/claim calls through an HTTP proxy that throttles their first request (fewer times
    than the client retries: the call must succeed; as many: a `BackendError` naming the throttle, never
    a `TokenMismatch`) or drops its connection before or after the server applied it (the outcome rules
    of `run_faults`)."""
    result = Result(THROTTLE_TITLE, server.name)
    rng = random.Random(seed)
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    ledger = _Ledger(result)
    counts = {"throttled then served": 0, "throttled past its retries": 0, "dropped": 0, "dropped after": 0}
    timer = Timer(budget)
    with _quiet_sockets(), FaultyProxy(f"http://{server.host}:{server.port}") as http:
        store = server.open(_HttpPort(http), f"throttles-{secrets.token_hex(4)}", sealer)  # type: ignore[arg-type]
        while result.trials < calls and timer.left():
            result.trials += 1
            key, op = _op(rng)
            kind, times, action = None, 0, ""
            if rng.random() < rate:
                r = rng.random()
                if r < 0.4:
                    kind, times, action = "throttled then served", rng.randint(1, server.attempts - 1), server.throttle
                elif r < 0.6:
                    kind, times, action = "throttled past its retries", server.attempts, server.throttle
                else:
                    kind, times = ("dropped", 1) if r < 0.8 else ("dropped after", 1)
                    action = "reset" if kind == "dropped" else "reset_after"
                counts[kind] += 1
                for _ in range(times):
                    http.fail(server.first(op), action)
            try:
                ledger.call(store, op, key)
                if kind == "throttled past its retries":
                    result.fail(f"call {result.trials}: {op} {key} throttled {times} times, yet it returned")
            except berth.BackendError as exc:
                ledger.errors += 1
                if kind == "throttled then served":
                    result.fail(f"call {result.trials}: {op} {key} throttled {times} times was not retried: {exc}")
                if kind == "throttled past its retries" and (
                    isinstance(exc, berth.TokenMismatch) or server.exhausted not in str(exc)
                ):
                    result.fail(f"call {result.trials}: {op} {key} throttled past its retries raised {exc!r}")
            except Exception as exc:  # noqa: BLE001 - anything but BackendError is a finding
                result.fail(f"call {result.trials}: {op} {key} raised {type(exc).__name__}: {exc}")
            with http._lock:
                http._faults.clear()  # a fault the call did not reach (a call served from elsewhere) goes
        ledger.recover(store)
        store.close()
    result.seconds = timer.elapsed()
    result.counts = {**counts, "backend_errors": ledger.errors}
    result.notes.insert(
        0,
        f"{result.trials} calls, {ledger.errors} raised BackendError ({ledger.unknown_claims} claims of unknown "
        f"outcome); faults: {counts}; {len(ledger.claimed)} runs claimed",
    )
    return result


@contextmanager
def _quiet_sockets() -> Iterator[None]:
    """azure-storage-blob's transport (requests) leaves the socket of a connection the proxy dropped to
    the garbage collector, which warns (ResourceWarning) in whichever test runs then: collected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            yield
        finally:
            gc.collect()


class _HttpPort:
    """A `FaultyProxy` as `Server.open` takes a proxy: its `port`."""

    def __init__(self, http: FaultyProxy):
        self.port = int(http.url.rsplit(":", 1)[1])


def run_lost_delete(server: Server, *, trials: int, wrap: Callable[[Any], Any] | None = None) -> Result:
    """The conditional delete of a claim is carried out and its response lost: BackendError, every time."""
    result = Result("server faults: claim whose delete response is lost", server.name)
    timer = Timer(0)
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    identity = f"lost-{secrets.token_hex(4)}"
    with server.proxy(random.Random(trials)) as proxy:
        store = server.open(proxy, identity, sealer)
        if server.name.startswith("redis"):  # a cluster's every primary too
            # the delete script in every script cache, so the armed request is the delete that runs,
            # not an EVALSHA answered NOSCRIPT (it did not run; berth sends it again by its text)
            from berth.backends.redis._wire import DELETE

            redis_backend: Any = store.backend
            redis_backend.client.script_load(DELETE)
        backend = _LoseDeleteResponse(wrap(store.backend) if wrap else store.backend, proxy)
        hooked = berth.Store(as_backend(backend), identity=identity, sealer=sealer)
        envelope = big_envelope(size=500)
        for i in range(trials):
            key = f"lost/{i}"
            store.save(key, envelope.replace(run_id=f"lost-{i}"))
            result.trials += 1
            try:
                got = hooked.claim(key)
            except berth.BackendError:
                got = Unset  # type: ignore[assignment]
            except Exception as exc:  # noqa: BLE001
                result.fail(f"claim {i} raised {type(exc).__name__}: {exc}")
                continue
            if got is not Unset:
                result.fail(f"claim {i} returned {'a win' if got else 'None'} though its outcome was unknown")
                continue
            after = _load_retrying(store, key)
            if after is not None:  # the delete did not run: the envelope is still claimable
                result.fail(f"claim {i}: the delete was sent but {key} is still parked")
        server.check(proxy, store, result)
        store.close()
        if proxy.lost_responses < trials:
            result.fail(f"only {proxy.lost_responses} of {trials} delete responses were lost: the trial did not bite")
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{proxy.lost_responses} delete responses lost; every claim raised BackendError")
    return result


class _LoseDeleteResponse:
    """Wraps a real backend: arms the proxy to lose the response of each delete it sends."""

    def __init__(self, inner: Any, proxy: Proxy):
        self.inner, self.proxy = inner, proxy

    def delete(self, name: str, token: berth.Token) -> None:
        # the delete's request names the frame, plainly (SQL, RESP, an S3 path) or quoted (a GCS path);
        # DynamoDB's names it in two attributes, under the operation's header
        self.proxy.lose_response_to(name.encode(), quote(name, safe="").encode(), b"DynamoDB_20120810.DeleteItem")
        self.inner.delete(name, token)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def _load_retrying(store: berth.Store, key: str) -> berth.Parked | None:
    for _ in range(50):
        try:
            return store.load(key)
        except berth.BackendError:
            time.sleep(0.1)
    return store.load(key)


# --- tests -------------------------------------------------------------------------------


SERVERS = ["postgresql", "redis", "redis-cluster", "s3", "gcs"]
HTTP = ["azblob", "dynamodb"]  # the proxy's faults, and throttles (`run_throttles`)


@pytest.fixture
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Server:
    name = request.param
    if name == "postgresql":
        return postgres_server(request.getfixturevalue("postgres_dsn"))
    if name == "redis":
        return redis_server(request.getfixturevalue("redis_url"))
    if name == "redis-cluster":
        return redis_cluster_server(request.getfixturevalue("redis_cluster_url"))
    if name == "gcs":
        return gcs_server(request.getfixturevalue("fake_gcs"))
    if name == "azblob":
        for variable in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"):
            monkeypatch.delenv(variable, raising=False)
        return azblob_server(request.getfixturevalue("azurite"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # moto takes any; nothing here reaches AWS
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    if name == "dynamodb":
        return dynamodb_server(request.getfixturevalue("moto_url"))
    s3 = s3_server(request.getfixturevalue("moto_url"))
    return _S3Server(s3.name, s3.host, s3.port, s3._url, s3.options)


@pytest.mark.parametrize("server", [*SERVERS, *HTTP], indirect=True)
def test_faults_mid_save_load_claim(server: Server) -> None:
    result = run_faults(server, calls=60 if server.name in HTTP else 150, budget=90)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    # the faults landed: some were injected, and some call was on the wire when one struck
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary


@pytest.mark.parametrize("server", ["postgresql", "redis"], indirect=True)
def test_async_faults_mid_save_load_claim(server: Server) -> None:
    # berth.aio's own pools (PostgreSQL, Redis) under the same faults as the sync store's
    result = run_faults(_AwaitedServer(server), calls=120, budget=90)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary


@pytest.mark.parametrize("server", [*SERVERS, *HTTP], indirect=True)
def test_claim_with_lost_delete_response_is_a_backend_error(server: Server) -> None:
    result = run_lost_delete(server, trials=5)
    result.notes = result.notes[1:]
    result.check()


def _check_throttles(result: Result) -> None:
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    # every kind of fault landed, and some call raised
    assert all(result.counts[kind] > 0 for kind in ("throttled then served", "throttled past its retries")), summary
    assert result.counts["backend_errors"] > 0, summary


@pytest.mark.parametrize("server", HTTP, indirect=True)
def test_throttles_mid_save_load_claim(server: _HttpServer) -> None:
    _check_throttles(run_throttles(server, calls=60, rate=0.3, budget=90))


@pytest.mark.slow
@pytest.mark.parametrize("server", HTTP, indirect=True)
def test_throttles_long(server: _HttpServer) -> None:
    _check_throttles(run_throttles(server, calls=1000, budget=900))


@pytest.fixture(params=["postgresql", "redis"])
def private_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    cls: Any = {"postgresql": PrivatePostgres, "redis": PrivateRedis}[request.param]
    if not cls.available():
        unavailable(f"a private {request.param} server", f"{cls.__doc__} cannot be started here")
    server = cls(tmp_path_factory.mktemp(f"private-{request.param}"))
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_server_crash_mid_save_load_claim(private_server: PrivateServer) -> None:
    result = run_faults(private_server.server(), calls=120, rate=0.03, crashes=private_server, budget=120)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    # the kills landed: the server was killed, and calls were in flight when it died
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary


def test_async_server_crash_mid_save_load_claim(private_server: PrivateServer) -> None:
    # the async pools survive a SIGKILLed and restarted server as the sync ones do
    server = _AwaitedServer(private_server.server())
    result = run_faults(server, calls=100, rate=0.03, crashes=private_server, budget=120)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary


@pytest.mark.slow
def test_server_crash_long(private_server: PrivateServer) -> None:
    result = run_faults(private_server.server(), calls=2000, rate=0.03, crashes=private_server, budget=1200)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary


class _RetriedDelete:
    """What a naive retry does: the lost response becomes a retried delete that finds nothing."""

    def __init__(self, inner: Any):
        self.inner = inner

    def delete(self, name: str, token: berth.Token) -> None:
        try:
            self.inner.delete(name, token)
        except berth.BackendError:
            self.inner.delete(name, token)  # raises TokenMismatch: the first attempt had deleted it

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


@pytest.mark.parametrize("server", ["postgresql"], indirect=True)
def test_the_lost_delete_trial_catches_a_retry_that_hides_the_outcome(server: Server) -> None:
    result = run_lost_delete(server, trials=3, wrap=_RetriedDelete)
    assert result.failures == 3
    assert all("returned None" in n for n in result.notes[1:4])


@pytest.mark.parametrize("server", ["redis-cluster"], indirect=True)
def test_the_cluster_trial_catches_a_client_past_the_proxies(server: _ClusterServer) -> None:
    # without address_remap the client learns the nodes' own ports from CLUSTER SLOTS and leaves the proxies
    server.remap = False
    result = run_lost_delete(server, trials=3)
    assert any("directly, past the fault proxies" in note for note in result.notes), result.notes


@pytest.mark.slow
@pytest.mark.parametrize("server", [*SERVERS, *HTTP], indirect=True)
def test_faults_long(server: Server) -> None:
    result = run_faults(server, calls=3000, budget=900)
    summary, result.notes = result.notes[0], result.notes[1:]
    result.check()
    assert result.counts["faults"] > 0 and result.counts["backend_errors"] > 0, summary
    lost = run_lost_delete(server, trials=200)
    lost.notes = lost.notes[1:]
    lost.check()
