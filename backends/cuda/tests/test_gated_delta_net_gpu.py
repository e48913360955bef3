"""The gated-delta-net layer kernels on an NVIDIA GPU: every workload row and dtype of
ZeroCentredRMSNorm, FusedAddZeroCentredRMSNorm, GatedRMSNorm and GDNGating.

Two checks per row, both against the float64 references of the conformance suite
(``tests/catalogue_references.py``, same tolerances): the TileLang kernel called with the
exact arguments the op passes it and NaN-filled outputs (every element must be written),
and the op through its public API on CUDA tensors (the TileLang kernel selected wherever it
does not refuse). Then strided views: slices of fused projections give the bits their
contiguous copies give, and a strided residual is written in place with its neighbours
untouched. Skips cleanly without a GPU or tilelang.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.baselines import capture_launches
from tileops_core.bench.workloads import instantiate
from tileops_core.kernels import select_kernel
from tileops_core.workloads import dtype_cases

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402

OPS = ("ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "GDNGatingFwdOp")


def _cases() -> list:
    manifest = load_manifest()
    return [pytest.param(name, i, case, id=f"{name}-{row.label}[{case}]")
            for name in OPS for i, row in enumerate(manifest[name].workloads) for case in dtype_cases(row)]


def _instance(name: str, row_index: int, case):
    spec = load_manifest()[name]
    cls = getattr(importlib.import_module(spec.source["op"]), name)
    seed = int.from_bytes(os.urandom(4), "little")
    inst = instantiate(spec, spec.workloads[row_index], case, rng=torch.Generator().manual_seed(seed))
    return spec, cls, inst, f"{inst.name} seed={seed}"


def _check(spec, got: dict, originals: dict, params: dict, where: str) -> None:
    expected = REFERENCES[spec.name](None, originals, params)
    for out_name, out in got.items():
        ref = expected[out_name]
        assert tuple(out.shape) == tuple(ref.shape), f"{where}: {out_name} shape"
        err = relative_error(out.cpu(), ref)  # infinite on any NaN: an element left unwritten
        assert err <= TOLERANCE[out.dtype], f"{where}: {out_name} relative error {err:.3g} > {TOLERANCE[out.dtype]:g}"


@pytest.mark.parametrize("name,row_index,case", _cases())
def test_kernel_writes_every_element_of_poisoned_outputs_and_matches_float64(cuda_device, name, row_index, case):
    spec, cls, inst, where = _instance(name, row_index, case)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    launch = capture_launches(op, args)[0]  # calls the op (once or twice): args are spent after this
    selection = select_kernel(launch.interface, launch.call)
    impl = selection.chosen
    if selection.chosen_backend != "cuda":
        pytest.skip(f"{where}: the TileLang kernel refuses this row: {impl.refusal(launch.call)}")
    # The launch's tensors are the captured call's; give the kernel fresh copies of the originals.
    names = {id(a): t.name for a, t in zip(args, spec.call_inputs) if a is not None}
    captured = op.last_plan
    fresh = {n: originals[n].to("cuda") for n in originals}
    kernel_args = [fresh[names[id(a)]] if id(a) in names else a for a in launch.args]
    outs = [torch.full(shape, float("nan"), dtype=dtype, device="cuda")
            for shape, dtype in zip(captured.out_shapes, captured.out_dtypes)]
    impl.entry_for(launch.call).build()(*kernel_args, *outs)
    torch.cuda.synchronize()
    got = dict(zip(spec.outputs, outs))
    got.update({t.name: fresh[t.name] for t in spec.call_inputs if t.mutated and t.name in fresh})
    _check(spec, got, originals, op.params, where)


@pytest.mark.parametrize("name,row_index,case", _cases())
def test_op_on_cuda_selects_tilelang_unless_refused_and_matches_float64(cuda_device, name, row_index, case):
    spec, cls, inst, where = _instance(name, row_index, case)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    result = op(*args)
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        tilelang = next(c.impl for c in selection.candidates if c.backend == "cuda")
        expected_backend = "cuda" if tilelang.refusal(call) is None else "cpu_ref"
        assert selection.chosen_backend == expected_backend, f"{where}: {selection.report()}"
    got = dict(zip(spec.outputs, result if isinstance(result, tuple) else (result,)))
    for name_, out in got.items():
        assert out.device.type == "cuda" and out.dtype == inst.dtypes[name_], f"{where}: {name_}"
    got.update({t.name: args[i] for i, t in enumerate(spec.call_inputs) if t.mutated and i < len(args)})
    _check(spec, got, originals, op.params, where)


def _ops():
    from tileops_core.ops import gated_delta_net as gdn

    return gdn


def test_zero_centred_norm_reads_a_chunk_of_q_proj_in_place(cuda_device, gen):
    gdn = _ops()
    q_and_gate = torch.randn(64, 16, 2 * 256, device="cuda", generator=gen).bfloat16()
    query, w = q_and_gate[..., :256], torch.randn(256, device="cuda", generator=gen).bfloat16()
    op = gdn.ZeroCentredRMSNormFwdOp()
    assert torch.equal(op(query, w), op(query.contiguous(), w))


def test_fused_add_writes_a_strided_residual_in_place_and_leaves_its_neighbours(cuda_device, gen):
    gdn = _ops()
    wide = torch.randn(256, 3 * 2048, device="cuda", generator=gen).bfloat16()
    before = wide.clone()
    x, w = torch.randn(256, 2048, device="cuda", generator=gen).bfloat16(), \
        torch.randn(2048, device="cuda", generator=gen).bfloat16()
    residual = wide[:, 2048:4096]
    out = gdn.FusedAddZeroCentredRMSNormFwdOp()(x, residual, w)
    contiguous_residual = before[:, 2048:4096].contiguous()
    expected = gdn.FusedAddZeroCentredRMSNormFwdOp()(x, contiguous_residual, w)
    assert torch.equal(out, expected)
    assert torch.equal(wide[:, 2048:4096], contiguous_residual)
    assert torch.equal(wide[:, :2048], before[:, :2048]) and torch.equal(wide[:, 4096:], before[:, 4096:])


def test_gated_norm_reads_a_gate_sliced_from_the_qkvz_projection_in_place(cuda_device, gen):
    gdn = _ops()
    T, NV, DV = 300, 32, 128
    qkvz = torch.randn(T, 4 * NV * DV, device="cuda", generator=gen).bfloat16()
    gate = qkvz[:, 3 * NV * DV:].view(T, NV, DV)
    x, w = torch.randn(T, NV, DV, device="cuda", generator=gen).bfloat16(), \
        torch.randn(DV, device="cuda", generator=gen).bfloat16()
    op = gdn.GatedRMSNormFwdOp()
    assert torch.equal(op(x, gate, w), op(x, gate.contiguous(), w))


def test_gating_reads_a_and_b_sliced_from_the_ba_projection_in_place(cuda_device, gen):
    gdn = _ops()
    ba = torch.randn(1000, 2 * 32, device="cuda", generator=gen).bfloat16()
    b, a = ba[:, :32], ba[:, 32:]
    A_log = torch.log(torch.rand(32, device="cuda", generator=gen) * 15 + 1)
    dt_bias = torch.randn(32, device="cuda", generator=gen).bfloat16()
    op = gdn.GDNGatingFwdOp()
    g, beta = op(a, b, A_log, dt_bias)
    g_ref, beta_ref = op(a.contiguous(), b.contiguous(), A_log, dt_bias)
    assert torch.equal(g, g_ref) and torch.equal(beta, beta_ref)


def _ragged_rows(M: int, N: int, gen, dtype=torch.bfloat16):
    """``[M, N]`` rows with a row stride past N (a slice of a wider projection)."""
    return torch.randn(M, N + 16, device="cuda", generator=gen).to(dtype)[:, :N]


@pytest.mark.parametrize("tile", [{"threads": 32, "vectors": 3}])
def test_gating_block_shapes_cover_a_ragged_last_program(cuda_device, gen, tile):
    """M * NV not a multiple of a program's elements: the last program's tail is guarded."""
    from tileops_cuda.kernels.gdn_gating import GDNGatingBuildKey, build_gdn_gating

    M, NV = 1001, 32
    a, b = _ragged_rows(M, NV, gen), _ragged_rows(M, NV, gen)
    A_log = torch.log(torch.rand(NV, device="cuda", generator=gen) * 15 + 1)
    dt_bias = torch.randn(NV, device="cuda", generator=gen).bfloat16()
    g = torch.full((M, NV), float("nan"), device="cuda")
    beta = torch.full((M, NV), float("nan"), device="cuda").bfloat16()
    build_gdn_gating(GDNGatingBuildKey("bfloat16", "float32", "bfloat16", NV, cuda_device[1], **tile)).fn(
        a, b, A_log, dt_bias, g, beta)
    expected = REFERENCES["GDNGatingFwdOp"](None, {"a": a.cpu(), "b": b.cpu(), "A_log": A_log.cpu(),
                                                   "dt_bias": dt_bias.cpu()}, {})
    assert relative_error(g.cpu(), expected["g"]) <= TOLERANCE[torch.float32]
    assert relative_error(beta.cpu(), expected["beta"]) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("tile", [{"threads": 256, "rows": 2}])
def test_zero_centred_norm_block_shapes_match_float64(cuda_device, gen, tile):
    from tileops_cuda.kernels.zero_centred_rmsnorm import ZeroCentredRMSNormBuildKey, build_zero_centred_rmsnorm

    M, N = 37, 4096  # rows not a multiple of rows per program
    x, r = _ragged_rows(M, N, gen), _ragged_rows(M, N, gen)
    w = torch.randn(N, device="cuda", generator=gen).bfloat16()
    originals = {"x": x.cpu(), "residual": r.cpu(), "weight": w.cpu()}
    y = torch.full((M, N), float("nan"), device="cuda").bfloat16()
    key = ZeroCentredRMSNormBuildKey("bfloat16", N, True, cuda_device[1], **tile)
    build_zero_centred_rmsnorm(key).fn(x, r, w, y, 1e-6)
    expected = REFERENCES["FusedAddZeroCentredRMSNormFwdOp"](None, originals, {})
    assert relative_error(y.cpu(), expected["output"]) <= TOLERANCE[torch.bfloat16]
    assert relative_error(r.cpu(), expected["residual"]) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("tile", [{"threads": 256, "rows": 64}])
def test_gated_norm_block_shapes_match_float64(cuda_device, gen, tile):
    from tileops_cuda.kernels.gated_rmsnorm import GatedRMSNormBuildKey, build_gated_rmsnorm

    A, H, D = 9, 40, 128  # heads not a multiple of heads per program
    x = torch.randn(A, H, D, device="cuda", generator=gen).bfloat16()
    gate = torch.randn(A, H, 2 * D, device="cuda", generator=gen).bfloat16()[..., D:]
    w = torch.randn(D, device="cuda", generator=gen).bfloat16()
    y = torch.full((A, H, D), float("nan"), device="cuda").bfloat16()
    build_gated_rmsnorm(GatedRMSNormBuildKey("bfloat16", D, cuda_device[1], **tile)).fn(x, gate, w, y, 1e-6)
    expected = REFERENCES["GatedRMSNormFwdOp"](None, {"x": x.cpu(), "gate": gate.cpu(), "weight": w.cpu()}, {})
    assert relative_error(y.cpu(), expected["output"]) <= TOLERANCE[torch.bfloat16]
