"""The contract's cases for `save_many`: each item's outcome, conflicts among saves, refusals before any I/O, chunks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from berth._batch import SaveItem
from berth._errors import EnvelopeTooLarge, InvalidEnvelope, InvalidKey, TokenMismatch
from berth._store import Store
from berth._token import Token
from berth.backends import Backend
from berth.testing._fixtures import SECRET, make_envelope
from berth.testing._recording import RecordingBackend

__all__ = ["SaveManyCases"]


def _run_ids(store: Store, keys: list[str]) -> list[str | None]:
    return [None if p is None else p.envelope.run_id for p in store.load_many(keys)]


class SaveManyCases:
    """`save_many` (docs/store.md, *Saving many*); `StoreContract` provides the fixtures."""

    def test_save_many_saves_each_with_its_token(self, store: Store) -> None:
        keys = [f"many/{i}" for i in range(5)]
        results = store.save_many([(key, make_envelope(key)) for key in keys])
        assert [r.key for r in results] == keys and all(r.ok and r.error is None for r in results)
        for result in results:
            parked = store.load(result.key)
            assert parked is not None and parked.envelope.run_id == result.key
            assert parked.token == result.token and not parked.token.is_zero
        assert [i.key for i in store.list("many/")] == keys

    def test_save_many_reports_a_conflict_and_writes_the_others(self, store: Store) -> None:
        store.save("taken", make_envelope("first"))
        old = store.save("moved", make_envelope("moved-1"))
        store.save("moved", make_envelope("moved-2"))  # `old` is stale now
        current = store.save("current", make_envelope("current-1"))
        results = store.save_many(
            [
                ("new-1", make_envelope("new-1")),
                SaveItem("taken", make_envelope("second"), if_absent=True),
                SaveItem("moved", make_envelope("moved-3"), if_match=old),
                SaveItem("current", make_envelope("current-2"), if_match=current),
                SaveItem("fresh", make_envelope("fresh"), if_absent=True),
                ("new-2", make_envelope("new-2")),
            ]
        )
        assert [r.ok for r in results] == [True, False, False, True, True, True]
        for lost in (results[1], results[2]):
            assert isinstance(lost.error, TokenMismatch) and lost.token is None
            assert lost.error.key == lost.key and lost.error.identity == store.identity
            assert SECRET not in str(lost.error)
        keys = ["new-1", "taken", "moved", "current", "fresh", "new-2"]
        assert _run_ids(store, keys) == ["new-1", "first", "moved-2", "current-2", "fresh", "new-2"]
        parked = store.load("current")  # the batch's compare-and-set moved it on
        assert parked is not None and parked.token == results[3].token != current

    def test_save_many_of_nothing_does_no_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        assert store.save_many([]) == []
        assert store.save_many(iter(())) == []
        assert recorder.calls == []

    def test_save_many_refuses_a_key_twice_before_any_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        batch = [("a", make_envelope("1")), ("dup", make_envelope("2")), ("b", make_envelope("3"))]
        with pytest.raises(InvalidKey, match="twice") as info:
            store.save_many([*batch, SaveItem("dup", make_envelope("4"), if_absent=True)])
        assert info.value.key == "dup" and "items 1 and 3" in str(info.value)
        assert recorder.calls == []

    def test_save_many_refuses_bad_input_before_any_io(
        self, make_store: Callable[..., Store], backend_opener: Callable[[], Backend]
    ) -> None:
        recorder = RecordingBackend(backend_opener())
        store = make_store(backend=recorder)
        good = [("ok-1", make_envelope("1")), ("ok-2", make_envelope("2"))]
        refusals: list[tuple[type[Exception], list[object]]] = [
            (InvalidKey, [*good, ("a//b", make_envelope())]),
            (InvalidEnvelope, [*good, ("k", {"not": "an envelope"})]),
            (InvalidEnvelope, [*good, "k"]),
            (InvalidEnvelope, [*good, ("k",)]),
            (TokenMismatch, [*good, SaveItem("k", make_envelope(), if_match=Token.ZERO)]),
            (TokenMismatch, [*good, SaveItem("k", make_envelope(), if_absent=True, if_match=Token(1))]),
        ]
        for error, batch in refusals:
            with pytest.raises(error):
                store.save_many(batch)  # type: ignore[arg-type]
        with pytest.raises(InvalidEnvelope):
            store.save_many(SaveItem("k", make_envelope()))  # type: ignore[arg-type]  # one item, not a batch
        assert recorder.calls == []

    def test_save_many_reports_an_envelope_too_large(self, make_store: Callable[..., Store]) -> None:
        store = make_store(max_envelope_bytes=4096)
        results = store.save_many(
            [("small", make_envelope("s")), ("big", make_envelope("b", provider_state={"x": "y" * 8192}))]
        )
        assert results[0].ok and isinstance(results[1].error, EnvelopeTooLarge) and results[1].token is None
        assert _run_ids(store, ["small", "big"]) == ["s", None]

    def test_save_many_in_chunks_keeps_each_outcome(self, store: Store) -> None:
        store.core.save_batch = 3  # eight items: three chunks (of one put_many each), a conflict in the second
        store.save("k/4", make_envelope("parked"))
        keys = [f"k/{i}" for i in range(8)]
        batch = [SaveItem(key, make_envelope(key), if_absent=True) for key in keys]
        results = store.save_many(batch)
        assert [r.key for r in results] == keys
        assert [r.ok for r in results] == [i != 4 for i in range(8)]
        assert _run_ids(store, keys) == [("parked" if i == 4 else key) for i, key in enumerate(keys)]
