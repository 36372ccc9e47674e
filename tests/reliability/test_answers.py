"""Duplicated answers: one answer delivered to 4 racing callers while the graph moves on to its next interrupt.

Each thread is a LangGraph graph that asks "push to main?" and then, in its next node,
"deploy to production?". The answer to the first question is delivered to four callers
10 ms apart (a retried webhook, a duplicated queue message), each with its own store
handle, each calling `berth.langgraph.resume_once`. The first caller's resume moves the
graph on to the second interrupt while the others are still arriving. Half the threads
deliver the answer bound to its interrupt (`{interrupt_id: answer}`, the documented
form), half as a plain value. Then the second question's answer is delivered once.

Checked per thread: the push node ran after its interrupt exactly once and with the push
answer; the deploy node ran at most once, never with the push answer, and exactly once
with the deploy answer. Before issue 29 a plain value read whatever was pending: 1 to 3
of 10 threads had a late delivery of "push" answer "deploy".
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import pytest

import berth
from tests.conftest import require

from ._common import Result

TITLE = "answers: one answer to 4 racing callers as the graph moves on (LangGraph)"
CALLERS = 4
GAP = 0.010  # seconds between two deliveries of the same answer


class _State(TypedDict, total=False):
    push: str
    deploy: str


def _graph(saver: Any, ran: list[tuple[str, str, str]]) -> Any:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def push(state: _State, config: RunnableConfig) -> _State:
        answer = interrupt("push to main?")
        ran.append((config["configurable"]["thread_id"], "push", answer))  # the side effect: once
        return {"push": answer}

    def deploy(state: _State, config: RunnableConfig) -> _State:
        answer = interrupt("deploy to production?")
        ran.append((config["configurable"]["thread_id"], "deploy", answer))
        return {"deploy": answer}

    builder = StateGraph(_State)
    builder.add_node("push", push)
    builder.add_node("deploy", deploy)
    builder.add_edge(START, "push")
    builder.add_edge("push", "deploy")
    builder.add_edge("deploy", END)
    return builder.compile(checkpointer=saver)


def run_answers(threads: int, workdir: Path, *, callers: int = CALLERS, gap: float = GAP) -> Result:
    """The experiment on an SQLite file: `threads` threads, `callers` deliveries of each first answer."""
    from berth.langgraph import BerthSaver, resume_once

    workdir.mkdir(parents=True, exist_ok=True)
    url, sealer = f"sqlite:///{workdir}/answers.db", berth.AesGcmSealer(berth.Keyring.generate())
    result = Result(TITLE, "sqlite")
    started = time.monotonic()
    ran: list[tuple[str, str, str]] = []
    stores = [berth.open_store(url, identity="answers", sealer=sealer) for _ in range(callers + 1)]
    try:
        graphs = [_graph(BerthSaver(store), ran) for store in stores]
        for n in range(threads):
            tid, bound = f"t{n}", n % 2 == 0
            config: Any = {"configurable": {"thread_id": tid}}
            (asked,) = graphs[-1].invoke({}, config)["__interrupt__"]
            answer = f"push-yes-{n}"
            value: Any = {asked.id: answer} if bound else answer
            outputs: list[Any] = [None] * callers
            errors: list[BaseException] = []

            def deliver(
                i: int, config: Any = config, value: Any = value, outputs: list[Any] = outputs, errors: Any = errors
            ) -> None:
                time.sleep(i * gap)
                try:
                    outputs[i] = resume_once(graphs[i], config, value)
                except BaseException as exc:  # counted below
                    errors.append(exc)

            workers = [threading.Thread(target=deliver, args=(i,)) for i in range(callers)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(timeout=60)
            stuck = sum(worker.is_alive() for worker in workers)
            result.trials += 1
            if stuck or errors:
                result.fail(f"{tid}: {stuck} callers still running, errors {errors!r}")
                continue
            pending = graphs[-1].get_state(config).interrupts
            if len(pending) != 1 or pending[0].value != "deploy to production?":
                result.fail(f"{tid}: after the push answer the thread waits on {pending!r}")
                continue
            final = resume_once(graphs[-1], config, {pending[0].id: f"deploy-yes-{n}"})
            runs = Counter((node, got) for t, node, got in ran if t == tid)
            want = Counter({("push", answer): 1, ("deploy", f"deploy-yes-{n}"): 1})
            winners = sum(out is not None for out in outputs)
            if runs != want or winners != 1 or final != {"push": answer, "deploy": f"deploy-yes-{n}"}:
                result.fail(f"{tid} ({'bound' if bound else 'plain'}): ran {dict(runs)}, {winners} callers won")
            result.counts["bound" if bound else "plain"] = result.counts.get("bound" if bound else "plain", 0) + 1
    finally:
        for store in stores:
            store.close()
    result.seconds = time.monotonic() - started
    return result


def test_a_duplicated_answer_resumes_each_interrupt_at_most_once_and_never_answers_the_next(tmp_path: Path) -> None:
    require("langgraph", "LangGraph")
    result = run_answers(10, tmp_path)
    result.check()
    assert result.counts == {"bound": 5, "plain": 5}


@pytest.mark.slow
def test_a_duplicated_answer_at_full_size(tmp_path: Path) -> None:
    run_answers(200, tmp_path).check()
