"""moto's S3/KMS server with its requests applied one at a time.

moto checks an S3 precondition (`If-Match`, `If-None-Match`) and then acts, with no lock
between the two: two conditional deletes of one object racing in its threaded server can
both pass the check, and a claim race then sees a double claim that real S3 -- which applies a
precondition atomically -- never gives (seen here under load). Serialising moto's request
handling makes the emulator atomic the way the service is, so a double claim in the suite is
berth's, never the emulator's.

    python tests/_moto.py PORT       # serve on 127.0.0.1:PORT until SIGTERM
    moto_command(port)               # that command, for subprocess.Popen
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["moto_command"]


def moto_command(port: int) -> list[str]:
    """The command that starts a serialised moto server on 127.0.0.1:`port`."""
    return [sys.executable, str(Path(__file__).resolve()), str(port)]


class _Serialised:
    """A WSGI app that lets one request at a time into `app` (the body is built inside)."""

    def __init__(self, app: Any):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self.lock:
            return list(self.app(environ, start_response))


def _cache_module_list() -> None:
    """List moto's service packages once instead of on every request.

    moto's dispatcher asks `moto.backends.list_of_moto_modules()` twice per request, and each call
    lists moto's package directory and stats every entry (~190 of them): about 40% of the server's
    CPU per S3 request here. The answer is fixed for an installed moto, so one listing serves all.
    """
    from moto import backends

    modules = list(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: iter(modules)


def main(port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    _cache_module_list()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, _Serialised(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(int(sys.argv[1]))
