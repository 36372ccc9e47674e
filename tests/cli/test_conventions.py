"""The conventions users bring to a command line (issue 34): `python -m berth`, suggestions for a
mistyped command, documented shell completion, a distinct exit code for an unreachable backend,
JSON on every outcome of a `--json` command, and one number format."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click
import pytest

import berth
from berth._cli import _app, cli
from berth._cli._failures import UNAVAILABLE
from tests._net import free_port
from tests.test_cli import BERTH, errors, fails, ok, park, run

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()


def test_python_m_berth_is_the_command_line(home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "berth", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == f"berth {berth.__version__}\n", done.stderr
    done = subprocess.run([sys.executable, "-m", "berth", "claim", "nope"], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and done.stderr.startswith("berth claim: nothing to claim"), done.stderr
    done = subprocess.run([sys.executable, "-c", "import sys, berth; print('berth.__main__' in sys.modules)"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout == "False\n"


@pytest.mark.parametrize(
    ("args", "suggested"),
    [
        (["lss"], "`berth ls`"),
        (["questoins"], "`berth questions`"),
        (["keys", "genrate", "x"], "`berth keys generate`"),
    ],
)
def test_a_mistyped_command_gets_a_suggestion(home: Path, args: list[str], suggested: str) -> None:
    line = fails(2, *args, says=[f"No such command {args[-2] if len(args) > 2 else args[0]!r}"])
    assert line.endswith(f"did you mean {suggested}? (see `{line.split(':')[0]} --help`)"), line


def test_a_command_nothing_resembles_gets_none(home: Path) -> None:
    line = fails(2, "xyzzy", says=["No such command 'xyzzy'"])
    assert "did you mean" not in line


@pytest.mark.parametrize(
    ("shell", "line", "script_says"),
    [
        ("bash", 'eval "$(_BERTH_COMPLETE=bash_source berth)"', "complete -o nosort -F _berth_completion berth"),
        ("zsh", 'eval "$(_BERTH_COMPLETE=zsh_source berth)"', "#compdef berth"),
        ("fish", "_BERTH_COMPLETE=fish_source berth \\| source", "complete --no-files --command berth"),
    ],
)
def test_shell_completion_is_documented_and_the_variable_prints_a_script(
    shell: str, line: str, script_says: str
) -> None:
    assert f"`{line}`" in CLI_DOC, line
    env = {**os.environ, "_BERTH_COMPLETE": f"{shell}_source"}
    done = subprocess.run([str(BERTH)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and script_says in done.stdout, done.stdout + done.stderr


def test_completion_completes_commands() -> None:
    env = {**os.environ, "_BERTH_COMPLETE": "bash_complete", "COMP_WORDS": "berth qu", "COMP_CWORD": "1"}
    done = subprocess.run([str(BERTH)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["plain,questions"], done.stdout + done.stderr


def exit_codes_documented() -> dict[int, str]:
    table = CLI_DOC.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| \*\*(\d+)\*\* \| (.+) \|$", table, re.M)}


def test_the_exit_codes_are_one_documented_table() -> None:
    codes = exit_codes_documented()
    assert set(codes) == {0, 1, 2, 66, UNAVAILABLE, 130, 141}, codes
    assert "unreachable" in codes[UNAVAILABLE] and "lost the claim" in codes[1]


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
@pytest.mark.parametrize("args", [["ls"], ["claim", "k"], ["sweep"]])
def test_an_unreachable_backend_is_its_own_exit_code_not_a_lost_claim(home: Path, scheme: str, args: list[str]) -> None:
    url = f"{scheme}://127.0.0.1:{free_port()}/{'test' if scheme == 'postgresql' else '0'}"  # a closed port
    line = fails(UNAVAILABLE, *args, "--url", url, says=["Connection refused"])
    assert line.startswith(f"berth {args[0]}:") and UNAVAILABLE != 1


def test_a_lost_claim_and_an_unreachable_backend_differ_in_json_too(home: Path, store: berth.Store) -> None:
    result = run("claim", "nothing-here", "--json")
    assert result.exit_code == 1
    lost = json.loads(result.stdout)
    assert lost == {
        "ok": False,
        "error": "refused",
        "exit_code": 1,
        "message": errors(result)[0].removeprefix("berth claim: "),
        "command": "berth claim",
        "identity": "pr-bot",
        "key": "nothing-here",
    }
    result = run("claim", "k", "--json", "--url", f"postgresql://127.0.0.1:{free_port()}/test")
    assert result.exit_code == UNAVAILABLE
    assert json.loads(result.stdout)["error"] == "unavailable"


def json_commands() -> list[str]:
    """Every command (and subcommand) that takes `--json`."""
    found = []
    ctx = click.Context(cli)
    for name in _app.COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        subs = command.commands if isinstance(command, click.Group) else {"": command}
        for sub, cmd in subs.items():
            if any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option)):
                found.append(f"{name} {sub}".strip())
    return found


# a failing run of each: the store ones against a closed port, the others on their own failure
FAILING = {
    "ls": ["ls"],
    "show": ["show", "k"],
    "park": ["park", "k", "--state", "-"],
    "claim": ["claim", "k"],
    "sweep": ["sweep"],
    "reseal": ["reseal"],
    "verify": ["verify"],
    "delete-prefix": ["delete-prefix", "--prefix", "k", "--yes"],
    "audit": ["audit"],
    "setup": ["setup"],
    "questions": ["questions"],
    "answer": ["answer", "k", "yes", "--question", "q"],
    "keys show": ["keys", "show", "no-such-keyring.json"],
    "keys generate": ["keys", "generate", "{existing}"],
    "keys rotate": ["keys", "rotate", "no-such-keyring.json"],
}


def test_every_command_with_json_prints_one_json_object_when_it_fails(home: Path) -> None:
    commands = json_commands()
    assert {"ls", "claim", "verify"} <= set(commands) and set(commands) <= set(FAILING), commands
    closed = f"postgresql://127.0.0.1:{free_port()}/test"
    for name in commands:
        args = [a.replace("{existing}", str(home / "keys.json")) for a in FAILING[name]]
        extra = ["--url", closed] if name.split()[0] not in ("keys",) else []
        result = run(*args, "--json", *extra, input="{}")
        assert result.exit_code != 0, (name, result.stdout)
        doc = json.loads(result.stdout)  # exactly one document
        assert doc["ok"] is False and doc["exit_code"] == result.exit_code, (name, doc)
        assert doc["message"] == errors(result)[0].split(": ", 1)[1], (name, doc, result.stderr)


def test_a_command_that_printed_its_json_report_adds_no_second_document(home: Path, store: berth.Store) -> None:
    park(store, "k")
    name = f"{store.identity}/k"
    found = store.backend.get(name)
    assert found is not None
    store.backend.put(name, bytes(found[0][:-3]) + b"xyz")  # tampered
    result = run("verify", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["tampered"] == 1  # the report alone: one document
    result = run("verify", "--jsonl")  # a line per frame, each a status: they tell the outcome
    assert result.exit_code == 1
    assert [json.loads(line)["status"] for line in result.stdout.splitlines()] == ["tampered"]


def test_usage_errors_are_json_too_when_json_was_asked(home: Path) -> None:
    result = run("ls", "--json", "--no-such-flag")
    assert result.exit_code == 2 and json.loads(result.stdout)["error"] == "usage"
    result = run("claim", "--", "--json")  # after `--` it is a key, not the flag
    assert result.exit_code == 1 and result.stdout == ""


def test_numbers_have_thousands_separators_everywhere_in_human_output(home: Path, store: berth.Store) -> None:
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    for i in range(1001):  # keys of letters: the only digits on a line are the counts
        key = "k" + "".join(chr(ord("a") + int(d)) for d in f"{i:04}")
        store.save(key, berth.Envelope(provider_state=b"{}", run_id="r", deadline=past))
    store.save("big", berth.Envelope(provider_state=json.dumps({"pad": "x" * 900}).encode(), run_id="r"))
    assert "100 of 1,002 envelopes shown" in ok("ls").stdout
    assert "would remove 1,001 expired envelopes" in ok("sweep", "--dry-run").stdout
    shown = ok("show", "big", "--raw").stdout
    size = store.backend.get(f"{store.identity}/big")
    assert size is not None and f"({len(size[0]):,} bytes)" in shown and len(size[0]) >= 1000
    verified = ok("verify").stdout
    assert "1,001 expired" in verified and "1 ok" in verified
    assert "removed 1,001 expired envelopes" in ok("sweep").stdout
    for text in (ok("ls").stdout, verified):  # key ids (aes-gcm:0a1b2c3d) are hex, not numbers
        assert not re.search(r"(?<![\d,.:])\d{4,}(?![\d,])", re.sub(r"aes-gcm:\w+", "", text)), text
