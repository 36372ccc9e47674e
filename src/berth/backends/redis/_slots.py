"""What the sync and the async Redis Cluster backends share, no I/O: the URL, and writes routed by slot.

A frame's key is the single-node backend's (`{prefix}frame:{name}`, no hash tag added): each
frame hashes to a slot of its own, so a cluster spreads one identity's frames over every
primary, and every key moves between a standalone Redis and a cluster unchanged. No script
touches two keys, so none needs a hash tag; what touches many keys at once (MGET, a pipeline
of deletes, a listing's reads) is split by slot or by node here and in the backends.

`routed_plan` sends a batch of writes, each to the primary of its key's slot, with WAIT
after them on the same connection (WAIT counts the replicas that have the writes made on
*its* connection): one round trip per node. A MOVED reply (the slot has another owner: after
a failover or a resharding) means the write did not run: the slot map is reloaded and the
write sent to the new owner; an ASK reply (the slot is migrating) sends it to the node named,
after ASKING. A connection error is raised: the write's outcome is unknown, and a write is
never sent twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis.exceptions

from berth._errors import BerthError
from berth._plan import Plan, role, step
from berth._redact import redact_url
from berth.backends.redis._wire import Write, command_of

__all__ = ["REDIRECTS", "NodeRounds", "Routed", "asked_replies", "cluster_url", "node_commands", "routed_plan"]

REDIRECTS = 5  # rounds of MOVED / ASK a batch may take before the last redirection is raised
_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

Routed = tuple[Write, bool]
"""A write on one node's pipeline, and whether ASKING goes before it (the slot is migrating there)."""


def cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(the `redis://` URL redis-py's cluster client reads, the other startup nodes) of a
    `redis+cluster://[user:password@]host:port[,host:port...][/0][?query]` URL."""
    scheme, sep, rest = url.partition("://")
    plain = _SCHEMES.get(scheme.lower())
    if not sep or plain is None:
        raise BerthError(
            f"a Redis Cluster URL starts with redis+cluster:// or rediss+cluster://, not {redact_url(url)!r}"
        )
    netloc, slash, tail = rest.partition("/")
    netloc, query_sep, query = netloc.partition("?")
    if query_sep:  # no path: the query followed the hosts
        tail = "?" + query
    path = tail.partition("?")[0]
    if path not in ("", "0"):
        raise BerthError(f"Redis Cluster has only database 0: {redact_url(url)!r} names {path!r}")
    user, at, hosts = netloc.rpartition("@")
    nodes = []
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit():
            raise BerthError(f"Redis Cluster URL {redact_url(url)!r}: {host!r} is not host:port")
        nodes.append((name.strip("[]"), int(port)))
    first = f"{nodes[0][0]}:{nodes[0][1]}" if ":" not in nodes[0][0] else f"[{nodes[0][0]}]:{nodes[0][1]}"
    query_part = tail.partition("?")[2]
    client_url = f"{plain}://{user}{at}{first}/0" + (f"?{query_part}" if query_part else "")
    return client_url, nodes[1:]


def node_commands(sends: Sequence[Routed], text: bool, wait: tuple[int, int] | None) -> list[tuple[Any, ...]]:
    """The commands of one node's round: each write (ASKING before it when asked), then WAIT when asked."""
    commands: list[tuple[Any, ...]] = []
    for (script, key, args), asking in sends:
        if asking:
            commands.append(("ASKING",))
        commands.append(command_of(script, key, args, text=text))
    if wait is not None:
        commands.append(("WAIT", *wait))
    return commands


def asked_replies(sends: Sequence[Routed], replies: list[Any]) -> list[Any]:
    """A node round's replies without ASKING's (an ASKING that failed fails the write after it)."""
    if not any(asking for _, asking in sends):
        return replies
    out: list[Any] = []
    it = iter(replies)
    for _, asking in sends:
        asked = next(it) if asking else None
        reply = next(it)
        out.append(asked if isinstance(asked, Exception) else reply)
    out.extend(it)  # the WAIT's
    return out


@role
class NodeRounds(Protocol):
    """The role of `routed_plan`'s steps: a cluster backend that talks to one node at a time."""

    def node_round(self, node: Any, sends: Sequence[Routed], text: bool) -> list[Any]:
        """`sends` on one pipeline of `node`'s (by SHA, or by `text`), each after ASKING when asked, WAIT
        after them when replicas are asked for: the writes' replies (an error as its exception), the WAIT's
        last. A connection error is raised."""
        ...

    def refresh(self) -> None:
        """Reload the slot map (a MOVED reply said it is out of date)."""
        ...


def routed_plan(
    writes: Sequence[Write],
    text: bool,
    waiting: bool,
    route: Callable[[str], Any],
    node_at: Callable[[str, int], Any],
) -> Plan[list[Any]]:
    """The replies of `writes` (by SHA, or by `text`), each sent to the primary of its key's slot
    (`route`), one round trip per node; with `waiting`, the fewest replicas any node's WAIT counted,
    last (see the module docstring).

    `route(key)` is the node that owns `key`'s slot, `node_at(host, port)` the node an ASK names (None
    when the map does not know it yet). A reply is the write's, or its error as an exception."""
    replies: list[Any] = [None] * len(writes)
    acked: int | None = None
    pending: list[tuple[int, Any, bool]] = [(i, route(key), False) for i, (_, key, _) in enumerate(writes)]
    for _ in range(REDIRECTS):
        groups: dict[str, tuple[Any, list[tuple[int, bool]]]] = {}
        for i, node, asking in pending:
            groups.setdefault(node.name, (node, []))[1].append((i, asking))
        pending, moved = [], False
        for node, items in groups.values():
            got = yield from step(NodeRounds.node_round, node, [(writes[i], asking) for i, asking in items], text)
            if waiting:
                count = got.pop()
                if isinstance(count, Exception):
                    raise count
                acked = int(count) if acked is None else min(acked, int(count))
            for (i, _), reply in zip(items, got, strict=True):
                replies[i] = reply
                if isinstance(reply, redis.exceptions.MovedError):  # (first: redis-py's MovedError is an AskError)
                    pending.append((i, None, False))
                    moved = True
                elif isinstance(reply, redis.exceptions.AskError):
                    target = node_at(reply.host, reply.port)
                    pending.append((i, target, target is not None))
                    moved = moved or target is None
        if not pending:
            break
        if moved:
            yield from step(NodeRounds.refresh)
        pending = [(i, node if node is not None else route(writes[i][1]), asking) for i, node, asking in pending]
    return replies + ([acked or 0] if waiting else [])
