"""Loopback helpers shared by the test session, the reliability suite and its script."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

__all__ = ["free_port", "wait_http", "wait_port"]


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 20.0) -> bool:
    """Whether `url` answers an HTTP GET within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except Exception:
            time.sleep(0.1)
    return False


def wait_port(host: str, port: int, timeout: float = 10.0) -> bool:
    """Whether a TCP connection to host:port succeeds within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server process: terminate, and kill it if it has not exited within 10 s (a loaded machine)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
