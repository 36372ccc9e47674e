"""berth.mcp against the real MCP Python SDK (in-process clients, no network): the sealed request-state
codec, and input-required rounds completed exactly once across server instances sharing one store."""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import berth
import berth.aio
from tests.conftest import require

mcp_mod = pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install -e '.[mcp]'")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.request_state import InvalidRequestState, RequestStateSecurity  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import (  # noqa: E402
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
    TextContent,
)

import berth.mcp  # noqa: E402

PAYLOAD = b'{"v":1,"s":"the state a tool asked with"}'


class CountingKms:
    """A LocalKms that counts its wraps and unwraps."""

    def __init__(self, keyring: berth.Keyring):
        self.inner = berth.kms.LocalKms(keyring)
        self.calls: Counter[str] = Counter()

    @property
    def key_id(self) -> str:
        return self.inner.key_id

    def holds(self, key_id: str) -> bool:
        return self.inner.holds(key_id)

    def wrap(self, data_key: bytes, *, context: Any) -> Any:
        self.calls["wrap"] += 1
        return self.inner.wrap(data_key, context=context)

    def unwrap(self, wrapped: Any, *, context: Any) -> bytes:
        self.calls["unwrap"] += 1
        return self.inner.unwrap(wrapped, context=context)


def _aes(keyring: berth.Keyring | None = None, **kw: Any) -> Any:
    return berth.mcp.request_state_codec(berth.AesGcmSealer(keyring or berth.Keyring.generate()), **kw)


def _kms(keyring: berth.Keyring | None = None, **kw: Any) -> Any:
    return berth.mcp.request_state_codec(berth.KmsSealer(berth.kms.LocalKms(keyring or berth.Keyring.generate())), **kw)


@pytest.fixture(params=["aes-gcm", "kms"])
def make_codec(request: pytest.FixtureRequest) -> Any:
    return _aes if request.param == "aes-gcm" else _kms


# -- the codec ------------------------------------------------------------------------------------


def test_codec_round_trips_and_keeps_the_state_unreadable(make_codec: Any) -> None:
    codec = make_codec()
    token = codec.seal(PAYLOAD)
    assert isinstance(token, str) and token.isascii() and "=" not in token
    assert b"the state" not in token.encode() and "dGhlIHN0YXRl" not in token
    assert codec.unseal(token) == PAYLOAD
    assert codec.seal(PAYLOAD) != token  # a fresh nonce per token


def test_old_tokens_open_after_a_key_rotation(make_codec: Any) -> None:
    keyring = berth.Keyring.generate()
    old = make_codec(keyring, audience="srv").seal(PAYLOAD)
    rotated = make_codec(keyring.rotate(), audience="srv")
    assert rotated.unseal(old) == PAYLOAD
    assert rotated.unseal(rotated.seal(PAYLOAD)) == PAYLOAD


def _flip(token: str, at: int) -> str:
    c = token[at]
    return token[:at] + ("A" if c != "A" else "B") + token[at + 1 :]


