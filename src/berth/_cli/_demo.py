"""`berth demo`: the whole job, narrated, on a fresh embedded store in a few seconds.

An agent parks three runs that wait on a human; `ls` shows them sealed; a human
answers one; two wakers in separate processes race for it and exactly one
resumes while the other rearms; a flipped byte is refused as tampered; a run
whose deadline passes is swept and never resumes. Every step checks what it
says, and the demo fails (exit 1) if any step did not behave as stated.

The wakers are this module run as `python -m berth._cli._demo waker ...`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import berth
from berth._cli._bulk_cmds import verify_one
from berth._cli._failures import counted
from berth._cli._output import ListingTable, listing_cells
from berth._format import deadline_text
from berth._redact import redact_url

__all__ = ["DemoError", "run_demo"]

RUNS = (
    ("org/repo#41", "Push the fix for the flaky test to main?", "yes, push it"),
    ("org/repo#42", "Close this issue as a duplicate of #17?", None),
    ("org/repo#43", "Bump the minimum Python to 3.12?", None),
)
SECRET = "customer transcript: do not leak"  # in every parked state; must never be readable at rest
SHORT_DEADLINE = 2.0  # seconds, for the run that expires
WAKER_TIMEOUT = 20.0


class DemoError(Exception):
    """The demo cannot run with this configuration (exit 2)."""


@dataclass
class Setup:
    """Where the demo runs."""

    url: str
    identity: str
    keyring_path: Path
    workdir: Path
    temporary_store: bool
    created: list[str] = field(default_factory=list)


# --- the waker process -----------------------------------------------------------------------


def _open(url: str, identity: str, keyring_path: str) -> tuple[berth.Store, Any]:
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring_path))
    store = berth.open_store(url, identity=identity, sealer=sealer)
    questions = berth.open_questions(url, identity=identity, sealer=sealer)
    return store, questions


def waker_main(argv: list[str]) -> int:
    """One waker: load the run, say so, wait for "go", then try to claim it; print the decision as JSON."""
    url, identity, keyring_path, key = argv
    logging.getLogger("berth").setLevel(logging.ERROR)  # the parent narrates
    store, questions = _open(url, identity, keyring_path)

    def rendezvous(envelope: berth.Envelope) -> None:
        # The coordinator calls this after its load and before its conditional delete:
        # both wakers hold the same token when the parent lets them race for the claim.
        print(json.dumps({"loaded": envelope.run_id}), flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit(3)

    coordinator = berth.Coordinator(store, questions, validate=rendezvous)
    wake = coordinator.wake(key)
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "decision": wake.decision.name,
                "reason": wake.reason,
                "run_id": wake.envelope.run_id if wake.envelope is not None else None,
                "answer": wake.answer.text if wake.answer is not None else None,
            }
        ),
        flush=True,
    )
    store.close()
    questions.close()
    return 0


# --- narration -------------------------------------------------------------------------------


class Narrator:
    """Prints the demo in at most 80 columns and keeps the score."""

    def __init__(self) -> None:
        from rich.console import Console

        self.out = Console(highlight=False, soft_wrap=False, width=min(80, shutil.get_terminal_size((80, 24)).columns))
        utf8 = (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") == "utf8"
        self.tick, self.cross = ("✓", "✗") if utf8 else ("ok", "FAIL")
        self.failures: list[str] = []
        self.steps = 0

    def say(self, text: str = "", style: str = "") -> None:
        from rich.markup import escape

        self.out.print(f"[{style}]{escape(text)}[/]" if style else escape(text))

    def step(self, title: str) -> None:
        self.steps += 1
        self.say()
        self.say(f"{self.steps}. {title}", "bold")

    def cmd(self, line: str) -> None:
        self.say(f"   $ {line}", "cyan")

    def check(self, ok: bool, claim: str, detail: str = "") -> bool:
        from rich.markup import escape

        if ok:
            self.out.print(f"   [green]{self.tick}[/] {escape(claim)}")
        else:
            self.failures.append(claim)
            self.out.print(f"   [bold red]{self.cross} NOT AS STATED: {escape(claim)}[/]")
            if detail:
                self.say(f"     {detail}", "red")
        return ok


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@contextmanager
def _quiet_berth_log() -> Iterator[None]:
    logger = logging.getLogger("berth")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _setup(url: str | None, workdir: Path) -> Setup:
    keyring_path = workdir / "keyring.json"
    berth.Keyring.generate().save(keyring_path)
    if url is None:
        db = workdir / "berth.db"
        return Setup("sqlite:///" + quote(str(db)), "pr-bot", keyring_path, workdir, True)
    if url.split("://", 1)[0].lower() == "memory":
        raise DemoError("the demo's wakers run in separate processes: memory:// is not shared between them")
    return Setup(url, f"pr-bot-demo-{secrets.token_hex(3)}", keyring_path, workdir, False)


def run_demo(*, url: str | None = None, keep: bool = False) -> bool:
    """Run the narrated demo; True only if every step behaved as stated.

    Args:
        url: a store shared between processes (default: a fresh SQLite file in a temporary directory).
        keep: keep the temporary directory (store and keyring) and say where it is.

    Raises:
        DemoError: the configuration cannot run the demo (memory://).
    """
    workdir = Path(tempfile.mkdtemp(prefix="berth-demo-"))
    os.chmod(workdir, 0o700)
    started = time.monotonic()
    n = Narrator()
    try:
        setup = _setup(url, workdir)
        with _quiet_berth_log():
            _run(n, setup)
    finally:
        if keep:
            n.say(f"\nkept {workdir} (store and keyring)", "dim")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    n.say()
    if n.failures:
        n.say(f"{len(n.failures)} of {n.steps} steps did not behave as stated ({elapsed:.1f} s).", "bold red")
        return False
    n.say(f"All {n.steps} steps behaved as stated, in {elapsed:.1f} s.", "bold green")
    n.say("Next: `berth serve` opens the inbox, where people answer parked runs.")
    return True


def _run(n: Narrator, s: Setup) -> None:
    ring = berth.Keyring.load(s.keyring_path)
    sealer = berth.AesGcmSealer(ring)
    store = berth.open_store(s.url, identity=s.identity, sealer=sealer)
    questions = berth.open_questions(s.url, identity=s.identity, sealer=sealer)
    coordinator = berth.Coordinator(store, questions)
    sealed_by = f"{sealer.name}:{sealer.key_id}"
    try:
        n.say("berth demo: a pull-request bot parks runs that wait for a maintainer,", "bold")
        n.say("and exactly one waker resumes each answered run.", "bold")
        n.say(f"   store     {redact_url(s.url)}")
        n.say(f"   keyring   {s.keyring_path} (AES-256-GCM, key {ring.primary})")
        n.say(f"   identity  {s.identity}")

        # 1. park three runs, each with a question
        n.step("The agent parks three runs, each waiting on a question")
        short_key = RUNS[2][0]
        for i, (key, prompt, _) in enumerate(RUNS):
            deadline = datetime.now(timezone.utc) + timedelta(seconds=SHORT_DEADLINE) if key == short_key else None
            env = berth.Envelope(
                provider="anthropic",
                model="claude-demo",
                run_id=f"run-{41 + i}",
                provider_state=json.dumps({"messages": [{"role": "user", "content": SECRET}]}).encode(),
                pending_calls=(berth.PendingCall(f"call-{41 + i}", "ask_maintainer", {"question": prompt}),),
                reason="awaiting answer",
                deadline=deadline,
                labels={"repo": "org/repo"},
            )
            parked = coordinator.suspend(key, env, question=prompt)
            s.created.append(key)
            when = deadline_text(parked.deadline, datetime.now(timezone.utc))
            n.say(f'   parked {key}  "{_short(prompt, 40)}"  ({when})')
        pending = [key for key, _, _ in RUNS if questions.pending(key) is not None]
        n.check(len(pending) == 3, "three runs parked, three questions waiting for a human")

        # 2. ls: what an operator sees
        n.step("What an operator sees: headers only, the state stays sealed")
        n.cmd("berth ls")
        listing = list(store.list())
        at = datetime.now(timezone.utc)
        rows = [listing_cells(item, at) for item in listing]
        table = ListingTable([cells for cells, _ in rows], n.out.width - 3, color=False)
        title, rule = table.header()
        n.say("   " + title, style="bold")
        for line in [rule] + [line for cells, expired in rows for line in table.row(cells, expired)]:
            n.say("   " + line)
        all_sealed = len(listing) == 3 and all(item.sealed_by == sealed_by for item in listing)
        leaked = [
            key
            for key, _, _ in RUNS
            if SECRET.encode() in bytes((store.backend.get(f"{s.identity}/{key}") or (b"", None))[0])
        ]
        n.check(all_sealed and not leaked, f"all three sealed by {sealed_by}; the stored bytes hide the state")

        # 3. a human answers one
        key, prompt, text = RUNS[0]
        assert text is not None
        n.step(f"A maintainer answers {key}")
        question = questions.pending(key)  # what `berth questions` shows, with its id
        qid = f"{question.id[:8]}…" if question is not None else "?"
        n.cmd(f"berth answer '{key}' '{text}' --question {qid}")
        n.say("   (bound to that question; or in a browser: `berth serve` is the inbox)", "dim")
        answer = questions.provide(key, question.id, text, by="maintainer") if question is not None else None
        n.check(answer is not None and answer.text == text, f"answer recorded for {key}, by maintainer")

        # 4. two wakers race
        n.step(f"Two wakers race for {key}, each in its own process")
        n.say("   (both load the run first, so both hold its token when they claim)", "dim")
        results, why = _race(s, key)
        if results is not None:
            for r in results:
                decision = r["decision"]
                said = (
                    f"resumes {r['run_id']} with {r['answer']!r}"
                    if decision == "RESUME"
                    else f"stands down: {r['reason']}"
                )
                n.say(f"   waker pid {r['pid']:<7} {decision:<7} {said}")
            decisions = sorted(r["decision"] for r in results)
            winner = [r for r in results if r["decision"] == "RESUME"]
            n.check(
                decisions == ["REARM", "RESUME"] and winner[0]["answer"] == text,
                "exactly one resumed, with the answer; the other rearmed",
                f"decisions: {decisions}",
            )
            n.check(
                not any(i.key == key for i in store.list(key)), f"{key} is no longer parked: it cannot resume twice"
            )
        else:
            n.check(False, "exactly one resumed, with the answer; the other rearmed", why)

        # 5. tampering
        key = RUNS[1][0]
        n.step(f"Someone with write access flips one byte of {key}'s frame")
        name = f"{s.identity}/{key}"
        found = store.backend.get(name)
        if found is None:
            n.check(False, f"{key} is parked", "it vanished")
        else:
            data = bytearray(found[0])
            data[-20] ^= 0x01  # a byte of the sealed body
            store.backend.put(name, bytes(data))
            wake = coordinator.wake(key)
            err = wake.error
            n.say(f"   wake {key}: {wake.decision.name} ({wake.reason}: {type(err).__name__ if err else 'no error'})")
            if err is not None:
                for line in textwrap.wrap(" ".join(str(err).split()), 72):
                    n.say(f"     {line}", "dim")
            try:
                store.claim(key)
                claim_refused = False
            except berth.IntegrityError:
                claim_refused = True
            n.check(
                wake.decision.name == "REARM" and isinstance(err, berth.IntegrityError) and claim_refused,
                "refused as tampered: never handed to a waker",
            )
            states = {k: verify_one(store, k)[0] for k, _, _ in RUNS if k != RUNS[0][0]}
            n.cmd("berth verify")
            n.say(f"   {key}: {states.get(key)}; {RUNS[2][0]}: {states.get(RUNS[2][0])}")
            n.check(states.get(key) == "tampered", "berth verify counts it tampered (exit 1)")

        # 6. a deadline passes
        key = RUNS[2][0]
        n.step(f"{key}'s deadline passes before anyone answers")
        item = next((i for i in store.list(key) if i.key == key), None)
        if item is not None and item.deadline is not None:
            wait = (item.deadline - datetime.now(timezone.utc)).total_seconds() + 0.05
            if wait > 0:
                n.say(f"   (waiting {wait:.1f} s for its deadline)", "dim")
                time.sleep(wait)
        n.cmd("berth sweep")
        expired = [i.key for i in store.list() if i.deadline and datetime.now(timezone.utc) > i.deadline]
        swept = store.sweep()
        questions.sweep()
        n.say(f"   removed {counted(swept, 'expired envelope')}: {', '.join(expired) or '-'}")
        wake = coordinator.wake(key)
        n.say(f"   wake {key}: {wake.decision.name} ({wake.reason})")
        n.check(
            swept == 1 and expired == [key] and wake.decision.name == "FRESH" and questions.pending(key) is None,
            "swept with its question; it never resumes",
        )
    finally:
        if not s.temporary_store:
            _clean(store, questions, s)
        store.close()
        questions.close()


def _clean(store: berth.Store, questions: Any, s: Setup) -> None:
    """On a store the user named, leave nothing of the demo's identity behind."""
    for item in list(store.list()):
        try:
            store.delete(item.key, item.token)
        except berth.BerthError:
            pass
    for key in s.created:
        try:
            q = questions.pending(key)
            if q is not None:
                questions.consume(key, q.id)
        except berth.BerthError:
            pass


def _race(s: Setup, key: str) -> tuple[list[dict[str, Any]] | None, str]:
    """Start two waker processes, let both load, then release them together."""
    cmd = [sys.executable, "-m", "berth._cli._demo", "waker", s.url, s.identity, str(s.keyring_path), key]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + WAKER_TIMEOUT
        for p in procs:
            line = _readline(p, deadline)
            if line is None or "loaded" not in line:
                return None, f"waker {p.pid} did not load the run: {_stderr(p)}"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = _readline(p, deadline)
            if line is None:
                return None, f"waker {p.pid} gave no decision: {_stderr(p)}"
            results.append(json.loads(line))
        return results, ""
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.wait(timeout=max(0.1, 5.0))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for stream in (p.stdin, p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


def _readline(p: subprocess.Popen[str], deadline: float) -> str | None:
    assert p.stdout is not None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    ready, _, _ = select.select([p.stdout], [], [], remaining)
    if not ready:
        return None
    line = p.stdout.readline()
    return line or None


def _stderr(p: subprocess.Popen[str]) -> str:
    if p.poll() is None:
        p.kill()
        p.wait()
    err = p.stderr.read() if p.stderr is not None else ""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {p.returncode}"


def _main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "waker":
        return waker_main(argv[1:])
    print("usage: python -m berth._cli._demo waker URL IDENTITY KEYRING KEY (use `berth demo`)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
