"""The integrations' shared part: reading approvals, one question per pending call, re-parks of one key."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import berth
from berth._cli import cli
from berth._hitl import Parking, Pending, call_key, parse_approval
from tests._frameworks import IDENTITY, KEY, Site, make_site


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approve", (True, None)),
        ("  Yes ", (True, None)),
        ("OK.", (True, None)),
        ("approved, go ahead", (False, "approved, go ahead")),  # not exactly an approval: fails closed
        ("yes but only archive it", (False, "yes but only archive it")),
        ("approve: fine", (False, "approve: fine")),
        ("reject", (False, None)),
        ("reject: not on a Friday", (False, "not on a Friday")),
        ("No - the archive is under legal hold", (False, "the archive is under legal hold")),
        ("deny:too risky", (False, "too risky")),
        ("", (False, None)),
        ("maybe later", (False, "maybe later")),
        ("yesterday's build is fine", (False, "yesterday's build is fine")),
        ("approve? no", (False, "approve? no")),
    ],
)
def test_only_an_explicit_approval_approves(text: str, expected: tuple[bool, str | None]) -> None:
    assert parse_approval(text) == expected


def parking(site: Site) -> Parking:
    store, questions = site.open()
    return Parking(store, questions, provider="fw", model="m", config_digest="sha256:0")


def park(site: Site, *names: str) -> berth.Envelope:
    p = parking(site)
    calls = [Pending(f"id-{n}", n, "{}", "approval") for n in names]
    return asyncio.run(p.park(KEY, p.envelope(KEY, provider_state={"s": 1}, calls=calls), calls))


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(tmp_path)


def test_a_re_park_supersedes_every_question_of_the_earlier_one(site: Site) -> None:
    park(site, "a", "b", "c")
    site.answer("approve", "approve")  # two of three answered, then the run is parked again with two calls
    park(site, "x", "y")
    _, questions = site.open()
    assert [q.key for q, _ in questions.list(KEY)] == [call_key(KEY, 1), call_key(KEY, 2)]
    assert all(a is None for _, a in questions.list(KEY)), "no answer carries over to the new park"
    assert asyncio.run(parking(site).wake(KEY)).decision is berth.WakeDecision.REARM
    site.answer("approve", "reject: no")
    woke = asyncio.run(parking(site).wake(KEY))
    assert woke.decision is berth.WakeDecision.RESUME
    assert [c.name for c in woke.envelope.pending_calls] == ["x", "y"]


def test_an_answer_to_a_superseded_sub_question_is_refused(site: Site) -> None:
    park(site, "a")
    _, questions = site.open()
    old = questions.pending(call_key(KEY, 1))
    park(site, "b")
    assert old is not None
    with pytest.raises(berth.AnswerRefused):
        questions.provide(call_key(KEY, 1), old.id, "approve")


def test_a_park_berth_would_refuse_fails_before_any_io(site: Site) -> None:
    with pytest.raises(berth.InvalidEnvelope, match="no tool call"):
        parking(site).envelope(KEY, provider_state={}, calls=[])
    calls = [Pending("id", "tool", "{}", "approval")]
    with pytest.raises(berth.InvalidKey):
        parking(site).envelope("k" * 1020, provider_state={}, calls=calls)  # fits, but its questions' keys do not
    with pytest.raises(berth.InvalidKey):
        parking(site).envelope("../x", provider_state={}, calls=calls)
    assert site.frames() == {}


def test_import_berth_pulls_in_no_framework() -> None:
    code = (
        "import sys, berth; berth.checkpoint_store; "
        "print([m for m in ('agents', 'openai', 'pydantic_ai', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def cli_env(site: Site, tmp_path: Path) -> dict[str, str]:
    """The environment that points the `berth` command line at the site."""
    assert isinstance(site.sealer, berth.AesGcmSealer)
    site.sealer.keyring.save(tmp_path / "keys.json")
    return {"BERTH_URL": site.url, "BERTH_IDENTITY": IDENTITY, "BERTH_KEYRING": str(tmp_path / "keys.json")}


def test_berth_questions_shows_each_call_with_the_runs_deadline(site: Site, tmp_path: Path) -> None:
    envelope = park(site, "a", "b")
    env = cli_env(site, tmp_path)
    result = CliRunner().invoke(cli, ["questions", "--json"], env=env, prog_name="berth")
    assert result.exit_code == 0, result.output
    docs = json.loads(result.output)
    assert [d["key"] for d in docs] == [call_key(KEY, 1), call_key(KEY, 2)]
    assert envelope.deadline is not None
    assert {d["deadline"] for d in docs} == {envelope.deadline.isoformat().replace("+00:00", "Z")}


def test_berth_answer_at_the_runs_own_key_names_the_per_call_questions(site: Site, tmp_path: Path) -> None:
    park(site, "a", "b")
    env = cli_env(site, tmp_path)
    result = CliRunner().invoke(cli, ["answer", KEY, "approve"], env=env, prog_name="berth")
    assert result.exit_code == 1
    assert f"answer each of '{call_key(KEY, 1)}', '{call_key(KEY, 2)}'" in result.output


def test_the_call_question_views_are_one_core_with_two_thin_shells() -> None:
    """`CallQuestions` and `AsyncCallQuestions` hold no logic of their own: each runs `CallPlans`' plans, so
    they have the same methods, with the same parameters, and nothing else (a method added to one only fails here)."""
    import inspect

    from berth._coordinator_core import AsyncQuestionsLike, QuestionsLike
    from berth._hitl import AsyncCallQuestions, CallPlans, CallQuestions

    def face(cls: type) -> dict[str, inspect.Signature]:
        own = {name: value for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
        return {name: inspect.signature(value) for name, value in own.items()}

    assert face(CallQuestions) == face(AsyncCallQuestions)
    assert set(face(CallQuestions)) == {name for name in vars(QuestionsLike) if not name.startswith("_")}
    assert set(face(AsyncCallQuestions)) == {name for name in vars(AsyncQuestionsLike) if not name.startswith("_")}
    assert all(inspect.iscoroutinefunction(method) for method in map(vars(AsyncCallQuestions).get, face(CallQuestions)))
    assert CallQuestions.__bases__ == AsyncCallQuestions.__bases__ == (CallPlans,)
