"""Every core op that promises ``torch_compile_fullgraph: true`` compiles cold under Inductor.

The promise of the spec, checked the way a user meets it: ``torch.compile(fullgraph=True)``
with the default backend (Inductor) around the real op and its selected reference kernel,
on the op's smallest workload row, from a reset Dynamo (cold). Two calls with the same
shapes compile once, and the compiled result equals the eager one. Mutated inputs are
written by the compiled call exactly as by the eager call.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases


def _promised() -> list[str]:
    return sorted(n for n, s in load_manifest().items()
                  if s.torch_compile_fullgraph and s.status == "implemented" and s.file.startswith("manifest/"))


def _smallest_row(spec):
    def size(row):
        meta = instantiate(spec, row, dtype_cases(row)[0], meta_only=True)
        return sum(m.numel() for m in meta.inputs.values())
    return min(spec.workloads, key=size)


@pytest.mark.parametrize("name", _promised())
def test_op_compiles_cold_with_inductor_fullgraph_once_and_matches_eager(name):
    spec = load_manifest()[name]
    module = importlib.import_module(spec.source["op"])
    row = _smallest_row(spec)
    inst = instantiate(spec, row, dtype_cases(row)[0], rng=torch.Generator().manual_seed(1234))
    op = getattr(module, name)(**inst.op_kwargs, check_contents=False)
    args = inst.call_args(spec)
    eager_args = [None if a is None else a.clone() for a in args]
    expected = op(*eager_args)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda *a: op(*a), fullgraph=True, backend=counter)
    first_args = [None if a is None else a.clone() for a in args]
    got = compiled(*first_args)
    compiled(*[None if a is None else a.clone() for a in args])
    assert counter.frame_count == 1, f"{name} recompiled: {counter.frame_count} frames"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for i, t in enumerate(spec.call_inputs):
        if t.mutated and i < len(args) and args[i] is not None:
            assert torch.equal(first_args[i], eager_args[i]), f"{name}: mutated {t.name} differs under compile"


@pytest.mark.parametrize("name", _promised())
def test_the_compile_boundary_of_every_catalogue_op_passes_opcheck(name):
    spec = load_manifest()[name]
    module = importlib.import_module(spec.source["op"])
    row = _smallest_row(spec)
    inst = instantiate(spec, row, dtype_cases(row)[0], rng=torch.Generator().manual_seed(4321))
    cls = getattr(module, name)
    op = cls(**inst.op_kwargs, check_contents=False)
    boundary = cls.definition().boundary
    args = [a for a in inst.call_args(spec)]
    args += [None] * (boundary.n_tensors - len(args))  # (out buffers absent)
    torch.library.opcheck(boundary.opoverload, (*args, *boundary.encode(op)))
