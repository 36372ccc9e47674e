"""The backend seam: bytes with generations, and the scheme registry.

A backend moves bytes and knows nothing of envelopes or keys. Names are
`{identity}/{key}` strings the store has already validated.
"""

from __future__ import annotations

import importlib
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple, Self

from berth._errors import BerthError, FormatError, IntegrityError, TokenMismatch, restated
from berth._redact import redact_text, redact_url
from berth._token import Token
from berth.backends._bulk import FRAME_BATCH, Data, Frame, Head, Put, sorted_names

__all__ = [
    "Backend",
    "Data",
    "Frame",
    "Head",
    "Put",
    "ENTRY_POINT_GROUP",
    "Entry",
    "as_backend",
    "async_backend_class",
    "backend_class",
    "creating",
    "credentials_hidden",
    "open_backend",
    "register",
    "registry",
]


class Backend(ABC):
    """Where frames live: the base class of every backend, naming every call the store may make.

    Four methods are required -- a host implements them to bring storage of its own:
    `put` raises `TokenMismatch` when `if_match` or `if_absent` does not hold;
    `delete` raises it when `token` is not the current generation, also when the
    name is gone. Every other failure is `BackendError`, except a value that is not
    one of the backend's records (another program's value, a value of another type,
    a changed record): `FormatError` or `IntegrityError`, which a host does not retry.

    The rest are optional: each has a default here that is correct for every backend,
    built on the four (a backend overrides one when it can do better: one query, one
    round trip, a ranged read), so no caller ever asks whether a backend has it.
    """

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Open a backend from its store URL (`open_store` calls it); a backend opened only by hand need not."""
        raise BerthError(f"{cls.__name__} cannot be opened from a URL ({redact_url(url)!r})")

    @abstractmethod
    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new generation (conditionally if asked).

        `data` is bytes or a `bytearray` (the built-in sealers build a frame in one).
        """

    @abstractmethod
    def get(self, name: str) -> tuple[Data, Token] | None:
        """The data under `name` and its generation, or None."""

    @abstractmethod
    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its generation is `token`; else `TokenMismatch`."""

    @abstractmethod
    def scan(self, prefix: str) -> Iterator[str]:
        """Every name starting with `prefix`, in bounded memory."""

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        """The first `size` bytes under `name` and its generation, or None. Default: `get`, cut."""
        found = self.get(name)
        return None if found is None else (found[0][:size], found[1])

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """`(name, first size bytes, token, full size)` of every frame under `prefix`, any order.

        In place of the bytes, the `FormatError`/`IntegrityError` that reading one entry raised:
        one bad entry never stops a listing. Default: `scan`, then one `get` each.
        """
        for name in self.scan(prefix):
            head = self._head_by_get(name, size)
            if head is not None:
                yield head

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in bytewise name order (descending with `reverse`), the first `limit`.

        Default: names only (`scan`) to order them, then one read per head it yields: the
        first `limit` of a million names cost a million names and `limit` reads, never a
        million frames.
        """
        for name in sorted_names(self.scan(prefix), limit, reverse):
            head = self._head_by_get(name, size)
            if head is not None:
                yield head

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        """Whole frames under `prefix` in bytewise name order (descending with `reverse`), the first `limit`.

        `(name, data, token)` each; a value that is not one of the backend's records raises
        (`FormatError`/`IntegrityError`), as `get` does. `before`: only names that sort before
        it (the store passes it only when its caller does). Default: names only (`scan`) to
        order them, then `get_many` a batch at a time; a frame deleted meanwhile is left out.
        """
        scanned = self.scan(prefix)
        names = sorted_names(scanned if before is None else (n for n in scanned if n < before), limit, reverse)
        for at in range(0, len(names), FRAME_BATCH):
            batch = names[at : at + FRAME_BATCH]
            for name, found in zip(batch, self.get_many(batch), strict=True):
                if found is not None:
                    yield name, found[0], found[1]

    def _head_by_get(self, name: str, size: int) -> Head | None:
        try:
            found = self.get(name)
        except (FormatError, IntegrityError) as exc:  # one bad value never stops a listing: it is yielded
            return name, exc, Token.ZERO, 0
        if found is None:
            return None
        data, token = found
        return name, bytes(data[:size]), token, len(data)  # a copy of the head: the frame is freed

    def put_many(self, items: Sequence[Put]) -> list[Token | TokenMismatch]:
        """`put` of each item (names distinct), in order: its new token, or the `TokenMismatch` of its
        condition that did not hold (nothing written for it; the others are written all the same).

        Any other failure raises (`BackendError`), and the items before it may have been written
        (a backend with transactions writes all of one call in one: then none was). Default: one
        `put` each; SQLite, PostgreSQL and Redis write a call in one transaction or round trip.
        """
        out: list[Token | TokenMismatch] = []
        for item in items:
            try:
                out.append(self.put(item.name, item.data, if_match=item.if_match, if_absent=item.if_absent))
            except TokenMismatch as exc:
                out.append(exc)
        return out

    def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        """`get` of every name, in order. Default: one `get` each."""
        return [self.get(name) for name in names]

    def delete_many(self, items: Sequence[tuple[str, Token]]) -> list[bool]:
        """Conditionally delete each (name, token); whether each was deleted (False: `TokenMismatch`).

        Default: one `delete` each.
        """
        out = []
        for name, token in items:
            try:
                self.delete(name, token)
            except TokenMismatch:
                out.append(False)
            else:
                out.append(True)
        return out

    creates: ClassVar[bool] = False
    """Whether opening creates the storage (a directory, a database file, a table): such a backend
    takes `create=False`, and then raises `StoreMissing` where nothing is, creating nothing."""

    def setup(self) -> int | None:
        """Create or migrate a schema (idempotent); its version, or None: nothing to set up by default."""
        return None

    def close(self) -> None:  # noqa: B027 - optional, with a default: nothing to release
        """Release connections; nothing by default."""


