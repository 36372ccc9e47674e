"""Races at scale: claimers, a re-saver and a sweeper at once, on every backend.

Every key of a large set is parked (some already past their deadline). Then,
together: several claimer processes claim every key in the same order (so they
contend on each key), one process re-saves every 7th key twice (a forward pass
and a backward pass, so some re-saves land after the key was claimed), and one
process sweeps in a loop. Afterwards the parent claims whatever is left, and:

- no run is handed to two callers (zero double claims);
- no expired run is ever handed out;
- every acknowledged re-save, unless superseded by a later acknowledged
  re-save, was claimed exactly once (zero lost re-saves), and every run parked
  at the start that was neither expired nor superseded was claimed exactly once.

With `unknown_ok` (for an emulator that stalls under this load, Azurite), a claim or re-save
that raises `BackendError` -- the contract's "unknown outcome": it may or may not have been
applied -- is counted apart rather than as a failure, and its key is checked for double claims
only (the run it concerns may rightly be claimed once or never); every other check stands.

The memory backend runs the same scenario with threads. With a witness (issue 20:
every opener can take one, in another file, table or key prefix), the same checks
hold, no worker sees an `IntegrityError` (a race is never taken for a replay or a
missing run), and the audit afterwards is clean.
"""

from __future__ import annotations

import json
import multiprocessing
import secrets
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth

from ._common import Result, Timer, big_envelope, scan_tree

Opener = Callable[[], berth.Store]
RESAVE_EVERY = 7
EXPIRED_EVERY = 5


def _keys(n: int) -> list[str]:
    return [f"race/{i:06d}" for i in range(n)]


def _claimer(open_store: Opener, keys: list[str], start: Any, out: str, unknown_ok: bool) -> None:
    store = open_store()
    won, expired, errors, unknown = [], [], [], []
    start.wait()
    for key in keys:
        try:
            env = store.claim(key)
        except berth.Expired:
            expired.append(key)
            continue
        except _unknown(unknown_ok) as exc:
            unknown.append(f"{key}: {type(exc).__name__}: {exc}")
            continue
        except berth.BerthError as exc:
            errors.append(f"{key}: {type(exc).__name__}: {exc}")
            continue
        if env is not None:
            won.append(env.run_id)
    store.close()
    Path(out).write_text(json.dumps({"won": won, "expired": expired, "errors": errors, "unknown": unknown}))


def _resaver(open_store: Opener, keys: list[str], start: Any, out: str, unknown_ok: bool) -> None:
    store = open_store()
    future = datetime.now(timezone.utc) + timedelta(days=1)
    env = big_envelope(size=500, deadline=future)
    acked, errors, unknown = [], [], []
    start.wait()
    subset = keys[::RESAVE_EVERY]
    for version, order in ((1, subset), (2, subset[::-1])):
        for key in order:
            run = f"v{version}:{key}"
            try:
                store.save(key, env.replace(run_id=run))
            except _unknown(unknown_ok) as exc:
                unknown.append(f"{key}: {type(exc).__name__}: {exc}")
                continue
            except berth.BerthError as exc:
                errors.append(f"{key}: {type(exc).__name__}: {exc}")
                continue
            acked.append(run)
    store.close()
    Path(out).write_text(json.dumps({"acked": acked, "errors": errors, "unknown": unknown}))


def _sweeper(open_store: Opener, start: Any, done: Any, out: str, pause: float) -> None:
    store = open_store()
    removed = sweeps = 0
    errors = []
    start.wait()
    stop = time.monotonic() + 900
    while not done.is_set() and time.monotonic() < stop:
        try:
            removed += store.sweep()
        except berth.BerthError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        sweeps += 1
        done.wait(pause)
    store.close()
    Path(out).write_text(json.dumps({"removed": removed, "sweeps": sweeps, "errors": errors}))


