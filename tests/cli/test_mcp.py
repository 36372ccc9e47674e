"""`berth mcp`: an approver's own MCP client lists the questions waiting and answers them, bound to the one shown.

In process over the SDK's in-memory transport, as a real stdio subprocess, and over streamable HTTP
behind `berth serve`'s authentication (a real server process).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import berth

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install -e '.[mcp]'")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp_types import CallToolResult, TextContent  # noqa: E402

from berth import _serve  # noqa: E402
from berth._cli._mcp_server import build_server  # noqa: E402
from tests._net import free_port, wait_port  # noqa: E402
from tests.test_cli import IDENTITY  # noqa: E402

KEY = "mcp/to/maintainers/task-1"
TOOL = berth.ToolRequest(name="delete_repo", arguments={"repo": "acme/old"}, agent="ops", call_id="task-1")


def _doc(result: Any) -> Any:
    assert isinstance(result, CallToolResult), result
    if result.is_error:
        block = result.content[0]
        assert isinstance(block, TextContent)
        return block.text
    if result.structured_content is not None:
        return result.structured_content.get("result", result.structured_content)
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


def _ask(questions: berth.QuestionStore) -> berth.Question:
    return questions.ask(KEY, "Delete acme/old?", run_id="task-1", accepts=["approve", "reject"], tool=TOOL)


def test_lists_the_questions_and_answers_the_one_shown_in_process(
    home: Path, store: berth.Store, questions: berth.QuestionStore
) -> None:
    first = _ask(questions)
    inbox = _serve.Inbox([_serve.Source(IDENTITY, store, questions)], max_age=0)
    server = build_server(inbox, IDENTITY, lambda ctx: "alice")

    async def main() -> None:
        async with Client(server) as client:
            (shown,) = _doc(await client.call_tool("list_questions", {"prefix": "mcp/to/"}))
            assert shown["key"] == KEY and shown["question_id"] == first.id and shown["prompt"] == "Delete acme/old?"
            assert shown["tool"]["name"] == "delete_repo" and shown["tool"]["arguments"] == {"repo": "acme/old"}
            assert shown["decisions"] == ["approve", "reject"] and shown["answered"] is False
            assert _doc(await client.call_tool("list_questions", {"prefix": "other/"})) == []
            # the run asks anew: an answer to the question shown before is refused, never given to the new one
            second = _ask(questions)
            stale = await client.call_tool(
                "answer_question", {"key": KEY, "question_id": first.id, "decision": "approve"}
            )
            assert "refused (409)" in _doc(stale) and questions.answer(KEY) is None
            bad = await client.call_tool("answer_question", {"key": KEY, "question_id": second.id, "decision": "edit"})
            assert isinstance(bad, CallToolResult) and bad.is_error and questions.answer(KEY) is None
            given = _doc(
                await client.call_tool(
                    "answer_question", {"key": KEY, "question_id": second.id, "decision": "approve", "text": "ok"}
                )
            )
            assert given["decision"] == "approve" and given["by"] == "alice" and given["question_id"] == second.id
            again = await client.call_tool(
                "answer_question", {"key": KEY, "question_id": second.id, "decision": "reject"}
            )
            assert "already answered" in _doc(again)
            missing = await client.call_tool("answer_question", {"key": "nope", "question_id": second.id})
            assert "refused (404)" in _doc(missing)

    asyncio.run(main())
    answer = questions.answer(KEY)
    assert answer is not None and answer.decision is berth.Decision.APPROVE and answer.by == "alice"


def _command() -> list[str]:
    exe = Path(sys.executable).with_name("berth")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from berth._cli import main; main()"]


def test_a_real_stdio_process_answers_as_by(home: Path, questions: berth.QuestionStore) -> None:
    asked = _ask(questions)
    cmd = _command()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", "--by", "bob"], env=dict(os.environ))

    async def main() -> Any:
        async with Client(params) as client:
            (shown,) = _doc(await client.call_tool("list_questions", {}))
            return _doc(
                await client.call_tool(
                    "answer_question", {"key": shown["key"], "question_id": shown["question_id"], "decision": "reject",
                                        "text": "it holds payroll records"}
                )
            )  # fmt: skip

    given = asyncio.run(main())
    assert given["by"] == "bob" and given["decision"] == "reject"
    answer = questions.answer(KEY)
    assert answer is not None and answer.question_id == asked.id and answer.text == "it holds payroll records"


def test_http_needs_berth_serves_credentials_and_answers_as_the_tokens_person(
    home: Path, questions: berth.QuestionStore
) -> None:
    _ask(questions)
    port = free_port()
    token = "Zq8" + "x7Lm2Kp9Vb4Nc6Rt1Wy3Hs5Jd0Gf8Ae"
    env = {**os.environ, "BERTH_SERVE_TOKEN": f"carol:{token}"}
    proc = subprocess.Popen([*_command(), "mcp", "--http", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        assert wait_port("127.0.0.1", port, timeout=60), "berth mcp --http did not start"
        assert httpx.post(url, json={}).status_code == 401
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401

        async def main() -> Any:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})

            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                (shown,) = _doc(await client.call_tool("list_questions", {}))
                return _doc(
                    await client.call_tool(
                        "answer_question", {"key": KEY, "question_id": shown["question_id"], "decision": "approve"}
                    )
                )

        given = asyncio.run(main())
        assert given["by"] == "carol" and given["decision"] == "approve"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_refuses_to_serve_http_off_loopback_without_authentication(home: Path) -> None:
    from tests.test_cli import run

    result = run("mcp", "--http", "0.0.0.0:8471")
    assert result.exit_code == 2 and "without authentication" in result.stderr
    assert run("mcp", "--http", "nonsense").exit_code == 2
