"""An interrupt resumed exactly once, as plans over the role `SaverSteps`: the claim (one conditional write per
interrupt, the commit point), the run lease, and handing back what a failed or cancelled claim took."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import orjson
from langgraph.types import StateSnapshot

from berth._envelope import Envelope
from berth._errors import Expired, TokenMismatch, where
from berth._plan import Plan, commit, settle, step
from berth._token import Token
from berth.langgraph._frames import (
    PROVIDER,
    SaverState,
    SaverSteps,
    claim_key,
    ns_prefix,
    question_key,
    segment,
)

__all__ = ["Claim", "check_deadline", "claim", "cleanup", "delivered", "release", "unclaim"]

log = logging.getLogger("berth")

T = TypeVar("T")

_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")  # LangGraph's interrupt ids: xxh3-128 hex digests
_LEASE = timedelta(minutes=15)  # how long one resume may hold a checkpoint before a waiter takes it over
_LEASE_POLL = (0.005, 0.25)  # first and longest pause between looks at a held lease, in seconds


def _is_resume_map(value: Any) -> bool:
    """LangGraph's own test: a non-empty dict keyed by interrupt ids resumes each interrupt it names."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and _INTERRUPT_ID.fullmatch(k) for k in value)
    )


def check_deadline(deadline: timedelta) -> timedelta:
    """`deadline`, refused unless a positive timedelta."""
    if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
        raise ValueError(f"deadline must be a positive timedelta, got {deadline!r}")
    return deadline


class Claim:
    """What one resumer has won so far, recorded step by step, so that what it took can be handed back.

    `resume` maps each interrupt id won to its answer, `tokens` to its claim record's token,
    `prompts` to the interrupt's value (its question, asked again if handed back); `lease_token`
    is the checkpoint's run lease once held. A failed claim hands back exactly these (`unclaim`);
    a cancelled one, its commits' undos (`berth._plan.commit`).
    """

    __slots__ = ("due", "lease_key", "lease_token", "prompts", "resume", "tokens", "where")

    def __init__(self) -> None:
        self.resume: dict[str, Any] = {}
        self.tokens: dict[str, Token] = {}
        self.prompts: dict[str, Any] = {}  # each interrupt's value, asked again if the resume is handed back
        self.where: tuple[str, str, str] = ("", "", "")
        self.due: datetime | None = None
        self.lease_key = ""
        self.lease_token: Token | None = None


def claim(saver: SaverState, snapshot: StateSnapshot, value: Any, deadline: timedelta, won: Claim) -> Plan[Claim]:
    """Claim the resume of the interrupts `value` answers: each for exactly one caller, then the run lease.

    `snapshot` is the graph's `get_state(config)`: its checkpoint and the interrupts still
    pending there (LangGraph's rule, applied by LangGraph's public API: an interrupt of a task
    with no output yet). A resume map (`{interrupt_id: value}`) claims each id it names that
    is pending: an answer bound to its interrupt never answers another. A plain value names
    no interrupt: it claims the one pending interrupt only when that is provably the only
    one the thread ever asked (`_plain_value_binds`), else nothing. Every claim is one
    conditional write (`if_absent`) keyed by thread, namespace, checkpoint and interrupt id:
    the commit point, before the graph runs. A caller that wins any waits for the
    checkpoint's run lease (so branches answered at once run one after the other, each
    seeing the other's output, and the step completes), re-checking the deadline until it
    holds it. Each step is recorded in `won` as it is taken; `won.resume` is empty when it
    won nothing.
    """
    pending = {item.id: item for item in snapshot.interrupts}
    if not pending or snapshot.created_at is None:
        return won
    conf = snapshot.config["configurable"]
    thread, ns, cid = str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), str(conf["checkpoint_id"])
    if _is_resume_map(value):
        wanted = {iid: answer for iid, answer in value.items() if iid in pending}
    elif len(pending) == 1:
        (only,) = pending
        binds = yield from _plain_value_binds(saver, thread, ns, cid, only)
        wanted = {only: value} if binds else {}
    else:
        raise ValueError(
            f"thread {thread!r} waits on {len(pending)} interrupts ({', '.join(sorted(pending))}): "
            "resume with a map {interrupt_id: value} naming the ones answered"
        )
    if not wanted:
        return won
    asked = datetime.fromisoformat(snapshot.created_at)
    if asked.tzinfo is None:
        asked = asked.replace(tzinfo=timezone.utc)
    won.where, won.due = (thread, ns, cid), asked + deadline
    _check_due(saver, won)
    for iid, answer in wanted.items():
        body = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "interrupt_id": iid}
        # no deadline: the record that this interrupt was resumed lasts as long as its thread,
        # so a plain value delivered again later is never taken for a later interrupt's answer
        record = Envelope(provider=PROVIDER, provider_state=orjson.dumps(body), reason="resume claimed")
        key = claim_key(saver, thread, ns, cid, iid)
        try:  # the commit point: one conditional write per interrupt, before the graph runs
            token = yield from commit(
                step(SaverSteps.save, key, record, if_absent=True), undo=functools.partial(_delete, key)
            )
        except TokenMismatch:
            continue
        won.resume[iid], won.tokens[iid], won.prompts[iid] = answer, token, pending[iid]
    for iid in list(won.resume):
        ask = functools.partial(_ask_again, saver, won, iid)  # cancelled later: the question is back first
        yield from commit(step(SaverSteps.consume, question_key(saver, thread, ns, cid, iid), iid), undo=ask)
    if won.resume:
        yield from _lease(saver, won)
    return won


