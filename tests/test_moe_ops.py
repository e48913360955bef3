"""The MoE block's ops through their public API: HF's router bits, the tie rule, the permuted
layout and its inverse, experts no token chose, refused indices, and the whole routed path
against HF's Qwen3NextExperts (the conformance suite checks every row against float64 loops).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from tileops_core.errors import CheckError, KernelError
from tileops_core.ops.moe import (
    MoEGroupedExpertsFwdOp, MoEPermuteFwdOp, MoESharedExpertFwdOp, MoETopKRoutingFwdOp, MoEUnpermuteFwdOp,
)
from tileops_cpu_ref.moe import grouped_mm_takes, grouped_linear_by_loop

transformers = pytest.importorskip("transformers")
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import (  # noqa: E402
    Qwen3NextExperts, Qwen3NextMLP, Qwen3NextTopKRouter,
)


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _config(E: int, K: int, H: int = 32, I: int = 16, norm_topk_prob: bool = True) -> Qwen3NextConfig:
    return Qwen3NextConfig(num_experts=E, num_experts_per_tok=K, hidden_size=H, moe_intermediate_size=I,
                           shared_expert_intermediate_size=I, norm_topk_prob=norm_topk_prob)


def _distinct_ids(T: int, K: int, choose_from: int, rng: torch.Generator) -> torch.Tensor:
    return torch.rand(T, choose_from, generator=rng).argsort(dim=1)[:, :K]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_routing_gives_qwen3_next_router_bits(dtype: torch.dtype, norm_topk_prob: bool) -> None:
    rng = _rng()
    router = Qwen3NextTopKRouter(_config(64, 6, norm_topk_prob=norm_topk_prob))
    router.weight.data = torch.randn(64, 32, generator=rng)
    router.to(dtype)
    x = torch.randn(20, 32, generator=rng).to(dtype)
    logits, hf_weights, hf_ids = router(x)
    weights, ids = MoETopKRoutingFwdOp(top_k=6, renormalize=norm_topk_prob)(logits)
    assert weights.dtype == hf_weights.dtype and torch.equal(weights, hf_weights)
    # bfloat16 logits tie often; torch.topk orders tied experts its own way, so ids must agree
    # wherever the chosen probability is held by that expert alone
    probs = torch.softmax(logits.float(), -1)
    alone = (probs.unsqueeze(1) == probs.gather(1, hf_ids).unsqueeze(-1)).sum(-1) == 1
    assert torch.equal(ids[alone], hf_ids[alone])


def test_routing_puts_tied_experts_in_ascending_id() -> None:
    logits = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.5, 1.0]])
    weights, ids = MoETopKRoutingFwdOp(top_k=3)(logits)
    assert ids.tolist() == [[1, 2, 3]]
    assert torch.equal(weights, torch.full((1, 3), 1 / 3))


def test_routing_of_equal_logits_picks_the_lowest_ids() -> None:
    weights, ids = MoETopKRoutingFwdOp(top_k=4)(torch.zeros(3, 10, dtype=torch.bfloat16))
    assert ids.tolist() == [[0, 1, 2, 3]] * 3
    assert torch.equal(weights, torch.full((3, 4), 0.25, dtype=torch.bfloat16))


def test_routing_without_renormalisation_returns_the_softmax_probabilities() -> None:
    logits = torch.randn(5, 16, generator=_rng())
    weights, ids = MoETopKRoutingFwdOp(top_k=3, renormalize=False, ids_dtype="int32")(logits)
    assert ids.dtype == torch.int32
    assert torch.equal(weights, torch.softmax(logits, -1).gather(1, ids.long()))
    assert bool((weights.sum(-1) < 1).all())


def test_permute_groups_copies_by_expert_and_its_index_map_inverts_it() -> None:
    rng = _rng()
    T, K, E, H = 9, 3, 8, 16
    x, ids = torch.randn(T, H, generator=rng), _distinct_ids(T, K, E, rng)
    permuted, offsets, index = MoEPermuteFwdOp(num_experts=E)(x, ids)
    assert offsets.dtype == torch.int32 and index.dtype == torch.int32
    assert torch.equal(permuted[index.long()], x.unsqueeze(1).expand(T, K, H))
    for e in range(E):
        rows = index.long()[ids == e]  # copies of expert e in (t, k) order
        assert rows.tolist() == list(range(int(offsets[e]), int(offsets[e + 1])))


def test_experts_no_token_chose_get_empty_ranges_and_cost_nothing() -> None:
    rng = _rng()
    E, H, I = 16, 24, 8
    ids = _distinct_ids(4, 2, 3, rng) + 5  # only experts 5, 6, 7 are chosen
    permuted, offsets, _ = MoEPermuteFwdOp(num_experts=E)(torch.randn(4, H, generator=rng), ids)
    counts = offsets.diff().tolist()
    assert [e for e, c in enumerate(counts) if c] == sorted(set(ids.flatten().tolist()))
    gate_up, down = torch.randn(E, 2 * I, H, generator=rng), torch.randn(E, H, I, generator=rng)
    gate_up[:5] = gate_up[8:] = float("nan")  # weights of unchosen experts must never be read
    down[:5] = down[8:] = float("nan")
    out = MoEGroupedExpertsFwdOp()(permuted, offsets, gate_up, down)
    assert bool(torch.isfinite(out).all())


def test_routed_path_matches_qwen3_next_experts() -> None:
    rng = _rng()
    T, K, E, H, I = 11, 4, 16, 32, 16
    experts = Qwen3NextExperts(_config(E, K, H, I))
    experts.gate_up_proj.data = torch.randn(E, 2 * I, H, generator=rng) / H ** 0.5
    experts.down_proj.data = torch.randn(E, H, I, generator=rng) / I ** 0.5
    x = torch.randn(T, H, generator=rng)
    weights, ids = MoETopKRoutingFwdOp(top_k=K)(torch.randn(T, E, generator=rng))
    permuted, offsets, index = MoEPermuteFwdOp(num_experts=E)(x, ids)
    y = MoEGroupedExpertsFwdOp()(permuted, offsets, experts.gate_up_proj.data, experts.down_proj.data)
    out = MoEUnpermuteFwdOp()(y, index, weights)
    torch.testing.assert_close(out, experts(x, ids, weights), rtol=1e-5, atol=1e-6)


def test_unpermute_adds_the_shared_output_and_sums_in_float32() -> None:
    rng = _rng()
    T, K, H = 6, 4, 64
    y = torch.randn(T * K, H, generator=rng).to(torch.bfloat16)
    index = torch.randperm(T * K, generator=rng).view(T, K)
    w, shared = torch.rand(T, K, generator=rng), torch.randn(T, H, generator=rng).to(torch.bfloat16)
    out = MoEUnpermuteFwdOp()(y, index, w, shared)
    terms = w.double().unsqueeze(-1) * y.double()[index]
    exact = shared.double() + terms.sum(1)
    # One rounding of a float32 sum: within half a bf16 unit of the exact value, plus what K + 1
    # float32 additions can add (a bf16 sum would be off by several half units). Bit-equality
    # with the float64 value rounded once does not hold: near a bf16 tie the float32 sum's last
    # bit decides, and fresh random inputs meet such ties now and then.
    half_unit = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(2.0**-126))) - 8)
    float32_sum = (K + 1) * 2.0**-24 * (shared.double().abs() + terms.abs().sum(1))
    assert out.dtype is torch.bfloat16
    assert bool(((out.double() - exact).abs() <= half_unit + float32_sum).all())


def test_shared_expert_matches_qwen3_next_mlp_with_its_sigmoid_gate() -> None:
    rng = _rng()
    H, I = 32, 48
    mlp = Qwen3NextMLP(_config(4, 2, H, I), intermediate_size=I)
    for p in mlp.parameters():
        p.data = torch.randn(p.shape, generator=rng) / p.shape[-1] ** 0.5
    gate = torch.randn(1, H, generator=rng)
    x = torch.randn(2, 5, H, generator=rng)
    args = (x, mlp.gate_proj.weight.data, mlp.up_proj.weight.data, mlp.down_proj.weight.data)
    op = MoESharedExpertFwdOp()
    torch.testing.assert_close(op(*args), mlp(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(op(*args, gate), torch.sigmoid(F.linear(x, gate)) * mlp(x), rtol=1e-5, atol=1e-6)


def test_with_contents_checks_off_the_kernel_refuses_an_expert_id_outside_the_experts() -> None:
    ids = torch.tensor([[0, 3], [1, 4]])
    with pytest.raises(KernelError, match=r"topk_ids \[4\] lie outside \[0, 4\); nothing was written"):
        MoEPermuteFwdOp(num_experts=4, check_contents=False)(torch.randn(2, 8), ids)


def test_with_contents_checks_off_the_kernel_refuses_offsets_not_ending_at_the_row_count() -> None:
    E, H, I = 3, 8, 4
    with pytest.raises(KernelError, match=r"expert_offsets must rise from 0 to 5 over 4 entries, got \[0, 2, 2, 4\]"):
        MoEGroupedExpertsFwdOp(check_contents=False)(torch.randn(5, H), torch.tensor([0, 2, 2, 4]),
                                                     torch.randn(E, 2 * I, H), torch.randn(E, H, I))


def test_with_contents_checks_off_the_kernel_refuses_an_unpermute_index_past_the_rows() -> None:
    with pytest.raises(KernelError, match=r"permuted_index \[6\] lie outside \[0, 6\)"):
        MoEUnpermuteFwdOp(check_contents=False)(torch.randn(6, 8), torch.tensor([[0, 1], [2, 6], [3, 4]]),
                                                torch.rand(3, 2))


def test_contents_checks_name_the_declaration_of_the_index_out_of_range() -> None:
    where = r" \(manifest/moe.yaml:\d+"
    with pytest.raises(CheckError, match=r"MoEPermuteFwdOp: topk_ids \[-1\] lie outside \[0, 4\)" + where):
        MoEPermuteFwdOp(num_experts=4, check_contents=True)(torch.randn(2, 8), torch.tensor([[0, 3], [1, -1]]))
    with pytest.raises(CheckError, match=r"MoEGroupedExpertsFwdOp: expert_offsets must rise from 0 to N=5, got "
                                         r"\[0, 3, 2, 5\]" + where):
        MoEGroupedExpertsFwdOp(check_contents=True)(torch.randn(5, 8), torch.tensor([0, 3, 2, 5]),
                                                    torch.randn(3, 8, 8), torch.randn(3, 8, 4))
    with pytest.raises(CheckError, match=r"MoEUnpermuteFwdOp: permuted_index \[9\] lie outside \[0, 6\)" + where):
        MoEUnpermuteFwdOp(check_contents=True)(torch.randn(6, 8), torch.tensor([[0, 1], [2, 9], [3, 4]]),
                                               torch.rand(3, 2))


def _expert_loop_case(dtype: torch.dtype, rng: torch.Generator):
    """(x, w, offs, looped, grouped): ten rows over five experts (two with none), the loop's result
    written into a NaN-poisoned output and torch._grouped_mm's."""
    offs = torch.tensor([0, 3, 3, 7, 7, 10])
    x, w = torch.randn(10, 16, generator=rng).to(dtype), torch.randn(5, 12, 16, generator=rng).to(dtype)
    poisoned = torch.full((10, 12), float("nan"), dtype=dtype)
    looped = grouped_linear_by_loop(x, w, offs.tolist(), out=poisoned)
    assert looped is poisoned
    return x, w, offs, looped, torch._grouped_mm(x, w.transpose(1, 2), offs=offs[1:].int())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_expert_loop_for_other_devices_gives_grouped_mms_float32_sums_and_writes_every_row(
        dtype: torch.dtype) -> None:
    x, w, offs, looped, grouped = _expert_loop_case(dtype, _rng())
    assert bool(torch.isfinite(looped).all())
    if dtype == torch.float32:
        assert torch.equal(looped, grouped)  # the same float32 products and sums
        return
    # bfloat16: both sum the 16 exact float32 products in float32 and round once, but in other
    # orders (the loop upcasts to a float32 mm, grouped_mm runs a bfloat16 mm), so their bits
    # differ now and then (22 of 20000 seeds; seed 21 rounds one element to the neighbour).
    # Each is within half its own step of its float32 sum, and each float32 sum (15 additions of
    # exact products) within 16 * 2**-24 * sum|x w| of the exact one: where the sum cancels, that
    # can be more than a step. A bfloat16 accumulator would be off by about 2**-8 of sum|x w|.
    inf = torch.tensor(float("inf"), dtype=dtype)
    step = torch.maximum(torch.nextafter(looped.abs(), inf) - looped.abs(), torch.nextafter(grouped.abs(), inf)
                         - grouped.abs()).double()
    magnitude = torch.cat([x[lo:hi].double().abs() @ w[e].double().abs().T
                           for e, (lo, hi) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist()))])
    assert bool(((looped.double() - grouped.double()).abs() <= step + 2 * 16 * 2.0**-24 * magnitude).all())


