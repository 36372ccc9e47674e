"""The envelope, digests and check_resumable."""

from __future__ import annotations

import copy
import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given as hypothesis_given
from hypothesis import settings
from hypothesis import strategies as st

import berth
from berth._codec import open_frame, seal_frame
from berth.testing import make_envelope

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def _round_trip(env: berth.Envelope) -> berth.Envelope:
    """`env` through the codec: sealed into a frame and opened back."""
    sealer = berth.PlaintextSealer()
    frame = seal_frame(env, identity="t", key="k", created_at=NOW, sealer=sealer, max_bytes=1 << 20)
    return open_frame(frame, identity="t", key="k", sealer_for=lambda header: sealer)


def test_provider_state_is_carried_verbatim() -> None:
    raw = b'{ "b": 1,   "a": [1.50, "\\u00e9"] }'
    env = berth.Envelope(provider_state=raw)
    assert env.provider_state == raw
    assert _round_trip(env).provider_state == raw


def test_json_values_are_encoded_once() -> None:
    env = berth.Envelope(provider_state={"messages": [{"role": "user", "content": "hi"}]}, loop_state=[1, 2])
    assert env.state() == {"messages": [{"role": "user", "content": "hi"}]}
    assert env.loop_state == b"[1,2]"


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ({1: "a"}, b'{"1":"a"}'),  # integer keys
        ([2**70], b"[1180591620717411303424]"),  # beyond 64 bits: exact in the bytes
        ({"deep": _nested(300)}, None),  # nesting past orjson's 254 levels
    ],
    ids=["int-keys", "big-int", "deep"],
)
def test_values_the_fast_encoder_refuses_are_still_encoded(value: object, encoded: bytes | None) -> None:
    env = berth.Envelope(provider_state=value)
    if encoded is not None:
        assert env.provider_state == encoded
    assert env.provider_state.count(b"[") == str(value).count("[")


def test_unencodable_values_are_refused() -> None:
    with pytest.raises(berth.InvalidEnvelope, match="provider_state cannot be encoded"):
        berth.Envelope(provider_state={"when": object()})
    with pytest.raises(berth.InvalidEnvelope, match="lone surrogate"):
        berth.Envelope(provider_state=["\ud800"])


def test_loop_state_json_null_means_no_loop_state() -> None:
    """None and JSON null are one value ("no loop state"), at construction and through a frame."""
    for given in (None, b"null", b" null "):
        env = berth.Envelope(provider_state={}, loop_state=given)
        assert env.loop_state is None
        assert _round_trip(env).loop_state is None
    for given in (b'"null"', b"0", b"[]", b"{}"):  # anything else is kept byte for byte
        env = berth.Envelope(provider_state={}, loop_state=given)
        assert _round_trip(env).loop_state == given


def test_envelope_is_immutable() -> None:
    env = make_envelope()
    with pytest.raises(AttributeError):
        env.model = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        env.labels["x"] = "y"  # type: ignore[index]
    assert isinstance(env.pending_calls, tuple)


def test_replace_copy_and_pickle() -> None:
    env = make_envelope()
    assert env.replace(model="other").model == "other" and env.model == "claude-test"
    assert copy.deepcopy(env) == env
    assert pickle.loads(pickle.dumps(env)) == env


@pytest.mark.parametrize(
    "changes",
    [
        {"deadline": datetime(2030, 1, 1)},
        {"created_at": datetime(2030, 1, 1)},
        {"deadline": "tomorrow"},
        {"provider_state": b"not json"},
        {"provider_state": b'{"a": 1} trailing'},
        {"provider_state": {"x": complex(1, 2)}},
        {"loop_state": b"{"},
        {"labels": {"k": 1}},
        {"labels": {"": "v"}},
        {"labels": {"k": "v" * 300}},
        {"pending_calls": ["not a call"]},
        {"pending_calls": "abc"},
        {"turn": "3"},
        {"turn": True},
        {"provider": None},
    ],
)
def test_bad_fields_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(berth.InvalidEnvelope) as info:
        make_envelope(**changes)
    assert isinstance(info.value, ValueError)


