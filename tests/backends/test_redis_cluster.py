"""The redis+cluster:// backend against a real three-node Redis Cluster: the contract, and what only a cluster has.

The test session starts the cluster (`tests/_redis_cluster.py`; BERTH_TEST_REDIS_CLUSTER names a
running one instead). A node killed mid-claim is the fault trial in tests/reliability/test_cluster.py.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import berth
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests.conftest import require

cluster = require("redis.cluster", "Redis Cluster")

from berth.backends.redis import AsyncRedisClusterBackend, DurabilityWarning, RedisClusterBackend  # noqa: E402
from berth.backends.redis._slots import cluster_url  # noqa: E402
from berth.backends.redis._sync import close_cluster  # noqa: E402

pytestmark = pytest.mark.redis


def _admin(url: str) -> Any:
    client_url, others = cluster_url(url)
    nodes = [cluster.ClusterNode(h, p) for h, p in others]
    return cluster.RedisCluster.from_url(client_url, startup_nodes=nodes, socket_timeout=10)


@pytest.fixture
def fresh_prefix(redis_cluster_url: str) -> Iterator[str]:
    """A key prefix no other test uses; its keys are removed afterwards (from every primary)."""
    prefix = f"bc{uuid.uuid4().hex[:12]}:"
    yield prefix
    admin = _admin(redis_cluster_url)
    try:
        for node in admin.get_primaries():
            server = admin.get_redis_connection(node)
            keys = list(server.scan_iter(match=prefix + "*", count=1000))
            for key in keys:
                server.unlink(key)
    finally:
        close_cluster(admin)


@pytest.fixture
def open_backend(redis_cluster_url: str, fresh_prefix: str) -> Iterator[Callable[..., RedisClusterBackend]]:
    opened: list[RedisClusterBackend] = []

    def make(**options: Any) -> RedisClusterBackend:
        options.setdefault("prefix", fresh_prefix)
        options.setdefault("check_durability", False)
        backend = RedisClusterBackend.from_url(options.pop("url", redis_cluster_url), **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class TestRedisClusterContract(StoreContract):
    @pytest.fixture
    def backend_opener(self, redis_cluster_url: str, fresh_prefix: str) -> Callable[[], RedisClusterBackend]:
        # check_durability=False: the test cluster runs without persistence on purpose
        return functools.partial(
            RedisClusterBackend.from_url, redis_cluster_url, prefix=fresh_prefix, check_durability=False
        )


class TestRedisClusterAsyncContract(AsyncStoreContract, TestRedisClusterContract):
    """The same cases through berth.aio, on redis.asyncio's cluster client (natively async)."""

    @pytest.fixture
    def async_backend_opener(self, redis_cluster_url: str, fresh_prefix: str) -> Callable[[], AsyncRedisClusterBackend]:
        return functools.partial(
            AsyncRedisClusterBackend.from_url, redis_cluster_url, prefix=fresh_prefix, check_durability=False
        )


# --- URLs ---------------------------------------------------------------------------------------


def test_cluster_urls_name_every_startup_node() -> None:
    assert cluster_url("redis+cluster://a:7000,b:7001,[::1]:7002/?prefix=p") == (
        "redis://a:7000/0?prefix=p",
        [("b", 7001), ("::1", 7002)],
    )
    assert cluster_url("rediss+cluster://u:pw@h:6380?ssl_cert_reqs=none") == (
        "rediss://u:pw@h:6380/0?ssl_cert_reqs=none",
        [],
    )
    assert cluster_url("redis+cluster://h:1/0")[0] == "redis://h:1/0"
    for bad in ("redis://h:1", "redis+cluster://h:1/2", "redis+cluster://h", "redis+cluster://h:1,:2/"):
        with pytest.raises(berth.BerthError):
            cluster_url(bad)


def test_open_store_opens_a_cluster_by_any_of_its_nodes(redis_cluster_url: str, fresh_prefix: str) -> None:
    one_node = redis_cluster_url.split(",")[0] + "/"
    for url in (redis_cluster_url, one_node):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DurabilityWarning)
            store = berth.open_store(f"{url}?prefix={fresh_prefix}", identity="u", sealer=berth.PlaintextSealer())
        try:
            assert isinstance(store.backend, RedisClusterBackend)
            store.save("k", make_envelope())
            assert store.claim("k") is not None and store.load("k") is None
        finally:
            store.close()


