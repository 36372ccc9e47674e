"""MCP servers on the official SDK: request state sealed under the host's keys, rounds completed once (extra `mcp`).

    codec = berth.mcp.request_state_codec(berth.AesGcmSealer(keyring), audience="deploy-server")
    server = MCPServer("deploy-server", request_state_security=RequestStateSecurity(codec=codec))
    rounds = berth.mcp.Rounds(async_store)

    @server.tool()
    async def deploy(env: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.request_state is None:                   # round one: ask, park the round
            return await rounds.ask({"ok": ElicitRequest(...)})
        return await rounds.finish(ctx.request_state, lambda state: really_deploy(env, ctx.input_responses))

`request_state_codec(sealer)` is the SDK's `RequestStateCodec` over a berth
sealer: an AES-GCM keyring (old tokens open after a rotation) or a KMS sealer
(one data key wrapped per `data_key_ttl`, unwrapped keys cached, so no KMS call
per token). The SDK's boundary binds each token to the method, tool, arguments,
principal and audience inside the sealed payload and checks its expiry; the
codec binds the seal itself to `audience`, so a token sealed by another server
under the same keys fails to open. Every failure to open is the SDK's
`InvalidRequestState`.

`Rounds(store)` makes the second round of an input-required tool call (the
retry that carries the answers) run its continuation exactly once across every
server instance sharing `store`: round one parks an open marker under a fresh
round id (carried in the sealed request state); round two claims it (the
store's claim is the commit point), runs the continuation, and stores its
result sealed (first writer wins) until the round's deadline; a replayed or
duplicated retry, on any instance, gets that stored result back. Past the
deadline the round is refused. See docs/integrations/mcp.md.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, IntegrityError, TokenMismatch
from berth._kms_sealer import KmsSealer
from berth._plaintext import PlaintextSealer
from berth._sealer import Sealer, check_sealer
from berth.kms import Wrapped

try:
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.request_state import InvalidRequestState, RequestStateCodec
    from mcp_types import CallToolResult, InputRequest, InputRequiredResult
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.mcp needs the official MCP Python SDK: pip install 'berthing[mcp]'") from exc

__all__ = ["PROVIDER", "Rounds", "request_state_codec"]

PROVIDER = "mcp"
"""The envelope's `provider` for what this module parks."""

T = TypeVar("T")

