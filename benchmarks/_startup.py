"""Workload 12: start-up. `import berth`, its first store, `berth --help`, `berth ls` (empty store), beside bare Python.

Each command runs in a fresh interpreter, all of them interleaved round by round
so the load of a shared machine falls on each alike; the report gives each
command's wall time (and CPU time, which the load of a shared machine disturbs
least) and what it adds over bare Python in the same round. The
console script is the installed `berth`, as a user runs it.

Bytecode is cached (in a scratch directory, PYTHONPYCACHEPREFIX), as an installed
package has it: under PYTHONDONTWRITEBYTECODE an editable install would compile
every berth module it imports on every run, which no user's install does.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_FIRST_STORE = "berth.open_store('memory://', identity='a', sealer=berth.PlaintextSealer())"


def commands(scratch: str) -> dict[str, list[str]]:
    """What is timed: a name for the report, and the command line."""
    berth = str(Path(sys.executable).parent / "berth")
    return {
        "bare python": [sys.executable, "-c", "pass"],
        "import berth": [sys.executable, "-c", "import berth"],
        # `import berth` defers each name to its first use: this is what a host pays before its first call
        "import berth, open a store": [sys.executable, "-c", f"import berth; {_FIRST_STORE}"],
        "berth --help": [berth, "--help"],
        "berth ls (empty store)": [berth, "ls", "--url", f"sqlite:///{scratch}/startup-empty.db"],
    }


def _shown(cmd: list[str]) -> str:
    return " ".join(["python" if c == sys.executable else Path(c).name if c.endswith("/berth") else c for c in cmd])


def run(ctx: dict[str, Any], rounds: int) -> dict[str, Any]:
    """`rounds` rounds of every command, interleaved; wall milliseconds per run and the load at each round."""
    cmds = commands(ctx["dir"])
    drop = ("BERTH_KEYRING", "BERTH_KMS", "BERTH_URL", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPYCACHEPREFIX"] = str(Path(ctx["dir"]) / "pycache")
    # `berth ls` opens only a store that exists (exit 66 otherwise): the empty store is made first
    empty = cmds["berth ls (empty store)"]
    made = subprocess.run([empty[0], "setup", *empty[2:]], env=env, capture_output=True, check=False)
    if made.returncode == 2 and b"No such command" in made.stderr:
        pass  # a tree of berth from before `berth setup` (benchmarks/ab.py's base): its `ls` made the store
    elif made.returncode != 0:
        raise subprocess.CalledProcessError(made.returncode, made.args, made.stdout, made.stderr)
    for cmd in cmds.values():  # warm the page cache and write the bytecode
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    runs: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    loads = []
    for i in range(rounds):
        loads.append(os.getloadavg()[0])
        order = list(cmds.items())
        for name, cmd in order if i % 2 == 0 else order[::-1]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            runs[name].append((time.perf_counter() - t0) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child's own user + system time
            cpu[name].append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return {"commands": {name: _shown(cmd) for name, cmd in cmds.items()}, "runs": runs, "cpu": cpu, "loads": loads}
