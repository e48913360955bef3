"""The gated-delta-net layer kernels on an NVIDIA GPU with the strided views a model passes them
(every workload row and dtype is checked in ``test_spec_rows_gpu.py``): slices of fused
projections give the bits their contiguous copies give, and a strided residual is written in place with its neighbours
untouched. Skips cleanly without a GPU or tilelang.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402


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


@pytest.mark.parametrize("tile", [{"threads": 32, "vectors": 3}, {"threads": 64, "vectors": 8, "fast_math": True}],
                         ids=["ragged", "fast-math"])
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


@pytest.mark.parametrize("tile", [{"threads": 256, "rows": 2}, {"early_weight": False},
                                  {"passes": 2, "threads": 256, "rows": 2},
                                  {"programs": 5, "threads": 256, "rows": 2},
                                  {"programs": 5, "passes": 2, "threads": 128, "rows": 2}],
                         ids=["rows", "late-weight", "two-pass", "persistent", "persistent-two-pass"])
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


@pytest.mark.parametrize("tile", [{"threads": 256, "rows": 64}, {"early_weight": False, "fast_silu": True},
                                  {"programs": 7, "threads": 128, "rows": 16}],
                         ids=["rows", "late-weight-fast-silu", "persistent"])
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
