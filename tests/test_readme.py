"""The README and the getting-started page run as written (issue 34).

Every ```python block of README.md runs on its own, as a newcomer would paste it into a file, in an
empty working directory with no `BERTH_*` setting: it must exit 0, print nothing on stderr (no
warning either), and print what its `print(...)  # comment` lines say. A block that cannot run
offline is marked with `<!-- readme-test: skip: REASON -->` on the line before it; the reason is
shown as the skip's reason, and at most one block may be marked.

docs/getting-started.md is a session: its ```python blocks are saved under the name on their first
line (`# park.py`), and every `$` line of its ```console blocks runs, in order, in one bash shell
in an empty directory (so `export` carries over), with the installed `berth` and this Python first
on PATH. Each command must exit 0, and what the page shows under a command is checked: every
line under `$ python ...` exactly, and under a `berth` command each shown line's first word.
One substitution, because a question id is random: the id after `--question` is replaced by the id
of the question pending at the command's key, read with `berth questions --json`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
SKIP = re.compile(r"<!-- readme-test: skip: (.+?) -->")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
SQLITE_URL = re.compile(r"sqlite:/*[^\s`'\")]*")
MARK = "@@berth-doc-test@@"


def blocks(path: Path, language: str) -> list[tuple[int, str, str | None]]:
    """Each fenced block of `language`: its line number, its text, and the skip reason marked before it."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) != language:
            continue
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        skip = SKIP.fullmatch(before.strip())
        found.append((text.count("\n", 0, match.start()) + 1, match.group(2), skip.group(1) if skip else None))
    return found


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a newcomer's shell: no berth settings, a private data directory, this venv first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONWARNINGS", None)
    return env


def printed(block: str) -> list[str]:
    """What the block's `print(...)  # expected` lines say they print, in order."""
    return [m.group(1).strip() for m in re.finditer(r"^\s*print\(.*\)\s+#\s*(.+)$", block, re.M)]


README_BLOCKS = blocks(README, "python")


def test_the_readme_has_python_blocks_and_at_most_one_is_not_run() -> None:
    assert len(README_BLOCKS) >= 3
    assert sum(skip is not None for _, _, skip in README_BLOCKS) <= 1


@pytest.mark.parametrize(("line", "code", "skip"), README_BLOCKS, ids=[f"README.md:{b[0]}" for b in README_BLOCKS])
def test_every_readme_python_block_runs_as_written(line: int, code: str, skip: str | None, tmp_path: Path) -> None:
    if skip is not None:
        pytest.skip(f"README.md:{line} is marked not run: {skip}")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", f"README.md:{line}\n{done.stderr}"
    out = done.stdout.splitlines()
    assert out[: len(printed(code))] == printed(code), f"README.md:{line} prints {out}"


def test_the_readme_starts_with_an_install_line_and_lists_langgraph() -> None:
    text = README.read_text()
    first_block = FENCE.search(text)
    assert first_block is not None and first_block.group(2).startswith("pip install berthing")
    frameworks = text.split("## Agent frameworks", 1)[1].split("\n## ", 1)[0]
    assert "**LangGraph**" in frameworks and "berthing[langgraph]" in frameworks
    assert "](docs/getting-started.md)" in text


@pytest.mark.parametrize("path", [README, GETTING_STARTED], ids=lambda p: p.name)
def test_sqlite_urls_are_spelled_one_way(path: Path) -> None:
    """Four slashes for an absolute path, three for a relative one: never three before an absolute-looking path."""
    for url in SQLITE_URL.findall(path.read_text()):
        assert re.fullmatch(r"sqlite:////[^/].*|sqlite:///[^/.][^/]*(/[^/]+)*", url), url
        assert not re.match(r"sqlite:///(var|tmp|etc|home|abs|Users)/", url), url


# --- the getting-started page ------------------------------------------------------------------


def session(page: Path) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """The page's files (name -> text) and its commands, each with the output lines the page shows."""
    files = {}
    for line, code, _ in blocks(page, "python"):
        name = code.split("\n", 1)[0].removeprefix("# ").strip()
        assert re.fullmatch(r"[\w-]+\.py", name), f"{page.name}:{line}: a Python block starts with `# FILE.py`"
        files[name] = code
    commands: list[tuple[str, list[str]]] = []
    for _, text, _ in blocks(page, "console"):
        for row in text.splitlines():
            if row.startswith("$ "):
                commands.append((row[2:], []))
            elif row.strip():
                assert commands, f"{page.name}: output before any command: {row!r}"
                commands[-1][1].append(row)
    return files, commands


def shell_script(commands: list[tuple[str, list[str]]]) -> str:
    """One bash script running every command, each framed by markers that carry its exit status."""
    pick = "import json,sys; print(json.load(sys.stdin)[0]['question_id'])"
    lines = []
    for i, (command, _) in enumerate(commands):
        if "--question" in command:
            key = shlex.split(command)[2]
            qid = f"$(berth questions --json --prefix {shlex.quote(key)} | python -c {shlex.quote(pick)})"
            command = re.sub(r"--question \S+", f'--question "{qid}"', command)
        lines += [f"echo {MARK}{i}", command, f"echo {MARK}rc $?"]
    return "\n".join(lines) + "\n"


def test_the_getting_started_page_runs_from_install_to_a_resumed_run(tmp_path: Path) -> None:
    files, commands = session(GETTING_STARTED)
    assert {"park.py", "wake.py"} <= set(files)
    ran = [c for c, _ in commands]
    assert "python park.py" in ran and "python wake.py" in ran and any(c.startswith("berth answer") for c in ran)
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    done = subprocess.run(
        ["bash", "-c", shell_script(commands)],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outputs = done.stdout.split(MARK)[1:]
    assert len(outputs) == 2 * len(commands), done.stdout
    for (command, shown), head, tail in zip(commands, outputs[::2], outputs[1::2], strict=True):
        out = head.split("\n", 1)[1].rstrip("\n").splitlines()
        assert tail.split()[:2] == ["rc", "0"], (command, head, done.stderr)
        if command.startswith("python "):
            assert out == shown, (command, out)
        else:
            words = {line.split()[0] for line in out if line.split()}
            assert {line.split()[0] for line in shown} <= words, (command, out)
    assert "resuming run-1" in done.stdout and not (tmp_path / "xdg").exists()


def test_the_getting_started_page_is_linked_from_the_site() -> None:
    assert "getting-started.md" in (ROOT / "mkdocs.yml").read_text()
    assert "getting-started.md" in (ROOT / "docs" / "index.md").read_text()