def test_the_durability_check_reads_every_primary(open_backend: Callable[..., RedisClusterBackend]) -> None:
    from berth.backends.redis import _sync

    _sync._checked_servers.clear()
    with pytest.warns(DurabilityWarning) as record:
        open_backend(check_durability=True)
    servers = {str(w.message).split(" can lose")[0] for w in record}
    assert len(servers) == 3, servers  # one warning per primary: none of them keeps an append-only file


# --- keys over slots ----------------------------------------------------------------------------


NAMES = [f"spread/{n:03d}" for n in range(60)]


def _nodes_of(backend: RedisClusterBackend, names: list[str]) -> set[str]:
    return {backend.client.get_node_from_key(backend.keys.frames + name).name for name in names}


def test_an_identitys_frames_spread_over_every_primary_under_the_single_node_names(
    open_backend: Callable[..., RedisClusterBackend], redis_cluster_url: str, fresh_prefix: str
) -> None:
    backend = open_backend()
    tokens = {name: backend.put(name, name.encode()) for name in NAMES}
    assert len(_nodes_of(backend, NAMES)) == 3  # no hash tag: one identity is not one node's load
    admin = _admin(redis_cluster_url)
    try:  # the key is the standalone backend's: a keyspace moves between the two unchanged
        stored = admin.get(f"{fresh_prefix}frame:spread/000")
        assert stored == b"%020d" % int(tokens["spread/000"].value) + b"spread/000"
    finally:
        close_cluster(admin)
    assert sorted(backend.scan("spread/")) == NAMES
    assert sorted((n, t) for n, _, t, _ in backend.heads("spread/0", 100)) == sorted(
        (n, tokens[n]) for n in NAMES if n.startswith("spread/0")
    )
    assert [r[0] for r in backend.sorted_heads("spread/", 4, limit=5, reverse=True)] == NAMES[::-1][:5]
    got = backend.get_many([*NAMES, "spread/none"])
    assert got[-1] is None and [g[1] for g in got[:-1] if g] == [tokens[n] for n in NAMES]
    stale = berth.Token(int(tokens[NAMES[1]].value) % (10**19) + 1)
    items = [(n, tokens[n]) for n in NAMES[2:]] + [(NAMES[1], stale)]
    assert backend.delete_many(items) == [True] * (len(NAMES) - 2) + [False]
    assert sorted(backend.scan("spread/")) == NAMES[:2]


def test_the_same_over_slots_through_berth_aio(open_backend, redis_cluster_url: str, fresh_prefix: str) -> None:
    plain = open_backend()

    async def main() -> None:
        backend = AsyncRedisClusterBackend.from_url(redis_cluster_url, prefix=fresh_prefix, check_durability=False)
        try:
            tokens = {name: await backend.put(name, name.encode()) for name in NAMES}
            assert sorted([n async for n, *_ in backend.heads("spread/", 8)]) == NAMES
            got = await backend.get_many(NAMES)
            assert [g[1] for g in got if g] == [tokens[n] for n in NAMES]
            assert await backend.delete_many([(n, tokens[n]) for n in NAMES[1:]]) == [True] * (len(NAMES) - 1)
        finally:
            await backend.aclose()

    asyncio.run(main())
    assert list(plain.scan("spread/")) == NAMES[:1]


