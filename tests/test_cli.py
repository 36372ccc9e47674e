"""The `berth` command line, driven through its real entry point.

Most cases run the click group through `CliRunner` (in process, fast); a few run
the installed `berth` console script in a subprocess, as a user would. Each
command has its success path, its refused path (exit 1) and its bad-input path
(exit 2), and every failure must be exactly one line on stderr naming the
identity and key, never a traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import pty
import select
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import berth
from berth._cli import _app, cli
from berth._cli._store_cmds import parse_deadline
from berth._format import span
from berth.backends.sqlite import SqliteBackend

IDENTITY = "pr-bot"
BERTH = Path(sys.executable).parent / "berth"
LISTING_FIELDS = {"key", "run_id", "created_at", "deadline", "size", "labels", "sealed_by"}
COMMANDS = [
    "ls",
    "show",
    "park",
    "claim",
    "rm",
    "sweep",
    "reseal",
    "verify",
    "delete-prefix",
    "questions",
    "answer",
    "keys",
    "demo",
    "serve",
    "mcp",
    "setup",
]


# --- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sealed store of identity pr-bot in a temporary directory, configured through the environment."""
    keyring = tmp_path / "keys.json"
    berth.Keyring.generate().save(keyring)
    for name in ("BERTH_KMS", "BERTH_DEBUG", "BERTH_URL", "BERTH_IDENTITY", "BERTH_KEYRING", "BERTH_WITNESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # never the real user data directory
    monkeypatch.setenv("BERTH_URL", f"sqlite:///{tmp_path}/berth.db")
    monkeypatch.setenv("BERTH_IDENTITY", IDENTITY)
    monkeypatch.setenv("BERTH_KEYRING", str(keyring))
    monkeypatch.setenv("COLUMNS", "120")
    SqliteBackend(tmp_path / "berth.db").close()  # the store exists: commands other than park create none
    return tmp_path


@pytest.fixture
def store(home: Path) -> Iterator[berth.Store]:
    """The same store the command line opens, for arranging and checking."""
    sealer = berth.AesGcmSealer(berth.Keyring.load(home / "keys.json"))
    with berth.open_store(os.environ["BERTH_URL"], identity=IDENTITY, sealer=sealer) as s:
        yield s


@pytest.fixture
def questions(home: Path) -> Iterator[berth.QuestionStore]:
    """The question store next to `store`."""
    sealer = berth.AesGcmSealer(berth.Keyring.load(home / "keys.json"))
    with berth.open_questions(os.environ["BERTH_URL"], identity=IDENTITY, sealer=sealer) as q:
        yield q


def run(*args: str, input: str | bytes | None = None, env: dict[str, str | None] | None = None) -> Result:
    """Run `berth ARGS` in process; no exception may escape the command line."""
    result = CliRunner().invoke(cli, list(args), input=input, env=env, prog_name="berth")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    return result


def ok(*args: str, **kw: object) -> Result:
    """Run `berth ARGS` and expect exit 0."""
    result = run(*args, **kw)  # type: ignore[arg-type]
    assert result.exit_code == 0, (result.exit_code, result.stderr)
    return result


def errors(result: Result) -> list[str]:
    """The lines of stderr that are not one-line warnings."""
    return [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("berth: warning:")]


def fails(code: int, *args: str, says: Sequence[str] = (), **kw: object) -> str:
    """Run `berth ARGS`, expect exit `code` and one line on stderr containing each of `says`."""
    result = run(*args, **kw)  # type: ignore[arg-type]
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = errors(result)
    assert len(lines) == 1, result.stderr
    for needle in says:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def where(key: str) -> list[str]:
    """What a message about `key` of pr-bot must name."""
    return [f"identity {IDENTITY!r}", f"key {key!r}"]


def park(store: berth.Store, key: str, *, deadline: timedelta | None = None, state: object = None) -> None:
    """Park a small envelope directly through the library."""
    env = berth.Envelope(
        provider_state=json.dumps(state if state is not None else {"messages": ["secret"]}).encode(),
        run_id=f"run-{key}",
        deadline=datetime.now(timezone.utc) + deadline if deadline is not None else None,
        labels={"team": "infra"},
    )
    store.save(key, env)


def expire(store: berth.Store, key: str) -> None:
    """Park `key` with a deadline that has already passed."""
    park(store, key, deadline=timedelta(milliseconds=1))
    time.sleep(0.01)


def flip_byte(store: berth.Store, key: str) -> None:
    """Change one byte of the sealed body of the frame under `key`, as an attacker with write access."""
    name = f"{store.identity}/{key}"
    found = store.backend.get(name)
    assert found is not None
    data = bytearray(found[0])
    data[-10] ^= 0x01
    store.backend.put(name, bytes(data))


def berth_process(
    *args: str, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed `berth` console script."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(BERTH), *args], input=input, capture_output=True, env=full_env, timeout=timeout, check=False
    )


# --- help, usage and configuration ----------------------------------------------------------------


def test_the_console_script_is_installed() -> None:
    assert BERTH.exists(), f"{BERTH} missing: pip install -e ."


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS), ["keys", "generate"], ["keys", "rotate"]])
def test_help_says_what_each_command_does_with_an_example(command: list[str]) -> None:
    result = ok(*command, "--help")
    text = result.stdout
    assert text.startswith("Usage: berth")
    summary = text.split("\n\n")[1].strip()
    assert summary and "\n" not in summary, summary  # one line of what it does
    assert "Example:" in text and "  berth " in text.split("Example:")[1]


def test_top_level_help_lists_every_command() -> None:
    text = ok("--help").stdout
    for command in COMMANDS:
        assert f"  {command} " in text


def test_the_command_table_is_every_command_with_the_first_line_of_its_help() -> None:
    # `berth --help` lists the commands from `_app.COMMANDS` without importing their modules: the
    # table must name each module's commands, and say what each command's own help says first.
    for module, _ in _app.COMMANDS.values():
        importlib.import_module(f"berth._cli.{module}")
    assert sorted(cli.commands) == sorted(_app.COMMANDS) == sorted([*COMMANDS, "audit"])
    for name, (module, line) in _app.COMMANDS.items():
        command = cli.commands[name]
        assert command.callback is not None and command.callback.__module__ == f"berth._cli.{module}", name
        assert " ".join((command.help or "").split("\n\n")[0].split()) == line, name


@pytest.mark.parametrize("width", [50, 80, 100])
def test_the_commands_in_the_help_read_as_click_writes_them_from_the_loaded_commands(width: int) -> None:
    for module, _ in _app.COMMANDS.values():
        importlib.import_module(f"berth._cli.{module}")
    ctx = click.Context(cli, info_name="berth")
    from_table, from_commands = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
    cli.format_commands(ctx, from_table)
    click.Group.format_commands(cli, ctx, from_commands)  # click's own: each loaded command's short help
    assert from_table.getvalue() == from_commands.getvalue() and "  verify " in from_table.getvalue()


