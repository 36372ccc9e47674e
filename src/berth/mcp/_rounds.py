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
