"""Attacks at the seams (issue 12): what a hostile operator or a careless host does around berth.

- a frame whose data key is wrapped under *another* KMS key, with the victim's KEK name (moto);
- a hostile directory under the file backend: symlinks, FIFOs, swapped and changed records;
- foreign values under a store's namespace, on every backend: enumeration must go on;
- SIGKILL during `Keyring.save`: no temporary copy of the keys survives the next load;
- a deadline that passes between the check and the commit of a claim or a wake.

Each scenario is a function returning a `Result`: short trials run in the default suite, long
ones behind `-m slow`, and scripts/reliability.py runs them as the "hostile" rows.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth
from berth.backends.memory import MemoryBackend
from berth.testing import FakeClock, RecordingBackend, make_envelope
from tests.reliability._common import Result, Timer

PAST = datetime(2000, 1, 1, tzinfo=timezone.utc)
REFUSED = (berth.IntegrityError, berth.FormatError)

# --- a hostile directory under the file backend -------------------------------------------

DIRECTORY_ATTACKS = (
    "fifo",
    "symlinked frame",
    "swapped record",
    "bad magic",
    "truncated",
    "generation 0",
    "symlinked dir",
)


def _bounded(fn: Callable[[], Any], seconds: float = 5.0) -> tuple[str, Any]:
    """("ok", value) / ("raised", exc) / ("hung", None): `fn` in a daemon thread with a time limit."""
    box: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - classified by the caller
            box.append(("raised", exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return box[0] if box else ("hung", None)


def _listed(store: berth.Store) -> list[berth.Listing]:
    return list(store.list())


def _unblock(path: Path) -> None:
    """Release a reader blocked opening a FIFO (what an old berth would do), so the trial goes on."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def run_hostile_directory(trials: int, work: Path, budget: float = 600) -> Result:
    """Every operation around a planted symlink, FIFO or changed record returns promptly with a berth error,
    never follows it outside the store, and leaves the other keys working."""
    result = Result("hostile: symlinks, FIFOs, swapped/changed records in a file store", "file")
    rng, timer = random.Random(1201), Timer(budget)
    for trial in range(trials):
        if not timer.left():
            break
        root, outside = work / f"t{trial}" / "s", work / f"t{trial}" / "outside"
        outside.mkdir(parents=True)
        (outside / "precious").write_bytes(b"not berth's")
        store = berth.open_store(f"file://{root}", identity="id", sealer=berth.PlaintextSealer())
        keys = [f"k{i}" for i in range(6)]
        for i, key in enumerate(keys):
            store.save(key, make_envelope(key, deadline=PAST if i % 2 else None))
        victim, other = rng.sample(keys, 2)
        attack = DIRECTORY_ATTACKS[trial % len(DIRECTORY_ATTACKS)]
        path = Path(store.backend._paths(f"id/{victim}")[1])  # type: ignore[attr-defined]
        other_path = Path(store.backend._paths(f"id/{other}")[1])  # type: ignore[attr-defined]
        record = path.read_bytes()
        if attack == "fifo":
            path.unlink()
            os.mkfifo(path, 0o600)
        elif attack == "symlinked frame":
            shutil.copy(other_path, outside / "copy")
            path.unlink()
            path.symlink_to(outside / "copy")
        elif attack == "swapped record":
            path.write_bytes(other_path.read_bytes())
        elif attack == "bad magic":
            path.write_bytes(b"XXXX" + record[4:])
        elif attack == "truncated":
            path.write_bytes(record[: rng.randrange(0, 14)])
        elif attack == "generation 0":
            path.write_bytes(record[:4] + bytes(8) + record[12:])
        else:  # the identity directory itself, moved outside and replaced by a symlink to it
            directory = path.parent  # `id@2` in the ordered layout
            os.rename(directory, outside / "id")
            directory.symlink_to(outside / "id")
        before = sorted((p.name, p.stat().st_size) for p in outside.rglob("*") if p.is_file())
        whole = attack == "symlinked dir"
        expect_victim = REFUSED if attack != "fifo" else (berth.IntegrityError,)
        ops: list[tuple[str, Callable[[], Any], bool]] = [
            ("load", functools.partial(store.load, victim, allow_expired=True), True),
            ("claim", functools.partial(store.claim, victim), True),
            ("list", functools.partial(_listed, store), whole),
            ("sweep", store.sweep, whole),
            ("reseal", store.reseal, whole),
            ("load other", functools.partial(store.load, other, allow_expired=True), whole),
        ]
        for name, op, must_refuse in ops:
            result.trials += 1
            outcome, value = _bounded(op)
            if outcome == "hung":
                result.fail(f"{attack}: {name} hung")
                _unblock(path)
                _bounded(op)
            elif must_refuse and not (outcome == "raised" and isinstance(value, expect_victim)):
                result.fail(f"{attack}: {name} gave {outcome} {value!r:.80} instead of a berth refusal")
            elif not must_refuse and outcome == "raised":
                result.fail(f"{attack}: {name} raised {type(value).__name__}: {value}"[:200])
            elif name == "list" and not whole:
                flagged = [i.key for i in value if i.error]
                if len(flagged) != 1 or len(value) != len(keys):
                    result.fail(f"{attack}: list showed {len(value)} entries, flagged {flagged}")
        after = sorted((p.name, p.stat().st_size) for p in outside.rglob("*") if p.is_file())
        if after != before:
            result.fail(f"{attack}: files outside the store changed: {before} -> {after}")
        store.close()
        shutil.rmtree(work / f"t{trial}", ignore_errors=True)
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{result.trials} operations over {trials} planted attacks ({', '.join(DIRECTORY_ATTACKS)})")
    return result


