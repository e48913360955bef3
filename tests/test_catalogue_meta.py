"""Every core op called on meta tensors (no data) returns its outputs on meta with the shapes
and dtypes the spec infers, as torch's own ops do: reference kernels that read metadata
contents compute nothing there instead of failing inside torch."""

from __future__ import annotations

import importlib

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases


def _rows() -> list[str]:
    return sorted(n for n, s in load_manifest().items() if s.status == "implemented" and s.file.startswith("manifest/"))


@pytest.mark.parametrize("name", _rows())
def test_an_op_on_meta_tensors_returns_meta_outputs_of_the_inferred_shapes(name):
    spec = load_manifest()[name]
    cls = getattr(importlib.import_module(spec.source["op"]), name)
    row = spec.workloads[0]
    inst = instantiate(spec, row, dtype_cases(row)[0], device=torch.device("cpu"), rng=torch.Generator().manual_seed(0))
    args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs, check_contents=False)  # contents checks read data, which meta has none of
    result = op(*args)
    outs = result if isinstance(result, tuple) else (result,)
    plan = op.last_plan
    assert [(o.device.type, tuple(o.shape), o.dtype) for o in outs] == [
        ("meta", tuple(s), d) for s, d in zip(plan.out_shapes, plan.out_dtypes)]
