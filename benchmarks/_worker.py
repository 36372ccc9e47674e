"""Subprocess entry point: `python benchmarks/_worker.py JOB JSON-ARGS`; prints one JSON result line.

Memory and syscall measurements each run in a fresh process so that one
measurement's peak or counters never leak into the next.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.simplefilter("ignore")  # the suite's figures, not deprecation notices, go to stdout


def main() -> None:
    job, args = sys.argv[1], json.loads(sys.argv[2])
    if job == "count":
        from _counts import count_job as run
    elif job == "large":
        from _large import large_job as run
    elif job == "listing":
        from _listing import listing_job as run
    elif job == "claimer":
        from _contention import claimer_job as run
    elif job == "writer":
        from _contention import writer_job as run
    else:
        raise SystemExit(f"unknown job {job!r}")
    result = run(args)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
