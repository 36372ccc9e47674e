"""The redis:// backend against a real server: the full contract plus what only Redis has."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import berth
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests._net import free_port, wait_port
from tests.conftest import require, unavailable
from tests.reliability._proxy import FaultProxy

redis = require("redis", "Redis")
from berth.backends.redis import AsyncRedisBackend, DurabilityWarning, RedisBackend, _sync, _wire  # noqa: E402

pytestmark = pytest.mark.redis


def _admin(url: str) -> Any:
    return redis.Redis.from_url(url, socket_timeout=10)


def _drop_prefix(url: str, prefix: str) -> None:
    admin = _admin(url)
    try:
        keys = list(admin.scan_iter(match=prefix + "*", count=1000))
        for i in range(0, len(keys), 500):
            admin.unlink(*keys[i : i + 500])
    finally:
        admin.close()


@pytest.fixture
def fresh_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; its keys are removed afterwards."""
    prefix = f"bt{uuid.uuid4().hex[:12]}:"
    yield prefix
    _drop_prefix(redis_url, prefix)


@pytest.fixture
def open_backend(redis_url: str, fresh_prefix: str) -> Iterator[Callable[..., RedisBackend]]:
    opened: list[RedisBackend] = []

    def make(**options: Any) -> RedisBackend:
        options.setdefault("prefix", fresh_prefix)
        options.setdefault("check_durability", False)  # the durability warning has tests of its own below
        backend = RedisBackend.from_url(options.pop("url", redis_url), **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class TestRedisContract(StoreContract):
    @pytest.fixture
    def backend_opener(self, redis_url: str, fresh_prefix: str) -> Callable[[], RedisBackend]:
        # check_durability=False: this server runs without persistence on purpose; the
        # warning that causes is asserted in test_durability_warning_* below.
        return functools.partial(RedisBackend.from_url, redis_url, prefix=fresh_prefix, check_durability=False)


class TestRedisAsyncContract(AsyncStoreContract, TestRedisContract):
    """The same cases through berth.aio, on redis.asyncio (natively async)."""

    @pytest.fixture
    def async_backend_opener(self, redis_url: str, fresh_prefix: str) -> Callable[[], AsyncRedisBackend]:
        return functools.partial(AsyncRedisBackend.from_url, redis_url, prefix=fresh_prefix, check_durability=False)


def _sealed_store(backend: RedisBackend, identity: str = "rd") -> berth.Store:
    return berth.Store(backend, identity=identity, sealer=berth.AesGcmSealer(berth.Keyring.generate()))


# --- durability -------------------------------------------------------------------------------


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which servers this process has already checked, so the next open checks again."""
    monkeypatch.setattr(_sync, "_checked_servers", set())


def _persistence(url: str) -> dict[str, str]:
    admin = _admin(url)
    try:
        return {k: v for name in ("appendonly", "appendfsync") for k, v in admin.config_get(name).items()}
    finally:
        admin.close()


@contextlib.contextmanager
def _private_redis(directory: Path, *options: str) -> Iterator[str]:
    """A redis-server of this test's own with `options`, on a free loopback port; its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        unavailable("redis-server", "not installed: these tests start a server with settings of their own")
    port = free_port()
    command = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(directory), *options]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_port("127.0.0.1", port, timeout=30):
            unavailable("redis-server", f"a private server did not start on port {port}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def redis_without_aof(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis without an append-only file: the shared one if it runs so (as in CI), else a private one."""
    if _persistence(redis_url).get("appendonly") == "no":
        yield redis_url
        return
    with _private_redis(tmp_path_factory.mktemp("redis-no-aof"), "--appendonly", "no") as url:
        yield url


def test_no_durability_warning_with_an_append_only_file(fresh_prefix, unchecked, tmp_path) -> None:
    with _private_redis(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as url:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            RedisBackend.from_url(url, prefix=fresh_prefix).close()


def test_durability_warning_once_per_server(redis_without_aof, fresh_prefix, unchecked) -> None:
    redis_url = redis_without_aof
    with pytest.warns(DurabilityWarning, match="append-only file") as record:
        store = berth.open_store(f"{redis_url}?prefix={fresh_prefix}", identity="w", sealer=berth.PlaintextSealer())
    store.close()
    assert len(record) == 1
    assert record[0].filename == __file__, "the warning points at the caller, not at berth"
    assert "appendonly yes" in str(record[0].message) and "resumed twice" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second open of the same server stays quiet
        RedisBackend.from_url(redis_url, prefix=fresh_prefix).close()


def test_durability_warning_names_an_evicting_memory_policy(own_redis, fresh_prefix, unchecked) -> None:
    redis_url = own_redis  # a server of this module's own: the policy is server-wide, others share the usual one
    admin = _admin(redis_url)
    before = {k: v for name in ("maxmemory", "maxmemory-policy") for k, v in admin.config_get(name).items()}
    try:  # a limit far above what this server holds: the policy is reported, nothing is evicted
        admin.config_set("maxmemory", str(64 * 2**30))
        admin.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.warns(DurabilityWarning, match="maxmemory-policy allkeys-lru") as record:
            RedisBackend.from_url(redis_url, prefix=fresh_prefix).close()
        assert "noeviction" in str(record[0].message)
    finally:
        admin.config_set("maxmemory-policy", before["maxmemory-policy"])
        admin.config_set("maxmemory", before["maxmemory"])
        admin.close()


def test_durability_check_can_be_turned_off(redis_url, fresh_prefix, unchecked) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RedisBackend.from_url(f"{redis_url}?prefix={fresh_prefix}&check_durability=false").close()


@pytest.fixture
def acl_user(redis_without_aof: str) -> Iterator[Callable[..., str]]:
    """Make a throwaway ACL user with the given rules (on a Redis without AOF); returns a URL that logs in as it."""
    redis_url = redis_without_aof
    admin = _admin(redis_url)
    made: list[str] = []

    def make(*rules: str) -> str:
        name = f"berth-test-{uuid.uuid4().hex[:8]}"
        admin.acl_setuser(name, enabled=True, passwords=["+pw"], reset=True)
        made.append(name)
        admin.execute_command("ACL", "SETUSER", name, *rules)
        return redis_url.replace("redis://", f"redis://{name}:pw@", 1)

    yield make
    for name in made:
        admin.acl_deluser(name)
    admin.close()


def test_durability_check_falls_back_to_info_without_config(acl_user, fresh_prefix, unchecked) -> None:
    url = acl_user("~*", "+@all", "-config")
    with pytest.warns(DurabilityWarning, match="aof_enabled:0"):
        RedisBackend.from_url(url, prefix=fresh_prefix).close()


def test_durability_check_tolerates_neither_config_nor_info(acl_user, fresh_prefix, unchecked, caplog) -> None:
    url = acl_user("~*", "+@all", "-config", "-info")
    with caplog.at_level(logging.WARNING, logger="berth"), warnings.catch_warnings():
        warnings.simplefilter("error")
        backend = RedisBackend.from_url(url, prefix=fresh_prefix)
    try:
        assert "cannot read the persistence settings" in caplog.text
        token = backend.put("i/k", b"v")
        assert backend.get("i/k") == (b"v", token)
    finally:
        backend.close()


def test_documented_acl_is_enough(acl_user, fresh_prefix, unchecked) -> None:
    # The rules docs/backends/redis.md gives, with the prefix this test uses. The first claim's
    # script SHA is one the server does not know, so it goes by its source (EVAL), as after a
    # restart emptied the server's script cache.
    url = acl_user(
        f"~{fresh_prefix}*",
        "resetchannels",
        "-@all",
        "+get",
        "+scan",
        "+evalsha",
        "+eval",
        "+getrange",
        "+strlen",
        "+set",
        "+unlink",
        "+config|get",
        "+info",
        "+wait",
        "+ping",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DurabilityWarning)  # asserted in the tests above
        backend = RedisBackend.from_url(url, prefix=fresh_prefix)
        store = _sealed_store(backend)
    try:
        store.save("k", make_envelope())
        assert [i.key for i in store.list()] == ["k"]
        backend._delete.sha = "0" * 40
        assert store.claim("k") is not None and store.claim("k") is None
    finally:
        store.close()


# --- names, prefixes and generations ----------------------------------------------------------


def test_prefixes_do_not_collide(open_backend, redis_url, fresh_prefix) -> None:
    other = fresh_prefix[:-1] + "x:"
    try:
        a = open_backend(prefix=fresh_prefix)
        b = open_backend(prefix=other)
        a.put("i/k", b"in a")
        assert b.get("i/k") is None and list(b.scan("")) == [] and list(b.heads("", 10)) == []
        b.put("i/k", b"in b")
        assert a.get("i/k")[0] == b"in a" and b.get("i/k")[0] == b"in b"
        assert list(a.scan("")) == ["i/k"]
    finally:
        _drop_prefix(redis_url, other)


def test_bad_prefixes_are_refused(redis_url) -> None:
    for prefix in ("", "a:b:", "a/b:", "a*:", "x" * 65 + ":", "sp ace:"):
        with pytest.raises(berth.BerthError):
            RedisBackend.from_url(redis_url, prefix=prefix, check_durability=False)
    for option in ({"decode_responses": True}, {"retry": None}):
        with pytest.raises(berth.BerthError):
            RedisBackend.from_url(redis_url, check_durability=False, **option)


def test_prefix_without_colon_gets_one(open_backend, fresh_prefix) -> None:
    assert open_backend(prefix=fresh_prefix[:-1]).prefix == fresh_prefix


def test_glob_characters_in_names_are_matched_literally(open_backend) -> None:
    backend = open_backend()
    names = ["x/a*b", "x/a?b", "x/a[b]", "x/a\\b", "x/aXb", "x/[ab]", "x/é/1", "y/a*b"]
    for name in names:
        backend.put(name, name.encode())
    assert list(backend.scan("x/a*")) == ["x/a*b"]
    assert list(backend.scan("x/a?")) == ["x/a?b"]
    assert list(backend.scan("x/a[")) == ["x/a[b]"]
    assert list(backend.scan("x/a\\")) == ["x/a\\b"]
    assert list(backend.scan("x/[")) == ["x/[ab]"]
    assert list(backend.scan("x/é")) == ["x/é/1"]
    assert sorted(backend.scan("x/")) == sorted(n for n in names if n.startswith("x/"))


def test_generation_never_reused_after_delete_and_recreate(open_backend) -> None:
    backend = open_backend()
    seen = []
    for _ in range(5):
        token = backend.put("i/k", b"v")
        seen.append(token.value)
        backend.delete("i/k", token)
        with pytest.raises(berth.TokenMismatch):
            backend.delete("i/k", token)
    assert len(set(seen)) == len(seen), seen
    assert open_backend().put("i/k", b"v").value not in seen


def test_tokens_that_are_not_generations_mismatch_without_io(open_backend) -> None:
    backend = open_backend()
    backend.put("i/k", b"v")
    for token in (berth.Token("etag"), berth.Token(-1), berth.Token(10**20), berth.Token(True)):
        with pytest.raises(berth.TokenMismatch):
            backend.delete("i/k", token)
        with pytest.raises(berth.TokenMismatch):
            backend.put("i/k", b"w", if_match=token)
    assert backend.get("i/k")[0] == b"v"


def test_heads_read_only_the_header(open_backend, redis_url) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    token = open_backend().put("i/big", big)
    parts = urlsplit(redis_url)
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        reader = open_backend(url=urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")))
        assert reader.get("i/none") is None  # connect first
        before = proxy.received
        assert list(reader.heads("i/", 16)) == [("i/big", big[:16], token, len(big))]
        read = proxy.received - before
    assert read < 16 * 1024, f"listing the head of a 1 MiB frame read {read} bytes from the server"


def test_foreign_value_under_a_frame_key_is_a_format_error(open_backend, redis_url, fresh_prefix) -> None:
    # Not an outage (BackendError, which a host retries forever): a value that is not a frame.
    backend = open_backend()
    admin = _admin(redis_url)
    try:
        admin.set(f"{fresh_prefix}frame:i/k", b"not ours")
        admin.hset(f"{fresh_prefix}frame:i/h", "a", "b")
    finally:
        admin.close()
    with pytest.raises(berth.FormatError):
        backend.get("i/k")
    with pytest.raises(berth.FormatError):
        backend.get("i/h")
    with pytest.raises(berth.FormatError):
        backend.put("i/h", b"v", if_match=berth.Token(1))


def test_wait_replicas_unmet_is_a_backend_error(open_backend) -> None:
    backend = open_backend(wait_replicas=1, wait_timeout=20)
    with pytest.raises(berth.BackendError, match="replicas"):
        backend.put("i/k", b"v")


def test_wait_replicas_unmet_after_every_kind_of_write(open_backend) -> None:
    # Each write happened on the primary (WAIT follows it in the same round trip); only the
    # replicas' acknowledgement is missing, and that is a BackendError naming the key.
    waiting, plain = open_backend(wait_replicas=1, wait_timeout=20), open_backend()
    with pytest.raises(berth.BackendError, match="replicas"):
        waiting.put("i/new", b"absent", if_absent=True)
    found = plain.get("i/new")
    assert found is not None and found[0] == b"absent"
    with pytest.raises(berth.BackendError, match="'i/new'.*replicas"):
        waiting.put("i/new", b"matched", if_match=found[1])
    found = plain.get("i/new")
    assert found is not None and found[0] == b"matched"
    with pytest.raises(berth.BackendError, match="replicas"):
        waiting.delete("i/new", found[1])
    assert plain.get("i/new") is None


# --- the stored layout and the conditional writes ---------------------------------------------


def test_stored_layout_is_twenty_digits_of_generation_then_the_frame(open_backend, redis_url, fresh_prefix) -> None:
    backend = open_backend()
    admin = _admin(redis_url)
    key = f"{fresh_prefix}frame:i/k"
    try:
        for write in (
            lambda: backend.put("i/k", b"plain"),
            lambda: backend.put("i/k", b"replaced"),
            lambda: backend.put("i/k", b"matched", if_match=backend.get("i/k")[1]),
        ):
            token = write()
            data = backend.get("i/k")[0]
            assert admin.get(key) == b"%020d" % token.value + data
        backend.delete("i/k", backend.get("i/k")[1])
        token = backend.put("i/k", b"absent", if_absent=True)
        assert admin.get(key) == b"%020d" % token.value + b"absent"
        # A value written in this layout by any earlier berth reads back with its generation.
        admin.set(key, b"00000000000000000042" + b"older frame")
        assert backend.get("i/k") == (b"older frame", berth.Token(42))
        with pytest.raises(berth.TokenMismatch):
            backend.delete("i/k", berth.Token(41))
        backend.delete("i/k", berth.Token(42))
        assert admin.exists(key) == 0
    finally:
        admin.close()


def test_conditional_puts_write_nothing_when_they_do_not_hold(open_backend) -> None:
    backend = open_backend()
    first = backend.put("i/k", b"first", if_absent=True)
    with pytest.raises(berth.TokenMismatch, match="'i/k' already exists"):
        backend.put("i/k", b"second", if_absent=True)
    assert backend.get("i/k") == (b"first", first)
    with pytest.raises(berth.TokenMismatch, match="'i/k' changed"):
        backend.put("i/k", b"second", if_match=berth.Token(first.value % (10**19) + 1))
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", b"second", if_match=first, if_absent=True)
    assert backend.get("i/k") == (b"first", first)
    with pytest.raises(berth.TokenMismatch):  # if_match on a name that is not there
        backend.put("i/gone", b"x", if_match=first)
    assert backend.get("i/gone") is None
    second = backend.put("i/k", b"second", if_match=first)
    assert second != first and backend.get("i/k") == (b"second", second)


def test_if_absent_race_has_exactly_one_winner(open_backend) -> None:
    backends = [open_backend() for _ in range(4)]
    start = threading.Barrier(len(backends))
    outcomes: list[object] = []

    def race(backend: RedisBackend, i: int) -> None:
        start.wait()
        try:
            outcomes.append((i, backend.put("i/race", b"%d" % i, if_absent=True)))
        except berth.TokenMismatch as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=race, args=(b, i)) for i, b in enumerate(backends)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    won = [o for o in outcomes if isinstance(o, tuple)]
    assert len(outcomes) == len(backends) and len(won) == 1, outcomes
    i, token = won[0]
    assert backends[0].get("i/race") == (b"%d" % i, token)


def test_scripts_are_loaded_again_after_a_script_flush(open_backend, own_redis) -> None:
    redis_url = own_redis  # SCRIPT FLUSH is server-wide: the shared server's other users must not see it
    backend = open_backend(url=redis_url)
    token = backend.put("i/k", b"v")
    admin = _admin(redis_url)
    try:
        admin.script_flush()
        token = backend.put("i/k", b"w", if_match=token)
        admin.script_flush()
        backend.delete("i/k", token)
    finally:
        admin.close()
    assert backend.get("i/k") is None


def _script_exists_calls(admin: Any) -> int:
    return int(admin.info("commandstats").get("cmdstat_script|exists", {}).get("calls", 0))


@pytest.mark.parametrize("waiting", [False, True], ids=["direct", "waited"])
def test_every_write_runs_after_the_script_cache_is_emptied_sync_and_async(own_redis, fresh_prefix, waiting) -> None:
    """A restart, a failover or SCRIPT FLUSH (another process's, at any moment) empties the
    server's script cache: each conditional write, on a pipeline with WAIT or alone, still runs
    once, by the script's source; a waited write asks no SCRIPT EXISTS of its own."""
    import asyncio

    redis_url = own_redis  # SCRIPT FLUSH is server-wide: the shared server's other users must not see it

    options = {"prefix": fresh_prefix, "check_durability": False}
    if waiting:
        options.update(wait_replicas=1, wait_timeout=20)
    plain = RedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False)
    admin = _admin(redis_url)

    def unacked() -> Any:  # no replica here: a waited write happens and then reports the missing ack
        return pytest.raises(berth.BackendError, match="replicas") if waiting else contextlib.nullcontext()

    def token(name: str) -> berth.Token:
        found = plain.get(name)
        assert found is not None
        return found[1]

    def sync_writes(backend: RedisBackend, name: str) -> None:
        with unacked():
            backend.put(name, b"first")
        admin.script_flush()
        before = _script_exists_calls(admin)
        with unacked():
            backend.put(name, b"second", if_match=token(name))
        assert plain.get(name)[0] == b"second"
        admin.script_flush()
        with unacked():
            backend.delete(name, token(name))
        assert plain.get(name) is None
        assert _script_exists_calls(admin) == before

    async def async_writes(name: str) -> None:
        backend = AsyncRedisBackend.from_url(redis_url, **options)
        try:
            with unacked():
                await backend.put(name, b"first")
            admin.script_flush()
            with unacked():
                await backend.put(name, b"second", if_match=token(name))
            assert plain.get(name)[0] == b"second"
            admin.script_flush()
            with unacked():
                await backend.delete(name, token(name))
            assert plain.get(name) is None
        finally:
            await backend.aclose()

    backend = RedisBackend.from_url(redis_url, **options)
    try:
        sync_writes(backend, "i/sync")
        asyncio.run(async_writes("i/async"))
    finally:
        backend.close()
        plain.close()
        admin.close()


@pytest.mark.parametrize("waiting", [False, True], ids=["direct", "waited"])
def test_deletes_in_one_pipeline_each_run_once_while_scripts_are_flushed(own_redis, fresh_prefix, waiting) -> None:
    """Another client's SCRIPT FLUSH can fall between the commands of a pipeline of deletes (the
    server reads a long pipeline in pieces): those answered NOSCRIPT go again by the script's
    text, the others are not repeated (a repeat would find the frame gone and report it kept)."""
    import asyncio

    redis_url = own_redis  # SCRIPT FLUSH is server-wide: the shared server's other users must not see it

    options: dict[str, Any] = {"prefix": fresh_prefix, "check_durability": False}
    if waiting:
        options.update(wait_replicas=1, wait_timeout=1)
    plain = RedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False)
    backend = RedisBackend.from_url(redis_url, **options)
    admin = _admin(redis_url)
    flushing, stop = threading.Event(), threading.Event()

    def flush() -> None:
        flusher = _admin(redis_url)
        try:
            while not stop.is_set():
                if flushing.wait(0.01):
                    flusher.script_flush()
        finally:
            flusher.close()

    async def deleted_async(items: list[tuple[str, berth.Token]]) -> list[bool]:
        abackend = AsyncRedisBackend.from_url(redis_url, **options)
        try:
            return await abackend.delete_many(items)
        finally:
            await abackend.aclose()

    def delete_all(round_: int, call: Callable[[list[tuple[str, berth.Token]]], list[bool]]) -> None:
        items = [(name, plain.put(name, b"v")) for name in (f"i/{round_}/{n:04d}" for n in range(1000))]
        admin.script_load(_wire.DELETE)  # cached as the pipeline starts; flushed while it runs
        flushing.set()
        try:
            if waiting:  # no replica here: the deletes happen, then the missing ack is reported
                with pytest.raises(berth.BackendError, match="replicas"):
                    call(items)
            else:
                assert call(items) == [True] * len(items)
        finally:
            flushing.clear()
        assert [name for name, _ in items if plain.get(name) is not None] == []

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    try:
        for round_ in range(4):
            delete_all(round_, backend.delete_many)
        for round_ in range(4, 8):
            delete_all(round_, lambda items: asyncio.run(deleted_async(items)))
    finally:
        stop.set()
        thread.join()
        backend.close()
        plain.close()
        admin.close()


