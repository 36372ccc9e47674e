"""`Rounds`: the second round of an input-required tool call runs once, on whichever replica gets it."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequest, InputRequiredResult

from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch
from berth._token import Token

__all__ = ["PROVIDER", "Rounds"]

PROVIDER = "mcp"
"""The envelope's `provider` for what this package parks."""

T = TypeVar("T")

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
        lease: timedelta = timedelta(minutes=5),
    ):
        """Rounds parked in `store`, answerable for `lifetime` after `ask`.

        Args:
            store: where rounds and their results are parked (sealed by its sealer), under `mcp/rounds/`.
            lifetime: how long a round may be answered, and its result replayed, after `ask`.
            wait: how long a retry that lost the claim waits for the winner's result before it is
                told to retry later.
            lease: how long the retry running the continuation holds the round; if it has stored no
                result by then (its process died), the next retry takes the round over and runs it.

        Raises:
            TypeError: `store` is not a `berth.aio.AsyncStore`.
            ValueError: `lifetime` or `wait` is negative or zero.
        """
        if not isinstance(store, AsyncStore):
            raise TypeError(f"Rounds needs a berth.aio.AsyncStore (berth.aio.open_store), not {type(store).__name__}")
        if lifetime <= timedelta(0) or wait <= timedelta(0) or lease <= timedelta(0):
            raise ValueError(f"Rounds: lifetime, wait and lease must be positive, got {lifetime}, {wait}, {lease}")
        self._store = store
        self._lifetime = lifetime
        self._wait = wait.total_seconds()
        self._lease = lease

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
        while True:
            taken = await self._take(open_key, round_id, deadline)
            if taken is None:
                stored = await self._stored_result(round_id, deadline)
                if stored is _RETAKE:  # the winner's lease ran out with no result: it died; take the round over
                    continue
                kept: T = stored
                return kept
            opened, token = taken
            try:
                result = await continuation(state)
            except BaseException:
                await self._reopen(opened, open_key, token)
                raise
            await self._keep(round_id, deadline, result)
            await self._release(open_key, token)
            return result

    async def _take(self, open_key: str, round_id: str, deadline: datetime) -> tuple[Envelope, Token] | None:
        """Lease the open round to this retry (compare-and-set); None when another retry holds a live lease."""
        try:
            parked = await self._store.load(open_key)
        except Expired:
            raise ToolError(self._expired(round_id, deadline)) from None
        if parked is None or _leased(parked.envelope, self._store.now()):
            return None
        opened = parked.envelope
        kept = json.loads(opened.provider_state)
        kept["lease_until"] = (self._store.now() + self._lease).isoformat()
        try:
            await self._store.save(open_key, _with_state(opened, kept), if_match=parked.token)
            leased = await self._store.load(open_key)
        except (TokenMismatch, Expired):
            return None
        if leased is None:  # pragma: no cover - swept between the two calls
            return None
        return opened, leased.token

    async def _reopen(self, opened: Envelope, open_key: str, token: Token) -> None:
        try:
            await self._store.save(open_key, opened, if_match=token)
        except (TokenMismatch, Expired):  # another retry took the round over, or it died meanwhile
            pass

    async def _release(self, open_key: str, token: Token) -> None:
        try:
            await self._store.delete(open_key, token)
        except TokenMismatch:  # our lease ran out and another retry took over: its result is stored first
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
            if parked is None and await self._orphaned(round_id):
                return _RETAKE
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

    async def _orphaned(self, round_id: str) -> bool:
        """Whether the round is open with no live lease (its winner died, or it failed and reopened)."""
        try:
            parked = await self._store.load(self._key(round_id, "open"))
        except Expired:
            return False
        return parked is not None and not _leased(parked.envelope, self._store.now())

    def _where(self, round_id: str) -> str:
        return f"{self._key(round_id, '*')!r} (identity {self._store.identity!r})"

    def _expired(self, round_id: str, deadline: datetime) -> str:
        return f"input round {self._where(round_id)} expired at {deadline.isoformat()}: call the tool again"

    def _key(self, round_id: str, what: str) -> str:
        return f"{_ROUNDS}{round_id}/{what}"


_RETAKE: Any = object()  # `_stored_result`: the round is open again with no live lease


def _leased(envelope: Envelope, now: datetime) -> bool:
    lease = json.loads(envelope.provider_state).get("lease_until")
    return lease is not None and now < datetime.fromisoformat(lease)


def _with_state(envelope: Envelope, state: dict[str, Any]) -> Envelope:
    return Envelope(
        provider_state=state,
        provider=envelope.provider,
        run_id=envelope.run_id,
        reason=envelope.reason,
        deadline=envelope.deadline,
        labels=dict(envelope.labels),
    )


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
