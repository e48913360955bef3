"""The Gated DeltaNet layer's norms and gating through their public API: HF's rounding order,
the fused residual contract, strided views, and outputs RGDR takes as they are.

The HF forms below are the formulas of transformers' Qwen3-Next modules (``Qwen3NextRMSNorm``,
``Qwen3NextRMSNormGated``, the gating lines of ``Qwen3NextGatedDeltaNet.forward``), written
out here so the ops are held to them. Rounding order is checked by the share of elements
whose bits agree: the same order gives (nearly) every element, a different one a visibly
smaller share.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from tileops_core.ops.gated_delta_net import (
    FusedAddZeroCentredRMSNormFwdOp, GatedRMSNormFwdOp, GDNGatingFwdOp, ZeroCentredRMSNormFwdOp,
)
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

EPS = 1e-6
#: Share of elements whose bits must equal HF's (float32 sums in another order may move a
#: rare element by one unit in the last place; a different rounding order moves many).
SAME_BITS = 0.995


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _randn(*shape: int, dtype: torch.dtype = torch.bfloat16, rng: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=rng).to(dtype)


def _hf_zero_centred(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = x.float()
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return (out * (1.0 + weight.float())).type_as(x)


def _hf_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    h = weight * h.to(x.dtype)
    return (h * F.silu(gate.to(torch.float32))).to(x.dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.dtype == b.dtype and a.shape == b.shape
    return float((a == b).float().mean())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_zero_centred_norm_rounds_like_qwen3_next_rms_norm(dtype):
    rng = _rng()
    x, w = _randn(64, 2048, dtype=dtype, rng=rng), 0.1 * _randn(2048, dtype=dtype, rng=rng)
    out = ZeroCentredRMSNormFwdOp()(x, w)
    assert _same_bits(out, _hf_zero_centred(x, w)) >= SAME_BITS


def test_zero_centred_norm_forms_one_plus_weight_in_float32_not_in_the_input_dtype():
    rng = _rng()
    x, w = _randn(64, 2048, rng=rng), 0.01 * _randn(2048, rng=rng)
    out = ZeroCentredRMSNormFwdOp()(x, w)
    rounded_first = (F.rms_norm(x.float(), (2048,), eps=EPS) * (1 + w).float()).to(x.dtype)
    assert _same_bits(out, _hf_zero_centred(x, w)) > _same_bits(out, rounded_first)


def test_fused_add_writes_the_rounded_sum_into_residual_and_normalises_that_sum():
    rng = _rng()
    x, r, w = _randn(32, 2048, rng=rng), _randn(32, 2048, rng=rng), _randn(2048, rng=rng)
    expected_h = r + x  # the decoder layer's own add, in bfloat16
    residual = r.clone()
    out = FusedAddZeroCentredRMSNormFwdOp()(x, residual, w)
    assert torch.equal(residual, expected_h)
    assert _same_bits(out, _hf_zero_centred(expected_h, w)) >= SAME_BITS


def test_fused_add_writes_a_strided_residual_view_in_place():
    rng = _rng()
    x, w = _randn(16, 256, rng=rng), _randn(256, rng=rng)
    wide = _randn(16, 512, rng=rng)
    view = wide[:, 128:384]
    expected_h = view + x
    untouched = torch.cat([wide[:, :128], wide[:, 384:]], dim=1).clone()
    FusedAddZeroCentredRMSNormFwdOp()(x, view, w)
    assert torch.equal(wide[:, 128:384], expected_h)
    assert torch.equal(torch.cat([wide[:, :128], wide[:, 384:]], dim=1), untouched)


def test_zero_centred_norm_of_a_chunk_of_a_projection_equals_that_of_its_copy():
    rng = _rng()
    q_and_gate = _randn(8, 16, 2 * 256, rng=rng)  # q_proj's output: q and its gate per head
    query = q_and_gate[..., :256]
    w = _randn(256, rng=rng)
    assert not query.is_contiguous()
    assert torch.equal(ZeroCentredRMSNormFwdOp()(query, w), ZeroCentredRMSNormFwdOp()(query.contiguous(), w))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gated_norm_rounds_like_qwen3_next_rms_norm_gated(dtype):
    rng = _rng()
    x, z, w = _randn(64, 32, 128, dtype=dtype, rng=rng), _randn(64, 32, 128, dtype=dtype, rng=rng), \
        _randn(128, dtype=dtype, rng=rng)
    out = GatedRMSNormFwdOp()(x, z, w)
    assert _same_bits(out, _hf_gated(x, z, w)) >= SAME_BITS


def test_gated_norm_rounds_between_norm_weight_and_gate_not_once():
    rng = _rng()
    x, z, w = _randn(64, 32, 128, rng=rng), _randn(64, 32, 128, rng=rng), _randn(128, rng=rng)
    out = GatedRMSNormFwdOp()(x, z, w)
    once = (F.rms_norm(x.float(), (128,), eps=EPS) * w.float() * F.silu(z.float())).to(x.dtype)
    assert _same_bits(out, _hf_gated(x, z, w)) > _same_bits(out, once)


def test_gated_norm_normalises_each_head_on_its_own():
    rng = _rng()
    x, z, w = _randn(4, 3, 64, dtype=torch.float32, rng=rng), _randn(4, 3, 64, dtype=torch.float32, rng=rng), \
        _randn(64, dtype=torch.float32, rng=rng)
    x[:, 1] *= 100.0  # one head far louder than the others: a norm over all heads would shrink them
    out = GatedRMSNormFwdOp()(x, z, w)
    per_head = torch.stack([GatedRMSNormFwdOp()(x[:, h], z[:, h], w) for h in range(3)], dim=1)
    torch.testing.assert_close(out, per_head, rtol=1e-6, atol=1e-6)


def test_gated_norm_reads_a_gate_sliced_from_a_fused_projection():
    rng = _rng()
    T, NV, DV = 8, 4, 32
    qkvz = _randn(T, 3 * NV * DV, rng=rng)
    gate = qkvz[:, 2 * NV * DV:].view(T, NV, DV)
    x, w = _randn(T, NV, DV, rng=rng), _randn(DV, rng=rng)
    assert not gate.is_contiguous()
    assert torch.equal(GatedRMSNormFwdOp()(x, gate, w), GatedRMSNormFwdOp()(x, gate.contiguous(), w))


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.bfloat16])
def test_gating_equals_qwen3_next_gated_delta_net_bit_for_bit(param_dtype):
    rng = _rng()
    a, b = _randn(2, 7, 32, rng=rng), _randn(2, 7, 32, rng=rng)
    A_log = torch.log(torch.empty(32).uniform_(1, 16, generator=rng)).to(param_dtype)
    dt_bias = _randn(32, dtype=param_dtype, rng=rng)
    g, beta = GDNGatingFwdOp()(a, b, A_log, dt_bias)
    assert g.dtype == torch.float32 and beta.dtype == b.dtype
    assert torch.equal(g, -A_log.float().exp() * F.softplus(a.float() + dt_bias))
    assert torch.equal(beta, b.sigmoid())


def test_gating_softplus_passes_large_arguments_through_as_torch_does():
    a = torch.tensor([[30.0, -30.0, 0.0]])
    g, _ = GDNGatingFwdOp()(a, torch.zeros(1, 3), torch.zeros(3), torch.zeros(3))
    assert torch.equal(g, -F.softplus(a))
    assert g[0, 0].item() == -30.0 and g[0, 1].item() < 0


def test_gating_outputs_feed_the_recurrent_gated_delta_rule_as_they_are():
    rng = _rng()
    T, NK, NV, DK, DV = 3, 1, 2, 16, 16
    ba = _randn(T, 2 * NV, rng=rng)  # the fused ba projection: b and a are strided slices of it
    b, a = ba[:, :NV], ba[:, NV:]
    g, beta = GDNGatingFwdOp()(a, b, torch.zeros(NV), torch.ones(NV))
    q = F.normalize(torch.randn(T, NK, DK, generator=rng), dim=-1).bfloat16()
    k = F.normalize(torch.randn(T, NK, DK, generator=rng), dim=-1).bfloat16()
    v = _randn(T, NV, DV, rng=rng)
    state = torch.zeros(T, NV, DV, DK)
    out = RecurrentGatedDeltaRuleFwdOp()(q, k, v, beta, state, torch.ones(T, dtype=torch.int32),
                                         torch.arange(T, dtype=torch.int32), g)
    assert out.shape == (T, NV, DV) and bool(torch.isfinite(out).all())
