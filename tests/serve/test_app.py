"""berth._serve._app: the route table, handlers that stand alone, and an app that loads without the CLI.

The inbox's behaviour over HTTP is the other files' business; here, its shape.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings
from typing import Any

import pytest

import berth

pytest.importorskip("starlette", reason="the serve extra is not installed: ./dev test installs it")

from starlette.requests import Request  # noqa: E402
from starlette.routing import Mount, Route  # noqa: E402

from berth._serve import Auth, Source, build_app  # noqa: E402
from berth._serve._api import api_questions, health  # noqa: E402
from berth._serve._app import ROUTES  # noqa: E402


def test_the_inbox_loads_without_the_command_line() -> None:
    """`berth serve`'s app shares the CLI's formatting through `berth._format`, not through click."""
    code = (
        "import sys, berth._serve._app\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'click' or m.startswith('berth._cli'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []


def test_one_table_names_every_address_and_its_module_level_handler() -> None:
    routes = [r for r in ROUTES if isinstance(r, Route)]
    assert sorted((r.path, m) for r in routes for m in r.methods or () if m != "HEAD") == [
        ("/", "GET"),
        ("/answer", "GET"),
        ("/answer", "POST"),
        ("/api/answers", "POST"),
        ("/api/openapi.json", "GET"),
        ("/api/questions", "GET"),
        ("/api/runs", "GET"),
        ("/health", "GET"),
        ("/inbox/live", "GET"),
        ("/login", "GET"),
        ("/login", "POST"),
        ("/logout", "POST"),
        ("/metrics", "GET"),
    ]
    assert [r.path for r in ROUTES if isinstance(r, Mount)] == ["/static"]
    for route in routes:  # no handler is a closure of create_app: each can be imported and called alone
        handler = route.endpoint
        assert "<locals>" not in handler.__qualname__, handler.__qualname__
        assert getattr(sys.modules[handler.__module__], handler.__name__) is handler


def _request(app: Any, path: str, query: bytes = b"") -> Request:
    headers = [(b"host", b"127.0.0.1:8470")]
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query, "headers": headers, "app": app}
    return Request({**scope, "server": ("127.0.0.1", 8470), "scheme": "http", "client": ("127.0.0.1", 1)})


def test_a_handler_called_alone_over_the_apps_state() -> None:
    """A handler needs only a request whose app holds the state: no server, no middleware, no routing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", berth.PlaintextWarning)
        store = berth.open_store("memory://", identity="x")
        questions = berth.open_questions("memory://", identity="x")
    berth.Coordinator(store, questions).suspend(
        "org/repo#7", berth.Envelope(provider="anthropic", provider_state={}), question="Push?"
    )
    app = build_app([Source("x", store, questions)], Auth(), max_age=0)

    async def called() -> tuple[Any, Any]:
        return await health(_request(app, "/health")), await api_questions(_request(app, "/api/questions"))

    ok, listed = asyncio.run(called())
    assert (ok.status_code, ok.body) == (200, b'{"status":"ok"}')
    assert listed.status_code == 200 and listed.headers["x-total-count"] == "1"
    assert b'"prompt":"Push?"' in listed.body and b'"key":"org/repo#7"' in listed.body
    store.close()
    questions.close()