def test_pending_call_input_must_be_json() -> None:
    with pytest.raises(berth.InvalidEnvelope):
        berth.PendingCall("1", "ask", b"{nope")
    assert berth.PendingCall("1", "ask", {"q": "?"}).input_value() == {"q": "?"}


def test_digest_json_is_canonical() -> None:
    assert berth.digest_json({"b": 1, "a": 2}) == berth.digest_json({"a": 2, "b": 1})
    assert berth.digest_json({"a": 1}) != berth.digest_json({"a": 2})
    assert berth.digest_json([]).startswith("sha256:") and len(berth.digest_json([])) == 71
    with pytest.raises(berth.InvalidEnvelope):
        berth.digest_json(object())


def test_digest_file(tmp_path) -> None:
    p = tmp_path / "machine.yaml"
    p.write_bytes(b"states: [a, b]\n")
    assert berth.digest_file(p) == "sha256:" + __import__("hashlib").sha256(b"states: [a, b]\n").hexdigest()


def test_check_resumable() -> None:
    env = make_envelope(deadline=NOW + timedelta(hours=1))
    ok: dict[str, Any] = dict(provider=env.provider, model=env.model, config_digest=env.config_digest)
    berth.check_resumable(env, **ok, now=NOW)
    for field, value in (("provider", "openai"), ("model", "other"), ("config_digest", "sha256:1")):
        with pytest.raises(berth.ConfigDrift):
            berth.check_resumable(env, **{**ok, field: value}, now=NOW)
    with pytest.raises(berth.ConfigDrift):
        berth.check_resumable(env.replace(version=2), **ok, now=NOW)
    berth.check_resumable(env, **ok, now=NOW + timedelta(hours=1))  # at the deadline: still fine
    with pytest.raises(berth.Expired) as info:
        berth.check_resumable(env, **ok, now=NOW + timedelta(hours=1, microseconds=1))
    assert info.value.deadline == env.deadline
    assert berth.check_resumable(env.replace(deadline=None), **ok) is None


def test_json_null_loop_state_is_no_loop_state() -> None:
    for value in (b"null", b" null\n", None):
        env = berth.Envelope(provider_state={}, loop_state=value)
        assert env.loop_state is None
        assert _round_trip(env) == env.replace(created_at=NOW)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused_not_turned_into_null(number: float) -> None:
    # issue 12.9: both encoders wrote NaN and ±Infinity as null, so the state did not round-trip
    for build in (
        lambda: berth.Envelope(provider_state=number),
        lambda: berth.Envelope(provider_state={"messages": [{"score": number}], "none": None}),
        lambda: berth.Envelope(provider_state={}, loop_state=[1, None, (2, number)]),
        lambda: berth.PendingCall("c", "n", {"x": [number], "y": None}),
    ):
        with pytest.raises(berth.InvalidEnvelope, match="NaN or Infinity"):
            build()
    assert berth.Envelope(provider_state={"a": None, "b": 1.5, "c": 1e308}).state() == {"a": None, "b": 1.5, "c": 1e308}


class _Dict(dict[str, object]):
    pass


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_found_in_every_container_and_depth(number: float) -> None:
    # the walk skips scalars by exact type: dict subclasses, sets, tuples and depth are still searched
    for state in (
        number,
        [number],
        {"a": [None, "x", 1, True, {"b": (None, {number} if number == number else frozenset([number]))}]},
        _Dict(a=[None, [[[[[[number]]]]]]]),
        [None] * 1000 + [{"deep": [None, [number]]}],
    ):
        with pytest.raises(berth.InvalidEnvelope, match="NaN or Infinity"):
            berth.Envelope(provider_state=state)
    finite = [None, 2.5, -0.0, 5e-324, -1.7976931348623157e308, _Dict(n=None, f=[1e308, (0.5,)])]
    back = [None, 2.5, -0.0, 5e-324, -1.7976931348623157e308, {"n": None, "f": [1e308, [0.5]]}]
    assert berth.Envelope(provider_state=finite).state() == back