# --- foreign values under a namespace, on every backend -----------------------------------


def _foreign_values(rng: random.Random, good_frame: bytes) -> list[bytes]:
    flipped = bytearray(good_frame)
    flipped[14 + rng.randrange(0, 20)] ^= 0xFF  # inside the header JSON
    return [
        rng.randbytes(rng.randrange(0, 64)),
        b"\x89BERTH\r\n" + rng.randbytes(rng.randrange(0, 32)),
        good_frame[: rng.randrange(0, 40)],
        bytes(flipped),
        b'{"not": "a frame"}',
    ]


def run_foreign_values(backend: str, opener: Callable[[], Any], rounds: int, budget: float = 600) -> Result:
    """Values that are not frames among good ones: list flags each, sweep removes only the expired good
    frames, reseal counts the bad ones as failed, and every bad value is left in place."""
    result = Result("hostile: foreign values under the namespace (list, sweep, reseal go on)", backend)
    rng, timer = random.Random(1204), Timer(budget)
    for round_ in range(rounds):
        if not timer.left():
            break
        identity = f"hostile{round_}-{os.getpid()}"
        store = berth.Store(opener(), identity=identity, sealer=berth.PlaintextSealer())
        for i in range(4):
            store.save(f"good/{i}", make_envelope(f"g{i}", deadline=PAST if i % 2 else None))
        found = store.backend.get(f"{identity}/good/0")
        assert found is not None
        bad = _foreign_values(rng, bytes(found[0]))
        for i, value in enumerate(bad):
            store.backend.put(f"{identity}/bad/{i}", value)
        result.trials += 1
        try:
            items = {i.key: i.error for i in store.list()}
            flagged = sorted(k for k, e in items.items() if e)
            if flagged != sorted(f"bad/{i}" for i in range(len(bad))) or len(items) != 4 + len(bad):
                result.fail(f"round {round_}: list flagged {flagged} of {sorted(items)}")
            removed: list[str] = []
            swept = store.sweep(on_removed=functools.partial(_record_key, removed))
            if swept != 2 or sorted(removed) != ["good/1", "good/3"]:
                result.fail(f"round {round_}: sweep removed {removed}")
            report = store.reseal()
            if report.failed != len(bad):
                result.fail(f"round {round_}: reseal counted {report.failed} failed, not {len(bad)}")
            left = {i.key for i in store.list()}
            if left != {"good/0", "good/2", *(f"bad/{i}" for i in range(len(bad)))}:
                result.fail(f"round {round_}: left {sorted(left)}")
        except Exception as exc:  # noqa: BLE001 - an enumeration stopped: the failure this counts
            result.fail(f"round {round_}: {type(exc).__name__}: {exc}"[:200])
        for item in list(store.list()):
            if item.error is None:
                store.delete(item.key, item.token)
        for i in range(len(bad)):
            found = store.backend.get(f"{identity}/bad/{i}") if backend != "file" else None
            if found is not None:
                store.backend.delete(f"{identity}/bad/{i}", found[1])
        store.close()
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{result.trials} rounds x 5 foreign values among 4 frames (2 expired)")
    return result