def test_tampered_truncated_foreign_and_garbage_tokens_are_refused(make_codec: Any) -> None:
    keyring = berth.Keyring.generate()
    codec = make_codec(keyring, audience="srv")
    token = codec.seal(PAYLOAD)
    bad = [
        _flip(token, len(token) // 2),  # a body byte
        _flip(token, len(token) - 3),  # the tag
        _flip(token, 5),  # key id / wrapped key
        token[:-6],
        token[:10],
        token.split(".", 1)[0] + ".",
        make_codec(audience="srv").seal(PAYLOAD),  # another keyring
        make_codec(keyring, audience="another-server").seal(PAYLOAD),  # same keys, another server
        (_kms if make_codec is _aes else _aes)(keyring, audience="srv").seal(PAYLOAD),  # the other format
        "",
        "garbage",
        "b1.",
        "b1k.",
        "b1.!!!!",
        "b1k.AAAA",
        "b1." + "A" * 80,
        "b1k." + "A" * 80,
        token + "A",  # non-canonical base64
    ]
    for each in bad:
        with pytest.raises(InvalidRequestState):
            codec.unseal(each)


def test_the_kms_codec_calls_the_kms_once_per_data_key_not_per_token() -> None:
    keyring = berth.Keyring.generate()
    kms_a, kms_b = CountingKms(keyring), CountingKms(keyring)
    a = berth.mcp.request_state_codec(berth.KmsSealer(kms_a))
    b = berth.mcp.request_state_codec(berth.KmsSealer(kms_b))
    tokens = [a.seal(PAYLOAD + bytes([i])) for i in range(100)]
    assert [b.unseal(t) for t in tokens] == [PAYLOAD + bytes([i]) for i in range(100)]
    assert kms_a.calls == {"wrap": 1} and kms_b.calls == {"unwrap": 1}
    # a new data key after its ttl; a KEK the client does not hold is refused with no KMS call
    c = berth.mcp.request_state_codec(berth.KmsSealer(kms_a), data_key_ttl=timedelta(microseconds=1))
    c.seal(PAYLOAD), c.seal(PAYLOAD)
    assert kms_a.calls["wrap"] == 3
    stranger = CountingKms(berth.Keyring.generate())
    with pytest.raises(InvalidRequestState):
        berth.mcp.request_state_codec(berth.KmsSealer(stranger)).unseal(tokens[0])
    assert stranger.calls == {}


def test_bad_arguments_are_refused_before_any_sealing() -> None:
    with pytest.raises(TypeError, match="plaintext"):
        berth.mcp.request_state_codec(berth.PlaintextSealer())
    with pytest.raises(TypeError, match="not a berth sealer"):
        berth.mcp.request_state_codec(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="data_key_ttl"):
        _kms(data_key_ttl=timedelta(0))
    with pytest.raises(TypeError, match="audience"):
        _aes(audience=b"srv")
    with pytest.raises(TypeError, match="AsyncStore"):
        berth.mcp.Rounds(berth.open_store("memory://", identity="x", sealer=berth.PlaintextSealer()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        berth.mcp.Rounds(_astore("memory://r"), lifetime=timedelta(0))


def test_import_berth_does_not_import_mcp() -> None:
    import subprocess

    code = "import berth, sys; berth.Store; assert 'mcp' not in sys.modules and 'berth.mcp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- through the SDK: two server instances, one store -----------------------------------------------

ASK = {
    "approve": ElicitRequest(
        params=ElicitRequestFormParams(message="deploy?", requested_schema={"type": "object", "properties": {}})
    )
}
YES: InputResponses = {"approve": ElicitResult(action="accept", content={})}


async def _retry(client: Client, name: str, args: dict[str, Any], state: str | None) -> Any:
    """Round two: the same call, carrying the answers and the request state."""
    return await client.session.call_tool(
        name, args, allow_input_required=True, input_responses=YES, request_state=state
    )


def _astore(url: str, clock: Any = None) -> berth.aio.AsyncStore:
    return berth.aio.open_store(
        url, identity="mcp-test", sealer=berth.AesGcmSealer(berth.Keyring.generate()), clock=clock
    )


def _server(codec: Any, rounds: berth.mcp.Rounds, ran: Counter[str], *, gate: asyncio.Event | None = None) -> MCPServer:
    server = MCPServer("deployer", request_state_security=RequestStateSecurity(codec=codec))

    @server.tool()
    async def deploy(env: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.request_state is None:
            return await rounds.ask(ASK, state=f"asked about {env}", tool="deploy")

        async def go(state: str) -> CallToolResult:
            ran[env] += 1
            if gate is not None:
                await gate.wait()
            return CallToolResult(content=[TextContent(type="text", text=f"deployed {env} ({state})")])

        return await rounds.finish(ctx.request_state, go)

    @server.tool()
    async def count(n: int, ctx: Context) -> dict[str, int] | InputRequiredResult:
        if ctx.request_state is None:
            return await rounds.ask(ASK)

        async def go(state: str) -> dict[str, int]:
            ran[f"count{n}"] += 1
            return {"n": n, "times": ran[f"count{n}"]}

        return await rounds.finish(ctx.request_state, go)

    return server


def _state(result: Any) -> str:
    assert isinstance(result, InputRequiredResult) and result.request_state, result
    return result.request_state


def _text(result: Any) -> str:
    assert isinstance(result, CallToolResult), result
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("redis", marks=pytest.mark.redis)])  # fmt: skip
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    kind = request.param
    if kind == "memory":
        yield f"memory://mcp-{uuid.uuid4().hex}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/berth.db"
    elif kind == "postgresql":
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema = f"berth_mcp_{uuid.uuid4().hex[:12]}"
        yield f"{dsn}?schema={schema}"
        psycopg = require("psycopg", "PostgreSQL")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix = f"berth-mcp-{uuid.uuid4().hex[:12]}:"
        yield f"{redis_url}?prefix={prefix}&check_durability=false"
        redis = require("redis", "Redis")
        admin = redis.Redis.from_url(redis_url)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def test_each_round_runs_once_across_two_instances_with_every_retry_sent_twice(url: str) -> None:
    calls = 20

    async def main() -> None:
        keyring = berth.Keyring.generate()
        ran: Counter[str] = Counter()
        store_a, store_b = _astore(url), _astore(url)
        store_b = berth.aio.open_store(url, identity="mcp-test", sealer=store_a.sealer)
        servers = [
            _server(_aes(keyring, audience="deployer"), berth.mcp.Rounds(store_a), ran),
            _server(_aes(keyring, audience="deployer"), berth.mcp.Rounds(store_b), ran),
        ]
        rng = random.Random(7)
        async with store_a, store_b, Client(servers[0]) as ca, Client(servers[1]) as cb:
            clients = [ca, cb]
            envs = [f"env{i}" for i in range(calls)]
            firsts = await asyncio.gather(
                *(rng.choice(clients).session.call_tool("deploy", {"env": e}, allow_input_required=True) for e in envs)
            )
            assert all(isinstance(f, InputRequiredResult) and f.request_state for f in firsts)
            retries = [(e, _state(f)) for e, f in zip(envs, firsts, strict=True) for _ in range(2)]
            rng.shuffle(retries)
            results = await asyncio.gather(*(_retry(rng.choice(clients), "deploy", {"env": e}, s) for e, s in retries))
            for (e, _), r in zip(retries, results, strict=True):
                assert _text(r) == f"deployed {e} (asked about {e})"
            assert ran == Counter({e: 1 for e in envs})
            # a replay long after, on either instance, gets the same result and runs nothing
            e, s = retries[0]
            again = await _retry(cb, "deploy", {"env": e}, s)
            assert _text(again) == f"deployed {e} (asked about {e})" and ran[e] == 1

    asyncio.run(main())


def test_a_json_result_replays_as_the_same_json() -> None:
    async def main() -> None:
        ran: Counter[str] = Counter()
        async with (
            _astore("memory://mcp-json") as store,
            Client(_server(_aes(audience="deployer"), berth.mcp.Rounds(store), ran)) as client,
        ):
            first = await client.session.call_tool("count", {"n": 3}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            again = [await _retry(client, "count", {"n": 3}, first.request_state) for _ in range(3)]
            assert all(isinstance(r, CallToolResult) and r.structured_content == {"n": 3, "times": 1} for r in again)
            assert ran["count3"] == 1

    asyncio.run(main())


def test_a_token_for_another_tool_or_arguments_or_server_is_refused_with_the_sdks_error() -> None:
    async def main() -> None:
        ran: Counter[str] = Counter()
        keyring = berth.Keyring.generate()
        async with _astore("memory://mcp-bind") as store:
            rounds = berth.mcp.Rounds(store)
            server = _server(_aes(keyring, audience="deployer"), rounds, ran)
            other = _server(_aes(keyring, audience="another"), rounds, ran)
            async with Client(server) as client, Client(other) as stranger:
                first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult) and first.request_state
                token = first.request_state
                cases: list[tuple[str, dict[str, Any], str, Client]] = [
                    ("deploy", {"env": "dev"}, token, client),  # other arguments
                    ("count", {"n": 1}, token, client),  # another tool
                    ("deploy", {"env": "prod"}, token, stranger),  # another server, same keys
                    ("deploy", {"env": "prod"}, _flip(token, len(token) // 2), client),  # tampered
                    ("deploy", {"env": "prod"}, token[:-8], client),  # truncated
                ]
                for name, args, state, via in cases:
                    with pytest.raises(MCPError, match="Invalid or expired requestState"):
                        await _retry(via, name, args, state)
                assert ran == Counter()

    asyncio.run(main())


def test_a_round_past_its_deadline_is_refused_and_never_runs() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    async def main() -> None:
        ran: Counter[str] = Counter()
        async with _astore("memory://mcp-expiry", clock=lambda: now[0]) as store:
            rounds = berth.mcp.Rounds(store, lifetime=timedelta(hours=1))
            async with Client(_server(_aes(audience="deployer"), rounds, ran)) as client:
                first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult) and first.request_state
                state = first.request_state
                now[0] += timedelta(hours=1, seconds=1)
                result = await _retry(client, "deploy", {"env": "prod"}, state)
                assert isinstance(result, CallToolResult) and result.is_error
                assert "expired" in _error(result)
                assert ran == Counter()
                # a round whose result was stored is not replayed past its deadline either
                now[0] = datetime(2026, 1, 1, tzinfo=UTC)
                first = await client.session.call_tool("deploy", {"env": "x"}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult)
                state = first.request_state
                assert _text(await _retry(client, "deploy", {"env": "x"}, state)).startswith("deployed")
                now[0] += timedelta(hours=2)
                late = await _retry(client, "deploy", {"env": "x"}, state)
                assert isinstance(late, CallToolResult) and late.is_error and "expired" in _error(late)

    asyncio.run(main())


def _error(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_finish_edge_cases_directly() -> None:
    async def main() -> None:
        async with _astore("memory://mcp-direct") as store:
            rounds = berth.mcp.Rounds(store, wait=timedelta(milliseconds=50))
            asked = await rounds.ask(ASK, state="s1")
            assert asked.request_state is not None
            assert berth.mcp.Rounds.state(asked.request_state) == "s1"
            with pytest.raises(Exception, match="not made by berth.mcp.Rounds.ask"):
                await rounds.finish("{}", _never)
            with pytest.raises(Exception, match="not made by berth.mcp.Rounds.ask"):
                await rounds.finish('{"r":"../x","d":"2026-01-01T00:00:00+00:00","s":""}', _never)
            # a continuation that raises stores nothing and leaves the round answerable
            with pytest.raises(RuntimeError):
                await rounds.finish(asked.request_state, _boom)
            assert await rounds.finish(asked.request_state, _ok) == "ok s1"
            assert await rounds.finish(asked.request_state, _never) == "ok s1"
            # a round nobody asked (or already swept): told to retry later, names the store
            other = (await rounds.ask(ASK)).request_state
            assert other is not None
            await store.delete_prefix("mcp/rounds/")
            with pytest.raises(Exception, match=r"identity 'mcp-test'\) is unknown or still being completed"):
                await rounds.finish(other, _never)

    asyncio.run(main())


async def _never(state: str) -> str:
    raise AssertionError("ran a continuation that must not run")


async def _boom(state: str) -> str:
    raise RuntimeError("transient")


async def _ok(state: str) -> str:
    return f"ok {state}"


def test_a_retry_while_the_first_is_still_running_waits_for_its_result() -> None:
    async def main() -> None:
        ran: Counter[str] = Counter()
        gate = asyncio.Event()
        async with _astore("memory://mcp-wait") as store:
            rounds = berth.mcp.Rounds(store)
            async with Client(_server(_aes(audience="deployer"), rounds, ran, gate=gate)) as client:
                first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
                assert isinstance(first, InputRequiredResult)
                state = first.request_state
                one = asyncio.ensure_future(_retry(client, "deploy", {"env": "prod"}, state))
                two = asyncio.ensure_future(_retry(client, "deploy", {"env": "prod"}, state))
                while ran["prod"] == 0:
                    await asyncio.sleep(0)
                assert not one.done() and not two.done()
                gate.set()
                assert _text(await one) == _text(await two)
                assert ran["prod"] == 1

    asyncio.run(main())


def test_a_round_survives_a_restart_and_a_key_rotation(tmp_path: Any) -> None:
    """Round one on a server that then stops; round two on a new one whose keyring was rotated meanwhile."""

    async def main() -> None:
        ran: Counter[str] = Counter()
        keyring = berth.Keyring.generate()
        url = f"sqlite:///{tmp_path}/rounds.db"
        async with berth.aio.open_store(url, identity="mcp-test", sealer=berth.AesGcmSealer(keyring)) as store:
            server = _server(_aes(keyring, audience="deployer"), berth.mcp.Rounds(store), ran)
            async with Client(server) as client:
                first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
        rotated = keyring.rotate()
        async with berth.aio.open_store(url, identity="mcp-test", sealer=berth.AesGcmSealer(rotated)) as store:
            server = _server(_aes(rotated, audience="deployer"), berth.mcp.Rounds(store), ran)
            async with Client(server) as client:
                done = await _retry(client, "deploy", {"env": "prod"}, _state(first))
                again = await _retry(client, "deploy", {"env": "prod"}, _state(first))
        assert _text(done) == _text(again) == "deployed prod (asked about prod)"
        assert ran == Counter({"prod": 1})

    asyncio.run(main())


def test_a_round_whose_winner_died_is_taken_over_after_its_lease() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    async def main() -> None:
        ran: Counter[str] = Counter()
        never = asyncio.Event()  # the first winner's continuation never finishes: its process "died"
        async with _astore("memory://mcp-lease", clock=lambda: now[0]) as store:
            rounds = berth.mcp.Rounds(store, lease=timedelta(minutes=5), wait=timedelta(seconds=1))
            keyring = berth.Keyring.generate()
            dead = _server(_aes(keyring, audience="deployer"), rounds, ran, gate=never)
            alive = _server(_aes(keyring, audience="deployer"), rounds, ran)
            async with Client(dead) as first, Client(alive) as second:
                asked = await first.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
                hung = asyncio.create_task(_retry(first, "deploy", {"env": "prod"}, _state(asked)))
                while ran["prod"] == 0:
                    await asyncio.sleep(0.01)
                told = await _retry(second, "deploy", {"env": "prod"}, _state(asked))  # the lease is live
                assert isinstance(told, CallToolResult) and told.is_error
                now[0] += timedelta(minutes=5, seconds=1)
                done = await _retry(second, "deploy", {"env": "prod"}, _state(asked))
                assert _text(done) == "deployed prod (asked about prod)" and ran["prod"] == 2
                hung.cancel()
                await asyncio.gather(hung, return_exceptions=True)
                again = await _retry(second, "deploy", {"env": "prod"}, _state(asked))
                assert _text(again) == "deployed prod (asked about prod)" and ran["prod"] == 2

    asyncio.run(main())