def test_large_frames_come_back_without_a_copy_and_the_store_reads_them(open_backend) -> None:
    backend = open_backend()
    small, big = b"s" * 1000, bytes(range(256)) * 8192  # 2 MiB
    backend.put("i/small", small)
    token = backend.put("i/big", big)
    got = backend.get("i/small")
    assert type(got[0]) is bytes and got[0] == small
    got = backend.get("i/big")
    assert isinstance(got[0], memoryview) and got[0] == big and got[1] == token
    store = _sealed_store(open_backend())
    blob = "x" * (2 << 20)
    store.save("k", make_envelope(provider_state={"blob": blob}))
    parked = store.load("k")
    assert parked is not None
    same = parked.envelope.state() == {"blob": blob}  # not in the assert: a failure would print 2 MiB
    assert same
    assert [i.key for i in store.list()] == ["k"]
    claimed = store.claim("k")
    assert claimed is not None and store.load("k") is None


def test_async_large_puts_are_sent_by_the_sync_client_in_a_thread(redis_url: str, fresh_prefix: str) -> None:
    # issue 35 (loop stalls): redis.asyncio joins and buffers a large command on the event loop
    # (~100 ms of the loop's CPU per 48 MiB frame); a frame of 1 MiB or more is sent by the sync
    # twin in a worker thread, every condition kept. The mechanism is asserted, not a timing.
    from berth._sealer import LARGE_FRAME

    big, other = bytes(range(256)) * (LARGE_FRAME // 256), b"o" * LARGE_FRAME
    threads: list[bool] = []

    async def run() -> None:
        backend = AsyncRedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False)
        real = backend.sync.put

        def put(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread() is not threading.main_thread())
            return real(*args, **kwargs)

        backend.sync.put = put  # type: ignore[method-assign]
        try:
            token = await backend.put("i/big", big)
            with pytest.raises(berth.TokenMismatch):
                await backend.put("i/big", other, if_absent=True)
            with pytest.raises(berth.TokenMismatch):
                await backend.put("i/big", other, if_match=berth.Token(1))
            got = await backend.get("i/big")
            assert got is not None and got[0] == big and got[1] == token
            second = await backend.put("i/big", other, if_match=token)
            assert (await backend.get("i/big")) == (other, second)
            await backend.put("i/small", b"small")  # a small frame: on the loop, as before
        finally:
            await backend.aclose()

    asyncio.run(run())
    assert threads == [True] * 4