_AAD = b"berth/mcp/request-state/v1\x00"
_SEALED = "b1."  # a berth sealer's bytes
_KMS = "b1k."  # a data key cached from a KMS: wrapped record, nonce, AES-256-GCM
_NONCE = 12
_TAG = 16
_UNWRAPPED_CACHE = 1024


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64u_decode(text: str) -> bytes:
    """The strict inverse of `_b64u`: a token that is not the canonical encoding is refused."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise InvalidRequestState("malformed") from None
    if _b64u(raw) != text:
        raise InvalidRequestState("malformed")
    return raw


def request_state_codec(
    sealer: Sealer, *, audience: str = "", data_key_ttl: timedelta = timedelta(hours=1)
) -> RequestStateCodec:
    """The SDK's request-state codec over a berth sealer (pass it as `RequestStateSecurity(codec=...)`).

    Args:
        sealer: `berth.AesGcmSealer` (the keyring's primary seals, every key it holds opens),
            `berth.KmsSealer` (a data key wrapped once per `data_key_ttl`, unwrapped keys cached:
            no KMS call per token) or any other berth sealer whose `seal`/`open` are local.
        audience: the server the tokens are for (its name); a token sealed for another audience,
            under the same keys, fails to open.
        data_key_ttl: with a KMS sealer, how long one wrapped data key seals new tokens.

    Returns:
        An object with `seal(bytes) -> str` and `unseal(str) -> bytes`; `unseal` raises the SDK's
        `InvalidRequestState` for every token it did not mint unmodified.

    Raises:
        TypeError: `sealer` is not a berth sealer, or is `PlaintextSealer` (request state needs integrity).
        ValueError: `data_key_ttl` is not positive.
    """
    check_sealer(sealer, "request_state_codec: sealer")
    if isinstance(sealer, PlaintextSealer):
        raise TypeError("request_state_codec needs a real sealer (AesGcmSealer, KmsSealer): plaintext has no integrity")
    if not isinstance(audience, str):
        raise TypeError(f"request_state_codec: audience must be a str, not {type(audience).__name__}")
    if data_key_ttl <= timedelta(0):
        raise ValueError(f"request_state_codec: data_key_ttl must be positive, got {data_key_ttl}")
    aad = _AAD + audience.encode("utf-8", "surrogatepass")
    if isinstance(sealer, KmsSealer):
        return _KmsCodec(sealer, aad, audience, data_key_ttl.total_seconds())
    return _SealerCodec(sealer, aad)


class _SealerCodec:
    """Tokens sealed by the berth sealer itself (AES-GCM keyring: local, synchronous)."""

    def __init__(self, sealer: Sealer, aad: bytes):
        self._sealer = sealer
        self._aad = _SEALED.encode() + aad

    def seal(self, payload: bytes) -> str:
        return _SEALED + _b64u(self._sealer.seal(bytes(payload), aad=self._aad))

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith(_SEALED):
            raise InvalidRequestState("malformed")
        raw = _b64u_decode(token[len(_SEALED) :])
        try:
            return self._sealer.open(raw, aad=self._aad)
        except IntegrityError:
            raise InvalidRequestState("seal") from None

    def __repr__(self) -> str:
        return f"request_state_codec({self._sealer!r})"


class _KmsCodec:
    """Tokens under a KMS-wrapped data key that is reused for `ttl` seconds and cached once unwrapped.

    Token bytes: wrapped record length (2) | record | nonce (12) | AES-256-GCM ciphertext + tag;
    the record is KEK name length (1) | KEK name | KEK version length (1) | version | the KMS's
    ciphertext, and is part of the associated data, so it cannot be swapped.
    """

    def __init__(self, sealer: KmsSealer, aad: bytes, audience: str, ttl: float):
        self._kms = sealer.kms
        self._aad = _KMS.encode() + aad
        self._context = {"berth:mcp-request-state": audience}
        self._ttl = ttl
        self._lock = threading.Lock()
        self._current: tuple[float, str, bytes, AESGCM] | None = None  # made at, KEK, record, AESGCM
        self._opened: OrderedDict[bytes, AESGCM] = OrderedDict()

    def _sealing_key(self) -> tuple[bytes, AESGCM]:
        now = time.monotonic()
        with self._lock:
            current = self._current
            if current is None or now - current[0] >= self._ttl or current[1] != self._kms.key_id:
                data_key = secrets.token_bytes(32)
                wrapped = self._kms.wrap(data_key, context=self._context)
                kek, version = wrapped.key_id.encode(), wrapped.version.encode()
                record = b"".join((bytes((len(kek),)), kek, bytes((len(version),)), version, bytes(wrapped.ciphertext)))
                aead = AESGCM(data_key)
                current = self._current = (now, wrapped.key_id, record, aead)
                self._remember(record, aead)
            return current[2], current[3]

    def _remember(self, record: bytes, aead: AESGCM) -> None:
        self._opened[record] = aead
        self._opened.move_to_end(record)
        while len(self._opened) > _UNWRAPPED_CACHE:
            self._opened.popitem(last=False)

    def seal(self, payload: bytes) -> str:
        record, aead = self._sealing_key()
        nonce = secrets.token_bytes(_NONCE)
        head = len(record).to_bytes(2, "big") + record
        return _KMS + _b64u(head + nonce + aead.encrypt(nonce, bytes(payload), self._aad + head))

    def _opener(self, record: bytes) -> AESGCM:
        with self._lock:
            aead = self._opened.get(record)
            if aead is not None:
                self._opened.move_to_end(record)
                return aead
        try:
            n = record[0]
            kek = record[1 : 1 + n].decode()
            m = record[1 + n]
            version = record[2 + n : 2 + n + m].decode()
            ciphertext = record[2 + n + m :]
        except (IndexError, UnicodeDecodeError):
            raise InvalidRequestState("malformed") from None
        if not ciphertext or not self._kms.holds(kek):
            raise InvalidRequestState("unknown key")
        try:
            data_key = self._kms.unwrap(Wrapped(kek, version, ciphertext), context=self._context)
        except IntegrityError:
            raise InvalidRequestState("unwrap") from None
        if len(data_key) != 32:
            raise InvalidRequestState("unwrap")
        aead = AESGCM(bytes(data_key))
        with self._lock:
            self._remember(record, aead)
        return aead

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith(_KMS):
            raise InvalidRequestState("malformed")
        raw = _b64u_decode(token[len(_KMS) :])
        if len(raw) < 2:
            raise InvalidRequestState("malformed")
        end = 2 + int.from_bytes(raw[:2], "big")
        if len(raw) < end + _NONCE + _TAG:
            raise InvalidRequestState("malformed")
        head, nonce, body = raw[:end], raw[end : end + _NONCE], raw[end + _NONCE :]
        aead = self._opener(head[2:])
        try:
            return bytes(aead.decrypt(nonce, body, self._aad + head))
        except InvalidTag:
            raise InvalidRequestState("seal") from None

    def __repr__(self) -> str:
        return f"request_state_codec(KmsSealer({self._kms!r}))"


# -- exactly-once rounds -------------------------------------------------------------------------

_ROUNDS = "mcp/rounds/"
_ROUND_ID = 22  # secrets.token_urlsafe(16)


class Rounds:
    """Exactly-once input-required rounds for MCP tools, over a `berth.aio.AsyncStore` every server instance shares.

    `ask` (round one) parks an open round and returns the `InputRequiredResult` whose request
    state names it; `finish` (round two, the retry carrying the answers) runs the continuation for
    exactly one retry of that round, on whichever instance, and gives every other retry the
    stored result. The request state should be sealed by the SDK's boundary (see
    `request_state_codec`), which binds it to the tool, its arguments and the principal.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        lifetime: timedelta = timedelta(days=14),
        wait: timedelta = timedelta(seconds=30),
    ):
        """Rounds parked in `store`, answerable for `lifetime` after `ask`.

        Args:
            store: where rounds and their results are parked (sealed by its sealer), under `mcp/rounds/`.
            lifetime: how long a round may be answered, and its result replayed, after `ask`.
            wait: how long a retry that lost the claim waits for the winner's result before it is
                told to retry later.

        Raises:
            TypeError: `store` is not a `berth.aio.AsyncStore`.
            ValueError: `lifetime` or `wait` is negative or zero.
        """
        if not isinstance(store, AsyncStore):
            raise TypeError(f"Rounds needs a berth.aio.AsyncStore (berth.aio.open_store), not {type(store).__name__}")
        if lifetime <= timedelta(0) or wait <= timedelta(0):
            raise ValueError(f"Rounds: lifetime and wait must be positive, got {lifetime} and {wait}")
        self._store = store
        self._lifetime = lifetime
        self._wait = wait.total_seconds()

    @property
    def store(self) -> AsyncStore:
        """The store rounds are parked in."""
        return self._store

    async def ask(
        self, input_requests: Mapping[str, InputRequest], *, state: str = "", tool: str = ""
    ) -> InputRequiredResult:
        """Round one: park a new round (deadline now + lifetime) and return the result that asks the client.

        Args:
            input_requests: what the client must answer before it retries.
            state: the tool's own state for round two (carried in the sealed request state).
            tool: the tool's name, written as a label on the parked round.

        Returns:
            `InputRequiredResult(input_requests=..., request_state=...)`; the request state names the round.

        Raises:
            berth.BackendError: the store could not park the round.
        """
        round_id = secrets.token_urlsafe(16)
        deadline = self._store.now() + self._lifetime
        envelope = Envelope(
            provider_state={"round": round_id},
            provider=PROVIDER,
            run_id=round_id,
            reason="awaiting input",
            deadline=deadline,
            labels={"mcp.tool": tool} if tool else {},
        )
        await self._store.save(self._key(round_id, "open"), envelope, if_absent=True)
        request_state = json.dumps({"r": round_id, "d": deadline.isoformat(), "s": state}, separators=(",", ":"))
        return InputRequiredResult(input_requests=dict(input_requests), request_state=request_state)

    @staticmethod
    def state(request_state: str) -> str:
        """The tool's own `state` given to `ask`, read back from round two's request state.

        Raises:
            mcp ToolError: the request state is not one `ask` made.
        """
        return _parse_state(request_state)[2]

    async def finish(self, request_state: str, continuation: Callable[[str], Awaitable[T]]) -> T:
        """Round two: run `continuation(state)` once for this round, across every instance; replays get its result.

        The continuation's result must be JSON (str, number, list, dict, None) or a `CallToolResult`;
        it is stored sealed until the round's deadline. If the continuation raises, nothing is stored
        and the round is opened again, so a later retry may run it.

        Raises:
            mcp ToolError: the request state is not one `ask` made; the round's deadline has passed;
                the round is unknown (never asked, or swept); or another retry of it is still running
                (retry later).
            berth.BackendError: the store failed.
        """
        round_id, deadline, state = _parse_state(request_state)
        if self._store.now() > deadline:
            raise ToolError(self._expired(round_id, deadline))
        open_key = self._key(round_id, "open")
        try:
            opened = await self._store.claim(open_key)
        except Expired:
            raise ToolError(self._expired(round_id, deadline)) from None
        if opened is None:
            stored: T = await self._stored_result(round_id, deadline)
            return stored
        try:
            result = await continuation(state)
        except BaseException:
            await self._reopen(opened, open_key)
            raise
        await self._keep(round_id, deadline, result)
        return result

    async def _reopen(self, opened: Any, open_key: str) -> None:
        try:
            await self._store.save(open_key, opened, if_absent=True)
        except (TokenMismatch, Expired):  # pragma: no cover - another retry reopened it, or it died meanwhile
            pass

    async def _keep(self, round_id: str, deadline: datetime, result: Any) -> None:
        if isinstance(result, CallToolResult):
            kept: dict[str, Any] = {"call_tool_result": result.model_dump(mode="json", by_alias=True)}
        else:
            kept = {"json": result}
        envelope = Envelope(provider_state=kept, provider=PROVIDER, run_id=round_id, reason="done", deadline=deadline)
        try:
            await self._store.save(self._key(round_id, "result"), envelope, if_absent=True)
        except TokenMismatch:  # pragma: no cover - only one claimer runs the continuation
            pass

    async def _stored_result(self, round_id: str, deadline: datetime) -> Any:  # the T `finish` was given
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._wait
        pause = 0.005
        key = self._key(round_id, "result")
        while True:
            try:
                parked = await self._store.load(key)
            except Expired:
                raise ToolError(self._expired(round_id, deadline)) from None
            if parked is not None:
                kept = json.loads(parked.envelope.provider_state)
                if "call_tool_result" in kept:
                    return CallToolResult.model_validate(kept["call_tool_result"])
                return kept["json"]
            if loop.time() >= give_up:
                raise ToolError(
                    f"input round {self._where(round_id)} is unknown or still being completed by another request:"
                    " retry later"
                )
            await asyncio.sleep(pause)  # polls the store: the winner may be another process
            pause = min(pause * 2, 0.5)

    def _where(self, round_id: str) -> str:
        return f"{self._key(round_id, '*')!r} (identity {self._store.identity!r})"

    def _expired(self, round_id: str, deadline: datetime) -> str:
        return f"input round {self._where(round_id)} expired at {deadline.isoformat()}: call the tool again"

    def _key(self, round_id: str, what: str) -> str:
        return f"{_ROUNDS}{round_id}/{what}"


def _parse_state(request_state: str) -> tuple[str, datetime, str]:
    try:
        parsed = json.loads(request_state)
        round_id, deadline, state = parsed["r"], datetime.fromisoformat(parsed["d"]), parsed["s"]
    except (TypeError, ValueError, KeyError):
        raise ToolError("this request state was not made by berth.mcp.Rounds.ask: call the tool again") from None
    if (
        not isinstance(round_id, str)
        or len(round_id) != _ROUND_ID
        or not all(c.isalnum() or c in "-_" for c in round_id)
        or deadline.tzinfo is None
        or not isinstance(state, str)
    ):
        raise ToolError("this request state was not made by berth.mcp.Rounds.ask: call the tool again")
    return round_id, deadline, state
