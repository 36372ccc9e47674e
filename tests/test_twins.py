"""Sync modules generated from their async twins (scripts/twin.py) are current, and the transform does what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scripts import twin

ROOT = Path(__file__).resolve().parent.parent

NAMES = {"AsyncThing": "Thing", "arun": "run", "aclose": "close", "berth.aio.AsyncThing": "berth.Thing"}

ASYNC = '''\
"""`berth.aio.AsyncThing`: a thing, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from berth._plan import arun


class AsyncThing:
    """Runs plans (`arun`)."""  # twin: sync """Runs plans, in place."""

    async def __aenter__(self) -> AsyncThing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.to_thread(
            print, "closing"
        )  # twin: sync print("closing")
        # twin: async-only
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        # twin: end

    async def items(
        self,
        f: Callable[[], int],
        threads: int = 8,  # twin: async-only
    ) -> AsyncIterator[int]:
        # twin: sync print("sync only")
        async with self:  # the AsyncThing itself; await nothing
            for x in [await arun(f), 2]:
                yield x
        print(
            "one",
            "two",  # twin: sync "zwei",
        )
        await asyncio.sleep(0)  # twin: async-only
        self.seen = [y async for y in self.items(f)]
'''

SYNC = '''\
# generated from aio.py by scripts/twin.py — do not edit: change the source and run the script
"""`berth.Thing`: a thing, awaited."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from berth._plan import run


class Thing:
    """Runs plans, in place."""

    def __enter__(self) -> Thing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        print("closing")

    def items(
        self,
        f: Callable[[], int],
    ) -> Iterator[int]:
        print("sync only")
        with self:  # the Thing itself; await nothing
            for x in [run(f), 2]:
                yield x
        print(
            "one",
            "zwei",
        )
        self.seen = [y for y in self.items(f)]
'''


def test_every_generated_module_is_current() -> None:
    # The CI check: a hand edit of a generated module, or a source changed without regenerating, fails here.
    done = subprocess.run([sys.executable, "scripts/twin.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_table_names_real_sources_sorted_and_each_target_says_where_it_comes_from() -> None:
    assert [t.target for t in twin.TWINS] == sorted(t.target for t in twin.TWINS)
    for pair in twin.TWINS:
        assert (ROOT / pair.source).is_file(), pair.source
        first = (ROOT / pair.target).read_text(encoding="utf-8").splitlines()[0]
        assert first == twin.HEADER.format(source=pair.source).rstrip("\n")


@pytest.fixture
def pair(tmp_path: Path) -> twin.Twin:
    (tmp_path / "aio.py").write_text(ASYNC, encoding="utf-8")
    return twin.Twin("aio.py", "sync.py", NAMES)


def test_the_sync_twin_of_a_sample(pair: twin.Twin, tmp_path: Path) -> None:
    assert twin.generate(pair, tmp_path) == SYNC
    assert twin.main([], [pair], tmp_path) == 0
    assert (tmp_path / "sync.py").read_text(encoding="utf-8") == SYNC
    assert twin.main(["--check"], [pair], tmp_path) == 0


def test_check_fails_naming_a_generated_module_edited_by_hand(
    pair: twin.Twin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert twin.main(["--check"], [pair], tmp_path) == 1  # never generated
    assert "sync.py differs" in capsys.readouterr().out
    twin.main([], [pair], tmp_path)
    target = tmp_path / "sync.py"
    target.write_text(target.read_text(encoding="utf-8").replace('print("closing")', "pass"), encoding="utf-8")
    assert twin.main(["--check", "--diff"], [pair], tmp_path) == 1
    out = capsys.readouterr().out
    assert "sync.py differs from what scripts/twin.py generates" in out
    assert '+        print("closing")' in out


def test_check_fails_when_the_source_changed_and_the_twin_was_not_regenerated(pair: twin.Twin, tmp_path: Path) -> None:
    twin.main([], [pair], tmp_path)
    source = tmp_path / "aio.py"
    source.write_text(ASYNC.replace("return self", "return self  # changed"), encoding="utf-8")
    assert twin.check([pair], tmp_path) == ["sync.py"]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("x = 1  # twin: synced\n", "3: unknown marker `# twin: synced`"),
        ("# twin: async-only\nx = 1\n", "3: `# twin: async-only` block never closed"),
        ("x = 1\n# twin: end\n", "4: `# twin: end` without an open"),
        ("# twin: async-only\n# twin: sync y = 1\n# twin: end\n", "4: `# twin: sync` inside the async-only block"),
        ("x = (\n    # twin: async-only\n    1,\n)\n", "4: `# twin: async-only` alone inside a statement"),
        ("x = 1  # twin: sync\n", "3: `# twin: sync` needs the sync code"),
    ],
)
def test_a_marker_the_transform_cannot_follow_is_refused_with_its_line(source: str, why: str) -> None:
    with pytest.raises(twin.TwinError, match="^aio.py:" + why.replace("(", r"\(")):
        twin.transform('"""A module."""\n\n' + source, origin="aio.py")


def test_a_refused_source_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "aio.py").write_text("# twin: end\n", encoding="utf-8")
    assert twin.main(["--check"], [twin.Twin("aio.py", "sync.py")], tmp_path) == 2
    assert "aio.py:1: `# twin: end`" in capsys.readouterr().err


def test_only_whole_words_are_renamed() -> None:
    out = twin.transform('arun_all = "AsyncThings"  # carun, arun\narun()\n', {"arun": "run", "AsyncThing": "Thing"})
    assert out == 'arun_all = "AsyncThings"  # carun, run\nrun()\n'


def test_check_fails_on_a_generated_module_no_pair_makes_any_more(
    pair: twin.Twin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A pair dropped from TWINS while its module stays would leave a "do not edit" file nothing regenerates.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "left.py").write_text(twin.HEADER.format(source="src/gone.py") + "x = 1\n", encoding="utf-8")
    (tmp_path / "src" / "plain.py").write_text("# generated from a template\nx = 1\n", encoding="utf-8")
    assert twin.orphans([pair], tmp_path) == ["src/left.py"]
    assert twin.main(["--check"], [pair], tmp_path) == 1
    assert "src/left.py says scripts/twin.py generates it, but no pair in TWINS does" in capsys.readouterr().out
