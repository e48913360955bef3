"""The bench scripts as modules for the CPU tests: they live beside the benches (``backends/cuda/bench``), not in a
package, so a test loads one by its file."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def bench_script(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as the module ``name``, registered in ``sys.modules`` first (its dataclasses
    resolve their annotations through it)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
