"""Read-only never creates (issue 34): a mistyped URL is an error naming what is missing, exit 66,
never an empty store made on the spot; `berth setup` (or a first `park`) creates a store, and
`open_store(..., create=False)` opens only what exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import berth
from berth._cli._failures import NOT_FOUND
from tests.test_cli import fails, ok, run

READ_ONLY = [["ls"], ["show", "k"], ["show", "k", "--raw"], ["questions"], ["verify"], ["claim", "k"], ["sweep"]]


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a))
def test_a_command_that_creates_nothing_refuses_a_missing_store_naming_it(
    home: Path, scheme: str, args: list[str]
) -> None:
    missing = home / "nonexistent-dir" / ("x.db" if scheme == "sqlite" else "store")
    url = f"{scheme}://{missing}" if scheme == "file" else f"sqlite:///{missing}"
    fails(NOT_FOUND, *args, "--url", url, says=[str(missing), "does not exist", "berth setup"])
    assert not (home / "nonexistent-dir").exists()
    result = run(*args, "--url", url, "--json")
    assert json.loads(result.stdout)["error"] == "not_found" and result.exit_code == NOT_FOUND


def test_an_sqlite_file_without_a_store_is_not_one(home: Path) -> None:
    empty = home / "empty.db"
    empty.touch()
    fails(NOT_FOUND, "ls", "--url", f"sqlite:///{empty}", says=[str(empty), "holds no berth store"])
    assert empty.stat().st_size == 0


def test_the_default_store_is_not_created_by_reading_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_URL")
    data = home / "fresh-xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    fails(NOT_FOUND, "ls", says=["berth.db", "does not exist"])
    assert not data.exists()
    ok("park", "k", "--state", "-", input="{}")  # a first park creates it, as a host's first save does
    assert "k" in ok("ls").stdout and (data / "berth" / "berth.db").is_file()


def test_setup_creates_the_store_then_it_reads_as_empty(home: Path) -> None:
    url = f"sqlite:///{home}/new/berth.db"
    assert ok("setup", "--url", url).stdout.startswith("store ready at")
    assert ok("setup", "--url", url).stdout.startswith("store ready at")  # idempotent
    result = ok("ls", "--url", url)
    assert result.stdout == "" and "nothing parked" in result.stderr
    doc = json.loads(ok("setup", "--url", f"file://{home}/dir-store", "--json").stdout)
    assert doc["identity"] == "pr-bot" and (home / "dir-store").is_dir()
    assert ok("ls", "--url", f"file://{home}/dir-store", "--json").stdout == "[]\n"


def test_open_store_with_create_false_opens_only_what_exists(tmp_path: Path) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    for url in (f"sqlite:///{tmp_path}/a/x.db", f"file://{tmp_path}/b/store"):
        with pytest.raises(berth.BackendError, match="does not exist"):
            berth.open_store(url, identity="i", sealer=sealer, create=False)
        with pytest.raises(berth.BackendError, match="does not exist"):
            berth.open_questions(url, identity="i", sealer=sealer, create=False)
        berth.open_store(url, identity="i", sealer=sealer).close()  # create=True, the default
        with berth.open_store(url, identity="i", sealer=sealer, create=False) as store:
            store.save("k", berth.Envelope(provider_state=b"{}"))
            assert store.claim("k") is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    with berth.open_store("memory://", identity="i", sealer=sealer, create=False) as store:  # nothing to create
        assert list(store.list()) == []
