"""The CPU reference of QKNormRope normalises and rotates q's and k's heads in one pass: the bits of
each tensor normalised (its own weight) and rotated on its own, HF's order (q_norm / k_norm, then
``apply_rotary_pos_emb``), on a strided query and contiguous outputs."""

from __future__ import annotations

import pytest
import torch

from cpu_ref_rows import fresh_rng
from tileops_cpu_ref.attention import _rotate, qk_norm_rope, rope_tables
from tileops_cpu_ref.gated_delta_net import zero_centred_rms_norm


def _each_on_its_own(query, key, q_weight, k_weight, positions, rotary_dim, theta, eps, style, section):
    cos, sin = rope_tables(positions, rotary_dim, theta, style, section, query.dtype, query.device)
    return (_rotate(zero_centred_rms_norm(query, q_weight, eps), cos, sin),
            _rotate(zero_centred_rms_norm(key, k_weight, eps), cos, sin))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("style,rows", [("neox", 1), ("mrope_interleaved", 3)])
@pytest.mark.parametrize("T,nq,nkv,d,rotary_dim", [(1, 16, 2, 256, 64), (7, 4, 2, 16, 4), (5, 2, 2, 32, 32)])
def test_q_and_k_in_one_pass_give_the_bits_of_each_on_its_own(dtype, style, rows, T, nq, nkv, d, rotary_dim):
    g = fresh_rng()
    q_and_gate = torch.randn(T, nq, 2 * d, generator=g).to(dtype)
    query = q_and_gate[..., :d]  # the query half of q_proj's output: a strided view
    key = torch.randn(T, nkv, d, generator=g).to(dtype)
    q_weight, k_weight = (0.1 * torch.randn(d, generator=g)).to(dtype), (0.1 * torch.randn(d, generator=g)).to(dtype)
    positions = torch.randint(0, 4096, (rows, T), generator=g).squeeze(0)
    args = (query, key, q_weight, k_weight, positions, rotary_dim, 1e7, 1e-6, style, (11, 11, 10))
    q_out, k_out = qk_norm_rope(*args)
    q_want, k_want = _each_on_its_own(*args)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert q_out.dtype == dtype and torch.equal(q_out, q_want) and torch.equal(k_out, k_want)
