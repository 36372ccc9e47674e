"""MCP rounds across two server processes: every input-required call's retry sent twice, to random instances.

Two `MCPServer` processes (stdio, this file run as a script) share one berth store and one keyring
(`berth.mcp.request_state_codec` + `berth.mcp.Rounds`). A client makes `calls` calls of a tool that
asks for an approval, each first round on a random instance; then every retry (the answers plus
the sealed request state) is sent twice, concurrently, each to a random instance. Each server
appends one line per continuation it ran to a shared log (O_APPEND). Checked: every retry got the
tool's result for its call (0 lost), and every call's continuation ran exactly once (0 twice).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import berth

from ._common import Result

TITLE = "mcp rounds: retries sent twice to 2 server processes"


def _serve() -> None:  # pragma: no cover - runs in the server processes
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.request_state import RequestStateSecurity
    from mcp_types import CallToolResult, ElicitRequest, ElicitRequestFormParams, InputRequiredResult, TextContent

    import berth.aio
    import berth.mcp

    # the SDK reads the tool's annotations (strings here) in this module's globals
    globals().update(Context=Context, CallToolResult=CallToolResult, InputRequiredResult=InputRequiredResult)
    keyring = berth.Keyring.load(os.environ["MCP_ROUNDS_KEYRING"])
    log = os.environ["MCP_ROUNDS_LOG"]
    name = os.environ["MCP_ROUNDS_NAME"]
    sealer = berth.AesGcmSealer(keyring)
    store = berth.aio.open_store(os.environ["MCP_ROUNDS_URL"], identity="mcp-rounds", sealer=sealer)
    rounds = berth.mcp.Rounds(store)
    codec = berth.mcp.request_state_codec(sealer, audience="deployer")
    server = MCPServer("deployer", request_state_security=RequestStateSecurity(codec=codec))
    ask = {
        "approve": ElicitRequest(
            params=ElicitRequestFormParams(message="deploy?", requested_schema={"type": "object", "properties": {}})
        )
    }

    @server.tool()
    async def deploy(call: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        if ctx.request_state is None:
            return await rounds.ask(ask, state=call, tool="deploy")

        async def go(state: str) -> CallToolResult:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{state} {name}\n".encode())
            finally:
                os.close(fd)
            return CallToolResult(content=[TextContent(type="text", text=f"deployed {state}")])

        return await rounds.finish(ctx.request_state, go)

    server.run("stdio")


def run_mcp_rounds(calls: int, workdir: Path, *, url: str, backend: str, seed: int = 31) -> Result:
    """The experiment: `calls` tool calls over two server processes sharing the store at `url`."""
    from mcp import Client, StdioServerParameters
    from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, InputResponses, TextContent

    workdir.mkdir(parents=True, exist_ok=True)
    keyring_path, log = workdir / "keyring.json", workdir / "ran.log"
    berth.Keyring.generate().save(keyring_path)
    log.unlink(missing_ok=True)
    result = Result(TITLE, backend)
    yes: InputResponses = {"approve": ElicitResult(action="accept", content={})}
    root = Path(__file__).resolve().parents[2]

    def params(name: str) -> StdioServerParameters:
        env = {
            **os.environ,
            "MCP_ROUNDS_KEYRING": str(keyring_path),
            "MCP_ROUNDS_LOG": str(log),
            "MCP_ROUNDS_NAME": name,
            "MCP_ROUNDS_URL": url,
            "PYTHONPATH": os.pathsep.join([str(root), str(root / "src")]),
        }
        return StdioServerParameters(command=sys.executable, args=["-m", "tests.reliability.test_mcp_rounds"], env=env)

    def text(got: Any) -> str | None:
        if isinstance(got, CallToolResult) and not got.is_error and isinstance(got.content[0], TextContent):
            return got.content[0].text
        return None

    async def main() -> None:
        rng = random.Random(seed)
        async with Client(params("a")) as a, Client(params("b")) as b:
            clients = [a, b]
            names = [f"call{i}" for i in range(calls)]
            firsts = await asyncio.gather(
                *(
                    rng.choice(clients).session.call_tool("deploy", {"call": n}, allow_input_required=True)
                    for n in names
                )
            )
            retries: list[tuple[str, str]] = []
            for n, first in zip(names, firsts, strict=True):
                if isinstance(first, InputRequiredResult) and first.request_state:
                    retries += [(n, first.request_state)] * 2
                else:
                    result.fail(f"{n}: round one answered {first!r}")
            rng.shuffle(retries)
            got = await asyncio.gather(
                *(
                    rng.choice(clients).session.call_tool(
                        "deploy", {"call": n}, allow_input_required=True, input_responses=yes, request_state=s
                    )
                    for n, s in retries
                ),
                return_exceptions=True,
            )
            for (n, _), each in zip(retries, got, strict=True):
                if text(each) != f"deployed {n}":
                    result.fail(f"{n}: a retry got {each!r}")
            result.counts["retries"] = len(retries)

    started = time.monotonic()
    asyncio.run(main())
    lines = log.read_text().splitlines() if log.exists() else []
    ran = Counter(line.split()[0] for line in lines)
    result.counts["instances"] = len({line.split()[1] for line in lines})
    for i in range(calls):
        n = f"call{i}"
        result.trials += 1
        if ran[n] != 1:
            result.fail(f"{n}: its continuation ran {ran[n]} times")
    result.seconds = time.monotonic() - started
    return result


def test_two_server_processes_run_each_round_once(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install -e '.[mcp]'")
    result = run_mcp_rounds(20, tmp_path, url=f"sqlite:///{tmp_path}/rounds.db", backend="sqlite")
    result.check()
    assert result.counts == {"retries": 40, "instances": 2}


@pytest.mark.slow
def test_two_server_processes_at_full_size(tmp_path: Path) -> None:
    run_mcp_rounds(200, tmp_path, url=f"sqlite:///{tmp_path}/rounds.db", backend="sqlite").check()


if __name__ == "__main__":  # pragma: no cover - a server process of the experiment
    _serve()
