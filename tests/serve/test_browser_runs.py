"""From the inbox page to the resumed run, in Chromium: the framework examples (offline) park a tool
approval, an approver edits an argument and approves in the page, and the resumed run calls the tool
with exactly the edited arguments; the free-text answer `yes but only archive it` never runs it.

The agents and the graph are the examples' own (`examples/openai_agents_approval.py`,
`examples/pydantic_ai_approval.py`, `examples/langgraph_approval.py`): scripted models, no network.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import berth
import berth.aio
from berth._serve import Auth, parse_tokens
from tests.serve.conftest import TOKENS, Server, serving
from tests.serve.test_browser import browser, card, login, page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.xdist_group("browser")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
IDENTITY = "ops-bot"  # the examples' identity


def example(name: str, extra: str) -> ModuleType:
    """Import `examples/<name>.py` (its framework installed, else the test is skipped as the extra says)."""
    pytest.importorskip(extra, reason=f"the example needs {extra}: ./dev test installs it")
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def in_thread(work: Callable[[], Any]) -> Any:
    """Run `work` (an `asyncio.run`) in a thread of its own: sync Playwright holds this thread's event loop."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the framework run did not finish"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@dataclass
class Site:
    """The inbox and the storage the example parks into: one SQLite file, one keyring."""

    server: Server
    url: str
    sealer: berth.Sealer

    @property
    def questions(self) -> berth.QuestionStore:
        return self.server.questions[IDENTITY]


@pytest.fixture
def site(tmp_path: Path, keyring: berth.Keyring) -> Iterator[Site]:
    """An inbox over the identity the examples park under."""
    db = tmp_path / "runs.db"
    with serving(db, keyring, Auth(tokens=parse_tokens(TOKENS)), identities=(IDENTITY,)) as s:
        yield Site(s, f"sqlite:///{db}", berth.AesGcmSealer(keyring))


class Agents:
    """`examples/openai_agents_approval.py` and `examples/pydantic_ai_approval.py`: `park` and `wake`."""

    argument, original = "name", "acme/payroll-archive"

    def __init__(self, name: str, extra: str, module: str) -> None:
        self.name, self.extra, self.module_name = name, extra, module

    def module(self) -> ModuleType:
        return example(self.module_name, self.extra)

    def park(self, site: Site, key: str) -> str:
        mod, integration = self.module(), importlib.import_module(f"berth.{self.name}")

        async def go() -> None:
            agent = mod.build_agent()
            if self.name == "openai_agents":
                result = await mod.Runner.run(agent, "Clean up the old payroll archive repo.")
            else:
                result = await agent.run("Clean up the old payroll archive repo, if ticket 7 is closed.")
            await integration.park(site.server.stores[IDENTITY], site.questions, key, result, agent=agent)

        in_thread(lambda: asyncio.run(go()))
        return f"{key}/call-1"

    def wake(self, site: Site, key: str) -> str:
        """Resume the run (after supplying the external result pydantic-ai's example also waits on); what it said."""
        for q, a in list(site.questions.list(key + "/")):
            if q.key != f"{key}/call-1" and a is None:
                site.questions.provide(q.key, q.id, "ticket 7 was closed by bob", by="bob")
        mod, integration = self.module(), importlib.import_module(f"berth.{self.name}")

        async def go() -> Any:
            return await integration.wake(site.server.stores[IDENTITY], site.questions, key, mod.build_agent())

        outcome = in_thread(lambda: asyncio.run(go()))
        assert outcome.decision is berth.WakeDecision.RESUME
        result = outcome.result
        return str(result.final_output if self.name == "openai_agents" else result.output)


class Graph:
    """`examples/langgraph_approval.py`: a graph asking in the Agent Inbox convention, resumed with `aresume_once`."""

    name, argument, original = "langgraph", "repo", "acme/old"

    def module(self) -> ModuleType:
        return example("langgraph_approval", "langgraph")

    def park(self, site: Site, key: str) -> str:
        mod = self.module()
        import berth.langgraph

        async def go() -> None:
            async with berth.aio.open_store(site.url, identity=IDENTITY, sealer=site.sealer) as store:
                await mod.graph(berth.langgraph.AsyncBerthSaver(store)).ainvoke({}, mod.CONFIG)

        in_thread(lambda: asyncio.run(go()))
        (question,) = [q for q, _ in site.questions.list("langgraph/")]
        return question.key

    def wake(self, site: Site, key: str) -> str:
        mod = self.module()
        import berth.langgraph

        (question,) = [q for q, _ in site.questions.list("langgraph/")]
        given = site.questions.answer(question.key)
        assert given is not None and question.tool is not None
        response = berth.langgraph.human_response(given, question.tool.name)

        async def go() -> Any:
            async with berth.aio.open_store(site.url, identity=IDENTITY, sealer=site.sealer) as store:
                graph = mod.graph(berth.langgraph.AsyncBerthSaver(store))
                return await berth.langgraph.aresume_once(graph, mod.CONFIG, {given.question_id: [response]})

        out = in_thread(lambda: asyncio.run(go()))
        assert out is not None, "the graph was not resumed"
        return str(out["outcome"])


FRAMEWORKS: list[Any] = [
    Agents("openai_agents", "agents", "openai_agents_approval"),
    Agents("pydantic_ai", "pydantic_ai", "pydantic_ai_approval"),
    Graph(),
]


@pytest.fixture(params=FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])
def framework(request: pytest.FixtureRequest) -> Any:
    fw = request.param
    fw.module().deleted.clear()
    return fw


def test_an_edited_argument_approved_in_the_page_is_exactly_what_the_resumed_run_calls(
    site: Site,
    framework: Any,
    page: Any,  # noqa: F811  (after `site`: closed before the server stops)
) -> None:
    question_key = framework.park(site, "edit/run")
    login(page, site.server, path="/")
    c = card(page, question_key)
    assert c.locator(".tool-name").inner_text() == "delete_repo"
    assert c.locator(".tool .args dt").all_inner_texts() == [framework.argument]
    assert c.locator(f".tool .args dt:text-is('{framework.argument}') + dd").inner_text() == framework.original
    edited = framework.original + "-2019"
    c.locator("details.edit summary").click()
    c.locator(f"textarea[data-arg={framework.argument}]").fill(edited)
    c.locator("button[value=edit]").click()
    page.wait_for_selector(".notice.ok")
    framework.wake(site, "edit/run")
    assert framework.module().deleted == [edited]  # the tool ran once, with exactly the edited argument


def test_free_text_that_is_not_exactly_an_approval_never_runs_the_tool(
    site: Site,
    framework: Any,
    page: Any,  # noqa: F811  (after `site`: closed before the server stops)
) -> None:
    question_key = framework.park(site, "text/run")
    login(page, site.server, path="/")
    c = card(page, question_key)
    c.locator("textarea[name=text]").fill("yes but only archive it")
    c.locator("button[value=respond]").click()
    page.wait_for_selector(".notice.ok")
    said = framework.wake(site, "text/run")
    assert framework.module().deleted == []  # not approved: the condition goes back, the tool never runs
    assert "only archive it" in said
