"""The conformance oracles' memory bounds keep their answers: ``relative_error`` a slab of rows at a time
and ``_attend`` a block of queries at a time give what they give in one piece.

Why: ``pytest -m all_workloads`` ran out of memory on a 24 GiB machine (the paged 64 x 16k decode row's
float64 caches, the 16k prompt's 34 GB score matrix), so both now bound what they hold; the bounds must
not change a verdict.
"""

from __future__ import annotations

import pytest
import torch

import catalogue_references as oracles


def test_relative_error_in_slabs_is_the_whole_tensor_s(monkeypatch):
    gen = torch.Generator().manual_seed(7)
    ref = torch.randn(37, 5, 3, generator=gen, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).to(torch.bfloat16)
    scale = torch.rand(3, generator=gen, dtype=torch.float64) + 0.5
    whole = oracles.relative_error(out, ref), oracles.relative_error(out, ref, scale)
    monkeypatch.setattr(oracles, "_CHUNK", 15)  # one row (5 x 3 elements) a slab
    assert oracles.relative_error(out, ref) == pytest.approx(whole[0], rel=1e-12)
    assert oracles.relative_error(out, ref, scale) == pytest.approx(whole[1], rel=1e-12)
    out[36, 4, 2] = float("nan")  # in the last slab
    assert oracles.relative_error(out, ref) == float("inf")


@pytest.mark.parametrize("causal", [True, False])
def test_attend_a_block_of_queries_at_a_time_is_the_whole_attention(causal, monkeypatch):
    gen = torch.Generator().manual_seed(8)
    S, NQ, NKV, D = 29, 4, 2, 8
    q, k, v = (torch.randn(S, n, D, generator=gen) for n in (NQ, NKV, NKV))
    whole = oracles._attend(q, k, v, None, causal)
    monkeypatch.setattr(oracles, "_SCORES", NQ * S * 3)  # blocks of 3 queries, the last one short
    blocked = oracles._attend(q, k, v, None, causal)
    assert torch.allclose(blocked, whole, rtol=0, atol=1e-13)
    if causal:  # the first query sees only the first key: its output is that key's value
        assert torch.allclose(blocked[0], v[0].double().repeat_interleave(NQ // NKV, dim=0), atol=1e-13)
