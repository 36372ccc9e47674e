"""a2a-sdk stores whose tasks and push-notification configs are sealed berth frames (extra `a2a`).

    astore = berth.aio.open_store("sqlite:////var/lib/app/berth.db", identity="helpdesk", sealer=sealer)
    handler = DefaultRequestHandler(agent_executor=executor, task_store=berth.a2a.BerthTaskStore(astore), ...)

Each task is one frame under ``a2a/tasks/<owner>/<task id>`` (each part escaped into one key
segment), sealed by the store's sealer and bound to that key as the seal's associated data; the
sealed body names the owner and the task id again and a load checks both. So a task moved to
another key or owner, a planted plaintext frame and a flipped byte are refused with
`berth.IntegrityError` (or `berth.FormatError`), never served.

- **Owner.** The owner is what the SDK's `OwnerResolver` makes of the `ServerCallContext` (by
  default the context's `user.user_name`, as the SDK's own stores). A caller sees, updates, lists
  and deletes only its own tasks; another owner's task id is not found.
- **Compare-and-set.** The token each `get` loads is kept in the call context's `state`; the next
  `save` of that task in the same context is conditional on it (`if_match`), a first save on the
  task being absent (`if_absent`). The loser of a concurrent update gets the SDK's
  `ConcurrentTaskModificationError` (raised from `berth.TokenMismatch`) and nothing is written: it
  reads the task again and redoes its change. No update is lost silently.
- **Deadline.** A task saved in `input-required` (or `auth-required`) gets a deadline
  (`input_deadline`, 14 days by default), kept while it stays in that state. Past it the task
  fails closed: `get` answers the SDK's not-found (`None`, so the handler raises
  `TaskNotFoundError`), `list` leaves it out, a save over it is refused as a conflict. `berth
  sweep` removes it.

`BerthPushNotificationConfigStore(store)` keeps the SDK's push-notification configs (webhook URLs
and the credentials sent to them) the same way: sealed, one frame per config, owner-bound.

Only `berth.aio.AsyncStore` is taken (the SDK's store interfaces are async).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson

from berth._aio_store import AsyncStore
from berth._envelope import Envelope
from berth._errors import Expired, IntegrityError, TokenMismatch, where
from berth._store import Parked
from berth._token import Token

try:
    from a2a.server.cluster.task_store import ConcurrentTaskModificationError
    from a2a.server.context import ServerCallContext
    from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
    from a2a.server.tasks.push_notification_config_store import (
        PushNotificationConfigStore,
        normalize_push_notification_config,
    )
    from a2a.server.tasks.task_store import TaskStore
    from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskPushNotificationConfig, TaskState
    from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
    from a2a.utils.errors import InvalidParamsError
    from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor
    from google.protobuf import json_format  # type: ignore[import-untyped]  # no stubs shipped
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("berth.a2a needs a2a-sdk: pip install 'berthing[a2a]'") from exc

__all__ = [
    "DEFAULT_INPUT_DEADLINE",
    "PROVIDER",
    "BerthPushNotificationConfigStore",
    "BerthTaskStore",
    "ConcurrentTaskModificationError",
]

PROVIDER = "a2a"
"""The envelope's `provider` for tasks parked by this module."""

DEFAULT_INPUT_DEADLINE = timedelta(days=14)
"""How long a task waits in `input-required` (or `auth-required`) before it fails closed."""

WAITING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
"""The states a task waits for a person in: the ones that carry a deadline."""

T = TypeVar("T")

_SAFE = re.compile(rb"[A-Za-z0-9\-_:@+=,.]")
_SEGMENT_MAX = 180


def _segment(text: str) -> str:
    """`text` as one key segment: `~XX` per byte outside a safe set, `~` when empty, `~h<sha256>` when long.

    The full value rides in the sealed body and is compared on every load, so a hashed or escaped
    segment never stands in for another value.
    """
    if not text:
        return "~"
    raw = text.encode()
    escaped = "".join(chr(b) if _SAFE.fullmatch(bytes([b])) else f"~{b:02X}" for b in raw)
    if escaped in (".", "..") or len(escaped) > _SEGMENT_MAX:
        return "~h" + hashlib.sha256(raw).hexdigest()
    return escaped