def run_races(
    backend: str,
    open_store: Opener,
    root: Path,
    *,
    keys: int,
    claimers: int = 3,
    processes: bool = True,
    sweep_pause: float = 0.0,
    budget: float = 900.0,
    scan: Path | None = None,
    witness: bool = False,
    unknown_ok: bool = False,
) -> Result:
    """Race `claimers` claimers, a re-saver and a sweeper over `keys` keys; count failed keys and worker errors.

    With `scan` (a local store's directory), every file under it is then checked for the
    plaintext marker and for modes 0600 / 0700, as the crash trials check theirs. `witness`:
    the stores `open_store` opens have a witness; the audit after the final claims must be clean.
    """
    result = Result(f"races{' with a witness' if witness else ''}: claimers x re-saver x sweeper", backend)
    root.mkdir(parents=True, exist_ok=True)
    timer = Timer(budget)
    names = _keys(keys)
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    future = datetime.now(timezone.utc) + timedelta(days=1)
    env = big_envelope(size=500)
    store = open_store()
    expired0 = set()
    for i, key in enumerate(names):
        expired = i % EXPIRED_EVERY == 0
        _retrying(store.save, key, env.replace(run_id=f"v0:{key}", deadline=past if expired else future))
        if expired:
            expired0.add(f"v0:{key}")
    if not processes:
        start: Any = threading.Barrier(claimers + 2)
        done: Any = threading.Event()
        spawn: Callable[..., Any] = lambda target, args: threading.Thread(target=target, args=args)  # noqa: E731
    else:
        store.close()  # no connection crosses the fork
        ctx = multiprocessing.get_context("fork")
        start, done = ctx.Barrier(claimers + 2), ctx.Event()
        spawn = lambda target, args: ctx.Process(target=target, args=args)  # noqa: E731
    outs = [str(root / f"claimer-{c}.json") for c in range(claimers)]
    workers = [spawn(_claimer, (open_store, names, start, out, unknown_ok)) for out in outs]
    workers.append(spawn(_resaver, (open_store, names, start, str(root / "resaver.json"), unknown_ok)))
    sweeper = spawn(_sweeper, (open_store, start, done, str(root / "sweeper.json"), sweep_pause))
    for w in [*workers, sweeper]:
        w.start()
    for w in workers:
        w.join(max(1.0, timer.stop - time.monotonic()))
    done.set()
    sweeper.join(60)
    for w in [*workers, sweeper]:
        if w.is_alive():
            result.fail(f"a worker overran the {budget:.0f} s budget")
            if processes and w.pid:
                w.kill()
                w.join(5)
    if result.failures:
        return result
    claims = [json.loads(Path(out).read_text()) for out in outs]
    resaver = json.loads((root / "resaver.json").read_text())
    sweep = json.loads((root / "sweeper.json").read_text())
    # a worker's error is a failure of its own: a claim, re-save or sweep that should have worked did not
    worker_errors = [error for report in [*claims, resaver, sweep] for error in report["errors"]]
    for error in worker_errors[:5]:
        result.fail(f"worker error: {error}")
    unknown = [entry for report in [*claims, resaver] for entry in report.get("unknown", [])]
    unsure = {entry.split(": ", 1)[0] for entry in unknown}  # keys a call of unknown outcome touched
    # whatever is left is claimed now, so every run is accounted for
    store = open_store()
    leftover = []
    for key in names:
        try:
            got = store.claim(key)
        except berth.Expired:
            continue
        except _unknown(unknown_ok) as exc:
            unknown.append(f"{key}: {type(exc).__name__}: {exc} (the final claim)")
            unsure.add(key)
            continue
        if got is not None:
            leftover.append(got.run_id)
    audit = store.audit() if witness else None
    store.close()
    if audit is not None and not audit.ok:
        result.fail(
            f"audit after the races: {len(audit.missing)} missing, {len(audit.replayed)} replayed, "
            f"{len(audit.unknown)} unknown, {len(audit.tampered)} tampered (first: "
            f"{(audit.missing + audit.replayed + audit.unknown + audit.tampered)[:3]})"
        )
    won = Counter(run for c in claims for run in c["won"])
    won.update(leftover)
    acked = resaver["acked"]
    acked_set = set(acked)
    bad: set[str] = set()
    for run, n in won.items():
        if n > 1:
            bad.add(run.split(":", 1)[1])
            result.fail(f"{run} claimed {n} times")
        if run in expired0:
            bad.add(run.split(":", 1)[1])
            result.fail(f"{run} was past its deadline but was handed out")
    for key in names:
        v0, v1, v2 = f"v0:{key}", f"v1:{key}", f"v2:{key}"
        must = [] if v0 in expired0 or v1 in acked_set or v2 in acked_set else [v0]
        if v2 in acked_set:
            must.append(v2)
        elif v1 in acked_set:
            must.append(v1)
        for run in must:
            if won[run] != 1 and key not in unsure:
                bad.add(key)
                result.fail(f"{run} acknowledged but claimed {won[run]} times (lost)")
    result.trials = keys
    # failed keys (not symptoms), plus every worker error, plus an audit that is not clean
    result.failures = len(bad) + len(worker_errors) + (audit is not None and not audit.ok)
    scanned = scan_tree(scan, result) if scan is not None else 0
    if scan is not None and scanned < 2:
        result.fail(f"nothing to scan under {scan}: the leak scan checked no store")
    total_claims = sum(len(c["won"]) for c in claims)
    expired_seen = sum(len(c["expired"]) for c in claims)
    result.notes.insert(
        0,
        f"{claimers} claimers: {total_claims} wins, {expired_seen} expired refusals; "
        f"{len(acked)} re-saves; sweeper removed {sweep['removed']} in {sweep['sweeps']} sweeps; "
        f"{len(leftover)} left for the final claim"
        + (
            f"; {len(unknown)} calls of unknown outcome on {len(unsure)} keys (checked for double claims only)"
            if unknown_ok
            else ""
        )
        + (f"; audit clean over {audit.checked} keys" if audit is not None and audit.ok else "")
        + (f"; {scanned} files and directories scanned for the marker and modes" if scan is not None else ""),
    )
    result.counts = {"unknown": len(unknown), "wins": total_claims}
    result.seconds = timer.elapsed()
    return result