def _non_finite_reference(value: object) -> bool:
    """The plain recursive definition the fast walk must agree with."""
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_non_finite_reference(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite_reference(v) for v in value)
    return False


_json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([float("nan"), float("inf"), float("-inf")])
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(_Dict)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@hypothesis_given(_json_like)
def test_a_state_is_refused_exactly_when_it_holds_nan_or_infinity(state: object) -> None:
    if _non_finite_reference(state):
        with pytest.raises(berth.InvalidEnvelope, match="NaN or Infinity"):
            berth.Envelope(provider_state=state)
    else:
        berth.Envelope(provider_state=state)  # nothing else is refused


_LARGE = "x" * 4096  # past _C_SEARCH_FROM: the state's JSON is searched for null by C's strstr


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@hypothesis_given(_json_like, st.booleans())
def test_a_large_state_is_refused_exactly_when_it_holds_nan_or_infinity(state: object, last: bool) -> None:
    # issue 15.4: a state of 2 KiB or more is searched for null in C; the answer is the same
    large = [_LARGE, state] if last else [state, _LARGE]
    if _non_finite_reference(state):
        with pytest.raises(berth.InvalidEnvelope, match="NaN or Infinity"):
            berth.Envelope(provider_state=large)
    else:
        assert berth.Envelope(provider_state=large).state()[0 if last else 1] == _LARGE  # nothing else is refused


@pytest.mark.parametrize("c_search", [True, False])
def test_the_null_search_is_exact_at_every_offset_with_or_without_c(c_search: bool, monkeypatch: Any) -> None:
    from berth import _envelope

    if not c_search:  # as on a platform with no C library to load by name
        monkeypatch.setattr(_envelope, "_c_strstr", lambda: None)
    elif _envelope._c_strstr() is None:
        pytest.skip("no C library strstr here")
    size = 3000
    for at in (0, 1, 15, 16, 17, 31, 32, 1000, size - 5, size - 4):
        data = bytearray(b"n" * size)
        data[at : at + 4] = b"null"
        assert _envelope._holds_null(bytes(data)), at
        data[at + 3] = ord("x")
        assert not _envelope._holds_null(bytes(data)), at
    # strstr stops at a NUL byte, which no encoder writes: data holding one is searched in full anyway
    assert _envelope._holds_null(b"a" * size + b"\0" + b"null")
    assert not _envelope._holds_null(b"a" * size + b"\0" + b"nul")
    nan_last = [{"text": "null and more" * 300}, None, {"score": float("nan")}]
    with pytest.raises(berth.InvalidEnvelope, match="NaN or Infinity"):
        berth.Envelope(provider_state=nan_last)
    nan_last[2] = {"score": 0.5}
    assert berth.Envelope(provider_state=nan_last).state() == nan_last


def test_state_bytes_with_invalid_utf8_inside_a_string_are_refused() -> None:
    # issue 12.2: accepted, parked and claimed, then envelope.state() raised: the run was lost
    for raw in (b'{"a": "\xff"}', b'["ok", "\xc3\x28"]', b'{"\xed\xa0\x80": 1}'):
        with pytest.raises(berth.InvalidEnvelope, match="UTF-8"):
            berth.Envelope(provider_state=raw)
        with pytest.raises(berth.InvalidEnvelope, match="UTF-8"):
            berth.Envelope(provider_state={}, loop_state=raw)
        with pytest.raises(berth.InvalidEnvelope, match="UTF-8"):
            berth.PendingCall("c", "n", raw)
    env = berth.Envelope(provider_state='{"é": "ü"}'.encode())
    assert env.state() == {"é": "ü"}


