"""open_store, the plaintext warning, error mapping, and the one-frame checkpoint helpers."""

from __future__ import annotations

import asyncio
import enum
import os
import stat
import sys
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import berth
import berth._core as store_module
import berth.aio
import berth.backends.memory
from berth.backends import register
from berth.backends._aio import ThreadedBackend
from berth.testing import SECRET, make_envelope


def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(berth.BerthError, match="unknown store scheme 'ftp'.*sqlite://"):
        berth.open_store("ftp://x", identity="a", sealer=berth.PlaintextSealer())
    with pytest.raises(berth.BerthError, match="no scheme"):
        berth.open_store("/just/a/path", identity="a", sealer=berth.PlaintextSealer())


def test_missing_extra_names_the_extra() -> None:
    register("fake-extra", "berth_tests_no_such_module.backend:X", extra="fakeextra")
    with pytest.raises(berth.BerthError, match=r"pip install 'berthing\[fakeextra\]'"):
        berth.open_store("fake-extra://x", identity="a", sealer=berth.PlaintextSealer())


def test_invalid_identity_before_any_io(tmp_path) -> None:
    with pytest.raises(berth.InvalidKey):
        berth.open_store(f"sqlite:///{tmp_path}/x.db", identity="../etc", sealer=berth.PlaintextSealer())
    assert not (tmp_path / "x.db").exists()