def _unknown(unknown_ok: bool) -> tuple[type[Exception], ...]:
    """What a worker counts as a call of unknown outcome: `BackendError` with `unknown_ok`, else nothing."""
    return (berth.BackendError,) if unknown_ok else ()


def _retrying(call: Callable[..., Any], *args: Any) -> Any:
    """An idempotent call (an unconditional save) repeated through a few `BackendError`s."""
    for attempt in range(5):
        try:
            return call(*args)
        except berth.BackendError:
            if attempt == 4:
                raise
            time.sleep(1.0 + attempt)
    return None


# --- openers (module level: the worker processes are forked, nothing is pickled) ---------


def memory_opener(_: Path, *, witness: bool = False) -> Opener:
    from berth.backends.memory import MemoryBackend

    backend, records = MemoryBackend(), MemoryBackend() if witness else None
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    return lambda: berth.Store(backend, identity="race", sealer=sealer, witness=records)


def url_opener(url: str, identity: str | None = None, **options: Any) -> Opener:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    identity = identity or f"race-{secrets.token_hex(4)}"

    def opener() -> berth.Store:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # redis' DurabilityWarning: the test server runs without AOF
            return berth.open_store(url, identity=identity, sealer=sealer, **options)

    return opener


def network_opener(backend: str, address: str, *, witness: bool = False) -> Opener:
    """A store on a network backend: `address` is the DSN, Redis URL, moto endpoint or Azurite connection string.

    `witness` (PostgreSQL and Redis): a witness in another table or under another key prefix.
    """
    if backend == "postgresql":
        sep = "&" if "?" in address else "?"
        if witness:
            return url_opener(
                f"{address}{sep}table=reliability_frames", witness=f"{address}{sep}table=reliability_witness"
            )
        return url_opener(f"{address}{sep}table=reliability_frames")
    if backend in ("redis", "redis-cluster"):
        if witness:
            return url_opener(f"{address}?prefix=reliability:", witness=f"{address}?prefix=reliability-witness:")
        return url_opener(f"{address}?prefix=reliability:")
    if backend == "s3":
        import boto3

        bucket = f"reliability-{secrets.token_hex(8)}"
        client = boto3.client("s3", endpoint_url=address, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        client.close()
        return url_opener(f"s3://{bucket}/races", endpoint_url=address, region_name="us-east-1")
    if backend == "dynamodb":
        from berth.backends.dynamodb import DynamoDbBackend

        table = DynamoDbBackend(f"reliability-{secrets.token_hex(8)}", endpoint_url=address, region_name="us-east-1")
        table.setup()
        table.close()
        return url_opener(f"dynamodb://{table.table}", endpoint_url=address, region_name="us-east-1")
    if backend == "azblob":  # `address`: Azurite's connection string
        from berth.backends.azblob import AzureBlobBackend

        container = f"reliability-{secrets.token_hex(8)}"
        setup = AzureBlobBackend(container, connection_string=address)
        setup.setup()
        setup.close()
        return url_opener(f"azblob://{container}/races", connection_string=address)
    raise ValueError(backend)


def gcs_opener(fake: Any) -> Opener:
    """A store on the in-process Cloud Storage fake (`tests.fakes.gcs.FakeGcs`, already started)."""
    bucket = f"reliability-{secrets.token_hex(8)}"
    fake.create_bucket(bucket)
    return url_opener(f"gs://{bucket}/races", endpoint=fake.url)


def local_openers(root: Path, *, witness: bool = False) -> dict[str, Opener]:
    """Openers of memory, file and SQLite stores under `root`; `witness`: each with a witness beside it."""
    root.mkdir(parents=True, exist_ok=True)
    file_witness = {"witness": f"file://{root / 'file-witness'}"} if witness else {}
    sqlite_witness = {"witness": f"sqlite:///{root / 'witness.db'}"} if witness else {}
    return {
        "memory": memory_opener(root, witness=witness),
        "file": url_opener(f"file://{local_store_dir(root, 'file')}", **file_witness),
        "sqlite": url_opener(f"sqlite:///{local_store_dir(root, 'sqlite')}/berth.db", **sqlite_witness),
    }


def local_store_dir(root: Path, backend: str) -> Path | None:
    """Where `local_openers(root)[backend]` keeps its files (None for memory): the trial scans it."""
    return None if backend == "memory" else root / f"{backend}-store"


def _check(result: Result) -> None:
    result.notes = result.notes[1:]
    result.check()


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_races_local(backend: str, tmp_path: Path) -> None:
    opener = local_openers(tmp_path)[backend]
    scan = local_store_dir(tmp_path, backend)
    result = run_races(
        backend, opener, tmp_path / "work", keys=150, processes=backend != "memory", budget=120, scan=scan
    )
    assert result.trials == 150
    _check(result)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite"])
def test_races_local_long(backend: str, tmp_path: Path) -> None:
    opener = local_openers(tmp_path)[backend]
    scan = local_store_dir(tmp_path, backend)
    result = run_races(
        backend, opener, tmp_path / "work", keys=10_000, processes=backend != "memory", budget=900, scan=scan
    )
    assert result.trials == 10_000
    _check(result)


NETWORK = {
    "postgresql": "postgres_dsn",
    "redis": "redis_url",
    "redis-cluster": "redis_cluster_url",
    "s3": "moto_url",
    "gcs": "fake_gcs",
    "dynamodb": "moto_url",
    "azblob": "azurite",
}
SWEEP_PAUSE = dict.fromkeys(("s3", "gcs", "dynamodb", "azblob"), 2.0)  # a sweep there reads every head
UNKNOWN_OK = {"azblob"}  # Azurite stalls for a minute under this load: a call of unknown outcome is counted apart


def _network(backend: str, request: pytest.FixtureRequest) -> Opener:
    if backend == "gcs":
        return gcs_opener(request.getfixturevalue("fake_gcs"))
    if backend == "azblob":
        monkeypatch = request.getfixturevalue("monkeypatch")
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"):
            monkeypatch.delenv(name, raising=False)
    if backend in ("s3", "dynamodb"):
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # moto takes any; nothing here reaches AWS
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return network_opener(backend, request.getfixturevalue(NETWORK[backend]))


@pytest.mark.parametrize("backend", list(NETWORK))
def test_races_network(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    keys = 40 if backend in ("gcs", "dynamodb", "azblob") else 100  # the GCS fake serves every process; moto is slow
    result = run_races(backend, _network(backend, request), tmp_path / "work", keys=keys, budget=120)
    assert result.trials == keys
    _check(result)


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(NETWORK))
def test_races_network_long(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    result = run_races(
        backend,
        _network(backend, request),
        tmp_path / "work",
        keys=10_000,
        budget=1800,
        sweep_pause=SWEEP_PAUSE.get(backend, 0.0),
        unknown_ok=backend in UNKNOWN_OK,
    )
    assert result.trials == 10_000
    _check(result)


WITNESSED = {"postgresql": "postgres_dsn", "redis": "redis_url", "redis-cluster": "redis_cluster_url"}


def _witnessed_races(backend: str, request: pytest.FixtureRequest, tmp_path: Path, keys: int, budget: float) -> None:
    if backend in WITNESSED:
        opener = network_opener(backend, request.getfixturevalue(WITNESSED[backend]), witness=True)
    else:
        opener = local_openers(tmp_path, witness=True)[backend]
    work = tmp_path / "work"
    result = run_races(backend, opener, work, keys=keys, processes=backend != "memory", budget=budget, witness=True)
    assert result.trials == keys and result.scenario.startswith("races with a witness")
    summary = result.notes[0]
    _check(result)
    assert f"audit clean over {keys} keys" in summary, summary


@pytest.mark.parametrize("backend", ["memory", "file", "sqlite", *WITNESSED])
def test_races_with_a_witness(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    _witnessed_races(backend, request, tmp_path, keys=60, budget=120)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "file", "sqlite", *WITNESSED])
def test_races_with_a_witness_long(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    _witnessed_races(backend, request, tmp_path, keys=10_000, budget=1800)


def test_the_race_accounting_catches_a_claim_that_is_not_conditional(tmp_path: Path) -> None:
    """The checker has teeth: a backend whose delete ignores the token hands runs out twice."""
    from berth.backends._bulk import Data
    from berth.backends.memory import MemoryBackend

    class Unconditional(MemoryBackend):
        def get(self, name: str) -> tuple[Data, berth.Token] | None:
            found = super().get(name)
            time.sleep(0.0005)  # widen the window between load and delete
            return found

        def delete(self, name: str, token: berth.Token) -> None:
            with self._lock:
                self._data.pop(name, None)

    backend = Unconditional()
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    result = run_races(
        "broken", lambda: berth.Store(backend, identity="race", sealer=sealer), tmp_path, keys=60, processes=False
    )
    assert result.failures > 0
    assert any("claimed 2 times" in n or "claimed 3 times" in n for n in result.notes)


def test_the_race_accounting_counts_worker_errors(tmp_path: Path) -> None:
    """A claimer's BackendError is a failure: the audit's planted delete errors once passed as 0 failures."""
    from berth.backends.memory import MemoryBackend

    class FailingDeletes(MemoryBackend):
        injected = 0

        def delete(self, name: str, token: berth.Token) -> None:
            with self._lock:
                fail = FailingDeletes.injected < 23 and name.endswith("0")
                FailingDeletes.injected += fail
            if fail:
                raise berth.BackendError(f"injected delete error on {name!r}")
            super().delete(name, token)

    backend = FailingDeletes()
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    result = run_races(
        "broken", lambda: berth.Store(backend, identity="race", sealer=sealer), tmp_path, keys=60, processes=False
    )
    assert FailingDeletes.injected == 23
    assert result.failures >= 23
    assert any(n.startswith("worker error:") and "injected delete error" in n for n in result.notes)