def test_grouped_mm_is_taken_only_for_the_16_byte_aligned_operands_it_accepts() -> None:
    assert grouped_mm_takes(torch.randn(3, 8), torch.randn(2, 4, 8))
    assert not grouped_mm_takes(torch.randn(3, 7), torch.randn(2, 4, 7))  # rows of 28 bytes
    assert not grouped_mm_takes(torch.randn(3, 16).bfloat16(), torch.randn(2, 5, 16).bfloat16())  # 10-byte rows out
    every_other = torch.randn(2, 4, 8, 2)[..., 0]  # aligned rows of elements 8 bytes apart (found in review)
    assert not grouped_mm_takes(torch.randn(3, 8), every_other)
    assert not grouped_mm_takes(torch.randn(3, 8, 2)[..., 0], torch.randn(2, 4, 8))


def test_expert_weights_of_strided_elements_are_served_by_the_loop() -> None:
    """Weight views whose elements are not adjacent are legal operands (the manifest asks no contiguity):
    the per-expert loop serves them, with the contiguous weights' result."""
    g = torch.Generator().manual_seed(12)
    x, offsets = torch.randn(10, 16, generator=g), torch.tensor([0, 3, 3, 7, 10], dtype=torch.int32)
    gate_up, down = torch.randn(4, 16, 16, generator=g) / 4, torch.randn(4, 16, 8, generator=g) / 3
    strided = [torch.stack([w, torch.full_like(w, float("nan"))], -1)[..., 0] for w in (gate_up, down)]
    op = MoEGroupedExpertsFwdOp()
    torch.testing.assert_close(op(x, offsets, *strided), op(x, offsets, gate_up, down), rtol=1e-6, atol=1e-6)


