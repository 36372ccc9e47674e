"""benchmarks/_report.py loaded by path (benchmarks/ is not a package) for the tests of the generated pages."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load(path: Path, name: str) -> ModuleType:
    """The module at `path` (a benchmark script, not in a package), fresh, as `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench_report() -> ModuleType:
    """A fresh copy of benchmarks/_report.py."""
    return load(ROOT / "benchmarks" / "_report.py", "bench_report")