def test_more_calls_at_once_than_connections_wait_their_turn_through_berth_aio(
    redis_cluster_url: str, fresh_prefix: str
) -> None:
    # redis-py's cluster node refuses a call at once when its `max_connections` are in use
    # (MaxConnectionsError): with 2 a node and 60 cycles at once after the slot map was loaded,
    # saves failed with BackendError. berth's calls wait their turn, as on one server's pool.
    import berth.aio

    async def main() -> None:
        store = berth.aio.open_store(
            f"{redis_cluster_url}?prefix={fresh_prefix}",
            identity="gate",
            sealer=berth.PlaintextSealer(),
            check_durability=False,
            max_connections=2,
            pool_timeout=30,
        )
        try:
            assert isinstance(store.backend, AsyncRedisClusterBackend)
            await store.save("warm", make_envelope())  # the slot map loaded: no call waits for it
            assert await store.claim("warm") is not None

            async def cycle(key: str) -> None:
                await store.save(key, make_envelope(run_id=key))
                claimed = await store.claim(key)
                assert claimed is not None and claimed.run_id == key

            await asyncio.gather(*(cycle(f"k{i}") for i in range(60)))
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_write_sent_by_a_stale_slot_map_goes_to_the_owner_once(
    open_backend: Callable[..., RedisClusterBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MOVED means the write did not run: the map is reloaded and the write sent where its slot is."""
    backend = open_backend(wait_replicas=1, wait_timeout=1)  # the pipelined path, WAIT on each node
    names = NAMES[:12]
    plain = open_backend()
    tokens = [(n, plain.put(n, b"v")) for n in names]
    owner = backend.client.get_node_from_key
    primaries = backend.client.get_primaries()
    wrong: list[str] = []

    def stale(key: str) -> Any:  # the first route of each key: a node that does not own its slot
        right = owner(key)
        if key in wrong:
            return right
        wrong.append(key)
        return next(node for node in primaries if node.name != right.name)

    refreshes: list[int] = []
    monkeypatch.setattr(backend.client, "get_node_from_key", stale)
    monkeypatch.setattr(backend, "refresh", lambda: refreshes.append(1))
    with pytest.raises(berth.BackendError, match="replicas acknowledged"):
        backend.delete_many(tokens)
    assert len(wrong) == len(names) and refreshes == [1]
    assert list(backend.scan("spread/")) == []  # each delete ran, on its owner


def test_wait_replicas_unmet_is_a_backend_error_after_every_write(
    open_backend: Callable[..., RedisClusterBackend],
) -> None:
    # The test cluster has no replicas: each write happens on its primary, then WAIT counts 0.
    waiting, plain = open_backend(wait_replicas=1, wait_timeout=20), open_backend()
    with pytest.raises(berth.BackendError, match="'i/k'.*0 of 1 replicas"):
        waiting.put("i/k", b"v")
    found = plain.get("i/k")
    assert found is not None
    with pytest.raises(berth.BackendError, match="replicas"):
        waiting.delete("i/k", found[1])
    assert plain.get("i/k") is None


def test_documented_acl_is_enough(redis_cluster_url: str, fresh_prefix: str) -> None:
    """The rules docs/backends/redis.md gives for a cluster, set on every node, with this test's prefix."""
    admin = _admin(redis_cluster_url)
    name = f"berth-test-{uuid.uuid4().hex[:8]}"
    rules = [
        "on",
        ">pw",
        f"~{fresh_prefix}*",
        "resetchannels",
        "-@all",
        *("+get +mget +scan +evalsha +eval +getrange +strlen +set +unlink +wait +ping".split()),
        *("+cluster|slots +cluster|shards +cluster|nodes +readonly +asking +command +info +config|get".split()),
    ]
    nodes = admin.get_nodes()
    try:
        for node in nodes:
            admin.get_redis_connection(node).execute_command("ACL", "SETUSER", name, *rules)
        url = redis_cluster_url.replace("redis+cluster://", f"redis+cluster://{name}:pw@", 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DurabilityWarning)
            store = berth.open_store(f"{url}?prefix={fresh_prefix}", identity="acl", sealer=berth.PlaintextSealer())
        try:
            for n in range(12):
                store.save(f"k{n}", make_envelope())
            assert len(list(store.list())) == 12
            backend: Any = store.backend
            backend._delete.sha = "0" * 40  # by its text, as after a failover emptied the cache
            assert store.claim("k0") is not None and store.claim("k0") is None
            assert store.sweep() == 0
        finally:
            store.close()
    finally:
        for node in nodes:
            admin.get_redis_connection(node).execute_command("ACL", "DELUSER", name)
        close_cluster(admin)


def test_close_leaves_no_node_connection_open(redis_cluster_url: str, fresh_prefix: str) -> None:
    # A cluster opened from a URL gives each node a pool its client does not close: close() must.
    backend = RedisClusterBackend.from_url(redis_cluster_url, prefix=fresh_prefix, check_durability=False)
    backend.put("i/k", b"frame")
    assert list(backend.scan("i/")) == ["i/k"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend.close()
        del backend
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