def test_no_tokens_route_to_empty_outputs_and_zero_offsets() -> None:
    weights, ids = MoETopKRoutingFwdOp(top_k=2)(torch.randn(0, 8))
    permuted, offsets, index = MoEPermuteFwdOp(num_experts=8)(torch.randn(0, 16), ids)
    assert weights.shape == ids.shape == index.shape == (0, 2) and permuted.shape == (0, 16)
    assert offsets.tolist() == [0] * 9
    out = MoEGroupedExpertsFwdOp()(permuted, offsets, torch.randn(8, 12, 16), torch.randn(8, 16, 6))
    assert MoEUnpermuteFwdOp()(out, index, weights).shape == (0, 16)


def test_the_permutes_roofline_counts_each_token_row_read_once():
    """The least a kernel moves (found in review: a read per copy gave efficiencies of 180% on rows whose
    hidden states sit in the L2)."""
    from tileops_core.bench.roofline import roofline_of_row
    from tileops_core.bench.catalog import resolve_specs
    from tileops_core.workloads import dtype_cases

    spec = resolve_specs(["MoEPermuteFwdOp"])[0]
    row = next(r for r in spec.workloads if r.label == "qwen3-next-80b-prefill-4k")
    T, K, H, E = 4096, 10, 2048, 512
    roofline = roofline_of_row(spec, row, dtype_cases(row)[0])
    ids = roofline.vars["id_elem"]
    assert roofline.bytes == (T * H + T * K * H) * 2 + T * K * (ids + 4) + (E + 1) * 4
