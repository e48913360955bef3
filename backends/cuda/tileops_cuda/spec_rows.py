"""The CUDA call specs of ops' workload rows, planned on ``meta`` tensors (nothing allocated: an expert
bank at real size is gigabytes), for what needs every row's kernel without running it: prebuilding
them (``bench/prebuild_spec_rows.py``) and checking which class and key serve them
(``tests/test_registered_dependent_launch.py``)."""

from __future__ import annotations

import importlib
from typing import Any, Iterator

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate, plan_row
from tileops_core.kernels import CallSpec
from tileops_core.workloads import dtype_cases

__all__ = ["cuda_calls"]


def cuda_calls(ops: tuple[str, ...], arch: str) -> Iterator[tuple[str, str, Any, CallSpec]]:
    """``(op, row label, kernel interface, call spec on cuda/arch)`` of every row, dtype case and
    call of ``ops`` (the manifest's names)."""
    manifest = load_manifest()
    for name in ops:
        spec = manifest[name]
        cls = getattr(importlib.import_module(spec.source["op"]), name)
        for row in spec.workloads:
            for case in dtype_cases(row):
                _, plan = plan_row(spec, cls, instantiate(spec, row, case, meta_only=True))
                for interface, c in plan.call_specs.items():
                    yield name, row.label, interface, CallSpec(c.op, c.interface, "cuda", arch, c.dtypes, c.dims,
                                                               c.flags)