# --- retries: reads only ----------------------------------------------------------------------


class _Flaky:
    """Stands in for the client's execute_command: fails the first `fails` calls with `error`."""

    def __init__(self, real: Callable[..., Any], error: Exception, fails: int):
        self.real, self.error, self.fails, self.calls = real, error, fails, 0

    def __call__(self, *args: Any, **options: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return self.real(*args, **options)


@pytest.fixture
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []
    monkeypatch.setattr(_sync.time, "sleep", pauses.append)
    return pauses


def test_reads_are_retried_after_connection_errors(open_backend, no_pauses) -> None:
    backend = open_backend()
    token = backend.put("i/k", b"v")
    flaky = _Flaky(backend._command, redis.exceptions.ConnectionError("reset"), fails=2)
    backend._command = flaky
    assert backend.get("i/k") == (b"v", token)
    assert flaky.calls == 3 and no_pauses == [0.05, 0.25]
    backend._command = _Flaky(flaky.real, redis.exceptions.TimeoutError("slow"), fails=3)
    with pytest.raises(berth.BackendError, match="could not load 'i/k': TimeoutError"):
        backend.get("i/k")
    assert backend._command.calls == 3


def test_other_read_errors_are_not_retried(open_backend, no_pauses) -> None:
    backend = open_backend()
    flaky = _Flaky(backend._command, redis.exceptions.ResponseError("ERR max number of clients reached"), fails=1)
    backend._command = flaky
    with pytest.raises(berth.BackendError, match="could not load 'i/k': ResponseError"):
        backend.get("i/k")
    assert flaky.calls == 1 and no_pauses == []


@pytest.mark.parametrize("write", ["put", "put_if_absent", "put_if_match", "delete"])
def test_writes_are_never_retried(write, open_backend, no_pauses) -> None:
    backend = open_backend()
    token = backend.put("i/k", b"v")
    flaky = _Flaky(backend._command, redis.exceptions.ConnectionError("reset"), fails=1)
    backend._command = flaky
    calls = {
        "put": lambda: backend.put("i/k", b"w"),
        "put_if_absent": lambda: backend.put("i/new", b"w", if_absent=True),
        "put_if_match": lambda: backend.put("i/k", b"w", if_match=token),
        "delete": lambda: backend.delete("i/k", token),
    }
    with pytest.raises(berth.BackendError, match="'i/(k|new)': ConnectionError"):
        calls[write]()
    assert flaky.calls == 1 and no_pauses == []
    backend._command = flaky.real
    assert backend.get("i/k") == (b"v", token) and backend.get("i/new") is None


# --- killed connections -----------------------------------------------------------------------


def _clients(admin: Any, name: str) -> list[dict[str, Any]]:
    return [c for c in admin.client_list() if c.get("name") == name]


def _killed_while_paused(url: str, name: str, call: Callable[[], object]) -> object:
    """Pause writes, start `call`, kill its connection while its write (a script or a SET) waits, resume."""
    admin = _admin(url)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # asserted by the caller
            outcome.append(exc)

    thread = threading.Thread(target=run)
    try:
        admin.execute_command("CLIENT", "PAUSE", 10000, "WRITE")
        thread.start()
        deadline = time.monotonic() + 10
        waiting: list[dict[str, Any]] = []
        while not waiting and time.monotonic() < deadline:
            waiting = [c for c in _clients(admin, name) if c.get("cmd") in ("evalsha", "set")]
            time.sleep(0.01)
        assert waiting, "the write never reached the server"
        for client in waiting:
            admin.execute_command("CLIENT", "KILL", "ID", client["id"])
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and len(outcome) == 1
    return outcome[0]


@pytest.fixture(scope="module")
def own_redis(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis of this module's own, for what acts on a whole server (CLIENT PAUSE, CONFIG SET): the shared
    one serves other tests meanwhile (other xdist workers, whose own pause would end this one's early)."""
    with _private_redis(tmp_path_factory.mktemp("redis-pause")) as url:
        yield url


@pytest.mark.parametrize("operation", ["claim", "delete", "save"])
def test_connection_killed_mid_operation_is_a_backend_error_never_a_false_success(
    operation, open_backend, own_redis
) -> None:
    redis_url = own_redis
    name = f"berth-kill-{uuid.uuid4().hex[:8]}"
    store = _sealed_store(open_backend(client_name=name, url=redis_url))
    store.save("k", make_envelope("before"))
    parked = store.load("k")
    assert parked is not None
    calls = {
        "claim": lambda: store.claim("k"),
        "delete": lambda: store.delete("k", parked.token),
        "save": lambda: store.save("k", make_envelope("after")),
    }
    outcome = _killed_while_paused(redis_url, name, calls[operation])
    assert isinstance(outcome, berth.BackendError), f"{operation} under a killed connection returned {outcome!r}"
    assert "rd" in str(outcome) and "k" in str(outcome)
    again = store.load("k")  # the store works again, and the killed write never ran
    assert again is not None and again.token == parked.token and again.envelope.run_id == "before"
    assert store.claim("k") is not None and store.load("k") is None


def test_idle_connections_killed_between_calls_are_replaced(open_backend, redis_url) -> None:
    name = f"berth-idle-{uuid.uuid4().hex[:8]}"
    store = _sealed_store(open_backend(client_name=name))
    store.save("k", make_envelope())
    admin = _admin(redis_url)
    try:
        killed = 0
        for client in _clients(admin, name):
            admin.execute_command("CLIENT", "KILL", "ID", client["id"])
            killed += 1
    finally:
        admin.close()
    assert killed >= 1
    parked = store.load("k")
    assert parked is not None
    store.delete("k", parked.token)  # a write on a fresh connection: no spurious error
    assert store.load("k") is None


def test_a_server_that_is_not_there_is_a_backend_error() -> None:
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        for call in (lambda: backend.get("i/k"), lambda: backend.put("i/k", b"v"), lambda: list(backend.scan(""))):
            with pytest.raises(berth.BackendError):
                call()
    finally:
        backend.close()


def test_a_foreign_value_under_the_prefix_never_stops_list_sweep_or_reseal(
    open_backend: Callable[..., RedisBackend], redis_url: str, fresh_prefix: str
) -> None:
    # issue 12.4: one value that is not a frame made list, sweep and reseal raise for everything
    from datetime import datetime, timezone

    store = berth.Store(open_backend(), identity="id", sealer=berth.PlaintextSealer())
    store.save("old", make_envelope(deadline=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    store.save("live", make_envelope())
    admin = _admin(redis_url)
    admin.hset(f"{fresh_prefix}frame:id/hash", "field", "value")  # a value of another type
    admin.set(f"{fresh_prefix}frame:id/plain", b"no generation here")  # a string that is no frame
    admin.close()
    items = {i.key: i.error for i in store.list()}
    assert items["live"] is None and items["old"] is None and items["hash"] and items["plain"]
    assert store.sweep() == 1
    assert store.reseal().failed == 2
    for key in ("hash", "plain"):
        with pytest.raises(berth.FormatError, match=repr(f"id/{key}")):
            store.load(key)
    assert {i.key for i in store.list()} == {"live", "hash", "plain"}


def test_listing_past_the_sort_memory_is_ordered_sync_and_async(
    open_backend, redis_url, fresh_prefix, monkeypatch
) -> None:
    """Past its memory the ordering spills (issue 15.2); the order and each-key-once hold, sync and async."""
    import asyncio

    import berth.backends._bulk as bulk

    monkeypatch.setattr(bulk, "_SORT_MEMORY", 50)
    backend = open_backend()
    names = [f"i/{k}{n}" for n in range(200) for k in ("é", "a/", "b", "日本")]
    for name in names:
        backend.put(name, b"frame of " + name.encode())
    want = sorted(names)
    for reverse in (False, True):
        rows = list(backend.sorted_heads("i/", 9, limit=None, reverse=reverse))
        assert [r[0] for r in rows] == (want[::-1] if reverse else want)
        assert all(r[1] == b"frame of " for r in rows)
    assert [r[0] for r in backend.sorted_heads("i/", 9, limit=7, reverse=True)] == want[::-1][:7]

    async def listed(reverse: bool, limit: int | None) -> list[str]:
        abackend = AsyncRedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False)
        try:
            return [r[0] async for r in abackend.sorted_heads("i/", 9, limit=limit, reverse=reverse)]
        finally:
            await abackend.aclose()

    assert asyncio.run(listed(False, None)) == want
    assert asyncio.run(listed(True, None)) == want[::-1]
    assert asyncio.run(listed(False, 5)) == want[:5]


def test_a_64_kib_frame_is_read_in_one_piece(redis_url, fresh_prefix) -> None:
    # issue 15.4: redis-py reads 64 KiB at a time, so a 64 KiB state's frame (header and generation
    # on top) took two reads and a reader buffer grown by a moving realloc; berth reads 128 KiB
    backend = RedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False)
    own = RedisBackend.from_url(redis_url, prefix=fresh_prefix, check_durability=False, socket_read_size=4096)
    try:
        assert backend.client.connection_pool.connection_kwargs["socket_read_size"] == 1 << 17
        assert own.client.connection_pool.connection_kwargs["socket_read_size"] == 4096  # the caller's is kept
        frame = bytes(range(256)) * 260  # a 64 KiB state's frame, and then some
        token = backend.put("i/k", frame)
        assert backend.get("i/k") == (frame, token)
    finally:
        backend.close()
        own.close()
