"""benchmarks/_report.py loaded by path (benchmarks/ is not a package) for the tests of the generated pages."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def bench_report() -> ModuleType:
    """A fresh copy of benchmarks/_report.py."""
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