class _Adapted(Backend):
    """An object with the four required methods that does not subclass `Backend`: used through those four."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __repr__(self) -> str:
        return repr(self.inner)

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        token: Token = self.inner.put(name, data, if_match=if_match, if_absent=if_absent)
        return token

    def get(self, name: str) -> tuple[Data, Token] | None:
        found: tuple[Data, Token] | None = self.inner.get(name)
        return found

    def delete(self, name: str, token: Token) -> None:
        self.inner.delete(name, token)

    def scan(self, prefix: str) -> Iterator[str]:
        names: Iterator[str] = self.inner.scan(prefix)
        return names


def as_backend(backend: Any) -> Backend:
    """`backend` itself if it subclasses `Backend`; else an object with `put`, `get`, `delete`, `scan`,
    used through those four alone (the optional calls take their defaults)."""
    if isinstance(backend, Backend):
        return backend
    missing = [m for m in ("put", "get", "delete", "scan") if not callable(getattr(backend, m, None))]
    if missing:
        raise TypeError(f"{type(backend).__name__} is not a berth backend: it lacks {', '.join(missing)}")
    return _Adapted(backend)


class Entry(NamedTuple):
    """One scheme of the registry: where its backend class is, and what installs its client."""

    target: str
    """`"package.module:Class"`, imported on first use."""
    extra: str | None = None
    """The berth extra that installs its client library (named when the import fails)."""
    async_target: str | None = None
    """Its native async twin (`"package.module:AsyncClass"`); None: `berth.aio` runs it in threads."""


ENTRY_POINT_GROUP = "berth.backends"
"""Third-party packages declare a scheme here: `myscheme = "pkg.module:Class"`."""

_PG = Entry("berth.backends.postgres:PostgresBackend", "postgres", "berth.backends.postgres:AsyncPostgresBackend")
_REDIS = Entry("berth.backends.redis:RedisBackend", "redis", "berth.backends.redis:AsyncRedisBackend")
_CLUSTER = Entry("berth.backends.redis:RedisClusterBackend", "redis", "berth.backends.redis:AsyncRedisClusterBackend")
_schemes: dict[str, Entry] = {  # alphabetical
    "azblob": Entry("berth.backends.azblob:AzureBlobBackend", "azblob", "berth.backends.azblob:AsyncAzureBlobBackend"),
    "dynamodb": Entry("berth.backends.dynamodb:DynamoDbBackend", "dynamodb"),
    "file": Entry("berth.backends.file:FileBackend"),
    "gs": Entry("berth.backends.gcs:GcsBackend", "gcs"),
    "memory": Entry("berth.backends.memory:MemoryBackend"),
    "postgres": _PG,
    "postgresql": _PG,
    "redis": _REDIS,
    "redis+cluster": _CLUSTER,
    "rediss": _REDIS,
    "rediss+cluster": _CLUSTER,
    "s3": Entry("berth.backends.s3:S3Backend", "s3"),
    "sqlite": Entry("berth.backends.sqlite:SqliteBackend"),
}
_entry_points_loaded = False
_lock = threading.Lock()

registry: Mapping[str, Entry] = MappingProxyType(_schemes)
"""Every known scheme and its `Entry`, read-only: change it with `register`."""


def register(scheme: str, target: str, *, extra: str | None = None, async_target: str | None = None) -> None:
    """Open `scheme://` URLs with the backend class `target` (`"package.module:Class"`), imported on first use.

    A third-party package may instead declare the entry point `scheme = "package.module:Class"` in
    the `berth.backends` group. Registering a scheme again replaces it (the last call wins).

    Args:
        scheme: the URL scheme, lower case (`myscheme` opens `myscheme://...`).
        target: the `Backend` subclass, as `"package.module:Class"`.
        extra: the berth extra that installs its client, named when its import fails.
        async_target: its native async twin, if it has one (else `berth.aio` runs it in threads).

    Raises:
        ValueError: a scheme or target that is not of that form.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise ValueError(f"backend scheme must be lower-case letters, digits, '+', '-' or '.', got {scheme!r}")
    for value in (target, async_target):
        if value is not None and (not isinstance(value, str) or not _TARGET.fullmatch(value)):
            raise ValueError(f"backend target must be 'package.module:Class', got {value!r}")
    with _lock:
        _schemes[scheme] = Entry(target, extra, async_target)


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        import importlib.metadata  # here, not at import: it pulls in pathlib, zipfile and email (~10 ms)

        found = [(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    for scheme, value in found:
        if scheme not in _schemes:  # a built-in or a `register` call wins over an entry point
            register(scheme, value)


def _entry(url: str) -> tuple[str, Entry]:
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme not in _schemes:
        _load_entry_points()
    if not sep or scheme not in _schemes:
        choices = ", ".join(s + "://" for s in sorted(_schemes))
        if not sep:
            raise BerthError(f"store URL {redact_url(url)!r} has no scheme: use one of {choices}")
        raise BerthError(f"unknown store scheme {scheme!r}: use one of {choices}")
    return scheme, _schemes[scheme]


def _imported(scheme: str, target: str, extra: str | None) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra and exc.name and not (exc.name == "berth" or exc.name.startswith("berth.")):
            raise BerthError(
                f"the {scheme}:// backend needs the {exc.name!r} package: pip install 'berthing[{extra}]'"
            ) from exc
        raise
    return getattr(module, attr)


def backend_class(url: str) -> type[Backend]:
    """The backend class for `url`'s scheme, importing its module (and client library) only now.

    Raises:
        BerthError: no scheme, an unknown scheme, or its extra is not installed (naming the extra).
        TypeError: the registered class does not subclass `Backend`.
    """
    scheme, entry = _entry(url)
    cls = _imported(scheme, entry.target, entry.extra)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"the {scheme}:// backend {entry.target} does not subclass berth.backends.Backend")
    return cls


def async_backend_class(url: str) -> Any:
    """The native async backend class for `url`'s scheme, or None: it runs in worker threads."""
    scheme, entry = _entry(url)
    if entry.async_target is None:
        return None
    return _imported(scheme, entry.async_target, entry.extra)


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
            raise restated(exc, clean, identity=exc.identity, key=exc.key) from None
        raise BerthError(f"cannot open {redact_url(url)}: {type(exc).__name__}: {clean}") from None


def open_backend(url: str, **options: Any) -> Backend:
    """Open the backend for `url`, importing its module (and client library) only now.

    `create=False` (any scheme) opens only what exists: a backend that would create its
    storage (`Backend.creates`) raises `StoreMissing` instead, having created nothing.
    """
    cls = backend_class(url)
    with credentials_hidden(url):
        return cls.from_url(url, **creating(cls, options))


def creating(cls: type[Backend], options: dict[str, Any]) -> dict[str, Any]:
    """`options` without `create`, which goes back in as `create=False` only for a backend that
    creates its storage (`Backend.creates`): to every other, opening creates nothing anyway."""
    create = options.pop("create", True)
    if cls.creates and not create:
        options["create"] = False
    return options
