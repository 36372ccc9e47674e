"""`berth.checkpoint_store(store)`: the agent-language checkpoint ADR's two-method host seam over a berth store.

    put(data, key=hint) -> location          get(location) -> data

The seam moves bytes, not envelopes: the runtime keeps its own checkpoint
format, berth seals the bytes under the store's sealer, bound (as associated
data) to the store's identity and the key. The location is opaque to the
runtime; to berth it is ``berth:<identity>/<key>#<nonce>``, where the nonce is
128 random bits kept only inside the sealed body. A location that was changed
(another key, identity or nonce), forged, or superseded by a later put under the
same key does not resolve: `get` raises a berth error and never returns the
bytes of another key. Any process that opens the same store resolves it.
"""

from __future__ import annotations

import base64
import hmac
import os
from datetime import timedelta
from typing import Protocol, runtime_checkable

import orjson

from berth._envelope import Envelope
from berth._errors import IntegrityError, InvalidEnvelope, InvalidKey, TokenMismatch, where
from berth._keys import validate_key
from berth._public import publish
from berth._store import Store

__all__ = ["CheckpointStore", "SealedCheckpointStore", "checkpoint_store"]

_SCHEME = "berth:"
_PROVIDER = "berth.checkpoint"
_NONCE_HEX = 32


@runtime_checkable
class CheckpointStore(Protocol):
    """The ADR's store protocol: moves bytes, returns an opaque location."""

    def put(self, data: bytes, *, key: str) -> str:
        """Store `data`, named after the hint `key`; return where to find it."""
        ...

    def get(self, location: str) -> bytes:
        """The bytes stored at `location`."""
        ...


class SealedCheckpointStore:
    """Checkpoint bytes sealed in a berth store; see `berth.checkpoint_store`."""

    def __init__(self, store: Store, *, prefix: str = "checkpoints/", ttl: timedelta | None = None):
        if not isinstance(store, Store):
            raise TypeError(f"checkpoint_store needs a berth.Store, got {type(store).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
            raise ValueError(f"ttl must be a positive timedelta or None, got {ttl!r}")
        self.store = store
        self.prefix = prefix
        self.ttl = ttl

    def __repr__(self) -> str:
        return f"checkpoint_store({self.store!r}, prefix={self.prefix!r}, ttl={self.ttl!r})"

    def put(self, data: bytes, *, key: str) -> str:
        """Seal `data` and park it under `prefix + key`, superseding an earlier put of that key.

        Args:
            data: the checkpoint's bytes (any bytes; JSON is kept verbatim inside the seal).
            key: a naming hint (a berth key once prefixed: `turn-120501-000123.json`, `tenant/run-7`).

        Returns:
            The location: opaque, for `get` in any process that opens the same store.

        Raises:
            InvalidKey: `prefix + key` breaks the key rules (before any I/O).
            TypeError: `data` is not bytes.
            EnvelopeTooLarge, BackendError: as `Store.save`.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"checkpoint data must be bytes, got {type(data).__name__}")
        if not isinstance(key, str):
            raise TypeError(f"checkpoint key must be a str, got {type(key).__name__}")
        name = validate_key(self.prefix + key, self.store.identity)
        data = bytes(data)
        nonce = os.urandom(_NONCE_HEX // 2).hex()
        now = self.store.now()
        deadline = now + self.ttl if self.ttl is not None else None
        try:  # JSON bytes with no surrounding space ride verbatim; anything else as base64
            if data[:1].isspace() or data[-1:].isspace():
                raise InvalidEnvelope("surrounding space is not kept")
            envelope = Envelope(provider_state=data, provider=_PROVIDER, loop_state={"nonce": nonce}, deadline=deadline)
        except InvalidEnvelope:
            envelope = Envelope(
                provider_state=base64.b64encode(data).decode("ascii").join('""'),
                provider=_PROVIDER,
                loop_state={"nonce": nonce, "base64": True},
                deadline=deadline,
            )
        self.store.save(name, envelope)
        return f"{_SCHEME}{self.store.identity}/{name}#{nonce}"

    def get(self, location: str) -> bytes:
        """Open the checkpoint at `location`, as `put` returned it.

        Raises:
            IntegrityError: the location is not one this store handed out: malformed, of another
                identity, changed, forged, or superseded by a later put of the same key; or the
                frame does not open (tampered, moved).
            TokenMismatch: nothing is parked there any more (swept, deleted).
            Expired: the checkpoint passed its `ttl`.
            FormatError, BackendError: as `Store.load`.
        """
        identity = self.store.identity
        name, nonce = self._parse(location)
        parked = self.store.load(name)
        if parked is None:
            raise TokenMismatch(
                f"no checkpoint is parked at {where(identity, name)}: deleted, swept, or never put",
                identity=identity,
                key=name,
            )
        env = parked.envelope
        loop = orjson.loads(env.loop_state) if env.loop_state is not None else None
        if not isinstance(loop, dict) or env.provider != _PROVIDER:
            loop = {}
        stored = loop.get("nonce")
        if not isinstance(stored, str) or not hmac.compare_digest(stored, nonce):
            raise IntegrityError(
                f"checkpoint location for {where(identity, name)} does not match what is parked there: "
                "changed, forged, or superseded by a later put",
                identity=identity,
                key=name,
            )
        if loop.get("base64"):
            return base64.b64decode(env.state())
        return env.provider_state

    def _parse(self, location: object) -> tuple[str, str]:
        identity = self.store.identity
        if not isinstance(location, str):
            raise TypeError(f"a checkpoint location is a str, got {type(location).__name__}")
        body, sep, nonce = location.rpartition("#")
        owner, slash, name = body.removeprefix(_SCHEME).partition("/")
        if (
            not body.startswith(_SCHEME)
            or not sep
            or not slash
            or len(nonce) != _NONCE_HEX
            or nonce.strip("0123456789abcdef")
        ):
            raise IntegrityError(
                f"not a checkpoint location of {where(identity, None)}: expected berth:<identity>/<key>#<nonce>",
                identity=identity,
            )
        if owner != identity:
            raise IntegrityError(
                f"checkpoint location names identity {owner[:128]!r}, this store is {where(identity, name[:1024])}",
                identity=identity,
                key=name[:1024],
            )
        try:
            return validate_key(name, identity), nonce
        except InvalidKey:
            raise IntegrityError(
                f"checkpoint location names an invalid key for {where(identity, None)}", identity=identity
            ) from None


def checkpoint_store(store: Store, *, prefix: str = "checkpoints/", ttl: timedelta | None = None) -> CheckpointStore:
    """The checkpoint ADR's host seam over `store`: `put(data, *, key) -> location`, `get(location) -> data`.

    What is put is sealed under the store's sealer and bound to its identity and key; the
    returned location is opaque and tamper-evident, and resolves in any process that opens
    the same store. Per-tenant keys: one store (identity + sealer) per tenant, one
    checkpoint store over each (docs/integrations/checkpoint-store.md).

    Args:
        store: the berth store to park checkpoints in.
        prefix: prepended to every key hint, to keep checkpoints apart from parked runs.
        ttl: when set, a checkpoint expires this long after its put (`get` raises `Expired`,
            `store.sweep()` removes it).

    Raises:
        TypeError, ValueError: `store`, `prefix` or `ttl` is not what is documented.
    """
    return SealedCheckpointStore(store, prefix=prefix, ttl=ttl)


publish(globals())  # its public names read as berth.X