def _modules_after(*args: str) -> list[str]:
    """The modules a `berth` process holds when it ends (the console script's own import and call)."""
    code = (
        "import sys\n"
        "from berth._cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('modules:', *sorted(sys.modules), file=sys.__stderr__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return done.stderr.rpartition("modules: ")[2].split()


def test_help_imports_no_command_module_store_backend_or_codec() -> None:
    # What `berth --help` may import (timing is a benchmark's job, benchmarks/_startup.py): the group,
    # its failures and settings, the errors module (one `where()` for every message), and click.
    # No command module, no store, no msgspec, no logging.
    loaded = _modules_after("--help")
    assert [m for m in loaded if m.split(".")[0] == "berth"] == [
        "berth", "berth._cli", "berth._cli._app", "berth._cli._failures", "berth._cli._settings", "berth._errors",
        "berth._public",
    ]  # fmt: skip
    heavy = ("msgspec", "orjson", "json", "logging", "rich", "cryptography", "sqlite3", "typing_extensions")
    assert [m for m in loaded if m.split(".")[0] in heavy] == []


def test_a_command_imports_its_own_command_module_only(tmp_path: Path) -> None:
    loaded = _modules_after("ls", "--url", f"sqlite:///{tmp_path}/empty.db")
    assert "berth._cli._store_cmds" in loaded and "berth._store" in loaded
    others = ("_key_cmds", "_question_cmds", "_demo_cmd", "_demo", "_serve_cmd")
    assert [m for m in loaded if m.removeprefix("berth._cli.") in others] == []


def test_unknown_command_and_option_are_usage_errors() -> None:
    assert "No such command 'frob'" in fails(2, "frob")
    line = fails(2, "ls", "--frob")
    assert line.startswith("berth ls:") and "--frob" in line


def test_bare_berth_prints_the_help() -> None:
    for args in ([], ["keys"]):
        result = run(*args)
        assert result.exit_code == 2 and result.stdout.startswith("Usage: berth") and "Example:" in result.stdout


def test_version() -> None:
    assert ok("--version").stdout.strip() == f"berth {berth.__version__}"


def test_default_store_is_an_sqlite_file_in_the_user_data_directory(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERTH_URL")
    ok("park", "k", "--state", "-", input='{"a": 1}')
    data_dir = home / "xdg" / "berth"
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "berth.db").stat().st_mode) == 0o600
    assert [item["key"] for item in json.loads(ok("ls", "--json").stdout)] == ["k"]


def test_flags_override_the_environment_before_or_after_the_command(home: Path, store: berth.Store) -> None:
    park(store, "mine")
    other = f"sqlite:///{home}/other.db"
    ok("setup", "--url", other)
    assert json.loads(ok("ls", "--json").stdout)[0]["key"] == "mine"
    assert json.loads(ok("--url", other, "ls", "--json").stdout) == []
    assert json.loads(ok("ls", "--url", other, "--json").stdout) == []
    assert json.loads(ok("ls", "--identity", "someone-else", "--json").stdout) == []
    assert json.loads(ok("--identity", "someone-else", "ls", "--json", env={"BERTH_IDENTITY": None}).stdout) == []


