"""The backend seam: bytes with generations, and the scheme registry.

A backend moves bytes and knows nothing of envelopes or keys. Names are
`{identity}/{key}` strings the store has already validated.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from berth._errors import BerthError
from berth._redact import redact_text, redact_url
from berth._token import Token

__all__ = ["Backend", "Head", "aio_registry", "backend_class", "credentials_hidden", "open_backend", "registry"]

Head = tuple[str, bytes, Token, int]
"""(name, the first bytes of the stored data, its token, the data's full size)."""


@runtime_checkable
class Backend(Protocol):
    """Where frames live: four methods a host implements to bring storage of its own.

    `put` raises `TokenMismatch` when `if_match` or `if_absent` does not hold;
    `delete` raises it when `token` is not the current generation, also when
    the name is gone. Every other failure is `BackendError`, except a value that
    is not one of the backend's records (another program's value, a value of
    another type, a changed record): `FormatError` or `IntegrityError`, which a
    host does not retry.

    Two optional methods make listing cheaper, and the store uses them when
    present: `heads(prefix, size)` yields `(name, first size bytes, token,
    full size)` per frame, with a `FormatError`/`IntegrityError` instance in
    place of the bytes for an entry it cannot read (one bad entry never stops
    a listing); `head(name, size)` returns `(first size bytes, token)` or None
    (a header longer than the first read is read alone, not the whole frame).
    """

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new generation."""
        ...

    def get(self, name: str) -> tuple[bytes, Token] | None:
        """The data under `name` and its generation, or None."""
        ...

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`."""
        ...

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix`, in bounded memory."""
        ...


# scheme -> (module, class, extra to install or None); alphabetical.
registry: dict[str, tuple[str, str, str | None]] = {
    "file": ("berth.backends.file", "FileBackend", None),
    "gs": ("berth.backends.gcs", "GcsBackend", "gcs"),
    "memory": ("berth.backends.memory", "MemoryBackend", None),
    "postgres": ("berth.backends.postgres", "PostgresBackend", "postgres"),
    "postgresql": ("berth.backends.postgres", "PostgresBackend", "postgres"),
    "redis": ("berth.backends.redis", "RedisBackend", "redis"),
    "rediss": ("berth.backends.redis", "RedisBackend", "redis"),
    "s3": ("berth.backends.s3", "S3Backend", "s3"),
    "sqlite": ("berth.backends.sqlite", "SqliteBackend", None),
}


# scheme -> the class of its native async twin (in the same module); other schemes run in threads.
aio_registry: dict[str, str] = {
    "postgres": "AsyncPostgresBackend",
    "postgresql": "AsyncPostgresBackend",
    "redis": "AsyncRedisBackend",
    "rediss": "AsyncRedisBackend",
}


def backend_class(url: str, *, native_async: bool = False) -> Any:
    """The backend class for `url`'s scheme (its async twin with `native_async`, or None if it has none),
    importing its module (and client library) only now."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise BerthError(
            f"store URL {redact_url(url)!r} has no scheme: use one of {', '.join(s + '://' for s in registry)}"
        )
    entry = registry.get(scheme.lower())
    if entry is None:
        raise BerthError(f"unknown store scheme {scheme!r}: use one of {', '.join(s + '://' for s in registry)}")
    module_name, cls_name, extra = entry
    if native_async:
        cls_name = aio_registry.get(scheme.lower(), "")
        if not cls_name:
            return None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra and exc.name and not (exc.name == "berth" or exc.name.startswith("berth.")):
            raise BerthError(
                f"the {scheme}:// backend needs the {exc.name!r} package: pip install 'berth[{extra}]'"
            ) from exc
        raise
    return getattr(module, cls_name)


@contextmanager
def credentials_hidden(url: str) -> Iterator[None]:
    """A `with` block opening `url`: an error quoting the URL or its password comes out redacted.

    A backend, or its client library parsing the URL, may quote either (psycopg's "invalid
    percent-encoded token"). Such an error is raised anew with the credential replaced by `***`,
    and without the original in its chain, so a traceback cannot show it either.
    """
    try:
        yield
    except Exception as exc:
        text = str(exc)
        clean = redact_text(text, url)
        cause = exc.__cause__ or exc.__context__
        if clean == text and (cause is None or redact_text(str(cause), url) == str(cause)):
            raise
        if isinstance(exc, BerthError):
            raise type(exc)(clean, identity=exc.identity, key=exc.key) from None
        raise BerthError(f"cannot open {redact_url(url)}: {type(exc).__name__}: {clean}") from None


def open_backend(url: str, **options: Any) -> Any:
    """Open the backend for `url`, importing its module (and client library) only now."""
    with credentials_hidden(url):
        return backend_class(url).from_url(url, **options)
