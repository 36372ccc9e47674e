"""From the inbox page to the resumed run, in Chromium: the framework examples' agents (offline) park a
tool approval, an approver edits an argument and approves in the page, and the resumed run calls the
tool with exactly the edited arguments; a free-text answer that is not exactly an approval never runs it.

The agents are the examples' own (`examples/openai_agents_approval.py`, `examples/pydantic_ai_approval.py`):
scripted models, no network.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import berth
from berth._serve import Auth, parse_tokens
from tests.serve.conftest import TOKENS, Server, serving
from tests.serve.test_browser import browser, card, login, page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.xdist_group("browser")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
IDENTITY = "ops-bot"  # the examples' identity
REPO = "acme/payroll-archive"  # what the examples' model asks to delete
EDITED = "acme/payroll-archive-2019"


def example(name: str, extra: str) -> ModuleType:
    """Import `examples/<name>.py` (its framework installed, else the test is skipped as the extra says)."""
    pytest.importorskip(extra, reason=f"the example needs {extra}: pip install -e '.[all,test]'")
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def in_thread(work: Callable[[], Any]) -> Any:
    """Run `work` in a thread of its own: sync Playwright holds this thread's event loop."""
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


@pytest.fixture
def site(tmp_path: Path, keyring: berth.Keyring) -> Iterator[Server]:
    """An inbox over the identity the examples park under."""
    with serving(tmp_path / "runs.db", keyring, Auth(tokens=parse_tokens(TOKENS)), identities=(IDENTITY,)) as s:
        yield s


class Framework:
    """How one example's agent is run to its approval, parked, and woken (sync handles, in a thread)."""

    def __init__(self, name: str, extra: str, module: str) -> None:
        self.name, self.extra, self.module_name = name, extra, module

    def module(self) -> ModuleType:
        return example(self.module_name, self.extra)

    def park(self, server: Server, key: str) -> None:
        mod = self.module()
        integration = importlib.import_module(f"berth.{self.name}")

        async def go() -> None:
            agent = mod.build_agent()
            if self.name == "openai_agents":
                result = await mod.Runner.run(agent, "Clean up the old payroll archive repo.")
            else:
                result = await agent.run("Clean up the old payroll archive repo, if ticket 7 is closed.")
            await integration.park(server.stores[IDENTITY], server.questions[IDENTITY], key, result, agent=agent)

        in_thread(lambda: asyncio.run(go()))

    def wake(self, server: Server, key: str) -> Any:
        mod = self.module()
        integration = importlib.import_module(f"berth.{self.name}")

        async def go() -> Any:
            return await integration.wake(server.stores[IDENTITY], server.questions[IDENTITY], key, mod.build_agent())

        return in_thread(lambda: asyncio.run(go()))

    def said(self, outcome: Any) -> str:
        result = outcome.result
        return str(result.final_output if self.name == "openai_agents" else result.output)


FRAMEWORKS = [
    Framework("openai_agents", "agents", "openai_agents_approval"),
    Framework("pydantic_ai", "pydantic_ai", "pydantic_ai_approval"),
]


@pytest.fixture(params=FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])
def framework(request: pytest.FixtureRequest) -> Framework:
    fw: Framework = request.param
    fw.module().deleted.clear()
    return fw


def answer_the_others(server: Server, key: str) -> None:
    """pydantic-ai's example also waits on an external result (`<key>/call-2`): a person supplies it."""
    questions = server.questions[IDENTITY]
    for q, a in list(questions.list(key + "/")):
        if q.key != f"{key}/call-1" and a is None:
            questions.provide(q.key, q.id, "ticket 7 was closed by bob", by="bob")


def test_an_edited_argument_approved_in_the_page_is_exactly_what_the_resumed_run_calls(
    site: Server,
    framework: Framework,
    page: Any,  # noqa: F811  (after `site`: closed before the server stops)
) -> None:
    key = f"edit/{framework.name}"
    framework.park(site, key)
    login(page, site, path="/?prefix=edit/")
    c = card(page, f"{key}/call-1")
    assert c.locator(".tool-name").inner_text() == "delete_repo"
    assert c.locator(".tool .args dt").all_inner_texts() == ["name"]
    assert c.locator(".tool .args dt:text-is('name') + dd").inner_text() == REPO
    c.locator("details.edit summary").click()
    c.locator("textarea[data-arg=name]").fill(EDITED)
    c.locator("button[value=edit]").click()
    page.wait_for_selector(".notice.ok")
    answer_the_others(site, key)
    outcome = framework.wake(site, key)
    assert outcome.decision is berth.WakeDecision.RESUME
    assert framework.module().deleted == [EDITED]  # the tool ran once, with exactly the edited argument


def test_free_text_that_is_not_exactly_an_approval_never_runs_the_tool(
    site: Server,
    framework: Framework,
    page: Any,  # noqa: F811  (after `site`: closed before the server stops)
) -> None:
    key = f"text/{framework.name}"
    framework.park(site, key)
    login(page, site, path="/?prefix=text/")
    c = card(page, f"{key}/call-1")
    c.locator("textarea[name=text]").fill("yes but only archive it")
    c.locator("button[value=respond]").click()
    page.wait_for_selector(".notice.ok")
    answer_the_others(site, key)
    outcome = framework.wake(site, key)
    assert outcome.decision is berth.WakeDecision.RESUME
    assert framework.module().deleted == []  # not approved: the condition is fed back, the tool never runs
    assert "only archive it" in framework.said(outcome)
