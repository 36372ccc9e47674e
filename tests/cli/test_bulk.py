"""Bulk commands at scale (issue 34): `sweep`, `reseal`, `verify` and `delete-prefix` each take
`--prefix`, show progress with a total and a rate, and on Ctrl-C say where they stopped (exit 130);
`--after KEY` resumes from there and does the rest exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import berth
from berth._cli._failures import INTERRUPTED
from tests.test_cli import expire, ok, park, run

KEYS = [f"t/{n:02}" for n in range(8)]


def _rotate(home: Path) -> str:
    """A new primary key in the CLI's keyring (every frame then needs resealing); its key id."""
    ok("keys", "rotate", str(home / "keys.json"))
    return berth.Keyring.load(home / "keys.json").primary


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Ctrl-C as the command's progress advances for the `n`th time (a KeyboardInterrupt from the hook)."""
    calls = [0]

    @contextmanager
    def progress(label: str, total: int | None) -> Iterator[Callable[[], None]]:
        def advance() -> None:
            calls[0] += 1
            if calls[0] == n:
                raise KeyboardInterrupt

        yield advance

    monkeypatch.setattr("berth._cli._bulk_cmds.progress", progress)


def _stopped(result: object, command: str) -> str:
    """The key a bulk command stopped after, from its one line; checks the line and exit 130."""
    assert result.exit_code == INTERRUPTED, (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    line = result.stderr.strip().splitlines()[-1]  # type: ignore[attr-defined]
    found = re.search(r"interrupted after 3 keys, after key '(.+?)': resume with `berth " + command, line)
    assert found, line
    assert "--after" in line
    return found.group(1)


@pytest.mark.parametrize("command", ["reseal", "sweep", "delete-prefix", "verify"])
def test_ctrl_c_says_where_it_stopped_and_after_resumes_the_rest_once(
    store: berth.Store, home: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    for key in KEYS:
        expire(store, key) if command == "sweep" else park(store, key)
    park(store, "u/other")  # outside --prefix: never touched
    if command == "reseal":
        new_id = _rotate(home)
    extra = ["--yes"] if command == "delete-prefix" else []
    _interrupt_after(monkeypatch, 3)
    first = run(command, "--prefix", "t/", *extra, "--json")
    after = _stopped(first, command)
    assert after == KEYS[2]
    doc = json.loads(first.stdout.splitlines()[-1] if command == "verify" else first.stdout)
    assert doc["error"] == "aborted" and doc["stopped_after"] == KEYS[2] and doc["done"] == 3
    _interrupt_after(monkeypatch, 0)  # no Ctrl-C this time
    rest = json.loads(ok(command, "--prefix", "t/", "--after", after, *extra, "--json").stdout)
    left = [item.key for item in store.list()]
    if command == "reseal":
        assert rest["moved"] == len(KEYS) - 3  # the first three were resealed before Ctrl-C, once
        assert {item.sealed_by for item in store.list("t/")} == {f"aes-gcm:{new_id}"}
        assert store.list("u/").__next__().sealed_by != f"aes-gcm:{new_id}"
    elif command == "sweep":
        assert rest["swept"] == len(KEYS) - 3 and left == ["u/other"]
    elif command == "delete-prefix":  # removed 500 at a time: the batch in hand at Ctrl-C was already gone
        assert rest["removed"] == 0 and left == ["u/other"]
    else:
        assert rest["ok"] == len(KEYS) - 3 and rest["problems"] == []


def test_each_bulk_command_takes_a_prefix(store: berth.Store, home: Path) -> None:
    for key in ("a/1", "a/2", "b/1"):
        expire(store, key)
    park(store, "a/3")
    assert json.loads(ok("verify", "--prefix", "a/", "--json").stdout)["expired"] == 2
    new_id = _rotate(home)
    assert json.loads(ok("reseal", "--prefix", "a/", "--json").stdout)["moved"] == 3
    assert {i.key for i in store.list() if i.sealed_by == f"aes-gcm:{new_id}"} == {"a/1", "a/2", "a/3"}
    assert json.loads(ok("sweep", "--prefix", "a/", "--json").stdout)["keys"] == ["a/1", "a/2"]
    assert [i.key for i in store.list()] == ["a/3", "b/1"]
    result = run("delete-prefix", "--prefix", "a/")  # no terminal, no --yes: nothing removed
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert json.loads(ok("delete-prefix", "--prefix", "a/", "--yes", "--json").stdout)["removed"] == 1
    assert [i.key for i in store.list()] == ["b/1"]
    assert (
        "removed 1 envelope for identity 'pr-bot' under 'b/'" in ok("delete-prefix", "--prefix", "b/", "--yes").stdout
    )


def test_a_real_sigint_stops_reseal_where_it_says_and_the_resume_finishes_it(home: Path) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.load(home / "keys.json"))
    total = 1500
    with berth.open_store(os.environ["BERTH_URL"], identity="pr-bot", sealer=sealer, synchronous="NORMAL") as fast:
        for n in range(total):
            fast.save(f"r/{n:05}", berth.Envelope(provider_state=b"{}"))
    new_id = _rotate(home)
    store = berth.open_store(os.environ["BERTH_URL"], identity="pr-bot", sealer=sealer)
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "reseal"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while next(store.list(limit=1)).sealed_by != f"aes-gcm:{new_id}":  # the walk is in key order
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == INTERRUPTED, err
    found = re.search(
        r"interrupted after ([\d,]+) keys?, after key '(r/\d+)': resume with `berth reseal --after (r/\d+)`", err
    )
    assert found, err
    done, after = int(found.group(1).replace(",", "")), found.group(2)
    assert 0 < done < total and after == f"r/{done - 1:05}"
    assert all(i.sealed_by == f"aes-gcm:{new_id}" for i in store.list() if i.key <= after)
    rest = json.loads(ok("reseal", "--after", after, "--json").stdout)
    assert total - done - 1 <= rest["moved"] <= total - done  # a frame in flight at Ctrl-C is not done twice
    assert {i.sealed_by for i in store.list()} == {f"aes-gcm:{new_id}"}
    store.close()
