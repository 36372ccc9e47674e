"""berth.backends._bulk.ordered: the bounded-memory ordering of names behind Redis's (and files') listing."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from berth.backends._bulk import ordered

_WORDS = ["a", "a/b", "a-c", "a/b/c", "é", "日本", "\U0001f600", "Z", "z", "~", "a\u00ff", "a\u0100"]


@pytest.mark.parametrize("memory", [2, 7, 64, 100_000])
@pytest.mark.parametrize("reverse", [False, True])
def test_ordered_is_bytewise_utf8_order_with_each_name_once(memory: int, reverse: bool) -> None:
    rng = random.Random(memory)
    names = [f"{rng.choice(_WORDS)}{rng.randrange(10**6)}{rng.choice(_WORDS)}" for _ in range(3_000)] + _WORDS
    names += rng.sample(names, 500)  # a SCAN may name a key twice: the listing names it once
    rng.shuffle(names)
    got = list(ordered(names, reverse=reverse, memory=memory))
    want = sorted(set(names), key=lambda n: n.encode(), reverse=reverse)
    assert got == want


def test_ordered_handles_names_outside_the_sample_and_repeats_past_every_level() -> None:
    # the first names give the buckets' bounds; everything after sorts past the last bound
    names = [f"a{i:06d}" for i in range(5_000)] + [f"z{i:06d}" for i in range(5_000)]
    assert list(ordered(names, memory=100)) == sorted(names)
    assert list(ordered(["same"] * 5_000, memory=10)) == ["same"]
    assert list(ordered([], memory=10)) == []


def test_ordered_holds_bounded_memory_however_many_names() -> None:
    peaks = []
    for n in (20_000, 200_000):
        names = (f"bench/org/repo-{i % 97}/pr#{(i * 7919) % n}" for i in range(n))
        tracemalloc.start()
        try:
            count = sum(1 for _ in ordered(names, memory=4_096))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert count == n
    # ten times the names, about the same peak (sorting them in memory would take ~10x)
    assert peaks[1] < 2 * peaks[0], peaks


def test_ordered_leaves_no_file_behind(tmp_path) -> None:
    rows = ordered((f"k{i}" for i in range(5_000)), memory=100, directory=str(tmp_path))
    assert next(rows) == "k0"
    rows.close()  # an abandoned listing
    assert list(tmp_path.iterdir()) == []
    assert list(ordered((f"k{i}" for i in range(5_000)), memory=100, directory=str(tmp_path)))[-1] == "k999"
    assert list(tmp_path.iterdir()) == []


def test_an_ordering_fed_in_batches_is_the_same_order(tmp_path) -> None:
    from berth.backends._bulk import Ordering

    names = [f"n{(i * 7919) % 3000}" for i in range(3000)]
    with Ordering(memory=100, directory=str(tmp_path)) as ordering:
        assert not ordering.spills(99) and ordering.spills(100)
        for i in range(0, len(names), 37):
            ordering.add(names[i : i + 37])
        assert ordering.spilled
        assert list(ordering) == sorted(set(names))
    assert list(tmp_path.iterdir()) == []
