"""berth's benchmark suite: berth beside its raw-client floor and beside LangGraph, on every backend, in one run.

    .venv/bin/python benchmarks/run.py            # the whole suite (about 20-30 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py --quick    # a few minutes, for a laptop
    .venv/bin/python benchmarks/run.py --only cycle,sealing
    .venv/bin/python benchmarks/run.py --from-json docs/results/benchmarks.json   # rewrite the doc only
    .venv/bin/python benchmarks/run.py --only resume,savers --splice   # LangGraph's sections into the doc
    .venv/bin/python benchmarks/run.py --only aio --splice             # berth.aio's section 7 into the doc
    .venv/bin/python benchmarks/run.py --only stalls,save_many --splice   # sections 13 and 14 into the doc

`stalls` (bench_aio.stalls: 300 concurrent 64 KiB cycles and 48 MiB states on one event loop, every
backend) and `save_many` (bench_save_many.measure: 1,000 saves one by one and in one call, SQLite,
PostgreSQL, Redis) add about 3-4 minutes to a full run (30 s in --quick).

Needs `pip install -e '.[all,hiredis]' --group bench`. Starts moto, fake-gcs-server and a private
redis-server itself (as tests/conftest.py does); uses the local PostgreSQL
(BERTH_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432/test) in a
database of its own, `berth_bench` (or `BERTH_BENCH_DB`), which it drops and re-creates. Writes
docs/benchmarks.md, docs/benchmarks-cycle.png and the raw figures of every trial as JSON to
docs/results/benchmarks.json (committed beside the page: `--from-json` re-derives every figure
of the page from it; `--splice` merges the sections run into it). A backend whose module or
server is missing is reported as not measured, never silently dropped. Benchmarks are not tests: nothing here
runs in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))
warnings.simplefilter("ignore", DeprecationWarning)

import _common  # noqa: E402
import _cycle  # noqa: E402
import _report  # noqa: E402
from _servers import BENCH_DB, POSTGRES_DSN, Servers  # noqa: E402
from scripts._commit import measured_commit, src_tree  # noqa: E402

WORKLOADS = (
    "cycle",
    "counts",
    "sealing",
    "large",
    "listing",
    "contention",
    "witness",
    "resume",
    "savers",
    "aio",
    "stalls",
    "save_many",
    "startup",
)
PACKAGES = (
    "berthing",
    "cryptography",
    "msgspec",
    "orjson",
    "psycopg",
    "redis",
    "hiredis",
    "boto3",
    "google-cloud-storage",
    "azure-storage-blob",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "pycryptodome",
    "moto",
)


RAW_NAME = "docs/results/benchmarks.json"
RAW = ROOT / RAW_NAME


def _rounded(x: Any) -> Any:
    """`x` with every float to 6 significant digits: the raw file stays small and its diffs readable."""
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_rounded(v) for v in x]
    return x


def write_raw(res: dict[str, Any], path: Path, splice: bool) -> Path:
    """Write the raw results of a run (the doc's notes apart: notes.md is their source) to `path`.

    With `splice` the sections run replace theirs in the file's last results and the run's
    meta is appended to its "spliced" list; the file's own meta stays the full run's.
    """
    fresh = _rounded({k: v for k, v in res.items() if k != "notes"})
    if splice and path.exists():
        saved = json.loads(path.read_text())
        for key, value in fresh.items():
            if key not in ("meta", "skipped"):
                saved[key] = value
        saved.setdefault("spliced", []).append(fresh["meta"])
        fresh = saved
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fresh, indent=1, ensure_ascii=False, default=str) + "\n")
    return path


def with_notes(res: dict[str, Any]) -> dict[str, Any]:
    """`res` with benchmarks/notes.md as its notes (the page's closing part; the raw file keeps none)."""
    notes = HERE / "notes.md"
    if notes.exists():
        res["notes"] = notes.read_text().strip().splitlines()
    return res


def load_raw(path: Path) -> dict[str, Any]:
    """A raw results file as run.py's page is written from it (what `--from-json` does)."""
    return with_notes(json.loads(path.read_text()))


def publish(res: dict[str, Any], raw: Path, doc: Path, png: Path | None, splice: bool) -> _report.Goals:
    """Write the raw file, then the page (or splice it) from the very figures the raw file keeps.

    The raw file rounds every float to 6 digits; a page written from the unrounded figures differed
    from what `--from-json` re-derives (tests/test_results.py) in the last digit of a few rows.
    """
    res = with_notes(_rounded(res))
    write_raw(res, raw, splice)
    if splice:
        goals = _report.splice(doc, res)
        log(f"spliced {', '.join(k for k in res if k not in ('meta', 'skipped', 'notes'))} into {doc} and {raw}")
    else:
        goals = _report.write(res, doc, png)
        log(f"wrote {doc}, {png or 'no chart'} and {raw}")
    return goals


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@contextmanager
def section(name: str, res: dict[str, Any], meta: dict[str, Any], partial: Path) -> Iterator[None]:
    """Run one section: a failure is recorded (res["failed"], shown on the page) and the run goes on
    (rerun the section alone with `--only NAME --splice` once mended).

    After each section, failed or not, everything measured so far goes to `partial` (the scratch
    directory, kept when the run dies): `run.py --from-json` turns it into a page.
    """
    try:
        yield
    except Exception as exc:  # one section's failure must not lose the sections already measured
        res.pop(name, None)  # half a section would give half its rows: the page says it failed instead
        res.setdefault("failed", {})[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log(f"{name}: failed, going on with the next section: {exc!r}")
    finally:
        write_raw({**res, "meta": {**meta, "partial": True}}, partial, splice=False)


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    fs = subprocess.run(["df", "-T", tempfile.gettempdir()], capture_output=True, text=True, check=False)
    fstype = fs.stdout.splitlines()[-1].split()[1] if fs.returncode == 0 and fs.stdout.strip() else "?"
    return {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "memory": mem,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "SQLite": __import__("sqlite3").sqlite_version,
        "files": f"{fstype} (fsync reaches a virtual disk)",
        "load average at start": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "not installed"
    return out


def fresh_database() -> None:
    """Drop and re-create the suite's own PostgreSQL database."""
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=3) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (BENCH_DB,),
        )
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
        admin.execute(f"CREATE DATABASE {BENCH_DB}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter trials and smaller listings")
    ap.add_argument(
        "--trials",
        type=int,
        default=None,
        help="interleaved trials per cycle and sealing group (default 31; 5 with --quick)",
    )
    ap.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--backends", default=",".join(_cycle.BACKENDS), help="comma-separated subset of backends")
    ap.add_argument("--dir", default=None, help="scratch directory for files and SQLite (default: under /var/tmp)")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--chart", default=str(ROOT / "docs" / "benchmarks-cycle.png"), help="'' for no chart")
    ap.add_argument(
        "--results", default=str(RAW), help="the raw results file (JSON) to write, or with --splice to merge into"
    )
    ap.add_argument("--from-json", default=None, help="rewrite the doc and chart from a saved results file")
    ap.add_argument(
        "--splice",
        action="store_true",
        help="with --only aio,resume,savers: replace just those sections and goal rows in the existing doc",
    )
    args = ap.parse_args()
    if args.from_json:
        saved = load_raw(Path(args.from_json))
        if args.splice:
            _report.splice(Path(args.doc), saved)
            log(f"spliced {args.from_json} into {args.doc}")
            return
        _report.write(saved, Path(args.doc), Path(args.chart) if args.chart else None)
        log(f"wrote {args.doc} and {args.chart} from {args.from_json}")
        return
    only = set(args.only.split(","))
    wanted = [b for b in _cycle.BACKENDS if b in args.backends.split(",")]
    quick = args.quick
    # One trial's berth/floor ratio spreads about ±15% on a shared VM (a WAL checkpoint or a slow fsync
    # lands in one contender's slot); with 15 trials the median moved ±0.05 from run to run, so 31.
    trials = args.trials or (5 if quick else 31)
    budget = 0.15 if quick else 0.4
    started = time.time()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="berth-bench-", dir="/var/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"skipped": {}}
    partial = scratch / "partial.json"
    log(f"each section's results go to {partial} as it ends (run.py --from-json it if the run dies)")
    meta: dict[str, Any] = {
        "command": "python benchmarks/run.py"
        + (" --quick" if quick else "")
        + ("" if only == set(WORKLOADS) else f" --only {args.only}"),
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if quick else "full",
        "commit": measured_commit(ROOT, generated=["docs/benchmarks.md", "docs/benchmarks-cycle.png", RAW_NAME]),
        "src_tree": src_tree(ROOT),
        "machine": machine(),
        "versions": versions(),
    }
    with Servers() as servers:
        need = set()
        if {"postgres"} & set(wanted) or only & {"listing", "contention", "resume", "savers", "aio"}:
            need = {"postgres"}
        if only & {"save_many"}:
            need |= {"postgres"}
        need |= {"redis"} if "redis" in wanted else set()
        need |= {"moto"} if {"s3", "dynamodb"} & set(wanted) else set()
        need |= {"gcs"} if "gcs" in wanted else set()
        need |= {"azurite"} if "azblob" in wanted else set()
        need |= {"redis_cluster"} if "redis-cluster" in wanted else set()
        if "postgres" in need:
            try:
                fresh_database()
            except Exception as exc:
                servers.skipped["postgres"] = f"{type(exc).__name__}: {exc}"
                need.discard("postgres")
        servers.start(need)
        meta["versions"].update({f"{k} server": v for k, v in servers.info.items()})
        ctx: dict[str, Any] = {
            "dir": str(scratch),
            "postgres": servers.postgres,
            "redis": servers.redis,
            "moto": servers.moto,
            "gcs": servers.gcs,
            "azurite": servers.azurite,
            "redis_cluster": servers.redis_cluster,
            "skipped": servers.skipped,
        }
        _cycle.prepare(ctx)
        available = []
        for backend in wanted:
            why = _cycle.backend_available(backend, ctx)
            if why:
                res["skipped"][backend] = why
                log(f"skip {backend}: {why}")
            else:
                available.append(backend)
        messages = _common.chat_messages()

        if "cycle" in only:
            with section("cycle", res, meta, partial):
                res["cycle"] = {}
                for backend in available:
                    log(f"cycle: {backend} ({trials} trials x {budget}s per contender)")
                    try:
                        variants = _cycle.group(backend, ctx, messages)
                        results = _common.interleave(variants, trials=trials, budget=budget)
                    except Exception as exc:
                        res["skipped"][backend] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
                        log(f"  failed: {exc!r}")
                        continue
                    res["cycle"][backend] = {
                        name: {"role": r.role, "rates": r.rates, "cpu": r.cpu} for name, r in results.items()
                    }
                    b = results[_report.BERTH]
                    for n, r in results.items():
                        log(f"  {n:45} {r.median:9.1f}/s  berth/this {_common.paired_ratio(b, r)[0]:.2f}")

        if "counts" in only:
            with section("counts", res, meta, partial):
                from _counts import count

                res["counts"] = {}
                for backend in available:
                    log(f"counts: {backend}")
                    calls = 100 if backend in ("file", "sqlite") else 40
                    roles = ["berth", "floor"] + (["peer"] if backend in ("sqlite", "postgres") else [])
                    try:
                        res["counts"][backend] = {role: count(backend, role, ctx, n=calls) for role in roles}
                    except Exception as exc:
                        res["counts"][backend] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                    log(f"  {res['counts'][backend]}")

        if "sealing" in only:
            with section("sealing", res, meta, partial):
                from _sealing import variants as seal_variants

                res["sealing"] = {}
                for size in (64 << 10, 16 << 20):
                    log(f"sealing: {size} bytes")
                    results = _common.interleave(seal_variants(size), trials=trials, budget=budget)
                    res["sealing"][str(size)] = {n: {"role": r.role, "rates": r.rates} for n, r in results.items()}
                    for n, r in results.items():
                        log(f"  {n:40} {r.median / 1e9:.2f} GB/s")

        if "large" in only:
            with section("large", res, meta, partial):
                import _large

                payload = scratch / "payload-64MiB.json"
                payload.write_bytes(_common.big_state_bytes(64 << 20))
                large_backends: list[str] = [b for b in ("file", "sqlite", "postgres") if b in available]
                log(f"large: {large_backends}")
                res["large"] = _large.run(large_backends, ctx, str(payload), 2 if quick else 5)
                payload.unlink()

        if "listing" in only:
            with section("listing", res, meta, partial):
                import _listing

                counts = [1_000, 10_000] if quick else [10_000, 100_000]
                lb = [
                    b
                    for b in _listing.BACKENDS
                    if b in available or (b == "postgres" and servers.postgres and b not in res["skipped"])
                ]
                lb = [b for b in lb if _cycle.backend_available(b, ctx) is None]
                log(f"listing: {lb} at {counts}")
                res["listing"] = _listing.run(lb, counts, ctx, 2 if quick else 3)
                for backend, rows in res["listing"].items():
                    for count, row in rows.items():
                        rate = [round(x["entries"] / x["wall"]) for x in row["list"]]
                        floor = [round(x["entries"] / x["wall"]) for x in row["floor"]]
                        log(f"  {backend} {count}: list {rate}/s, floor {floor}/s")
                if "sqlite" in lb:
                    log(f"listing: berth ls beside --jsonl at {counts}")
                    res["ls"] = _listing.run_ls(counts, ctx, 2 if quick else 3)

        if "contention" in only:
            with section("contention", res, meta, partial):
                import _contention

                cb: list[str] = [
                    b for b in ("sqlite", "postgres") if b in wanted and _cycle.backend_available(b, ctx) is None
                ]
                log(f"contention: {cb}")
                res["contention"] = _contention.run(cb, ctx, 1 if quick else 3)
                writers = _contention.WRITERS_QUICK if quick else _contention.WRITERS
                log(f"contention writers: {cb} at {writers} processes")
                res["writers"] = _contention.run_writers(cb, ctx, 1 if quick else 3, writers, 3.0 if quick else 5.0)

        if "witness" in only:
            with section("witness", res, meta, partial):
                import _witness

                wb = [b for b in _witness.BACKENDS if b in available]
                log(f"witness: {wb} ({trials} trials x {budget}s per contender)")
                res["witness"] = _witness.run(wb, ctx, messages, trials=trials, budget=budget, n=20 if quick else 60)
                for backend, entry in res["witness"].items():
                    log(f"  {backend}: {entry.get('counts')}")
        if "resume" in only:
            with section("resume", res, meta, partial):
                import _resume_race

                rb = [b for b in ("sqlite", "postgres") if _cycle.backend_available(b, ctx) is None]
                threads = 50 if quick else 200
                log(f"resume: {rb}, {threads} interrupted threads x {_resume_race.PROCESSES} processes")
                res["resume"] = _resume_race.run(rb, ctx, threads, 1)
                for backend, rows in res["resume"].items():
                    for who, trials in rows.items():
                        log(f"  {backend} {who}: {[(t['resumes'], t['resumed_twice_or_more']) for t in trials]}")

        if "savers" in only:
            with section("savers", res, meta, partial):
                import _savers

                sb = [b for b in ("sqlite", "postgres") if _cycle.backend_available(b, ctx) is None]
                log(f"savers: {sb}")
                res["savers"] = _savers.run(
                    sb, ctx, quick=quick, trials=args.trials or (3 if quick else 9), budget=0.1 if quick else 0.25
                )

        if "startup" in only:
            with section("startup", res, meta, partial):
                import _startup

                log("startup: import berth, berth --help, berth ls on an empty store, beside bare python")
                res["startup"] = _startup.run(ctx, 10 if quick else 40)

        if "aio" in only:
            with section("aio", res, meta, partial):
                import bench_aio

                ab: list[str] = [b for b in ("sqlite", "postgres", "redis") if b in available]
                log(f"aio: {ab}")
                res["aio"] = bench_aio.run(
                    ab, {"postgres": servers.postgres or "", "redis": servers.redis or ""}, quick
                )
                for backend, r in res["aio"].items():
                    log(f"  {backend}: {r.get('error') or r['ratios']}")

        if "stalls" in only:
            with section("stalls", res, meta, partial):
                import bench_aio

                res["stalls"] = {}
                for backend in available:
                    log(f"stalls: {backend} (64 KiB x {bench_aio.STALL_TASKS} at once, then 48 MiB states)")
                    url, options = _cycle.berth_url(backend, ctx, "stalls")
                    try:
                        res["stalls"][backend] = bench_aio.stalls(url, options, quick)
                    except Exception as exc:
                        res["stalls"][backend] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    log(f"  {_report.stall_summary(res['stalls'][backend])}")

        if "save_many" in only:
            with section("save_many", res, meta, partial):
                import bench_save_many

                res["save_many"] = {"items": 300 if quick else 1000, "rounds": 1 if quick else 3, "backends": {}}
                for backend in [b for b in ("sqlite", "postgres", "redis") if b in available]:
                    url, _ = _cycle.berth_url(backend, ctx, "save_many")  # these three take no options
                    items, rounds = res["save_many"]["items"], res["save_many"]["rounds"]
                    log(f"save_many: {backend} ({items} saves x {rounds} rounds)")
                    rates: dict[str, Any]
                    try:
                        rates = bench_save_many.measure(url, res["save_many"]["items"], res["save_many"]["rounds"])
                    except Exception as exc:
                        rates = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    res["save_many"]["backends"][backend] = rates
                    log(f"  {rates}")

    meta["duration_s"] = time.time() - started
    res["meta"] = meta
    goals = publish(res, Path(args.results), Path(args.doc), Path(args.chart) if args.chart else None, args.splice)
    for goal, figure, ok in goals.rows:
        print(f"  {'MET    ' if ok else 'NOT MET' if ok is not None else '       '}  {goal}: {figure}")
    if not args.dir:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