def test_import_berth_pulls_in_no_cloud_client() -> None:
    import subprocess

    code = (
        "import sys, berth, berth.testing; "
        "bad = [m for m in ('boto3', 'botocore', 'psycopg', 'redis', 'google.cloud', 'google.cloud.storage') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plaintext_store_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_warned_plaintext", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        berth.open_store("memory://", identity="a")
        berth.open_store("memory://", identity="b")
        berth.open_store("memory://", identity="c", sealer=berth.PlaintextSealer())
    plaintext = [w for w in caught if issubclass(w.category, berth.PlaintextWarning)]
    assert len(plaintext) == 1 and "not sealed" in str(plaintext[0].message)


class _Exploding:
    """A duck-typed backend (no `Backend` base class): the store uses its four required methods."""

    def put(self, name, data, *, if_match=None, if_absent=False):
        raise ConnectionResetError("peer reset")

    get = delete = scan = put


def test_raw_backend_errors_become_backend_error() -> None:
    store = berth.Store(_Exploding(), identity="a", sealer=berth.PlaintextSealer())  # type: ignore[arg-type]
    with pytest.raises(berth.BackendError, match="identity 'a', key 'k'") as info:
        store.save("k", make_envelope())
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert SECRET not in str(info.value)


class _RaisingBerthError:
    """A duck-typed backend whose every call raises the one berth error object it holds, naming no key."""

    def __init__(self, error: berth.BerthError):
        self.error = error

    def _raise(self, *args, **kwargs):
        raise self.error

    put = get = delete = scan = _raise


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("error_class", [berth.BackendError, berth.FormatError, berth.IntegrityError, berth.Expired])
def test_a_backend_error_is_restated_with_identity_and_key_never_changed(
    error_class: type[berth.BerthError], flavour: str
) -> None:
    original = error_class("sqlite backend could not save 'a/k': OperationalError: disk I/O error")
    original.detail = "kept"  # type: ignore[attr-defined]  # an attribute of the backend's own, carried over
    args, attributes = original.args, dict(vars(original))
    backend = _RaisingBerthError(original)
    if flavour == "sync":
        store = berth.Store(backend, identity="a", sealer=berth.PlaintextSealer())  # type: ignore[arg-type]
        with pytest.raises(error_class) as info:
            store.save("k", make_envelope())
    else:

        async def main() -> None:
            threaded = ThreadedBackend(backend)  # type: ignore[arg-type]
            astore = berth.aio.AsyncStore(threaded, identity="a", sealer=berth.PlaintextSealer())
            try:
                await astore.save("k", make_envelope())
            finally:
                await astore.aclose()

        with pytest.raises(error_class) as info:
            asyncio.run(main())
    raised = info.value
    assert raised is not original and type(raised) is error_class
    assert raised.__cause__ is original
    assert (raised.identity, raised.key) == ("a", "k")
    assert "identity 'a', key 'k'" in str(raised) and str(raised).startswith(str(original))
    assert "\n" not in str(raised) and SECRET not in str(raised)
    assert getattr(raised, "detail", None) == "kept"
    # The backend's exception object is exactly as it was raised.
    assert original.args == args and dict(vars(original)) == attributes
    assert (original.identity, original.key) == (None, None)
    assert str(original) == "sqlite backend could not save 'a/k': OperationalError: disk I/O error"


def test_a_backend_error_that_already_names_a_key_is_raised_as_it_is() -> None:
    original = berth.IntegrityError("tampered at identity 'a', key 'k'", identity="a", key="k")
    store = berth.Store(_RaisingBerthError(original), identity="a", sealer=berth.PlaintextSealer())  # type: ignore[arg-type]
    with pytest.raises(berth.IntegrityError) as info:
        store.load("k")
    assert info.value is original and original.args == ("tampered at identity 'a', key 'k'",)


def test_check_key_applies_the_key_rules_without_io() -> None:
    store = berth.Store(_Exploding(), identity="a", sealer=berth.PlaintextSealer())  # type: ignore[arg-type]
    assert store.check_key("org/repo#42") == "org/repo#42"
    for bad in ("", "/abs", "a//b", "a/../b", "tab\there", "x" * 1025):
        with pytest.raises(berth.InvalidKey, match="identity 'a'"):
            store.check_key(bad)


def test_a_key_is_checked_on_every_call_whatever_the_store_has_named_before(monkeypatch) -> None:
    # The store keeps the checked name of keys it has seen: a bad key is never among them, a str
    # subclass is refused (never kept), and past the cap keys are still checked and named.
    monkeypatch.setattr(store_module, "_NAMES_KEPT", 2)
    store = berth.open_store("memory://", identity="a", sealer=berth.PlaintextSealer(), accept_plaintext=True)

    class Key(str):
        pass

    with pytest.raises(berth.InvalidKey, match="not a subclass"):
        store.core.name(Key("k2"))
    for key in ("k1", "k1", "k3", "k4", "k4"):
        token = store.save(key, make_envelope())
        assert store.load(key) is not None
        store.delete(key, token)
        assert store.load(key) is None
    assert sorted(store.core._names) == ["k1", "k3"]
    for _ in range(2):
        for bad in ("", "a//b", "tab\there", 42):
            with pytest.raises(berth.InvalidKey, match="identity 'a'"):
                store.save(bad, make_envelope())  # type: ignore[arg-type]
            with pytest.raises(berth.InvalidKey, match="identity 'a'"):
                store.delete(bad, berth.Token(1))  # type: ignore[arg-type]


@pytest.mark.parametrize("witness", [None, "memory://"])
def test_a_str_subclass_key_is_refused_before_any_io_on_every_call(witness: str | None) -> None:
    # msgspec encodes exact str only, so a StrEnum key used to fail inside the seal as a BackendError
    # (after the witness or backend was asked): now it is an InvalidKey that says what to pass.
    class Key(enum.StrEnum):
        A = "org/repo#42"

    store = berth.Store(_Exploding(), identity="a", sealer=berth.PlaintextSealer())  # type: ignore[arg-type]
    if witness:
        store = berth.open_store("memory://", identity="a", sealer=berth.PlaintextSealer(), witness=witness)
    calls = [
        lambda: store.save(Key.A, make_envelope()),
        lambda: store.load(Key.A),
        lambda: store.claim(Key.A),
        lambda: store.delete(Key.A, berth.Token(1)),
        lambda: store.load_many(["ok", Key.A]),
    ]
    refused = r"identity 'a': a key is a str, not a subclass of it: pass str\(key\)"
    for call in calls:
        with pytest.raises(berth.InvalidKey, match=refused):
            call()
    if witness:
        store.save(str(Key.A), make_envelope())
        assert store.load(str(Key.A)) is not None


def test_checkpoint_round_trip_is_private_and_sealed(tmp_path) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    path = tmp_path / "turn-1.ckpt"
    env = make_envelope()
    old = os.umask(0)
    try:
        berth.save_checkpoint(path, env, sealer=sealer)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert SECRET.encode() not in path.read_bytes()
    loaded = berth.load_checkpoint(path, sealer=sealer)
    assert loaded.provider_state == env.provider_state
    assert [p.name for p in tmp_path.iterdir()] == ["turn-1.ckpt"]


def test_checkpoint_refuses_tampering_renaming_and_expiry(tmp_path) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    path = tmp_path / "a.ckpt"
    berth.save_checkpoint(path, make_envelope(), sealer=sealer)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    (tmp_path / "t.ckpt").write_bytes(bytes(data))
    with pytest.raises(berth.IntegrityError):
        berth.load_checkpoint(tmp_path / "t.ckpt", sealer=sealer)
    path.rename(tmp_path / "b.ckpt")
    with pytest.raises(berth.IntegrityError):
        berth.load_checkpoint(tmp_path / "b.ckpt", sealer=sealer)
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    berth.save_checkpoint(path, make_envelope(deadline=past), sealer=sealer)
    with pytest.raises(berth.Expired):
        berth.load_checkpoint(path, sealer=sealer)
    assert berth.load_checkpoint(path, sealer=sealer, allow_expired=True).deadline == past
    with pytest.raises(FileNotFoundError):
        berth.load_checkpoint(tmp_path / "missing.ckpt", sealer=sealer)
    with pytest.raises(berth.IntegrityError):
        berth.load_checkpoint(path)  # a plaintext reader is refused a sealed frame


def test_setup_delegates_to_a_backend_that_has_one() -> None:
    calls: list[str] = []

    class WithSchema(berth.backends.memory.MemoryBackend):
        def setup(self) -> None:
            calls.append("setup")

    berth.Store(WithSchema(), identity="a", sealer=berth.PlaintextSealer()).setup()
    assert calls == ["setup"]
    berth.open_store("memory://", identity="a", sealer=berth.PlaintextSealer()).setup()  # nothing to do


def _forged_plaintext_frame(state_len: int) -> bytes:
    """A plaintext frame whose header states `state_len`, its checksum recomputed (plaintext can be forged)."""
    import hashlib

    from berth._codec import PREFIX_SIZE, build_aad, peek_header

    store = berth.Store(berth.backends.memory.MemoryBackend(), identity="t", sealer=berth.PlaintextSealer())
    store.save("k", berth.Envelope(provider_state={"a": 1}, run_id="r"))
    found = store.backend.get("t/k")
    assert found is not None
    frame = bytes(found[0])
    header, end = peek_header(frame, "t", "k")
    head = frame[:end].replace(b'"state_len":%d' % header.state_len, b'"state_len":%d' % state_len)
    head = head[:9] + (len(head) - PREFIX_SIZE).to_bytes(4, "big") + head[13:]
    body = frame[end:-32]
    aad = build_aad(head, "t", "k")
    digest = hashlib.sha256(len(aad).to_bytes(8, "big") + aad + body).digest()
    return head + body + digest


@pytest.mark.parametrize(
    ("state_len", "error"),
    [(10_000, berth.IntegrityError), (0, berth.IntegrityError), (6, berth.FormatError), (8, berth.FormatError)],
    ids=["longer-than-body", "zero", "cuts-inside-state", "cuts-inside-envelope"],
)
def test_a_state_length_that_does_not_fit_its_body_is_refused(state_len: int, error: type[Exception]) -> None:
    store = berth.Store(berth.backends.memory.MemoryBackend(), identity="t", sealer=berth.PlaintextSealer())
    store.backend.put("t/k", _forged_plaintext_frame(state_len))
    with pytest.raises(error, match="identity 't', key 'k'"):
        store.load("k")
    assert store.backend.get("t/k") is not None  # left in place


def test_parked_repr_shows_no_state() -> None:
    store = berth.Store(berth.backends.memory.MemoryBackend(), identity="a", sealer=berth.PlaintextSealer())
    store.save("k", make_envelope())
    parked = store.load("k")
    assert parked is not None
    assert SECRET not in repr(parked) and SECRET not in str(parked)
    assert "Token(" in repr(parked) and "bytes>" in repr(parked)


def test_a_state_of_the_documented_maximum_fits_the_default_limit() -> None:
    # issue 15.6: the default limit counted the whole envelope JSON, so a 64 MiB state was refused
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    store = berth.open_store("memory://", identity="big", sealer=sealer)
    assert store.max_envelope_bytes == store_module.DEFAULT_MAX_ENVELOPE_BYTES
    state = b'"' + b"a" * (store_module.MAX_STATE_BYTES - 2) + b'"'
    assert len(state) == 64 * 1024 * 1024
    env = berth.Envelope(
        provider_state=state,
        run_id="r" * 200,
        labels={f"l{i}": "v" * 256 for i in range(64)},
        pending_calls=[berth.PendingCall(f"c{i}", "tool", {"x": "y" * 1000}) for i in range(100)],
    )
    store.save("k", env)
    parked = store.load("k")
    assert parked is not None and len(parked.envelope.provider_state) == len(state)
    del parked, env
    too_big = b'"' + b"a" * (store_module.DEFAULT_MAX_ENVELOPE_BYTES - 2) + b'"'
    with pytest.raises(berth.EnvelopeTooLarge, match="max_envelope_bytes"):
        store.save("k2", berth.Envelope(provider_state=too_big))
    assert store.load("k2") is None


class _ListingFails(berth.backends.memory.MemoryBackend):
    """A memory backend whose listing (heads, sorted_heads) fails as a client library's own error would."""

    def heads(self, prefix: str, size: int) -> Any:
        raise OSError("connection reset")

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Any:
        raise OSError("connection reset")


def _bulk(store: berth.Store | berth.aio.AsyncStore, call: str, **kwargs: object) -> object:
    """`store.<call>(**kwargs)`, awaited for an `AsyncStore`."""
    result = getattr(store, call)(**kwargs)
    if isinstance(store, berth.aio.AsyncStore):
        return asyncio.run(result)
    return result


def _store(kind: str, backend: berth.backends.memory.MemoryBackend, *, witnessed: bool = False, **kwargs: Any) -> Any:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    witness = berth.backends.memory.MemoryBackend() if witnessed else None
    if kind == "sync":
        return berth.Store(backend, identity="bulk", sealer=sealer, witness=witness, **kwargs)
    return berth.aio.AsyncStore(
        ThreadedBackend(backend),
        identity="bulk",
        sealer=sealer,
        witness=None if witness is None else ThreadedBackend(witness),
        **kwargs,
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("call", "kwargs"),
    [
        ("sweep", {"prefix": "t/"}),
        ("reseal", {"prefix": "t/"}),
        ("delete_prefix", {"prefix": "t/"}),
        ("adopt", {}),
    ],
)
def test_a_bulk_call_whose_listing_fails_raises_a_backend_error_naming_identity_and_prefix(
    kind: str, call: str, kwargs: dict[str, object]
) -> None:
    """A failed listing is the backend's failure, typed and named as every other (sync reseal and adopt
    let the client's own error out unnamed)."""
    store = _store(kind, _ListingFails(), witnessed=call == "adopt")
    for progress in (None, lambda key: None):  # the backend's order, and key order
        if call == "adopt" and progress is not None:
            continue
        with pytest.raises(berth.BackendError, match="connection reset") as caught:
            _bulk(store, call, **kwargs, **({} if progress is None else {"on_progress": progress}))
        assert caught.value.identity == "bulk"
        assert caught.value.key == ("t/" if kwargs else "*")
        assert isinstance(caught.value.__cause__, OSError)


class _Mine(Exception):
    """What a caller's callback raises."""


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("call", "hook"),
    [("sweep", "on_removed"), ("sweep", "on_progress"), ("reseal", "on_progress"), ("delete_prefix", "on_progress")],
)
def test_what_a_bulk_calls_callback_raises_comes_out_as_raised(kind: str, call: str, hook: str) -> None:
    """The caller's own error is not the backend's: never turned into a `BackendError` (the sync sweep
    did, and both delete_prefix did for `on_progress`)."""
    clock = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    backend = berth.backends.memory.MemoryBackend()
    seeding = berth.Store(backend, identity="bulk", sealer=berth.PlaintextSealer(), clock=lambda: clock[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key in ("t/a", "t/b"):
            seeding.save(key, make_envelope(deadline=clock[0] + timedelta(seconds=1)))
    store = _store(kind, backend, accept_plaintext=True)

    def hook_fn(_: object) -> None:
        raise _Mine("the caller's own")

    kwargs: dict[str, object] = {"prefix": "t/", hook: hook_fn}
    if call == "sweep":
        kwargs["now"] = clock[0] + timedelta(days=1)
    with pytest.raises(_Mine):
        _bulk(store, call, **kwargs)