# --- SIGKILL during Keyring.save ------------------------------------------------------------


def run_keyring_kills(kills: int, work: Path, budget: float = 600) -> Result:
    """A keyring save killed at a random moment: the file is the old or the new keyring, and no
    temporary copy of the keys survives the next load."""
    result = Result("hostile: SIGKILL mid Keyring.save (no secret temp file left)", "file")
    rng, timer = random.Random(1208), Timer(budget)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "keys.json"
    rings = [berth.Keyring.generate() for _ in range(2)]
    rings[0].save(path)
    left_behind = 0
    for _ in range(kills):
        if not timer.left():
            break
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child saves until it is killed
            try:
                while True:
                    rings[1].save(path)
                    rings[0].save(path)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        result.trials += 1
        left_behind += any(".tmp" in p.name for p in work.iterdir())
        try:
            loaded = berth.Keyring.load(path)
        except Exception as exc:  # noqa: BLE001 - a torn keyring is the failure this counts
            result.fail(f"keyring unreadable after a kill: {type(exc).__name__}: {exc}"[:200])
            rings[0].save(path)
            continue
        if loaded.primary not in (rings[0].primary, rings[1].primary):
            result.fail(f"keyring after a kill is neither the old nor the new one: {loaded!r}")
        temps = [p.name for p in work.iterdir() if ".tmp" in p.name]
        if temps:
            result.fail(f"temporary keyring copies left after the next load: {temps}")
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{result.trials} kills; {left_behind} left a temp file, each removed by the next load")
    return result


# --- a deadline passing between the check and the commit -------------------------------------


def run_deadline_at_commit(trials: int, budget: float = 600) -> Result:
    """Claims and wakes whose conditional delete takes a random time while the deadline comes near:
    an envelope whose deadline passed before the commit succeeded is never handed out."""
    result = Result("hostile: deadline passing between check and commit (claim, wake)", "memory")
    rng, timer = random.Random(1203), Timer(budget)
    handed = refused = 0
    for trial in range(trials):
        if not timer.left():
            break
        clock = FakeClock()
        delay = timedelta(milliseconds=rng.randrange(0, 200))

        def slow(_name: str, clock: FakeClock = clock, delay: timedelta = delay) -> None:
            clock.advance(delay)

        backend = RecordingBackend(MemoryBackend(), before_delete=slow)
        store = berth.Store(backend, identity="id", sealer=berth.PlaintextSealer(), clock=clock)
        deadline = clock.now + timedelta(milliseconds=rng.randrange(0, 200))
        result.trials += 1
        if trial % 2:
            questions = berth.QuestionStore(MemoryBackend(), identity="id", clock=clock)
            coordinator = berth.Coordinator(store, questions)
            coordinator.suspend("k", make_envelope(deadline=deadline))
            pending = questions.pending("k")
            assert pending is not None
            questions.provide("k", pending.id, "yes", by="ops")
            wake = coordinator.wake("k")
            got = wake.envelope if wake.decision is berth.WakeDecision.RESUME else None
        else:
            store.save("k", make_envelope(deadline=deadline))
            try:
                got = store.claim("k")
            except berth.Expired:
                got = None
        if got is not None:
            handed += 1
            if clock.now > deadline:
                result.fail(f"trial {trial}: handed out {clock.now - deadline} after its deadline")
        else:
            refused += 1
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{result.trials} claims and wakes: {handed} handed out in time, {refused} refused")
    return result


# --- a frame wrapped under another KMS key ---------------------------------------------------


