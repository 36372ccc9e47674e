"""Peak memory and time of a `berth serve` inbox fed one oversized request body (issue 30.4).

Starts the inbox (memory store, one token) in a child process, sends one request whose
body is SIZE MiB, and prints the answer's status line, how long it took, and how much
the server's peak resident memory (VmHWM, Linux) grew.

    .venv/bin/python scripts/inbox_bodies.py login 240   # an unauthenticated POST /login of empty fields
    .venv/bin/python scripts/inbox_bodies.py api 200     # an authenticated POST /api/answers of one long text

Run it with PYTHONPATH pointing at another checkout's `src` to compare releases.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import subprocess
import sys
import time

SERVER = """
import berth, uvicorn
from berth._serve import Auth, Source, build_app, parse_tokens
url = "memory://"
source = Source("x", berth.open_store(url, identity="x", sealer=berth.PlaintextSealer()),
                berth.open_questions(url, identity="x", sealer=berth.PlaintextSealer()))
app = build_app([source], Auth(tokens=parse_tokens({token!r})), max_age=0)
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="critical")
"""


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=["login", "api"])
    parser.add_argument("mib", type=int, help="body size in MiB")
    args = parser.parse_args()
    token = secrets.token_urlsafe(32)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(token=token, port=port)])
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        before = peak_mib(server.pid)
        size = args.mib << 20
        if args.target == "login":
            headers = "Content-Type: application/x-www-form-urlencoded\r\nCookie: berth_csrf=abc\r\n"
            body = b"csrf=abc&token=" + b"&" * (size - 15)
            path = "/login"
        else:
            headers = f"Content-Type: application/json\r\nAuthorization: Bearer {token}\r\n"
            body = b'{"key": "k", "question_id": "q", "text": "' + b"a" * (size - 44) + b'"}'
            path = "/api/answers"
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {size}\r\n\r\n"
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(head.encode())
            try:
                for i in range(0, len(body), 1 << 20):
                    conn.sendall(body[i : i + (1 << 20)])
            except OSError:
                pass  # the server answered and closed before taking it all
            conn.settimeout(600)
            status = conn.recv(256).split(b"\r\n")[0].decode()
        took = time.monotonic() - started
        after = peak_mib(server.pid)
        print(f"{path}, {args.mib} MiB body: {status} after {took:.1f} s; server peak RSS +{after - before:.0f} MiB")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
