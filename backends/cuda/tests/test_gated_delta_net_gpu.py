"""The gated-delta-net layer kernels on an NVIDIA GPU with the strided views a model passes them
(every workload row and dtype is checked in ``test_spec_rows_gpu.py``): slices of fused
projections give the bits their contiguous copies give, and a strided residual is written in place with its neighbours
untouched. Skips cleanly without a GPU or tilelang.
"""

from __future__ import annotations

import torch


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
