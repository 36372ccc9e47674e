#!/usr/bin/env python
"""Run berth's reliability trials at full length and write the table to docs/reliability.md.

    .venv/bin/python scripts/reliability.py              # everything, long counts (tens of minutes)
    .venv/bin/python scripts/reliability.py --quick      # the CI counts, for a smoke run
    .venv/bin/python scripts/reliability.py --only crash races --backends file sqlite
    .venv/bin/python scripts/reliability.py --only races --backends s3 --count 2000 --merge   # a busy machine
    .venv/bin/python scripts/reliability.py --only faults cluster-kill --backends redis-cluster --merge
    .venv/bin/python scripts/reliability.py --remap   # after a rebase: rows cite the commits now holding their code

Servers: PostgreSQL and Redis from BERTH_TEST_POSTGRES / BERTH_TEST_REDIS (default the
local ones), a private moto server, the Cloud Storage fake and Azurite (when installed:
tests/_azurite.py) started here. A server that
is not reachable gives a row marked "skipped". Only loopback traffic.

Prints one row per scenario and backend -- trials, failures, seconds -- and
replaces the table between the markers in docs/reliability.md (unless --no-write),
and the raw record of every row in docs/results/reliability.json (with every note of
a row, the commit it measured and the tree hash of src/ there; --merge merges both).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from scripts._commit import commit_exists, commit_with_tree, measured_commit, src_tree  # noqa: E402
from tests._azurite import azurite_command, connection_string  # noqa: E402
from tests._moto import moto_command  # noqa: E402
from tests._net import free_port, stop, wait_http, wait_port  # noqa: E402
from tests.reliability import (  # noqa: E402
    test_answers,
    test_cancel,
    test_cluster,
    test_crash,
    test_faults,
    test_fuzz,
    test_hostile,
    test_leaks,
    test_mcp_rounds,
    test_races,
    test_tamper,
)
from tests.reliability._common import Result, sealer_names  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- reliability:begin -->", "<!-- reliability:end -->"
SCENARIOS = [
    "tamper",
    "fuzz",
    "leaks",
    "crash",
    "crash-witness",
    "races",
    "races-witness",
    "faults",
    "server-crash",
    "cluster-kill",
    "hostile",
    "answers",
    "cancel",
    "a2a",
    "mcp-rounds",
]
NETWORK = ["postgresql", "redis", "s3", "gcs", "dynamodb", "redis-cluster", "azblob"]
NO_HOSTILE = {"dynamodb", "redis-cluster", "azblob"}  # no hostile workload of theirs yet
UNRECORDED = "-"  # the commit of a row measured before rows named theirs (its run line above may name it)

TITLES = {
    "tamper": "tamper: bit flips, truncations, appends",
    "fuzz": "fuzz",
    "leaks": "leaks: marker in files/messages/logs; modes 0600/0700 under umask 0",
    "crash": "crash: SIGKILL mid save/load/claim",
    "crash-witness": "crash with a witness: SIGKILL mid save/load/claim, then older frames replayed",
    "races": "races: claimers x re-saver x sweeper",
    "races-witness": "races with a witness: claimers x re-saver x sweeper",
    "faults": "server faults: cut / down / lost response mid save, load, claim",
    "server-crash": "server crash: SIGKILL + restart mid save, load, claim",
    "cluster-kill": test_cluster.TITLE,
    "hostile": "hostile: attacks at the seams (issue 12)",
    "answers": test_answers.TITLE,
    "cancel": "cancel: every await point of claim, wake and the integrations' wakes",
    "a2a": "a2a: concurrent updates of one task from 8 workers, each its own store (berth.a2a)",
    "mcp-rounds": test_mcp_rounds.TITLE,
}
LONG = {
    "fuzz": 110_000,
    "leaks": 20,
    "crash": 250,
    "crash-witness": 250,
    "races": 10_000,
    "races-witness": 10_000,
    "faults": 3000,
    "lost": 200,
    "throttles": 1000,
    "server-crash": 3000,
    "cluster-kill": 10,  # rounds: a cluster of its own each, 600 keys, one primary killed
    "hostile-dir": 700,
    "hostile-foreign": 200,
    "hostile-kills": 100,
    "hostile-deadline": 20_000,
    "hostile-kms": 40,
    "answers": 200,
    "cancel": 12,
    "a2a": 1000,
    "mcp-rounds": 200,
}
QUICK = {
    "fuzz": 420,
    "leaks": 1,
    "crash": 20,
    "crash-witness": 10,
    "races": 150,
    "races-witness": 60,
    "faults": 150,
    "lost": 5,
    "throttles": 60,
    "server-crash": 120,
    "cluster-kill": 1,
    "hostile-dir": 14,
    "hostile-foreign": 3,
    "hostile-kills": 8,
    "hostile-deadline": 300,
    "hostile-kms": 2,
    "answers": 10,
    "cancel": 1,
    "a2a": 50,
    "mcp-rounds": 20,
}


# --- servers -------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(wanted: list[str]) -> Iterator[dict[str, Any]]:
    """Addresses of the servers in `wanted` (None for one that is unavailable)."""
    found: dict[str, Any] = {}
    stack = contextlib.ExitStack()
    with stack:
        if "postgresql" in wanted:
            dsn = os.environ.get("BERTH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
            try:
                import psycopg

                psycopg.connect(dsn, connect_timeout=3).close()
                found["postgresql"] = dsn
            except Exception:
                found["postgresql"] = None
        if "redis" in wanted:
            url = os.environ.get("BERTH_TEST_REDIS", "redis://127.0.0.1:6379/0")
            try:
                import redis

                redis.Redis.from_url(url, socket_timeout=3).ping()
                found["redis"] = url
            except Exception:
                found["redis"] = None
        if "redis-cluster" in wanted:  # BERTH_TEST_REDIS_CLUSTER, or three primaries started for the run
            found["redis-cluster"] = os.environ.get("BERTH_TEST_REDIS_CLUSTER")
            if not found["redis-cluster"]:
                from tests._redis_cluster import LocalCluster

                cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="berth-reliability-cluster-")))
                try:
                    found["redis-cluster"] = cluster.start().url
                    stack.callback(cluster.stop)
                except RuntimeError:
                    found["redis-cluster"] = None
        aws = [b for b in ("s3", "dynamodb") if b in wanted]  # one moto server serves both
        if aws:
            found.update(dict.fromkeys(aws))
            if importlib.util.find_spec("moto") is not None:
                port = free_port()
                proc = subprocess.Popen(moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stack.callback(stop, proc)  # moto can take over 10 s to exit after a long run
                url = f"http://127.0.0.1:{port}"
                if wait_http(url + "/moto-api/", timeout=30):
                    found.update(dict.fromkeys(aws, url))
                    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
                    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        if "azblob" in wanted:  # BERTH_TEST_AZURITE_URL, or Azurite's blob service started for the run
            found["azblob"] = None
            given = os.environ.get("BERTH_TEST_AZURITE_URL")
            port = free_port()
            command = None if given else azurite_command(port)
            if given:
                found["azblob"] = connection_string(given.rstrip("/"))
            elif command is not None:
                home = Path(tempfile.mkdtemp(prefix="berth-reliability-azurite-"))
                azurite = subprocess.Popen(command, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stack.callback(stop, azurite)
                if wait_port("127.0.0.1", port, timeout=60):
                    found["azblob"] = connection_string(f"http://127.0.0.1:{port}/devstoreaccount1")
        if "gcs" in wanted:
            # the in-process fake of the JSON API: fake-gcs-server ignores ifGenerationMatch on delete
            found["gcs"] = None
            if importlib.util.find_spec("tests.fakes.gcs") is not None:
                from tests.fakes.gcs import FakeGcs

                found["gcs"] = stack.enter_context(FakeGcs())
        yield found


def _backend_present(name: str) -> bool:
    module = {"postgresql": "postgres", "redis-cluster": "redis"}.get(name, name)
    return importlib.util.find_spec(f"berth.backends.{module}") is not None


# --- scenarios -----------------------------------------------------------------------------


def plan(args: argparse.Namespace, addresses: dict[str, Any]) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    """(scenario, backend, thunk) for every row to run; a thunk returns a Result or a list of them."""
    n = dict(QUICK if args.quick else LONG)
    if args.count is not None:  # one count for the scenarios run now (the table shows what ran)
        n = dict.fromkeys(n, args.count)
    work = Path(tempfile.mkdtemp(prefix="berth-reliability-"))
    local = [b for b in ("memory", "file", "sqlite") if b in args.backends]
    network = [b for b in NETWORK if b in args.backends]

    if "tamper" in args.only:
        for sealer in sealer_names():
            yield "tamper", sealer, lambda s=sealer: test_tamper.run_tamper(s, every_bit=not args.quick)
    if "fuzz" in args.only:
        yield "fuzz", "memory+file", lambda: test_fuzz.run_fuzz(n["fuzz"], str(work / "fuzz"))
    for kind in ("file", "sqlite"):
        if "leaks" in args.only and kind in args.backends:
            yield "leaks", kind, lambda k=kind: test_leaks.run_leaks(k, work / f"leaks-{k}", rounds=n["leaks"])
    for kind in ("file", "sqlite"):
        if "crash" in args.only and kind in args.backends:
            yield (
                "crash",
                kind,
                lambda k=kind: test_crash.run_crash(k, work / f"crash-{k}", kills=n["crash"], budget=1800),
            )
        if "crash-witness" in args.only and kind in args.backends:
            yield (
                "crash-witness",
                kind,
                lambda k=kind: test_crash.run_crash(
                    k, work / f"crash-witness-{k}", kills=n["crash-witness"], budget=1800, witness=True
                ),
            )
    if "races" in args.only:
        for backend in local:
            opener = test_races.local_openers(work / f"races-{backend}")[backend]
            scan = test_races.local_store_dir(work / f"races-{backend}", backend)
            yield (
                "races",
                backend,
                lambda b=backend, o=opener, s=scan: test_races.run_races(
                    b, o, work / f"races-work-{b}", keys=n["races"], processes=b != "memory", budget=1800, scan=s
                ),
            )
        for backend in network:
            address = addresses.get(backend)
            if not address or not _backend_present(backend):
                yield "races", backend, lambda: None
                continue
            yield (
                "races",
                backend,
                lambda b=backend, a=address: test_races.run_races(
                    b,
                    test_races.gcs_opener(a) if b == "gcs" else test_races.network_opener(b, a),
                    work / f"races-work-{b}",
                    keys=n["races"],
                    sweep_pause=test_races.SWEEP_PAUSE.get(b, 0.0),
                    budget=3600,
                    unknown_ok=b in test_races.UNKNOWN_OK,
                ),
            )
    if "races-witness" in args.only:
        yield from _races_witness(n["races-witness"], work, local, network, addresses)
    if "faults" in args.only:
        for backend in network:
            address = addresses.get(backend)
            if not address or not _backend_present(backend):
                yield "faults", backend, lambda: None
                continue
            server = _fault_server(backend, address)
            yield (
                "faults",
                backend,
                lambda s=server: [
                    test_faults.run_faults(s, calls=n["faults"], budget=1800),
                    test_faults.run_lost_delete(s, trials=n["lost"]),
                    *(
                        [test_faults.run_throttles(s, calls=n["throttles"], budget=1800)]
                        if isinstance(s, test_faults._HttpServer)
                        else []
                    ),
                ],
            )
    if "hostile" in args.only:
        yield from _hostile(n, work, local, network, addresses)
    if "answers" in args.only and "sqlite" in args.backends and importlib.util.find_spec("langgraph"):
        yield "answers", "sqlite", lambda: test_answers.run_answers(n["answers"], work / "answers")
    if "cancel" in args.only:
        for backend in [*local, *[b for b in network if b in ("postgresql", "redis")]]:
            address = addresses.get(backend, "")
            if backend in NETWORK and (not address or not _backend_present(backend)):
                yield "cancel", backend, lambda: None
                continue
            url = test_cancel.url_for(backend, work / f"cancel-{backend}", address=address)
            (work / f"cancel-{backend}").mkdir()
            yield (
                "cancel",
                backend,
                lambda b=backend, u=url: test_cancel.run_cancel(b, u, sweeps=n["cancel"], budget=3600),
            )
    if "a2a" in args.only and importlib.util.find_spec("a2a"):
        for backend in [b for b in ("memory", "sqlite", "postgresql", "redis") if b in args.backends]:
            address = addresses.get(backend, "")
            if backend in NETWORK and (not address or not _backend_present(backend)):
                yield "a2a", backend, lambda: None
                continue
            (work / f"a2a-{backend}").mkdir()
            url = test_cancel.url_for(backend, work / f"a2a-{backend}", address=address)
            url = f"memory://a2a-{os.getpid()}" if backend == "memory" else url  # one bucket the 8 stores share
            yield "a2a", backend, lambda b=backend, u=url: _a2a_updates(b, u, n["a2a"])
    if "mcp-rounds" in args.only and importlib.util.find_spec("mcp"):
        for backend in [b for b in ("sqlite", "postgresql", "redis") if b in args.backends]:
            address = addresses.get(backend, "")
            if backend in NETWORK and (not address or not _backend_present(backend)):
                yield "mcp-rounds", backend, lambda: None
                continue
            (work / f"mcp-{backend}").mkdir()
            url = test_cancel.url_for(backend, work / f"mcp-{backend}", address=address)
            yield (
                "mcp-rounds",
                backend,
                lambda b=backend, u=url: test_mcp_rounds.run_mcp_rounds(
                    n["mcp-rounds"], work / f"mcp-work-{b}", url=u, backend=b
                ),
            )
    if "server-crash" in args.only:
        for backend, cls in (("postgresql", test_faults.PrivatePostgres), ("redis", test_faults.PrivateRedis)):
            if backend not in args.backends:
                continue
            if not cls.available() or not _backend_present(backend):
                yield "server-crash", backend, lambda: None
                continue
            yield "server-crash", backend, lambda c=cls: _server_crash(c, n["server-crash"])
    if "cluster-kill" in args.only and "redis-cluster" in args.backends:
        if not test_faults.PrivateRedis.available() or shutil.which("redis-cli") is None:
            yield "cluster-kill", "redis-cluster", lambda: None
        else:
            yield (
                "cluster-kill",
                "redis-cluster",
                lambda: test_cluster.run_cluster_kill(work / "cluster-kill", rounds=n["cluster-kill"]),
            )


def _a2a_updates(backend: str, url: str, updates: int) -> Result:
    """`updates` appends to one A2A task from 8 workers: every one kept once, every loser told (tests/test_a2a.py)."""
    from tests import test_a2a

    result = Result(TITLES["a2a"], backend)
    started = time.monotonic()
    written, kept, conflicts = test_a2a.concurrent_updates(url, workers=8, updates=updates)
    result.seconds = time.monotonic() - started
    result.trials = updates
    if kept != updates or written != updates:
        result.fail(f"{updates} updates: {written} in the task, {kept} distinct")
    result.notes.append(f"{conflicts:,} conflicts told to losers (ConcurrentTaskModificationError), each retried")
    return result


def _races_witness(
    keys: int, work: Path, local: list[str], network: list[str], addresses: dict[str, Any]
) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    """The races with a witness beside each store: local backends, PostgreSQL and Redis (one server, a cluster)."""
    for backend in local:
        opener = test_races.local_openers(work / f"races-witness-{backend}", witness=True)[backend]
        yield (
            "races-witness",
            backend,
            lambda b=backend, o=opener: test_races.run_races(
                b, o, work / f"races-witness-work-{b}", keys=keys, processes=b != "memory", budget=1800, witness=True
            ),
        )
    for backend in [b for b in network if b in ("postgresql", "redis", "redis-cluster")]:
        address = addresses.get(backend)
        if not address or not _backend_present(backend):
            yield "races-witness", backend, lambda: None
            continue
        yield (
            "races-witness",
            backend,
            lambda b=backend, a=address: test_races.run_races(
                b,
                test_races.network_opener(b, a, witness=True),
                work / f"races-witness-work-{b}",
                keys=keys,
                budget=3600,
                witness=True,
            ),
        )


def _hostile(
    n: dict[str, int], work: Path, local: list[str], network: list[str], addresses: dict[str, Any]
) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    """The attacks at the seams of issue 12 (tests/reliability/test_hostile.py)."""
    if "file" in local:
        yield "hostile", "file", lambda: test_hostile.run_hostile_directory(n["hostile-dir"], work / "hostile-dir")
        yield "hostile", "file", lambda: test_hostile.run_keyring_kills(n["hostile-kills"], work / "hostile-keys")
    yield "hostile", "memory", lambda: test_hostile.run_deadline_at_commit(n["hostile-deadline"])
    openers: dict[str, Callable[[], Any]] = {
        b: (lambda o=o: o().backend)
        for b, o in test_races.local_openers(work / "hostile-foreign").items()
        if b in local
    }
    for backend in [b for b in network if b not in NO_HOSTILE]:
        address = addresses.get(backend)
        if address and _backend_present(backend):
            opener = test_races.gcs_opener(address) if backend == "gcs" else test_races.network_opener(backend, address)
            openers[backend] = lambda o=opener: o().backend
    for backend, backend_opener in openers.items():
        yield (
            "hostile",
            backend,
            lambda b=backend, o=backend_opener: test_hostile.run_foreign_values(b, o, n["hostile-foreign"]),
        )
    if addresses.get("s3"):
        yield "hostile", "s3", lambda: test_hostile.run_forged_kms(n["hostile-kms"], addresses["s3"])


def _server_crash(cls: type[test_faults.PrivateServer], calls: int) -> Result:
    server = cls(Path(tempfile.mkdtemp(prefix="berth-reliability-")))
    server.start()
    try:
        return test_faults.run_faults(server.server(), calls=calls, rate=0.03, crashes=server, budget=1800)
    finally:
        server.close()


def _fault_server(backend: str, address: Any) -> test_faults.Server:
    if backend == "azblob":
        return test_faults.azblob_server(address)
    if backend == "dynamodb":
        return test_faults.dynamodb_server(address)
    if backend == "gcs":
        return test_faults.gcs_server(address)
    if backend == "postgresql":
        return test_faults.postgres_server(address)
    if backend == "redis":
        return test_faults.redis_server(address)
    if backend == "redis-cluster":
        return test_faults.redis_cluster_server(address)
    s3 = test_faults.s3_server(address)
    return test_faults._S3Server(s3.name, s3.host, s3.port, s3._url, s3.options)


# --- the report ----------------------------------------------------------------------------


def table(rows: list[Result], commits: dict[tuple[str, str], str]) -> str:
    """The results as a Markdown table, each row with the commit it measured, and its first note below it."""
    lines = [
        "| scenario | backend | trials | failures | seconds | commit |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        failures = "skipped" if r.trials == 0 and not r.failures else str(r.failures)
        commit = commits.get((r.scenario, r.backend)) or UNRECORDED
        lines.append(f"| {r.scenario} | {r.backend} | {r.trials:,} | {failures} | {r.seconds:,.1f} | {commit} |")
    notes = [f"- {r.scenario} / {r.backend}: {r.notes[0]}" for r in rows if r.notes]
    return "\n".join(lines + ([""] + notes if notes else []))


def previous_runs() -> list[str]:
    """The list of runs that made the table docs/reliability.md holds now."""
    if not DOC.exists() or BEGIN not in DOC.read_text():
        return []
    part = DOC.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in part.splitlines() if line.startswith("- `")]


def previous_rows() -> tuple[list[Result], dict[tuple[str, str], str]]:
    """The rows (and their first notes) of the table docs/reliability.md holds now, and each row's commit."""
    if not DOC.exists() or BEGIN not in DOC.read_text():
        return [], {}
    part = DOC.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    rows: dict[tuple[str, str], Result] = {}
    commits: dict[tuple[str, str], str] = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) in (5, 6) and cells[0] not in ("scenario", "---"):
            failures = 0 if cells[3] == "skipped" else int(cells[3])
            r = Result(cells[0], cells[1], int(cells[2].replace(",", "")), failures, float(cells[4].replace(",", "")))
            rows[(r.scenario, r.backend)] = r
            commits[(r.scenario, r.backend)] = cells[5] if len(cells) == 6 else UNRECORDED
        elif line.startswith("- "):
            for (scenario, backend), r in rows.items():
                if line[2:].startswith(f"{scenario} / {backend}: "):
                    r.notes = [line[2 + len(f"{scenario} / {backend}: ") :]]
    return list(rows.values()), commits


