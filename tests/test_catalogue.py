"""The conformance suite, generated from the manifest: every core op, workload row and dtype.

Each case instantiates a row with fresh random inputs, runs the op through its public API
on the CPU (the selected kernel is the reference backend's), and compares every output
and every mutated input with the float64 reference (``catalogue_references``) at the
per-dtype tolerances documented there; output shapes and dtypes are checked against what
the spec gives. Rows whose inputs exceed a few MB are marked ``all_workloads`` (run them
with ``pytest -m all_workloads``); the default run covers the small rows of every op.
A second test makes one call per op that breaks a declared dtype and expects the check
to name that declaration.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
import torch

from catalogue_references import ERROR_SCALES, REFERENCES, TOLERANCE, relative_error, resolve_ref_api
from tileops_core import CheckError, load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.lang.dtypes import DTYPE_NAMES, DTypeSet
from tileops_core.spec.nodes import OpSpec
from tileops_core.workloads import dtype_cases

#: Rows above this many input bytes run only with ``-m all_workloads``.
SMALL_BYTES = 4 << 20


def _core_specs() -> dict[str, OpSpec]:
    specs = {n: s for n, s in load_manifest().items() if s.status == "implemented" and s.file.startswith("manifest/")}
    for spec in specs.values():
        importlib.import_module(spec.source["op"])  # registers the op's workload generators
    return specs


def op_class(spec: OpSpec) -> type:
    return getattr(importlib.import_module(spec.source["op"]), spec.name)


def _cases() -> list[Any]:
    params = []
    for name, spec in sorted(_core_specs().items()):
        for row in spec.workloads:
            for case in dtype_cases(row):
                meta = instantiate(spec, row, case, meta_only=True)
                size = sum(m.numel() * m.itemsize for m in meta.inputs.values())
                marks = [] if size <= SMALL_BYTES else [pytest.mark.all_workloads]
                params.append(pytest.param(name, row.index, case, id=f"{name}-{meta.name}", marks=marks))
    return params


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def test_every_core_op_has_a_reference_adapter():
    assert set(_core_specs()) == set(REFERENCES)


@pytest.mark.parametrize("name,row_index,case", _cases())
def test_op_matches_reference_on_workload(name: str, row_index: int, case: Any) -> None:
    spec = _core_specs()[name]
    row = spec.workloads[row_index]
    seed = _seed()
    inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(seed))
    op = op_class(spec)(**inst.op_kwargs)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    result = op(*inst.call_args(spec))
    outputs = dict(zip(spec.outputs, result if isinstance(result, tuple) else (result,)))
    api = None if spec.ref_api == "none" else resolve_ref_api(spec.ref_api)
    expected = REFERENCES[name](api, originals, op.params)
    where = f"{inst.name} seed={seed}"
    scale = ERROR_SCALES[name](originals, op.params) if name in ERROR_SCALES else None
    for out_name, out in outputs.items():
        ref = expected[out_name]
        assert tuple(out.shape) == tuple(ref.shape), f"{where}: {out_name} shape {list(out.shape)} vs {list(ref.shape)}"
        assert out.dtype == inst.dtypes[out_name], f"{where}: {out_name} dtype {out.dtype} vs spec {inst.dtypes[out_name]}"
        err = relative_error(out, ref, scale)
        assert err <= TOLERANCE[out.dtype], f"{where}: {out_name} relative error {err:.3g} > {TOLERANCE[out.dtype]:g}"
    for t in spec.inputs.values():
        if t.mutated and t.name in inst.inputs:
            got = inst.inputs[t.name]
            err = relative_error(got, expected[t.name])
            assert err <= TOLERANCE[got.dtype], f"{where}: mutated {t.name} relative error {err:.3g}"


def _bad_dtype(declared: DTypeSet) -> str:
    for candidate in ("float64", "int8", "complex64", "bool", "float32", "int64"):
        if candidate not in declared.names and candidate in DTYPE_NAMES:
            return candidate
    raise AssertionError(f"every dtype is allowed by {declared}")


@pytest.mark.parametrize("name", sorted(_core_specs()))
def test_a_call_breaking_a_declared_dtype_names_the_declaration(name: str) -> None:
    spec = _core_specs()[name]
    row = min(spec.workloads, key=lambda r: sum(m.numel() for m in instantiate(
        spec, r, dtype_cases(r)[0], meta_only=True).inputs.values()))
    inst = instantiate(spec, row, dtype_cases(row)[0], rng=torch.Generator().manual_seed(_seed()))
    victim = next(t for t in spec.call_inputs if isinstance(t.dtype, DTypeSet) and t.name in inst.inputs)
    bad = _bad_dtype(victim.dtype)
    inst.inputs[victim.name] = inst.inputs[victim.name].to(getattr(torch, bad))
    op = op_class(spec)(**inst.op_kwargs)
    with pytest.raises(CheckError) as caught:
        op(*inst.call_args(spec))
    message = str(caught.value)
    assert message.startswith(f"{name}: input {victim.name} has dtype {bad}, expected {victim.dtype}")
    assert message.endswith(f"({victim.loc.where()})")
