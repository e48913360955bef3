"""The manifest's workload rows of one op as pytest parameters, the large ones marked ``all_workloads``."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import dtype_cases, instantiate
from tileops_core.spec.nodes import OpSpec

__all__ = ["fresh_rng", "workload_params"]


def fresh_rng() -> torch.Generator:
    """A generator with a fresh seed, printed (pytest shows it with a failure)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def workload_params(op: str, tensor: str, max_bytes: int) -> tuple[OpSpec, list[Any]]:
    """``(spec, [pytest.param(row_index, dtypes), ...])``; rows whose ``tensor`` exceeds ``max_bytes``
    run only with ``-m all_workloads``."""
    spec = load_manifest()[op]
    importlib.import_module(spec.source["op"])  # registers the op's workload generators
    params = []
    for row in spec.workloads:
        for case in dtype_cases(row):
            meta = instantiate(spec, row, case, meta_only=True)
            t = meta.inputs[tensor]
            marks = [] if t.numel() * t.itemsize <= max_bytes else [pytest.mark.all_workloads]
            params.append(pytest.param(row.index, case, id=meta.name, marks=marks))
    return spec, params