def _order(r: Result) -> tuple[int, int]:
    """Table order: scenarios as run, backends as listed."""
    scenario = next((i for i, t in enumerate(TITLES.values()) if r.scenario.startswith(t.split(":")[0])), 99)
    backends = ["plaintext", "aes-gcm", "kms-local", "memory", "file", "sqlite", *NETWORK]
    backend = next((i for i, b in enumerate(backends) if r.backend.startswith(b)), 99)
    return scenario, backend


# "How to run it" quotes how long a full run takes, from the table's own seconds.
_SUMS = re.compile(
    r"about [\d,]+ minutes: the rows below sum to [\d,]+ s,"
    r" the races \(with and without a witness\) [\d,]+ s of it and the cancellation trial [\d,]+ s"
)


def quoted_sums(rows: list[Result]) -> str:
    """The sentence of "How to run it" that says what a full run costs, summed over `rows`."""

    def seconds(prefix: str) -> float:
        return sum(round(r.seconds, 1) for r in rows if r.scenario.startswith(prefix))

    return (
        f"about {round(seconds('') / 60):,} minutes: the rows below sum to {round(seconds('')):,} s, the races"
        f" (with and without a witness) {round(seconds('races')):,} s of it and the cancellation trial"
        f" {round(seconds('cancel:')):,} s"
    )