def test_plaintext_only_when_nothing_is_configured_with_a_one_line_warning(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BERTH_KEYRING")
    result = ok("park", "k", "--state", "-", input="{}")
    warnings_ = [line for line in result.stderr.splitlines() if line]
    assert len(warnings_) == 1 and warnings_[0].startswith("berth: warning: identity 'pr-bot'")
    assert "not sealed" in warnings_[0] and "UserWarning" not in result.stderr
    assert json.loads(ok("ls", "--json").stdout)[0]["sealed_by"] == "plaintext:sha256"
    # sealed once configured: no warning
    monkeypatch.setenv("BERTH_KEYRING", str(home / "keys.json"))
    result = ok("park", "k2", "--state", "-", input="{}")
    assert result.stderr == ""
    assert json.loads(ok("show", "k2", "--raw", "--json").stdout)["sealed_by"].startswith("aes-gcm:")


def test_bad_configuration_is_exit_2_naming_the_identity(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fails(2, "ls", "--url", "nope://x", says=["identity 'pr-bot'", "unknown store scheme 'nope'"])
    fails(2, "ls", "--identity", "bad id", says=["invalid identity 'bad id'"])
    fails(2, "show", "k", "--keyring", str(home / "missing.json"), says=["missing.json", "berth keys generate"])
    monkeypatch.setenv("BERTH_KMS", "bogus")
    fails(2, "show", "k", says=["identity 'pr-bot'", "BERTH_KMS"])


def test_kms_from_the_environment_seals(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_KEYRING")
    monkeypatch.setenv("BERTH_KMS", f"local://{home / 'keys.json'}")
    ok("park", "k", "--state", "-", input='{"a": 1}')
    sealed_by = json.loads(ok("ls", "--json").stdout)[0]["sealed_by"]
    assert not sealed_by.startswith(("plaintext", "aes-gcm"))
    assert json.loads(ok("claim", "k", "--json").stdout)["provider_state"] == {"a": 1}


def test_debug_shows_the_traceback(store: berth.Store) -> None:
    park(store, "k")
    flip_byte(store, "k")
    result = CliRunner().invoke(cli, ["claim", "k"], env={"BERTH_DEBUG": "1"}, prog_name="berth")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "IntegrityError" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("berth claim: frame at identity 'pr-bot', key 'k'")


# --- ls ------------------------------------------------------------------------------------------


def test_ls_table_json_and_jsonl(store: berth.Store) -> None:
    park(store, "org/repo#1", deadline=timedelta(hours=2))
    park(store, "org/repo#2")
    park(store, "other/1")
    table = ok("ls").stdout
    for text in ("KEY", "SEALED BY", "org/repo#1", "in 1h 59m", "aes-gcm:", "team=infra", "none"):
        assert text in table
    docs = json.loads(ok("ls", "--json").stdout)
    assert [d["key"] for d in docs] == ["org/repo#1", "org/repo#2", "other/1"]
    assert all(set(d) == LISTING_FIELDS for d in docs)
    first = docs[0]
    assert first["run_id"] == "run-org/repo#1" and first["labels"] == {"team": "infra"}
    assert first["created_at"].endswith("Z") and first["deadline"].endswith("Z")
    assert datetime.fromisoformat(first["deadline"]) > datetime.now(timezone.utc) + timedelta(minutes=119)
    assert docs[1]["deadline"] is None and docs[0]["size"] > 0
    lines = ok("ls", "--jsonl", "--prefix", "org/").stdout.splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["org/repo#1", "org/repo#2"]


def test_ls_expired_and_empty(store: berth.Store) -> None:
    result = ok("ls")
    assert result.stdout == "" and "nothing parked for identity 'pr-bot'" in result.stderr
    expire(store, "old")
    park(store, "new", deadline=timedelta(days=1))
    assert [d["key"] for d in json.loads(ok("ls", "--expired", "--json").stdout)] == ["old"]
    assert "expired" in ok("ls").stdout


def test_ls_table_shows_a_default_limit_counts_the_rest_and_all_shows_every_one(
    store: berth.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("berth._cli._store_cmds.LS_LIMIT", 3)
    for i in range(5):
        park(store, f"k{i}")
    expire(store, "k9")

    def keys(text: str) -> list[str]:
        return [line.split()[0] for line in text.splitlines() if line.startswith("k")]

    table = ok("ls").stdout
    assert keys(table) == ["k0", "k1", "k2"]
    assert table.splitlines()[-1] == "3 of 6 envelopes shown: --all for every one, --limit N for the first N"
    assert keys(ok("ls", "--all").stdout) == ["k0", "k1", "k2", "k3", "k4", "k9"]
    assert "shown" not in ok("ls", "--all").stdout
    assert keys(ok("ls", "--limit", "5").stdout) == ["k0", "k1", "k2", "k3", "k4"]
    assert ok("ls", "--limit", "5").stdout.splitlines()[-1].startswith("5 of 6 envelopes shown")
    assert keys(ok("ls", "--expired").stdout) == ["k9"]
    assert "shown" not in ok("ls", "--prefix", "k9").stdout
    assert ok("ls", "--prefix", "k", "--limit", "1").stdout.splitlines()[-1].startswith("1 of 6 envelopes under 'k'")
    # Scripts get every one unless they ask for fewer.
    assert len(json.loads(ok("ls", "--json").stdout)) == 6
    assert len(ok("ls", "--jsonl").stdout.splitlines()) == 6
    assert [d["key"] for d in json.loads(ok("ls", "--json", "--limit", "2").stdout)] == ["k0", "k1"]
    assert [json.loads(x)["key"] for x in ok("ls", "--jsonl", "--expired", "--limit", "1").stdout.splitlines()] == [
        "k9"
    ]
    fails(2, "ls", "--all", "--limit", "2", says=["--all and --limit"])
    fails(2, "ls", "--limit", "0")


def test_ls_json_streams_the_same_text_as_one_document(store: berth.Store) -> None:
    from berth._cli._output import json_text

    assert ok("ls", "--json").stdout == "[]\n"
    for i in range(3):
        park(store, f"org/\u202erepo#{i}")
    docs = json.loads(ok("ls", "--json").stdout)
    assert ok("ls", "--json").stdout == json_text(docs) + "\n" and len(docs) == 3


def test_ls_table_prints_its_first_rows_before_the_listing_ends(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from berth._cli._output import print_listing

    monkeypatch.setattr("berth._cli._output.stdout_is_terminal", lambda: True)  # the aligned table
    at = datetime.now(timezone.utc)
    seen: list[str] = []

    def listings() -> Iterator[berth.Listing]:
        for i in range(10_000):
            if i == 200:  # well before the end: the header and the first rows are out already
                seen.append(capsys.readouterr().out)
            yield berth.Listing(f"k{i:05}", "r", at, None, 10, {}, "plaintext:sha256", berth.Token(1))

    assert print_listing(listings(), at, None) == (10_000, 10_000)
    head = seen[0].splitlines()
    assert head[0].split() == ["KEY", "RUN", "ID", "AGE", "DEADLINE", "SIZE", "SEALED", "BY", "LABELS"]
    assert head[2].startswith("k00000  r ") and len(head) >= 50
    assert capsys.readouterr().out.splitlines()[-1].startswith("k09999  r ")
    assert print_listing(listings(), at, 7) == (7, 10_000)


def test_ls_table_folds_long_cells_escapes_controls_and_colours_expired_on_a_colour_terminal(
    store: berth.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("berth._cli._output.stdout_is_terminal", lambda: True)  # tests/cli/test_pipes.py: a pipe
    park(store, "org/" + "x" * 150, deadline=timedelta(hours=1))
    store.save(
        "old", berth.Envelope(provider_state=b"{}", deadline=datetime.now(timezone.utc), labels={"x": "\x1b[2J"})
    )
    lines = ok("ls", env={"COLUMNS": "80"}).stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "".join(line.split()[0] for line in lines[2:] if line.startswith(("org/", "x"))) == "org/" + "x" * 150
    wide = ok("ls", env={"COLUMNS": "300"}).stdout
    assert "x=\\x1b[2J" in wide and "\x1b" not in wide + "".join(lines)
    coloured = ok("ls", env={"COLUMNS": "300", "FORCE_COLOR": "1", "NO_COLOR": None}).stdout
    assert coloured.startswith("\x1b[1mKEY") and "\x1b[31mexpired" in coloured and "x=\\x1b[2J" in coloured
    assert "\x1b" not in ok("ls", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout


def test_ls_needs_no_key(store: berth.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    park(store, "k")
    monkeypatch.delenv("BERTH_KEYRING")
    result = ok("ls", "--json")
    assert json.loads(result.stdout)[0]["key"] == "k" and result.stderr == ""


def test_ls_bad_prefix_is_exit_2(home: Path) -> None:
    fails(2, "ls", "--prefix", "/abs", says=["identity 'pr-bot'", "/abs"])


# --- show ----------------------------------------------------------------------------------------


def test_show_pretty_prints_and_json(store: berth.Store) -> None:
    park(store, "k", deadline=timedelta(days=14), state={"messages": [{"role": "user", "content": "hello"}]})
    text = ok("show", "k").stdout
    for needle in ("run-k", "provider state", '"content": "hello"', "in 13d 23h", "team=infra"):
        assert needle in text
    doc = json.loads(ok("show", "k", "--json").stdout)
    assert doc["key"] == "k" and doc["provider_state"] == {"messages": [{"role": "user", "content": "hello"}]}
    assert doc["version"] == berth.ENVELOPE_VERSION and doc["deadline"].endswith("Z")


def test_show_raw_is_the_header_only_and_needs_no_key(store: berth.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    park(store, "k")
    monkeypatch.delenv("BERTH_KEYRING")
    doc = json.loads(ok("show", "k", "--raw", "--json").stdout)
    assert set(doc) == LISTING_FIELDS and doc["sealed_by"].startswith("aes-gcm:")
    text = ok("show", "k", "--raw").stdout
    assert "sealed by" in text and "secret" not in text


def test_show_expired_is_shown_marked(store: berth.Store) -> None:
    expire(store, "k")
    assert "expired" in ok("show", "k").stdout


def test_show_refuses_nothing_parked_and_tampered(store: berth.Store) -> None:
    fails(1, "show", "nope", says=["nothing parked", *where("nope")])
    fails(1, "show", "nope", "--raw", says=["nothing parked", *where("nope")])
    park(store, "k")
    flip_byte(store, "k")
    fails(1, "show", "k", says=[*where("k"), "does not open"])


def test_show_refuses_a_key_it_does_not_hold(store: berth.Store, home: Path) -> None:
    park(store, "k")
    other = home / "other.json"
    berth.Keyring.generate().save(other)
    fails(1, "show", "k", "--keyring", str(other), says=[*where("k"), "does not hold"])


def test_show_bad_key_is_exit_2(home: Path) -> None:
    fails(2, "show", "a/../b", says=["invalid key 'a/../b'", "identity 'pr-bot'"])
    fails(2, "show", "a/../b", "--raw", says=["invalid key 'a/../b'"])


# --- park ----------------------------------------------------------------------------------------


def test_park_from_a_file_with_everything(home: Path, store: berth.Store) -> None:
    state = home / "state.json"
    state.write_text('{"messages": []}')
    doc = json.loads(
        ok(
            "park", "org/repo#7", "--state", str(state), "--run-id", "r7", "--provider", "anthropic",
            "--model", "claude", "--deadline", "2h", "--label", "repo=org/repo", "--label", "pr=7", "--json",
        ).stdout
    )  # fmt: skip
    assert set(doc) == LISTING_FIELDS
    assert doc["run_id"] == "r7" and doc["labels"] == {"repo": "org/repo", "pr": "7"}
    parked = store.load("org/repo#7")
    assert parked is not None
    env = parked.envelope
    assert (env.provider, env.model, env.state()) == ("anthropic", "claude", {"messages": []})
    assert env.deadline is not None and timedelta(minutes=119) < env.deadline - datetime.now(timezone.utc)


def test_park_from_stdin_with_an_rfc3339_deadline(store: berth.Store) -> None:
    when = (datetime.now(timezone.utc) + timedelta(days=3)).replace(microsecond=0)
    text = ok("park", "k", "--state", "-", "--deadline", when.isoformat().replace("+00:00", "Z"), input="[1, 2]").stdout
    assert text.startswith("parked 'k' for identity 'pr-bot'") and "aes-gcm:" in text
    parked = store.load("k")
    assert parked is not None and parked.envelope.deadline == when and parked.envelope.state() == [1, 2]


def test_park_with_a_question_asks_it(store: berth.Store, questions: berth.QuestionStore) -> None:
    ok("park", "k", "--state", "-", "--question", "Ship it?", input="{}")
    q = questions.pending("k")
    assert q is not None and q.prompt == "Ship it?"
    parked = store.load("k")
    assert parked is not None and parked.envelope.deadline is not None  # the coordinator's default deadline


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--deadline", "10q"], ["--deadline", "neither a duration"]),
        (["--deadline", "2030-01-01T00:00:00"], ["--deadline", "no UTC offset"]),
        (["--deadline", "2001-01-01T00:00:00Z"], ["--deadline", "not in the future"]),
        (["--label", "novalue"], ["--label", "not k=v"]),
        (["--state", "/nonexistent/state.json"], ["--state", "No such file"]),
    ],
)
def test_park_bad_input_is_exit_2(home: Path, args: list[str], says: list[str]) -> None:
    base = ["park", "k"] if "--state" in args else ["park", "k", "--state", "-"]
    fails(2, *base, *args, input="{}", says=says)


def test_park_state_that_is_not_json_is_exit_2_and_parks_nothing(store: berth.Store) -> None:
    fails(2, "park", "k", "--state", "-", input="not json", says=[*where("k"), "not valid JSON"])
    fails(2, "park", "a//b", "--state", "-", input="{}", says=["invalid key 'a//b'"])
    assert list(store.list()) == []


def test_park_refuses_a_state_over_the_store_limit(store: berth.Store) -> None:
    big = b'"' + b"a" * store.max_envelope_bytes + b'"'  # the state alone is past the whole envelope's limit
    fails(1, "park", "k", "--state", "-", input=big, says=[*where("k"), "limit"])
    assert list(store.list()) == []


# --- claim ---------------------------------------------------------------------------------------


def test_claim_prints_the_envelope_once(store: berth.Store) -> None:
    park(store, "k", state={"turn": 3})
    doc = json.loads(ok("claim", "k", "--json").stdout)
    assert doc["key"] == "k" and doc["provider_state"] == {"turn": 3} and doc["run_id"] == "run-k"
    fails(1, "claim", "k", says=["nothing to claim", *where("k")])
    park(store, "h")
    result = ok("claim", "h")
    assert '"turn"' not in result.stdout and "messages" in result.stdout and "claimed 'h'" in result.stderr


def test_claim_refuses_expired_and_removes_it(store: berth.Store) -> None:
    expire(store, "k")
    fails(1, "claim", "k", says=[*where("k"), "deadline", "never resumed"])
    assert list(store.list()) == []


def test_claim_refuses_tampered_and_leaves_it(store: berth.Store) -> None:
    park(store, "k")
    flip_byte(store, "k")
    fails(1, "claim", "k", says=[*where("k"), "does not open"])
    assert [i.key for i in store.list()] == ["k"]


def test_claim_of_state_it_cannot_decode_fails_before_the_commit(store: berth.Store) -> None:
    # issue 12.2: the frame was removed, then the output failed: exit 1 and nobody had the run.
    # (berth refuses such state at Envelope(...) now; a frame from an older berth can still hold it.)
    env = berth.Envelope(provider_state={}, run_id="legacy")
    object.__setattr__(env, "provider_state", b'{"a": "\xff"}')
    store.save("k", env)
    for args in (("claim", "k"), ("claim", "k", "--json")):
        fails(1, *args, says=[*where("k"), "cannot decode", "left parked"])
        assert [i.key for i in store.list()] == ["k"], "the run was not lost"


def test_claim_of_a_run_expiring_during_the_claim_is_refused(
    store: berth.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    park(store, "k", deadline=timedelta(seconds=30))
    real_delete = berth.Store.delete

    def slow_delete(self: berth.Store, key: str, token: berth.Token) -> None:
        real_delete(self, key, token)
        monkeypatch.setattr(berth.Store, "now", lambda self: datetime.now(timezone.utc) + timedelta(minutes=1))

    monkeypatch.setattr(berth.Store, "delete", slow_delete)
    fails(1, "claim", "k", "--json", says=[*where("k"), "deadline", "never resumed"])
    assert list(store.list()) == []


def test_claim_bad_key_is_exit_2(home: Path) -> None:
    fails(2, "claim", "/k", says=["invalid key '/k'", "identity 'pr-bot'"])


def test_claim_race_between_processes_has_one_winner(store: berth.Store) -> None:
    park(store, "race")
    procs = [
        subprocess.Popen([str(BERTH), "claim", "race", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        outcomes.append((p.returncode, out, err))
    assert sorted(code for code, _, _ in outcomes) == [0, 1]
    winner = next(out for code, out, _ in outcomes if code == 0)
    assert json.loads(winner)["key"] == "race"
    loser = next(err for code, _, err in outcomes if code == 1).decode()
    assert loser.count("\n") == 1 and "nothing to claim at identity 'pr-bot', key 'race'" in loser


# --- rm ------------------------------------------------------------------------------------------


def test_rm_claims_and_discards_with_its_question(store: berth.Store, questions: berth.QuestionStore) -> None:
    park(store, "k")
    assert "removed 'k'" in ok("rm", "k").stdout
    assert list(store.list()) == []
    fails(1, "rm", "k", says=["nothing parked", *where("k")])
    berth.Coordinator(store, questions).suspend("q", berth.Envelope(provider_state=b"{}"), question="?")
    ok("rm", "q")
    assert questions.pending("q") is None and list(store.list()) == []


def test_rm_refuses_expired_and_tampered_without_force(store: berth.Store) -> None:
    expire(store, "old")
    park(store, "bad")
    flip_byte(store, "bad")
    fails(1, "rm", "old", says=[*where("old"), "past its deadline", "--force"])
    fails(1, "rm", "bad", says=[*where("bad"), "does not open", "--force"])
    assert sorted(i.key for i in store.list()) == ["bad", "old"]
    ok("rm", "old", "--force")
    ok("rm", "bad", "--force")
    assert list(store.list()) == []
    fails(1, "rm", "bad", "--force", says=["nothing parked", *where("bad")])


def test_rm_force_needs_no_key(store: berth.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    park(store, "k")
    monkeypatch.delenv("BERTH_KEYRING")
    fails(1, "rm", "k", says=[*where("k")])  # plaintext store cannot open a sealed frame
    result = ok("rm", "k", "--force")
    assert result.stderr == "" and list(store.list()) == []


def test_rm_bad_key_is_exit_2(home: Path) -> None:
    fails(2, "rm", "a/./b", says=["invalid key 'a/./b'"])
    fails(2, "rm", "a/./b", "--force", says=["invalid key 'a/./b'"])


# --- sweep ---------------------------------------------------------------------------------------


def test_sweep_dry_run_then_sweep(store: berth.Store) -> None:
    expire(store, "old/1")
    expire(store, "old/2")
    park(store, "live", deadline=timedelta(hours=1))
    doc = json.loads(ok("sweep", "--dry-run", "--json").stdout)
    assert doc == {"dry_run": True, "swept": 2, "keys": ["old/1", "old/2"], "questions": 0}
    assert len(list(store.list())) == 3
    text = ok("sweep").stdout
    assert text.startswith("removed 2 expired envelopes for identity 'pr-bot'") and "old/1" in text
    assert [i.key for i in store.list()] == ["live"]
    assert json.loads(ok("sweep", "--json").stdout)["swept"] == 0


def test_sweep_needs_no_key_and_removes_expired_questions(
    store: berth.Store, questions: berth.QuestionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = berth.Coordinator(store, questions)
    env = berth.Envelope(provider_state=b"{}", deadline=datetime.now(timezone.utc) + timedelta(milliseconds=1))
    coordinator.suspend("k", env, question="still there?")
    time.sleep(0.01)
    monkeypatch.delenv("BERTH_KEYRING")
    result = ok("sweep", "--json")
    assert json.loads(result.stdout)["swept"] == 1 and result.stderr == ""
    assert json.loads(result.stdout)["questions"] == 1
    assert questions.pending("k") is None


def test_sweep_bad_input_is_exit_2(home: Path) -> None:
    fails(2, "sweep", "--url", "sqlite://relative.db", says=["identity 'pr-bot'", "sqlite:////abs"])
    fails(2, "sweep", "KEY", says=["unexpected extra argument"])


# --- reseal --------------------------------------------------------------------------------------


def test_reseal_after_rotate(store: berth.Store, home: Path) -> None:
    park(store, "a")
    park(store, "b")
    old = json.loads(ok("ls", "--json").stdout)[0]["sealed_by"]
    ok("keys", "rotate", str(home / "keys.json"))
    doc = json.loads(ok("reseal", "--json").stdout)
    assert doc == {"moved": 2, "skipped": 0, "failed": 0}
    sealed = {d["sealed_by"] for d in json.loads(ok("ls", "--json").stdout)}
    assert len(sealed) == 1 and sealed != {old}
    assert ok("reseal").stdout.startswith("resealed 0 envelopes for identity 'pr-bot'")
    assert json.loads(ok("claim", "a", "--json").stdout)["key"] == "a"


def test_reseal_refuses_when_a_frame_does_not_open(store: berth.Store, home: Path) -> None:
    park(store, "good")
    park(store, "bad")
    flip_byte(store, "bad")
    ok("keys", "rotate", str(home / "keys.json"))
    result = run("reseal")
    assert result.exit_code == 1
    assert "resealed 1 envelope" in result.stdout and "1 did not open" in result.stdout
    assert errors(result) == ["berth reseal: 1 frame of identity 'pr-bot' did not open: run `berth verify`"]


def test_reseal_migrates_plaintext_only_when_asked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_KEYRING")
    ok("park", "legacy", "--state", "-", input="{}")
    monkeypatch.setenv("BERTH_KEYRING", str(home / "keys.json"))
    fails(1, "reseal", says=["did not open"])
    assert json.loads(ok("reseal", "--accept-plaintext", "--json").stdout)["moved"] == 1
    assert json.loads(ok("ls", "--json").stdout)[0]["sealed_by"].startswith("aes-gcm:")


def test_reseal_bad_keyring_is_exit_2(home: Path) -> None:
    (home / "junk.json").write_text("{}")
    (home / "junk.json").chmod(0o600)
    fails(2, "reseal", "--keyring", str(home / "junk.json"), says=["junk.json", "not a berth keyring"])


# --- verify --------------------------------------------------------------------------------------


def test_verify_counts_and_exits_0_when_nothing_is_tampered(store: berth.Store) -> None:
    park(store, "a")
    park(store, "b")
    expire(store, "c")
    expired = {"key": "c", "status": "expired", "error": "past its deadline: never resumed (`berth sweep` removes it)"}
    assert json.loads(ok("verify", "--json").stdout) == {
        "ok": 2, "expired": 1, "tampered": 0, "unknown_key": 0, "unreadable": 0, "problems": [expired],
    }  # fmt: skip
    assert ok("verify").stdout.splitlines()[-1] == "identity 'pr-bot': 2 ok, 1 expired, 0 tampered"


def test_verify_refuses_tampered_and_reports_unknown_keys(store: berth.Store, home: Path) -> None:
    park(store, "a")
    park(store, "bad")
    flip_byte(store, "bad")
    other = home / "other.json"
    berth.Keyring.generate().save(other)
    sealer = berth.AesGcmSealer(berth.Keyring.load(other))
    with berth.open_store(os.environ["BERTH_URL"], identity=IDENTITY, sealer=sealer) as elsewhere:
        park(elsewhere, "foreign")
    result = run("verify")
    assert result.exit_code == 1
    assert "tampered    bad:" in result.stdout and "unknown key foreign:" in result.stdout
    assert result.stdout.splitlines()[-1] == "identity 'pr-bot': 1 ok, 1 tampered, 1 unknown key"
    assert errors(result) == [
        "berth verify: 2 frames of identity 'pr-bot' did not open "
        "(tampered, unreadable, or sealed under a key id the sealer does not hold)"
    ]
    lines = [json.loads(line) for line in run("verify", "--jsonl").stdout.splitlines()]
    assert {d["key"]: d["status"] for d in lines} == {"a": "ok", "bad": "tampered", "foreign": "unknown_key"}


def test_verify_finds_frames_listing_cannot_read(store: berth.Store) -> None:
    store.backend.put(f"{IDENTITY}/junk", b"not a frame at all")
    result = run("verify", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["unreadable"] == 1
    fails(1, "rm", "junk", says=[*where("junk"), "--force"])
    ok("rm", "junk", "--force")
    assert ok("verify", "--json").stdout.count('"unreadable": 0') == 1


def test_verify_bad_input_is_exit_2(home: Path) -> None:
    fails(2, "verify", "--json", "--jsonl", "--bogus", says=["--bogus"])
    fails(2, "verify", "--identity", "..", says=["invalid identity '..'"])


def test_progress_bar_only_when_stderr_is_a_terminal(store: berth.Store) -> None:
    for i in range(3):
        park(store, f"k{i}")
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(BERTH), "verify"], stdout=subprocess.PIPE, stderr=slave)
        out, _ = proc.communicate(timeout=60)
        os.close(slave)
        slave = -1
        chunks = []
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        terminal = b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0
    assert "verifying" in terminal
    assert out.decode().splitlines()[-1] == "identity 'pr-bot': 3 ok, 0 tampered"
    piped = berth_process("verify")  # stderr is a pipe: no bar
    assert piped.returncode == 0 and piped.stderr == b""


# --- questions and answer ------------------------------------------------------------------------


def test_questions_lists_pending_with_prompts_and_deadlines(store: berth.Store, questions: berth.QuestionStore) -> None:
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend("org/repo#1", berth.Envelope(provider_state=b"{}", run_id="r1"), question="Push to main?")
    coordinator.suspend("org/repo#2", berth.Envelope(provider_state=b"{}", run_id="r2"), question="Close as dup?")
    table = ok("questions").stdout
    assert "Push to main?" in table and "Close as dup?" in table and "waiting" in table and "in 13d 23h" in table
    docs = json.loads(ok("questions", "--json").stdout)
    assert [(d["key"], d["prompt"], d["answered"]) for d in docs] == [
        ("org/repo#1", "Push to main?", False),
        ("org/repo#2", "Close as dup?", False),
    ]
    assert docs[0]["deadline"].endswith("Z") and docs[0]["run_id"] == "r1"
    lines = ok("questions", "--jsonl", "--prefix", "org/repo#2").stdout.splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["org/repo#2"]


def test_questions_empty_and_bad_prefix(home: Path) -> None:
    result = ok("questions")
    assert result.stdout == "" and "no pending questions for identity 'pr-bot'" in result.stderr
    fails(2, "questions", "--prefix", "/x", says=["identity 'pr-bot'"])


def test_answer_then_the_waker_resumes(store: berth.Store, questions: berth.QuestionStore) -> None:
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend("k", berth.Envelope(provider_state=b"{}", run_id="r1"), question="Ship it?")
    qid = questions.pending("k").id
    text = ok("answer", "k", "yes, ship it", "--by", "alice", "--question", qid).stdout
    assert text.startswith(f"answered question {qid} ('Ship it?') at identity 'pr-bot', key 'k' as alice")
    assert "answered by alice" in ok("questions").stdout
    wake = coordinator.wake("k")
    assert wake.decision == berth.WakeDecision.RESUME and wake.answer is not None
    assert (wake.answer.text, wake.answer.by) == ("yes, ship it", "alice")


def test_answer_from_a_file_or_stdin(store: berth.Store, questions: berth.QuestionStore, home: Path) -> None:
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend("a", berth.Envelope(provider_state=b"{}"), question="?")
    coordinator.suspend("b", berth.Envelope(provider_state=b"{}"), question="?")
    (home / "answer.txt").write_text("from a file\n")
    qa, qb = questions.pending("a"), questions.pending("b")
    assert qa is not None and qb is not None
    doc = json.loads(ok("answer", "a", "--file", str(home / "answer.txt"), "--json", "--question", qa.id).stdout)
    assert doc["key"] == "a" and doc["answered_at"].endswith("Z") and doc["question_id"] == qa.id
    ok("answer", "b", "--file", "-", "--question", qb.id, input="from stdin")
    answers = (questions.answer("a"), questions.answer("b"))
    assert [a.text if a else None for a in answers] == ["from a file\n", "from stdin"]


def test_answer_refuses_nothing_pending_and_a_second_answer(store: berth.Store, questions: berth.QuestionStore) -> None:
    fails(1, "answer", "k", "yes", says=["no question is pending", *where("k")])
    berth.Coordinator(store, questions).suspend("k", berth.Envelope(provider_state=b"{}"), question="?")
    qid = questions.pending("k").id
    ok("answer", "k", "yes", "--by", "alice", "--question", qid)
    fails(1, "answer", "k", "no", "--by", "bob", "--question", qid, says=[*where("k"), "already answered by 'alice'"])


def test_answer_bad_input_is_exit_2(home: Path) -> None:
    fails(2, "answer", "k", says=["give the answer as TEXT"])
    fails(2, "answer", "k", "text", "--file", "-", input="x", says=["not both"])
    fails(2, "answer", "../k", "yes", says=["invalid key '../k'"])


def ask_tool_approval(questions: berth.QuestionStore, key: str) -> berth.Question:
    tool = berth.ToolRequest("archive_repo", {"repo": "acme/\u202eold", "force": False}, agent="ops", call_id="c1")
    return questions.ask(key, "May ops archive it?", accepts=["approve", "reject", "edit", "respond"], tool=tool)


def test_answer_with_a_decision(questions: berth.QuestionStore) -> None:
    for key in ("a", "r", "e", "t", "n"):
        ask_tool_approval(questions, key)
    qid = {key: questions.pending(key).id for key in ("a", "r", "e", "t", "n")}
    text = ok("answer", "a", "--approve", "fine, it is dead", "--by", "alice", "--question", qid["a"]).stdout
    assert "as alice (approve)" in text
    assert (questions.answer("a").decision, questions.answer("a").text) == ("approve", "fine, it is dead")
    ok("answer", "r", "--reject", "not on a Friday", "--question", qid["r"])
    assert (questions.answer("r").decision, questions.answer("r").text) == ("reject", "not on a Friday")
    doc = json.loads(ok("answer", "e", "--edit", '{"repo": "acme/older"}', "--question", qid["e"], "--json").stdout)
    assert doc["decision"] == "edit" and doc["arguments"] == {"repo": "acme/older"}
    assert dict(questions.answer("e").arguments) == {"repo": "acme/older"}
    # Plain text: only exactly an approval approves; other text never does.
    ok("answer", "t", "yes but only archive it", "--question", qid["t"])
    assert questions.answer("t").decision == "respond"
    ok("answer", "n", "approve", "--question", qid["n"])
    assert questions.answer("n").decision == "approve"
    listed = {d["key"]: d for d in json.loads(ok("questions", "--json").stdout)}
    assert listed["e"]["decisions"] == ["approve", "reject", "edit", "respond"]
    assert listed["e"]["tool"]["arguments"] == {"repo": "acme/\u202eold", "force": False}
    assert listed["e"]["decision"] == "edit"


def test_answer_decisions_bad_input_is_exit_2(questions: berth.QuestionStore) -> None:
    q = ask_tool_approval(questions, "k")
    plain = questions.ask("p", "What priority?")
    fails(2, "answer", "k", "--approve", "--reject", "no", "--question", q.id, says=["give one decision"])
    fails(2, "answer", "k", "--edit", "[1]", "--question", q.id, says=["JSON object"])
    fails(2, "answer", "k", "--edit", "{nope", "--question", q.id, says=["JSON object"])
    fails(2, "answer", "k", "why", "--reject", "no", "--question", q.id, says=["--reject takes the reason"])
    fails(2, "answer", "p", "--approve", "--question", plain.id, says=[*where("p"), "accepts respond"])
    assert questions.answer("k") is None and questions.answer("p") is None


def test_answer_shows_the_tool_call_with_controls_escaped(questions: berth.QuestionStore) -> None:
    ask_tool_approval(questions, "k")
    line = fails(2, "answer", "k", "--approve", says=["acme/\\u202eold"])
    assert "\u202e" not in line


# --- keys ----------------------------------------------------------------------------------------


def test_keys_generate_rotate_show(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    assert ok("keys", "generate", str(path)).stdout.startswith(f"wrote keyring {path}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = berth.Keyring.load(path)
    doc = json.loads(ok("keys", "rotate", str(path), "--json").stdout)
    assert doc["key_ids"][1] == first.primary and doc["primary"] != first.primary and "keys" not in doc
    shown = ok("keys", "show", str(path)).stdout
    material = [base64_of(berth.Keyring.load(path), kid) for kid in doc["key_ids"]]
    assert doc["primary"] in shown and not any(m in shown for m in material)
    assert not any(m in ok("keys", "show", str(path), "--json").stdout for m in material)
    revealed = json.loads(ok("keys", "show", str(path), "--json", "--reveal").stdout)
    assert sorted(revealed["keys"].values()) == sorted(material)
    assert all(m in ok("keys", "show", str(path), "--reveal").stdout for m in material)
    assert json.loads(ok("keys", "show", str(path), "--json").stdout)["mode"] == "0600"


def base64_of(ring: berth.Keyring, kid: str) -> str:
    """A key's material as `keys show --reveal` prints it."""
    import base64

    return base64.b64encode(ring.key(kid) or b"").decode()


def test_keys_show_warns_about_a_readable_keyring(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    ok("keys", "generate", str(path))
    path.chmod(0o644)
    result = ok("keys", "show", str(path))
    assert result.stderr.startswith("berth: warning: keyring") and "chmod 600" in result.stderr


def test_keys_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    ok("keys", "generate", str(path))
    before = path.read_bytes()
    fails(1, "keys", "generate", str(path), says=["already exists", "keys rotate"])
    assert path.read_bytes() == before
    ok("keys", "generate", str(path), "--force")
    assert path.read_bytes() != before


def test_keys_bad_input_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    fails(2, "keys", "generate", str(tmp_path / "a-file" / "keys.json"), says=["cannot write keyring"])
    ok("keys", "generate", str(tmp_path / "new" / "dir" / "keys.json"))  # missing directories: made 0700
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "dir").st_mode) == 0o700
    fails(2, "keys", "rotate", str(tmp_path / "missing.json"), says=["does not exist", "keys generate"])
    (tmp_path / "junk.json").write_text("[]")
    fails(2, "keys", "show", str(tmp_path / "junk.json"), says=["not a berth keyring"])
    fails(2, "keys", "frob", says=["No such command 'frob'"])


# --- parsing helpers ------------------------------------------------------------------------------


def test_deadline_forms() -> None:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_deadline("30s", at) == at + timedelta(seconds=30)
    assert parse_deadline("15m", at) == at + timedelta(minutes=15)
    assert parse_deadline("2h", at) == at + timedelta(hours=2)
    assert parse_deadline("14d", at) == at + timedelta(days=14)
    assert parse_deadline("2026-02-01T10:00:00+01:00", at) == datetime(2026, 2, 1, 9, tzinfo=timezone.utc)
    assert [span(s) for s in (5, 90, 3600, 3660, 86400 * 14 - 1)] == ["5s", "1m", "1h", "1h 1m", "13d 23h"]


# --- the installed console script ------------------------------------------------------------------


def test_subprocess_success_refused_and_bad_usage(store: berth.Store) -> None:
    done = berth_process("park", "k", "--state", "-", "--json", input=b'{"a": 1}')
    assert done.returncode == 0 and json.loads(done.stdout)["key"] == "k" and done.stderr == b""
    done = berth_process("claim", "nope")
    assert done.returncode == 1
    assert done.stderr.decode() == "berth claim: nothing to claim at identity 'pr-bot', key 'nope': " \
        "nothing parked, or another claimer won\n"  # fmt: skip
    done = berth_process("ls", "--no-such-flag")
    assert done.returncode == 2 and done.stderr.decode().count("\n") == 1 and b"Traceback" not in done.stderr
    done = berth_process("show", "k", env={"BERTH_KEYRING": str(Path(os.environ["BERTH_KEYRING"]).parent / "x")})
    assert done.returncode == 2 and done.stderr.decode().count("\n") == 1


def test_subprocess_broken_pipe_is_quiet(store: berth.Store) -> None:
    for i in range(600):  # more than a pipe buffer of rows
        park(store, f"k{i:03}")
    for args in (["ls"], ["ls", "--all"], ["ls", "--jsonl"]):
        # `berth ls | head -1`, with berth's own exit status (pipefail): 0 or SIGPIPE's 141, never 1 (refused).
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {BERTH} {' '.join(args)} | head -1"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode in (0, 141), (args, done.returncode, done.stderr)
        assert done.stderr == b"" and done.stdout.count(b"\n") == 1, (args, done.stderr)


# --- issue 13: the human edges, through the installed console script ---------------------------


def test_questions_show_ids_and_an_answer_is_bound_to_the_question_shown(
    store: berth.Store, questions: berth.QuestionStore
) -> None:
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend("k", berth.Envelope(provider_state=b"{}", run_id="r1"), question="Push the fix to main?")
    seen = questions.pending("k")
    assert seen is not None
    listed = berth_process("questions", env={"COLUMNS": "200"})
    assert listed.returncode == 0 and seen.id in listed.stdout.decode()
    # The run is re-parked with a new question between the operator reading and answering.
    coordinator.suspend(
        "k", berth.Envelope(provider_state=b"{}", run_id="r2"), question="Drop the production database?"
    )
    done = berth_process("answer", "k", "yes", "--question", seen.id)
    assert done.returncode == 1, done.stderr
    err = done.stderr.decode()
    assert err.count("\n") == 1 and seen.id in err and "superseded" in err and "identity 'pr-bot', key 'k'" in err
    assert questions.answer("k") is None  # the new question was not answered
    # Without --question and without a terminal: nothing is answered; the exact pending prompt is shown.
    done = berth_process("answer", "k", "yes")
    pending = questions.pending("k")
    assert pending is not None and pending.prompt == "Drop the production database?"
    err = done.stderr.decode()
    assert done.returncode == 2 and "'Drop the production database?'" in err and f"--question {pending.id}" in err
    assert questions.answer("k") is None
    done = berth_process("answer", "k", "--file", "-", input=b"yes")
    assert done.returncode == 2 and questions.answer("k") is None
    # Naming the pending question answers it, and says which prompt it answered.
    done = berth_process("answer", "k", "no, never", "--question", pending.id, "--by", "alice")
    assert done.returncode == 0, done.stderr
    assert "'Drop the production database?'" in done.stdout.decode()
    answer = questions.answer("k")
    assert answer is not None and (answer.question_id, answer.text) == (pending.id, "no, never")


def answer_on_a_terminal(reply: bytes) -> tuple[int, str]:
    """`berth answer k yes` on a pseudo-terminal, replying `reply` to its confirmation; exit code and output."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(str(BERTH), [str(BERTH), "answer", "k", "yes", "--by", "alice"])
    output = b""
    replied = False
    while True:
        ready, _, _ = select.select([fd], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        if not replied and b"[y/N]" in output:
            os.write(fd, reply)
            replied = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_answer_on_a_terminal_shows_the_prompt_and_answers_only_what_was_confirmed(
    store: berth.Store, questions: berth.QuestionStore
) -> None:
    berth.Coordinator(store, questions).suspend("k", berth.Envelope(provider_state=b"{}"), question="Ship it?")
    q = questions.pending("k")
    assert q is not None
    code, output = answer_on_a_terminal(b"n\n")
    assert code == 1 and "'Ship it?'" in output and q.id in output and questions.answer("k") is None
    code, output = answer_on_a_terminal(b"y\n")
    assert code == 0, output
    answer = questions.answer("k")
    assert answer is not None and answer.question_id == q.id and answer.text == "yes"


HOSTILE_TEXT = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m\u202eevil\x7f\u3164"  # U+3164 draws nothing
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\x7f", "\u3164")


def all_strings(doc: object) -> Iterator[str]:
    """Every string in a decoded JSON document, keys included."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from all_strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from all_strings(v)


def test_control_characters_reach_no_terminal_and_json_stays_exact(
    store: berth.Store, questions: berth.QuestionStore
) -> None:
    key = "org/\u202erepo#1"  # keys may hold format characters (not controls)
    env = berth.Envelope(
        provider_state={"note": HOSTILE_TEXT},
        run_id="run-" + HOSTILE_TEXT,
        labels={"team": HOSTILE_TEXT},
        reason=HOSTILE_TEXT,
    )
    berth.Coordinator(store, questions).suspend(key, env, question="Approve? " + HOSTILE_TEXT)
    for args in (["ls"], ["questions"], ["show", key], ["show", key, "--raw"], ["verify"]):
        done = berth_process(*args, env={"COLUMNS": "300"})
        assert done.returncode == 0, (args, done.stderr)
        text = done.stdout.decode() + done.stderr.decode()
        for raw in RAW_CONTROLS:
            assert raw not in text, (args, raw, text)
        if args[0] != "verify":
            assert "\\x1b" in text, (args, text)  # shown, escaped
    for args in (["ls", "--json"], ["ls", "--jsonl"], ["questions", "--json"], ["show", key, "--json"]):
        done = berth_process(*args)
        assert done.returncode == 0, (args, done.stderr)
        out = done.stdout.decode()
        for raw in RAW_CONTROLS:
            assert raw not in out, (args, raw)
        docs = [json.loads(line) for line in out.splitlines()] if args[-1] == "--jsonl" else [json.loads(out)]
        strings = list(all_strings(docs))
        assert any(HOSTILE_TEXT in t for t in strings) and key in strings, args  # exact once decoded
    # A failure that quotes hostile text is escaped too.
    done = berth_process("claim", "nothing/\u202ehere")
    assert done.returncode == 1 and "\u202e" not in done.stderr.decode()


def test_a_far_future_deadline_can_be_listed_shown_and_serialised(store: berth.Store) -> None:
    deadline = "9999-12-31T23:59-23:59"  # in UTC: year 10000
    done = berth_process(
        "park", "far", "--state", "-", "--deadline", deadline, "--question", "Still there?", input=b"{}"
    )
    assert done.returncode == 0, done.stderr
    for args in (
        ["ls"],
        ["ls", "--json"],
        ["ls", "--jsonl"],
        ["show", "far"],
        ["show", "far", "--json"],
        ["show", "far", "--raw", "--json"],
        ["questions"],
        ["questions", "--json"],
        ["sweep", "--dry-run"],
        ["verify"],
    ):
        done = berth_process(*args)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (args, done.stderr)
        assert b"OverflowError" not in done.stdout + done.stderr, args
    (doc,) = json.loads(berth_process("ls", "--json").stdout)
    assert datetime.fromisoformat(doc["deadline"]) == datetime.fromisoformat(deadline)


def test_a_world_readable_keyring_is_refused_in_one_line_unless_allowed(store: berth.Store, home: Path) -> None:
    park(store, "k")
    keyring = home / "keys.json"
    keyring.chmod(0o644)
    done = berth_process("show", "k")
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and f"chmod 600 {keyring}" in err and "0644" in err
    done = berth_process("show", "k", "--keyring", str(keyring))
    assert done.returncode == 2 and f"chmod 600 {keyring}" in done.stderr.decode()
    assert berth_process("show", "k", env={"BERTH_KEYRING_ALLOW_READABLE": "1"}).returncode == 0


@pytest.mark.parametrize(
    "url",
    [
        "postgresql//alice:hunter2secret@db.example/app",  # no ':' after the scheme
        "postgresql://alice:hunter2%secret@db.example/app",  # a '%' in the password
        "redis//:hunter2secret@cache.example/0",
        "file://alice:hunter2secret@host/dir",
    ],
)
def test_no_password_reaches_stderr(home: Path, url: str) -> None:
    done = berth_process("ls", env={"BERTH_URL": url, "BERTH_DEBUG": "1"})
    err = done.stderr.decode()
    assert done.returncode == 2 and err, err
    assert "hunter2" not in err and "secret" not in err, err
    with pytest.raises(berth.BerthError) as info:
        berth.open_store(url, identity="a", sealer=berth.PlaintextSealer())
    assert "hunter2" not in str(info.value) and info.value.__cause__ is None


def rewrite_key_id(store: berth.Store, key: str, new_id: str) -> None:
    """Rewrite the (cleartext, unauthenticated until opened) key id in the header of `key`'s frame."""
    name = f"{store.identity}/{key}"
    found = store.backend.get(name)
    assert found is not None
    data = bytes(found[0])
    old = f'"key_id":"{store.sealer.key_id}"'.encode()
    assert data.count(old) == 1 and len(new_id) == len(store.sealer.key_id)
    store.backend.put(name, data.replace(old, f'"key_id":"{new_id}"'.encode()))


def test_verify_exits_1_on_a_frame_whose_key_id_was_rewritten(store: berth.Store) -> None:
    park(store, "good")
    park(store, "bad")
    flip_byte(store, "bad")
    rewrite_key_id(store, "bad", "f" * len(store.sealer.key_id))
    done = berth_process("verify")
    out = done.stdout.decode()
    assert done.returncode == 1, out
    assert "1 ok" in out and "1 unknown key" in out and "f" * len(store.sealer.key_id) in out
    assert done.stderr.decode().count("\n") == 1 and "did not open" in done.stderr.decode()
    done = berth_process("verify", "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["unknown_key"] == 1


# --- the demo ----------------------------------------------------------------------------------------


def test_demo_passes_in_80_columns(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env.update({"COLUMNS": "80", "TMPDIR": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")})
    started = time.monotonic()
    done = subprocess.run([str(BERTH), "demo"], capture_output=True, env=env, timeout=120, check=False)
    elapsed = time.monotonic() - started
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert done.stderr == b""
    assert "All 6 steps behaved as stated" in out and "NOT AS STATED" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for needle in (
        "RESUME",
        "REARM",
        "IntegrityError",
        "removed 1 expired envelope: org/repo#43",
        "FRESH",
        "berth serve",
    ):
        assert needle in out
    assert elapsed < 30
    assert not (tmp_path / "xdg").exists()  # the demo never touches the user's default store
    assert not any(tmp_path.iterdir())  # and it removes its temporary directory


def test_demo_on_a_named_store_leaves_nothing_behind(home: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/frames"
    done = berth_process("demo", "--url", url)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    frames = tmp_path / "frames"
    # empty identity directories stay, and beside each its ordered layout's marker (a file named as
    # the legacy directory would be): structure, not frames
    markers = {p.with_name(p.name.removesuffix("@2")) for p in frames.glob("*@2") if p.is_dir()}
    leftovers = [p for p in frames.rglob("*") if p.is_file() and p.parent.name != ".locks" and p not in markers]
    assert markers and leftovers == [], leftovers


def test_demo_refuses_a_store_processes_cannot_share() -> None:
    fails(2, "demo", "--url", "memory://", says=["memory://", "separate processes"])


@pytest.fixture(autouse=True)
def _no_stray_default_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test may create a store in the real user data directory."""
    if "XDG_DATA_HOME" not in os.environ:
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-guard"))


def test_no_rich_or_click_at_import_berth() -> None:
    code = "import sys, berth; print(any(m.split('.')[0] in ('rich', 'click') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.strip() == b"False"