class BerthTaskStore(TaskStore):
    """An a2a-sdk `TaskStore` over a `berth.aio.AsyncStore`: sealed, owner-bound, compare-and-set, deadlines.

    Args:
        store: where the tasks are parked (its sealer seals them; its identity namespaces them).
        owner_resolver: how a call context names its owner (the SDK's default: the user's name).
        input_deadline: how long a task may wait in `input-required` before it fails closed.
        prefix: the key prefix the tasks live under; ends with ``/``.

    Raises:
        TypeError: `store` is not a `berth.aio.AsyncStore`.
        ValueError: `input_deadline` is not positive or `prefix` does not end with ``/``.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        owner_resolver: OwnerResolver = resolve_user_scope,
        input_deadline: timedelta = DEFAULT_INPUT_DEADLINE,
        prefix: str = "a2a/tasks/",
    ) -> None:
        if not isinstance(store, AsyncStore):
            raise TypeError(
                f"BerthTaskStore needs a berth.aio.AsyncStore (berth.aio.open_store), got {type(store).__name__}"
            )
        if input_deadline <= timedelta(0):
            raise ValueError(f"input_deadline must be positive, got {input_deadline}")
        if not prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {prefix!r}")
        self.store = store
        self.owner_resolver = owner_resolver
        self.input_deadline = input_deadline
        self.prefix = prefix

    # --- naming and the per-call token memory --------------------------------------------------

    def _owner_prefix(self, owner: str) -> str:
        return f"{self.prefix}{_segment(owner)}/"

    def _key(self, owner: str, task_id: str) -> str:
        if not task_id:
            raise ValueError(f"an A2A task id must be a non-empty string ({where(self.store.identity)})")
        return self._owner_prefix(owner) + _segment(task_id)

    def _slot(self, key: str) -> str:
        return f"berth.a2a:{self.store.identity}:{key}"

    # --- frames ------------------------------------------------------------------------------------

    def _envelope(self, owner: str, task: Task, deadline: datetime | None) -> Envelope:
        state = orjson.dumps({"owner": owner, "task_id": task.id, "task": json_format.MessageToDict(task)})
        return Envelope(
            provider_state=state,
            provider=PROVIDER,
            run_id=task.id,
            reason=TaskState.Name(task.status.state),
            deadline=deadline,
            labels={"a2a.state": TaskState.Name(task.status.state)},
        )

    def _task(self, key: str, parked: Parked) -> Task:
        def key_of(body: dict[str, Any]) -> str:
            return self._key(body["owner"], body["task"]["id"])

        task: Task = _opened(self.store.identity, key, parked, "task", key_of, Task())
        return task

    def _deadline(self, task: Task, context: ServerCallContext, key: str) -> datetime | None:
        if task.status.state not in WAITING:
            return None
        kept = context.state.get(self._slot(key) + ":deadline")
        if isinstance(kept, datetime):  # still waiting since the load: the deadline is never pushed out
            return kept
        return self.store.now() + self.input_deadline

    def _remember(self, context: ServerCallContext, key: str, token: Token, envelope: Envelope) -> None:
        context.state[self._slot(key)] = token
        context.state[self._slot(key) + ":deadline"] = envelope.deadline

    def _forget(self, context: ServerCallContext, key: str) -> None:
        context.state.pop(self._slot(key), None)
        context.state.pop(self._slot(key) + ":deadline", None)

    def _conflict(self, task_id: str, exc: Exception) -> ConcurrentTaskModificationError:
        err = ConcurrentTaskModificationError(task_id)
        err.args = (
            f"{err.args[0]} ({where(self.store.identity, getattr(exc, 'key', None))}): read it again and retry",
        )
        return err

    # --- the SDK's TaskStore -----------------------------------------------------------------------

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Seal and park `task` for the context's owner, conditionally on what this context last read.

        Raises:
            ConcurrentTaskModificationError: the task changed since this context read it (or it exists
                though this context never read it, or it expired): nothing was written.
            berth.BackendError: the storage failed.
        """
        owner = self.owner_resolver(context)
        key = self._key(owner, task.id)
        envelope = self._envelope(owner, task, self._deadline(task, context, key))
        seen = context.state.get(self._slot(key))
        try:
            if isinstance(seen, Token):
                token = await self.store.save(key, envelope, if_match=seen)
            else:
                token = await self.store.save(key, envelope, if_absent=True)
        except TokenMismatch as exc:
            raise self._conflict(task.id, exc) from exc
        self._remember(context, key, token, envelope)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The context owner's task `task_id`, or `None` when there is none or it is past its deadline.

        Raises:
            berth.IntegrityError: the frame was tampered with, moved, planted in plaintext, or names
                another owner or task.
            berth.BackendError: the storage failed.
        """
        owner = self.owner_resolver(context)
        key = self._key(owner, task_id)
        try:
            parked = await self.store.load(key)
        except Expired:  # fails closed: not found, and a save over it is refused (if_absent)
            self._forget(context, key)
            return None
        if parked is None:
            self._forget(context, key)
            return None
        task = self._task(key, parked)
        self._remember(context, key, parked.token, parked.envelope)
        return task

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The context owner's tasks, filtered, newest status first and paged as the SDK's own stores do.

        Tasks past their deadline are left out.

        Raises:
            berth.IntegrityError: a frame among the owner's was tampered with, moved or planted.
            a2a.utils.errors.InvalidParamsError: the page token is not one this store issued.
        """
        owner = self.owner_resolver(context)
        keys = [listing.key async for listing in self.store.list(self._owner_prefix(owner))]
        now = self.store.now()
        tasks = [
            self._task(key, parked)
            for key, parked in zip(keys, await self.store.load_many(keys, allow_expired=True), strict=True)
            if parked is not None and (parked.envelope.deadline is None or parked.envelope.deadline >= now)
        ]
        if params.context_id:
            tasks = [t for t in tasks if t.context_id == params.context_id]
        if params.status:
            tasks = [t for t in tasks if t.status.state == params.status]
        if params.HasField("status_timestamp_after"):
            after_ns = params.status_timestamp_after.ToNanoseconds()
            tasks = [t for t in tasks if _sort_key(t)[0] and _sort_key(t)[1] >= after_ns]
        tasks.sort(key=_sort_key, reverse=True)
        total = len(tasks)
        start = 0
        if params.page_token:
            cursor = decode_list_tasks_cursor(params.page_token)
            if cursor is None:
                raise InvalidParamsError(f"Invalid page token: {params.page_token}")
            start = next((i for i, t in enumerate(tasks) if _sort_key(t) < cursor.sort_key()), total)
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        end = start + size
        page = tasks[start:end]
        following = encode_list_tasks_cursor(_cursor(tasks[end - 1])) if end < total else None
        return ListTasksResponse(next_page_token=following, tasks=page, total_size=total, page_size=size)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Remove the context owner's task `task_id` (nothing when there is none), as this context read it.

        Raises:
            ConcurrentTaskModificationError: the task changed since this context read it.
            berth.IntegrityError: the frame there was tampered with, moved or planted.
        """
        owner = self.owner_resolver(context)
        key = self._key(owner, task_id)
        seen = context.state.get(self._slot(key))
        if not isinstance(seen, Token):
            parked = await self.store.load(key, allow_expired=True)
            if parked is None:
                return
            self._task(key, parked)
            seen = parked.token
        try:
            await self.store.delete(key, seen)
        except TokenMismatch as exc:
            raise self._conflict(task_id, exc) from exc
        self._forget(context, key)


class BerthPushNotificationConfigStore(PushNotificationConfigStore):
    """An a2a-sdk `PushNotificationConfigStore` over a `berth.aio.AsyncStore`: each config one sealed frame.

    A config holds a webhook URL and the credentials the server presents to it, so it is sealed like a
    task: one frame under ``a2a/push/<task id>/<owner>/<config id>``, bound to that key, the body naming
    all three again. `get_info` and `delete_info` see the caller's own configs; `get_info_for_dispatch`
    every owner's, for the SDK's dispatch path. A last save of one config id wins, as the SDK's stores.

    Args:
        store: where the configs are parked.
        owner_resolver: how a call context names its owner (the SDK's default: the user's name).
        prefix: the key prefix the configs live under; ends with ``/``.

    Raises:
        TypeError: `store` is not a `berth.aio.AsyncStore`.
        ValueError: `prefix` does not end with ``/``.
    """

    def __init__(
        self, store: AsyncStore, *, owner_resolver: OwnerResolver = resolve_user_scope, prefix: str = "a2a/push/"
    ) -> None:
        if not isinstance(store, AsyncStore):
            raise TypeError(
                "BerthPushNotificationConfigStore needs a berth.aio.AsyncStore (berth.aio.open_store), "
                f"got {type(store).__name__}"
            )
        if not prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {prefix!r}")
        self.store = store
        self.owner_resolver = owner_resolver
        self.prefix = prefix

    def _task_prefix(self, task_id: str) -> str:
        if not task_id:
            raise ValueError(f"an A2A task id must be a non-empty string ({where(self.store.identity)})")
        return f"{self.prefix}{_segment(task_id)}/"

    def _key(self, task_id: str, owner: str, config_id: str) -> str:
        return f"{self._task_prefix(task_id)}{_segment(owner)}/{_segment(config_id)}"

    async def _configs(self, prefix: str) -> list[tuple[str, Parked, TaskPushNotificationConfig]]:
        keys = [listing.key async for listing in self.store.list(prefix)]
        found = zip(keys, await self.store.load_many(keys), strict=True)
        return [(key, parked, self._config(key, parked)) for key, parked in found if parked is not None]

    def _config(self, key: str, parked: Parked) -> TaskPushNotificationConfig:
        def key_of(body: dict[str, Any]) -> str:
            return self._key(body["config"]["taskId"], body["owner"], body["config"]["id"])

        config: TaskPushNotificationConfig = _opened(
            self.store.identity, key, parked, "config", key_of, TaskPushNotificationConfig()
        )
        return config

    async def set_info(
        self, task_id: str, notification_config: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Seal and park the config (normalized as the SDK does) for the context's owner; returns what was stored.

        Raises:
            berth.BackendError: the storage failed.
        """
        owner = self.owner_resolver(context)
        stored = normalize_push_notification_config(task_id, notification_config)
        key = self._key(task_id, owner, stored.id)
        body = {"owner": owner, "config": json_format.MessageToDict(stored)}
        await self.store.save(key, Envelope(provider_state=orjson.dumps(body), provider=PROVIDER, run_id=task_id))
        result = TaskPushNotificationConfig()
        result.CopyFrom(stored)
        return result

    async def get_info(self, task_id: str, context: ServerCallContext) -> list[TaskPushNotificationConfig]:
        """The context owner's configs for `task_id`.

        Raises:
            berth.IntegrityError: a config frame was tampered with, moved or planted.
        """
        owner = self.owner_resolver(context)
        return [config for _, _, config in await self._configs(f"{self._task_prefix(task_id)}{_segment(owner)}/")]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every owner's configs for `task_id`: the SDK's dispatch path (authorization happened at `set_info`).

        Raises:
            berth.IntegrityError: a config frame was tampered with, moved or planted.
        """
        return [config for _, _, config in await self._configs(self._task_prefix(task_id))]

    async def delete_info(self, task_id: str, context: ServerCallContext, config_id: str | None = None) -> None:
        """Remove the context owner's config `config_id` for `task_id`, or all of them when it is None.

        None there: nothing. A config re-saved by another call meanwhile stays: that newer version is not the
        one the caller saw.
        """
        owner = self.owner_resolver(context)
        for key, parked, config in await self._configs(f"{self._task_prefix(task_id)}{_segment(owner)}/"):
            if config_id is None or config.id == config_id:
                with contextlib.suppress(TokenMismatch):  # removed or re-saved by another call meanwhile
                    await self.store.delete(key, parked.token)


def _opened(identity: str, key: str, parked: Parked, what: str, key_of: Callable[[dict[str, Any]], str], into: T) -> T:
    """The message `what` parked at `key`, once the body it was sealed with names that very key.

    The seal binds the frame to its key; the body binds the key to the owner and the ids it names
    (a key segment may be a hash), so a frame planted under the wrong key is refused even when the
    store's sealer is plaintext.
    """
    envelope = parked.envelope
    try:
        body = orjson.loads(envelope.provider_state)
        bound = envelope.provider == PROVIDER and key_of(body) == key
        json_format.ParseDict(body[what], into)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, json_format.ParseError) as exc:
        raise IntegrityError(
            f"the frame is not an A2A {what} parked by berth.a2a ({where(identity, key)}): "
            "refused; remove it with `berth rm`",
            identity=identity,
            key=key,
        ) from exc
    if not bound:
        raise IntegrityError(
            f"the A2A {what} parked here names another owner or {what} ({where(identity, key)}): "
            "refused; remove it with `berth rm`",
            identity=identity,
            key=key,
        )
    return into


def _sort_key(task: Task) -> tuple[bool, int, str]:
    stamped = task.HasField("status") and task.status.HasField("timestamp")
    return stamped, task.status.timestamp.ToNanoseconds() if stamped else 0, task.id


def _cursor(task: Task) -> Any:
    stamped, ns, task_id = _sort_key(task)
    return ListTasksCursor(timestamp_ns=ns if stamped else None, task_id=task_id)