def write_doc(body: str, rows: list[Result] | None = None) -> None:
    """Replace the generated part of docs/reliability.md (between the markers) with `body`.

    Given the table's `rows`, the sums "How to run it" quotes are rewritten from them too.
    """
    text = DOC.read_text() if DOC.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    if rows is not None:
        head = _SUMS.sub(lambda _: quoted_sums(rows), head)
    DOC.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}")


def raw_path() -> Path:
    """Where the raw records of the table live: docs/results/reliability.json beside the page."""
    return DOC.parent / "results" / "reliability.json"


def raw_record(r: Result, commit: str, tree: str | None) -> dict[str, Any]:
    """One row's raw record: the table's cells, every note (up to 20), the commit and src/ tree measured."""
    record: dict[str, Any] = {
        "scenario": r.scenario,
        "backend": r.backend,
        "trials": r.trials,
        "failures": r.failures,
        "seconds": round(r.seconds, 1),
        "commit": commit,
        "src_tree": tree,
        "notes": r.notes[:20],
    }
    if tree is None and commit != UNRECORDED and not commit_exists(ROOT, commit):
        record["lost"] = "measured before src trees were recorded; its commit was rebased away"
    return record


def write_raw(rows: list[Result], commits: dict[tuple[str, str], str], fresh: dict[tuple[str, str], str],
              runs: list[dict[str, Any]], merge: bool) -> None:  # fmt: skip
    """Write docs/results/reliability.json: a record per row of the table, in its order, and the runs.

    `fresh` maps the rows run now to the src/ tree they measured; with `merge` the other rows keep
    their records (a row of the page with no record yet gets one from the page's cells).
    """
    path = raw_path()
    old: dict[str, Any] = {"runs": [], "rows": []}
    if merge and path.exists():
        old = json.loads(path.read_text())
    kept = {(x["scenario"], x["backend"]): x for x in old["rows"]}
    records = []
    for r in rows:
        key = (r.scenario, r.backend)
        commit = commits.get(key) or UNRECORDED
        if key in fresh:
            records.append(raw_record(r, commit, fresh[key]))
        else:
            records.append(kept.get(key) or raw_record(r, commit, None))
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"runs": [*old["runs"], *runs] if merge else runs, "rows": records}
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def remap() -> int:
    """After a rebase: each row citing a commit no longer in the history cites the one that holds its src/ tree.

    Rewrites the table and docs/results/reliability.json (the old hash kept as "rebased_from");
    runs nothing. Returns how many rows still cite a commit not in the history.
    """
    rows, commits = previous_rows()
    raw = json.loads(raw_path().read_text())
    lost = 0
    for record in raw["rows"]:
        key, commit = (record["scenario"], record["backend"]), record["commit"]
        if commit == UNRECORDED or commit_exists(ROOT, commit):
            continue
        found = commit_with_tree(ROOT, record.get("src_tree") or "")
        if found is None:
            lost += 1
            continue
        record["rebased_from"], record["commit"] = commit, found
        commits[key] = found
        print(f"{record['scenario']} / {record['backend']}: {commit} -> {found}", file=sys.stderr)
    write_doc("\n".join(previous_runs()) + "\n\n" + table(rows, commits))
    raw_path().write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    return lost


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios, print the table, write it to docs/reliability.md; exit 1 on any failure."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n")[1],  # the command lines above
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="CI counts instead of the long ones")
    parser.add_argument(
        "--only",
        nargs="+",
        default=SCENARIOS,
        choices=SCENARIOS,
        metavar="SCENARIO",
        help="the scenarios to run (default all): " + ", ".join(SCENARIOS),
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["memory", "file", "sqlite", *NETWORK],
        metavar="BACKEND",
        help="the backends to run them on (default all): memory, file, sqlite, " + ", ".join(NETWORK),
    )
    parser.add_argument(
        "--count",
        type=int,
        help="trials per row instead of the long or quick counts (cluster-kill: rounds, one primary killed in each)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument(
        "--merge", action="store_true", help="keep the doc's rows for the scenarios and backends not run now"
    )
    parser.add_argument(
        "--remap",
        action="store_true",
        help="after a rebase: rows cite the commit now holding their src/ tree; runs nothing",
    )
    args = parser.parse_args(argv)
    if args.remap:
        left = remap()
        print(f"{left} row(s) cite a commit not in the history and no recorded src/ tree finds it", file=sys.stderr)
        return 0
    logging.disable(logging.WARNING)  # psycopg.pool narrates every reconnect during the fault trials
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    commit = measured_commit(ROOT, generated=["docs/reliability.md", "docs/results/reliability.json"])
    tree = src_tree(ROOT)
    rows: list[Result] = []
    # the scenarios that run on the servers
    served = {"races", "races-witness", "faults", "hostile", "cancel", "a2a", "mcp-rounds"}
    wanted = [b for b in NETWORK if b in args.backends and served & set(args.only)]
    with servers(wanted) as addresses:
        for scenario, backend, thunk in plan(args, addresses):
            t = time.monotonic()
            print(f"... {scenario} on {backend}", file=sys.stderr, flush=True)
            try:
                out = thunk()
            except Exception as exc:
                out = Result(TITLES[scenario], backend)
                out.fail(f"crashed: {type(exc).__name__}: {exc}")
                traceback.print_exc()
            if out is None:
                out = Result(TITLES[scenario], backend, notes=["skipped: backend or server not available here"])
            for r in out if isinstance(out, list) else [out]:
                if not r.seconds:
                    r.seconds = time.monotonic() - t
                rows.append(r)
                print(f"{r.scenario:<72} {r.backend:<12} {r.trials:>9,} {r.failures:>5} {r.seconds:>8.1f}s", flush=True)
                for note in r.notes[1:4] if r.failures else []:
                    print(f"    {note}", flush=True)
    commits = {(r.scenario, r.backend): commit for r in rows}
    ran = set(commits)
    if args.merge:
        kept, kept_commits = previous_rows()
        rows = [r for r in kept if (r.scenario, r.backend) not in commits] + rows
        commits = {**kept_commits, **commits}
        rows.sort(key=_order)
    run = (
        f"`{' '.join(['.venv/bin/python', 'scripts/reliability.py', *(argv or sys.argv[1:])])}` "
        f"on {started:%Y-%m-%d %H:%M} UTC: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{f'{args.count:,} per row' if args.count else 'CI counts (--quick)' if args.quick else 'long counts'}, "
        f"{time.monotonic() - t0:,.0f} s, "
        f"commit {commit}"
    )
    history = previous_runs() if args.merge else []
    body = "\n".join([*history, f"- {run}."]) + "\n\n" + table(rows, commits)
    print("\n" + table(rows, commits))
    if not args.no_write:
        write_doc(body, rows)
        fresh = dict.fromkeys(ran, tree)
        if args.merge and not raw_path().exists():  # the first raw file: the page's earlier runs as they read
            history_records = [{"line": line[2:]} for line in history]
        else:
            history_records = []
        run_record = {"line": run + ".", "commit": commit, "src_tree": tree}
        write_raw(rows, commits, fresh, [*history_records, run_record], args.merge)
        print(f"\nwritten to {DOC} and {raw_path()}", file=sys.stderr)
    return 1 if any(r.failures for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