def test_a_large_state_is_checked_for_utf8_a_piece_at_a_time() -> None:
    # issue 15.6: one str of the whole state (4 bytes a character with an emoji in it) cost 3.9x
    # the state in peak memory; the check goes piece by piece, and still finds every bad byte
    import tracemalloc

    from berth._envelope import _UTF8_PIECE as piece

    text = ("naïve 🙂 " * 600_000).encode()  # ~7.8 MiB: many pieces, characters across their ends
    good = b'["' + text + b'"]'
    tracemalloc.start()
    env = berth.Envelope(provider_state=good)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert env.provider_state is good or env.provider_state == good
    assert peak < len(good) // 4, peak
    for at in (2, piece - 1, piece, piece + 1, 5 * piece + 2, len(good) - 2):
        while good[at] & 0xC0 == 0x80:  # a character's start, so the bad byte is where it is reported
            at += 1
        bad = good[:at] + b"\xff" + good[at:]
        with pytest.raises(berth.InvalidEnvelope, match=f"invalid UTF-8 at byte {at}"):
            berth.Envelope(provider_state=bad)
    with pytest.raises(berth.InvalidEnvelope, match="UTF-8"):  # a character cut at the very end
        berth.Envelope(provider_state=good[:-2].rstrip(b"\x80\x81\x82\x83\x84\x85\x86\x87") + b'\xf0\x9f"]')


def test_state_nested_too_deeply_is_invalid_envelope_not_recursion_error() -> None:
    # issue 12.6
    deep_bytes = b"[" * 3000 + b"]" * 3000
    deep_value: list[object] = []
    cursor = deep_value
    for _ in range(3000):
        inner: list[object] = []
        cursor.append(inner)
        cursor = inner
    for state in (deep_bytes, deep_value):
        with pytest.raises(berth.InvalidEnvelope):
            berth.Envelope(provider_state=state)


def test_surrounding_whitespace_of_raw_state_is_dropped_once() -> None:
    env = berth.Envelope(provider_state=b'\n  {"a": 1}  \n', loop_state=b" [1] ")
    assert env.provider_state == b'{"a": 1}' and env.loop_state == b"[1]"
    assert _round_trip(env) == env.replace(created_at=NOW)


def test_repr_shows_ids_and_sizes_never_the_state() -> None:
    secret = "the customer's card is 4111-1111"
    env = berth.Envelope(
        provider_state={"messages": [secret]},
        loop_state={"note": secret},
        pending_calls=[berth.PendingCall("call-7", "ask", {"q": secret})],
        run_id="run-9",
        labels={"repo": "org/repo"},
    )
    for text in (repr(env), str(env), f"{env!r}", repr(env.pending_calls[0]), repr([env])):
        assert secret not in text and "4111" not in text, text
    assert "run-9" in repr(env) and f"<{len(env.provider_state)} bytes>" in repr(env)
    assert "'call-7'" in repr(env) and "org/repo" in repr(env)
    assert (
        repr(env.pending_calls[0])
        == f"PendingCall(id='call-7', name='ask', input=<{len(env.pending_calls[0].input)} bytes>)"
    )


def test_fields_off_the_fast_check_are_checked_one_by_one() -> None:
    # The usual envelope (ASCII str, plain int) passes one check; anything else goes field by field.
    class Name(str):
        pass

    class Turn(int):
        pass

    env = make_envelope(provider="anthröpic", model=Name("claude-x"), reason="wartet ✓", turn=Turn(3))
    assert (env.provider, env.model, env.reason, env.turn) == ("anthröpic", "claude-x", "wartet ✓", 3)
    assert type(env.model) is Name and type(env.turn) is Turn  # kept as given, as before
    for field_name in ("provider", "model", "config_digest", "run_id", "reason", "trace_id"):
        with pytest.raises(berth.InvalidEnvelope, match=f"^{field_name} must be a str"):
            make_envelope(**{field_name: "bad \ud800"})
        with pytest.raises(berth.InvalidEnvelope, match=f"^{field_name} must be a str"):
            make_envelope(**{field_name: b"bytes"})  # type: ignore[arg-type]
    for field_name in ("version", "turn", "remaining_turns"):
        with pytest.raises(berth.InvalidEnvelope, match=f"^{field_name} must be an int"):
            make_envelope(**{field_name: False})  # type: ignore[arg-type]