def run_forged_kms(trials: int, moto_url: str, budget: float = 600) -> Result:
    """Frames forged with the victim's KEK name (alias, alias ARN) and a data key wrapped under another
    key the host may decrypt with: none opens, the honest frames do."""
    import boto3

    from berth.kms import AwsKms
    from tests.sealers.test_kms_aws import _alias_arn, _ForgerKms

    result = Result("hostile: frame wrapped under another KMS key (alias, alias ARN)", "kms-aws (moto)")
    timer = Timer(budget)
    admin = boto3.session.Session().client("kms", region_name="us-east-1", endpoint_url=moto_url)
    for trial in range(trials):
        if not timer.left():
            break
        victim = admin.create_key()["KeyMetadata"]
        other = admin.create_key()["KeyMetadata"]
        alias = f"alias/hostile-{victim['KeyId'][:12]}"
        admin.create_alias(AliasName=alias, TargetKeyId=victim["KeyId"])
        kek = alias if trial % 2 else _alias_arn(admin, alias)
        backend = MemoryBackend()

        def kms(key: str) -> AwsKms:
            return AwsKms(key, region_name="us-east-1", endpoint_url=moto_url)

        berth.Store(backend, identity="t", sealer=berth.KmsSealer(kms(kek))).save("real", make_envelope("real"))
        forger = berth.KmsSealer(_ForgerKms(kek, kms(other["Arn"])))
        berth.Store(backend, identity="t", sealer=forger).save("forged", make_envelope("forged"))
        store = berth.Store(backend, identity="t", sealer=berth.KmsSealer(kms(kek)))
        result.trials += 1
        try:
            store.claim("forged")
        except berth.IntegrityError:
            pass
        except Exception as exc:  # noqa: BLE001
            result.fail(f"trial {trial}: {type(exc).__name__}: {exc}"[:200])
        else:
            result.fail(f"trial {trial}: a frame wrapped under another key opened ({kek})")
        parked = store.load("real")
        if parked is None or parked.envelope.run_id != "real":
            result.fail(f"trial {trial}: the honest frame did not open")
    admin.close()
    result.seconds = timer.elapsed()
    result.notes.insert(0, f"{result.trials} forged frames refused before Decrypt; honest frames opened")
    return result


# --- the tests: short trials by default, long ones with -m slow ------------------------------


def _local_openers(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    from berth.backends.file import FileBackend
    from berth.backends.sqlite import SqliteBackend

    shared = MemoryBackend()
    return {
        "memory": lambda: shared,
        "file": lambda: FileBackend(str(tmp_path / "files")),
        "sqlite": lambda: SqliteBackend(str(tmp_path / "b.db")),
    }


def test_hostile_directory(tmp_path: Path) -> None:
    run_hostile_directory(len(DIRECTORY_ATTACKS) * 2, tmp_path).check()


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_foreign_values(tmp_path: Path, backend: str) -> None:
    run_foreign_values(backend, _local_openers(tmp_path)[backend], rounds=3).check()


def test_foreign_values_redis(redis_url: str) -> None:
    from berth.backends.redis import RedisBackend

    prefix = f"hostile{os.getpid()}{random.randrange(1 << 30)}:"
    opener = lambda: RedisBackend.from_url(redis_url, prefix=prefix, check_durability=False)  # noqa: E731
    run_foreign_values("redis", opener, rounds=2).check()


def test_keyring_kills(tmp_path: Path) -> None:
    run_keyring_kills(8, tmp_path / "keys").check()


def test_deadline_at_commit() -> None:
    run_deadline_at_commit(300).check()


@pytest.mark.s3
def test_forged_kms_frames(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    run_forged_kms(2, moto_url).check()


@pytest.mark.slow
def test_hostile_directory_long(tmp_path: Path) -> None:
    run_hostile_directory(700, tmp_path).check()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_foreign_values_long(tmp_path: Path, backend: str) -> None:
    run_foreign_values(backend, _local_openers(tmp_path)[backend], rounds=200).check()


@pytest.mark.slow
def test_keyring_kills_long(tmp_path: Path) -> None:
    run_keyring_kills(100, tmp_path / "keys").check()


@pytest.mark.slow
def test_deadline_at_commit_long() -> None:
    run_deadline_at_commit(20_000).check()


@pytest.mark.slow
@pytest.mark.s3
def test_forged_kms_frames_long(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    run_forged_kms(40, moto_url).check()


def _record_key(sink: list[str], item: berth.Listing) -> None:
    sink.append(item.key)