def _plain_value_binds(saver: SaverState, thread: str, ns: str, cid: str, iid: str) -> Plan[bool]:
    """Whether a plain value (no interrupt id) provably answers `iid`: no other interrupt was ever asked here.

    Read after the pending interrupt was: a claim record in the namespace (any interrupt
    resumed through `resume_once`, kept as long as the thread), or a question for another
    interrupt (one resumed some other way, or asked beside it), means the value may have
    been given for an earlier interrupt -- a retried delivery -- so it binds to nothing.
    """
    base = ns_prefix(saver, thread, ns)
    claimed = yield from step(SaverSteps.heads, base + "r/", 1)
    if claimed:
        return False
    asked: list[str] = yield from step(SaverSteps.asked, base + "q/", 2)
    return all(key == question_key(saver, thread, ns, cid, iid) for key in asked)


def _check_due(saver: SaverState, won: Claim) -> None:
    """Raise `Expired` once the claimed interrupt's deadline has passed: it is never resumed."""
    if won.due is None or saver.now() < won.due:
        return
    thread, ns, cid = won.where
    key = f"{ns_prefix(saver, thread, ns)}r/{segment(cid)}"
    raise Expired(
        f"the interrupt at {where(saver.identity, key)} passed its deadline {won.due.isoformat()}: never resumed",
        identity=saver.identity,
        key=key,
        deadline=won.due,
    )


def _lease(saver: SaverState, won: Claim) -> Plan[None]:
    """Hold the checkpoint's run lease: wait while another resume runs there (or until its lease lapses).

    The deadline is checked again on every look and once the lease is held -- the moment the
    run resumes -- so a resumer that waited behind another branch never runs past it.
    """
    thread, ns, cid = won.where
    won.lease_key = f"{ns_prefix(saver, thread, ns)}l/{segment(cid)}"
    body = orjson.dumps({"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid})
    pause = _LEASE_POLL[0]
    while True:
        lease = Envelope(provider=PROVIDER, provider_state=body, reason="resume running", deadline=saver.now() + _LEASE)
        try:
            # the lease held, the resume is the caller's: a cancellation from here on is withdrawn
            won.lease_token = yield from commit(
                step(SaverSteps.save, won.lease_key, lease, if_absent=True),
                undo=functools.partial(_delete, won.lease_key),
                delivers=True,
            )
        except TokenMismatch:
            _check_due(saver, won)
            yield from step(SaverSteps.clear_expired, won.lease_key)  # a resumer that died holding it
            yield from step(SaverSteps.sleep, pause)
            pause = min(pause * 2, _LEASE_POLL[1])
            continue
        _check_due(saver, won)
        return None


def release(won: Claim) -> Plan[None]:
    """Release the run lease `won` holds, if any."""
    if won.lease_token is not None:
        yield from step(SaverSteps.delete, won.lease_key, won.lease_token)
        won.lease_token = None
    return None


def _delete(key: str, token: Token) -> Plan[None]:
    """Delete what a commit wrote at `key` (an `undo` of `berth._plan.commit`)."""
    yield from step(SaverSteps.delete, key, token)
    return None


def _ask_again(saver: SaverState, won: Claim, iid: str, _consumed: Any = None) -> Plan[None]:
    """Ask the question of interrupt `iid` again (it was consumed by a claim being handed back)."""
    thread, ns, cid = won.where
    if won.due is not None:
        yield from step(SaverSteps.ask, question_key(saver, thread, ns, cid, iid), won.prompts[iid], won.due, iid)
    return None


def unclaim(saver: SaverState, won: Claim) -> Plan[None]:
    """Hand back what `won` took (a claim that failed before the graph ran): the interrupts are resumable again.

    Each interrupt's question is asked again first (kept if still pending), then its claim
    record is deleted (with the token it was written with), then the run lease released.
    """
    thread, ns, cid = won.where
    for iid in list(won.tokens):
        # asked again whether or not its consume got that far (a question still pending is kept)
        yield from _ask_again(saver, won, iid)
        yield from step(SaverSteps.delete, claim_key(saver, thread, ns, cid, iid), won.tokens.pop(iid))
        won.resume.pop(iid, None)
    yield from release(won)
    return None


async def delivered(work: Awaitable[T]) -> T:
    """`work` to its outcome through any cancellation of the caller, which is withdrawn (`Task.uncancel`)."""
    task, late = await settle(work)
    current = asyncio.current_task()
    for _ in late if current is not None else ():
        current.uncancel()  # type: ignore[union-attr]
    result: T = task.result()
    return result


async def cleanup(work: Awaitable[Any]) -> None:
    """Clean-up after the outcome is known: to its end through any cancellation (withdrawn), a failure logged."""
    try:
        await delivered(work)
    except Exception as exc:
        log.warning("berth: a LangGraph resume's clean-up failed: %s", exc)
