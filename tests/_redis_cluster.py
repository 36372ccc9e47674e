"""A local Redis Cluster of redis-server processes: for the test session, the fault trial and its script."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests._net import wait_port

__all__ = ["LocalCluster"]


def _node_port() -> int:
    """A port free for a node and for its cluster bus (the port + 10000, so under 55536)."""
    while True:
        port = random.randrange(20000, 45000)
        try:
            for each in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", each))
        except OSError:
            continue
        return port


class LocalCluster:
    """`primaries` primaries with `replicas` replicas each, on free loopback ports, under `directory`.

    No persistence (`--save ""`, `--appendonly no`): a test cluster. `start()` raises `RuntimeError`
    with the reason when redis-server or redis-cli is missing or the cluster never reports
    `cluster_state:ok`; `stop()` ends every process it started.
    """

    def __init__(self, directory: Path, *, primaries: int = 3, replicas: int = 0, node_timeout_ms: int = 2000):
        self.directory = directory
        self.count = primaries * (1 + replicas)
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = []
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """`redis+cluster://` over every node's address."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports) + "/"

    def start(self) -> LocalCluster:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are not installed")
        for _attempt in range(3):  # a port taken between the check and the server's bind: new ports
            self.ports = []
            while len(self.ports) < self.count:
                port = _node_port()
                if port not in self.ports and port + 10000 not in self.ports:
                    self.ports.append(port)
            for port in self.ports:
                self._spawn(server, port)
            if all(wait_port("127.0.0.1", p, timeout=30) and self.processes[p].poll() is None for p in self.ports):
                break
            self.stop()
            self.processes.clear()
        else:
            raise RuntimeError("redis-server did not start (three tries)")
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
        create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-500:]!r} {done.stderr[-500:]!r}")
        if not self.wait_ok(60):
            self.stop()
            raise RuntimeError("the cluster never reported cluster_state:ok")
        return self

    def _spawn(self, server: str, port: int) -> None:
        command = [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.directory / f"nodes-{port}.conf"),
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.directory),
        ]
        self.processes[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def info(self, port: int, *what: str) -> str:
        """`redis-cli -p PORT *what`'s output ('' when the node does not answer)."""
        cli = shutil.which("redis-cli") or "redis-cli"
        try:
            done = subprocess.run([cli, "-p", str(port), *what], capture_output=True, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout.decode(errors="replace")

    def wait_ok(self, timeout: float) -> bool:
        """Whether every live node reports `cluster_state:ok` and every slot, and every replica is in sync
        with its primary, within `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [p for p, proc in self.processes.items() if proc.poll() is None]
            infos = [self.info(p, "cluster", "info") for p in live]
            replication = [self.info(p, "info", "replication") for p in live]
            synced = all("role:master" in r or "master_link_status:up" in r for r in replication)
            if synced and all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i for i in infos):
                return True
            time.sleep(0.1)
        return False

    def primary_ports(self) -> list[int]:
        """The ports of the nodes that are primaries now (by ROLE)."""
        return [
            p for p, proc in self.processes.items() if proc.poll() is None and self.info(p, "role").startswith("master")
        ]

    def kill(self, port: int) -> None:
        """SIGKILL the node on `port` (a crash: nothing flushed, nothing said to its peers)."""
        proc = self.processes[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def restart(self, port: int) -> None:
        """Start the node on `port` again, with its cluster config (a killed primary comes back as a replica)."""
        server = shutil.which("redis-server") or "redis-server"
        self._spawn(server, port)
        if not wait_port("127.0.0.1", port, timeout=30):
            raise RuntimeError(f"redis-server did not start again on port {port}")

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
