"""The memory-bound ops of a hybrid model's attention and MoE block on an NVIDIA GPU, beyond their
spec rows (``test_spec_rows_gpu.py``): the strided inputs a model passes them (the query and
gate halves of q_proj's output) are read in place and give the bits their contiguous copies
give; MRoPE with equal position rows is NeoX; routing ties go to the lower id; permute gives the
reference's exact bits over many chunks; the routed experts match ``torch._grouped_mm`` at real
sizes (their spec rows run only tiny there), and read unchecked expert offsets as the spec's clipped
ranges. Skips cleanly without a GPU or tilelang.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch


def _attention_ops():
    from tileops_core.ops import attention

    return attention


#: Both QKNormRope programs, and the lanes program's pairs and warp tables with every other candidate on (qknr3).
_QK_SHAPES = {"token_heads": {"program": "token_heads"}, "lanes": {"program": "lanes"},
              "lanes-pairs-fast": {"program": "lanes", "table": "pairs", "sincos": "reduced", "partners": "vectors",
                                   "rotation": "native"},
              "lanes-warp-fast": {"program": "lanes", "table": "warp", "sincos": "reduced", "partners": "vectors",
                                  "rotation": "native"}}
_QK_PROGRAMS = pytest.mark.parametrize("program", list(_QK_SHAPES))


def _qk_program(monkeypatch, program: str) -> None:
    from tileops_cuda.kernels import block_shapes

    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope", ((None, _QK_SHAPES[program]),))


@_QK_PROGRAMS
def test_qk_norm_rope_reads_the_query_half_of_q_proj_in_place(cuda_device, gen, monkeypatch, program):
    _qk_program(monkeypatch, program)
    ops = _attention_ops()
    T, NQ, NKV, D = 37, 16, 2, 256
    q_and_gate = torch.randn(T, NQ, 2 * D, device="cuda", generator=gen).bfloat16()
    query = q_and_gate[..., :D]
    key = torch.randn(T, NKV, D, device="cuda", generator=gen).bfloat16()
    w_q, w_k = (torch.randn(D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    positions = torch.randint(0, 30000, (T,), device="cuda", generator=gen)
    op = ops.QKNormRopeFwdOp(rotary_dim=64, theta=1e7)
    strided = op(query, key, w_q, w_k, positions)
    contiguous = op(query.contiguous(), key, w_q, w_k, positions)
    assert all(torch.equal(a, b) for a, b in zip(strided, contiguous))


@_QK_PROGRAMS
def test_mrope_with_equal_position_rows_is_neox(cuda_device, gen, monkeypatch, program):
    _qk_program(monkeypatch, program)
    ops = _attention_ops()
    T, NQ, NKV, D = 9, 4, 2, 128
    query = torch.randn(T, NQ, D, device="cuda", generator=gen).bfloat16()
    key = torch.randn(T, NKV, D, device="cuda", generator=gen).bfloat16()
    w_q, w_k = (torch.randn(D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    positions = torch.randint(0, 4096, (T,), device="cuda", generator=gen)
    neox = ops.QKNormRopeFwdOp(rotary_dim=64, theta=1e7)(query, key, w_q, w_k, positions)
    mrope = ops.QKNormRopeFwdOp(rotary_dim=64, theta=1e7, rope_style="mrope_interleaved",
                                mrope_section=(11, 11, 10))(query, key, w_q, w_k, positions.expand(3, T))
    assert all(torch.equal(a, b) for a, b in zip(neox, mrope))


def test_sigmoid_gate_mul_reads_the_gate_half_of_q_proj_in_place(cuda_device, gen):
    ops = _attention_ops()
    T, NQ, D = 65, 16, 256
    q_and_gate = torch.randn(T, NQ, 2 * D, device="cuda", generator=gen).bfloat16()
    gate = q_and_gate[..., D:]
    attn = torch.randn(T, NQ, D, device="cuda", generator=gen).bfloat16()
    op = ops.SigmoidGateMulFwdOp()
    assert torch.equal(op(attn, gate), op(attn, gate.contiguous()))


def test_topk_routing_gives_tied_probabilities_to_the_lower_expert_id(cuda_device, gen):
    from tileops_core.ops.moe import MoETopKRoutingFwdOp
    from tileops_cpu_ref.moe import moe_topk_routing

    # Integer logits in [-3, 3] over 512 experts: every token has long runs of exact ties.
    logits = torch.randint(-3, 4, (257, 512), device="cuda", generator=gen).bfloat16()
    weights, ids = MoETopKRoutingFwdOp(top_k=10)(logits)
    want_weights, want_ids = moe_topk_routing(logits.cpu(), 10, True)
    assert torch.equal(ids.cpu(), want_ids)
    assert torch.allclose(weights.cpu().float(), want_weights.float(), rtol=1e-2, atol=0)


def test_unpermute_without_shared_output_starts_from_zero(cuda_device, gen):
    from tileops_core.ops.moe import MoEUnpermuteFwdOp

    T, K, H = 33, 8, 512
    rows = torch.randn(T * K, H, device="cuda", generator=gen).bfloat16()
    index = torch.randperm(T * K, device="cuda", generator=gen).view(T, K)
    weights = torch.rand(T, K, device="cuda", generator=gen)
    shared = torch.zeros(T, H, device="cuda").bfloat16()
    op = MoEUnpermuteFwdOp()
    assert torch.equal(op(rows, index, weights), op(rows, index, weights, shared))


def test_permute_matches_the_reference_bits_over_many_chunks_with_repeated_experts(cuda_device, gen):
    from tileops_core.ops.moe import MoEPermuteFwdOp
    from tileops_cpu_ref.moe import moe_permute

    # 40 960 copies (80 chunks of the ranking kernel); ids drawn with repeats within a token
    # and a skewed choice (a few hot experts), so the stable order inside an expert is tested.
    T, K, E, H = 4096, 10, 512, 256
    hot = torch.randint(0, 8, (T, K), device="cuda", generator=gen)
    ids = torch.where(torch.rand(T, K, device="cuda", generator=gen) < 0.5, hot,
                      torch.randint(0, E, (T, K), device="cuda", generator=gen))
    x = torch.randn(T, H, device="cuda", generator=gen).bfloat16()
    got = MoEPermuteFwdOp(num_experts=E)(x, ids)
    want = moe_permute(x.cpu(), ids.cpu(), E)
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("T,K,E", [(1, 8, 256), (1, 10, 512), (64, 8, 256), (77, 8, 16), (600, 10, 512)])
def test_permute_of_a_partial_last_chunk_matches_the_reference_bits(cuda_device, gen, T, K, E):
    """Decode sizes (one chunk of the ranking kernel holding B·K copies) and a last chunk cut short
    (77·8 = 616, 600·10 = 6000 copies): the ranking loop runs over the chunk's copies only."""
    from tileops_core.ops.moe import MoEPermuteFwdOp
    from tileops_cpu_ref.moe import moe_permute

    ids = torch.randint(0, E, (T, K), device="cuda", generator=gen)
    ids[:, -1] = ids[:, 0]  # a repeated expert within every token: the stable order is tested
    x = torch.randn(T, 2048, device="cuda", generator=gen).bfloat16()
    got = MoEPermuteFwdOp(num_experts=E)(x, ids)
    want = moe_permute(x.cpu(), ids.cpu(), E)
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("T,K,E", [(1, 10, 512), (1, 8, 256), (12, 10, 512), (16, 8, 256), (5, 2, 8)])
def test_the_one_launch_permute_matches_the_reference_and_the_three_kernels_bits(cuda_device, gen, T, K, E):
    """``MoEPermuteBuildKey.one_launch_copies`` (a candidate): every copy count up to the key's 128
    through the one-launch program, on NaN / -7 poisoned outputs, strided rows, a repeated expert in
    every token and one id out of range (left unplaced, as the three kernels leave it)."""
    from tileops_cpu_ref.moe import moe_permute
    from tileops_cuda.kernels.moe_permute import MoEPermuteBuildKey, build_moe_permute

    H = 2048
    key = MoEPermuteBuildKey("bfloat16", "int64", H, K, E, cuda_device[1])
    one, three = (build_moe_permute(k).run for k in (dataclasses.replace(key, one_launch_copies=128), key))
    wide = torch.randn(T, 2 * H, device="cuda", generator=gen).bfloat16()
    x = wide[:, H:]
    ids = torch.randint(0, E, (T, K), device="cuda", generator=gen)
    ids[:, -1] = ids[:, 0]

    def run(launch, ids):
        outs = (torch.full((T * K, H), float("nan"), device="cuda").bfloat16(),
                torch.full((E + 1,), -7, dtype=torch.int32, device="cuda"),
                torch.full((T, K), -7, dtype=torch.int32, device="cuda"))
        return launch(x, ids, E, *outs)

    got = run(one, ids)
    for g, w in zip(got, moe_permute(x.cpu(), ids.cpu(), E)):
        assert torch.equal(g.cpu(), w)
    ids[0, 0] = E + 3  # out of range: unplaced by both paths (the op's contents check would refuse it)
    for g, w in zip(run(one, ids)[1:], run(three, ids)[1:]):
        assert torch.equal(g, w)


@pytest.mark.parametrize("one_launch", [0, 128], ids=["three-kernels", "one-launch"])
def test_an_unchecked_64_bit_id_past_int32_is_left_unplaced_not_given_the_expert_it_wraps_to(one_launch, cuda_device,
                                                                                             gen):
    """int64 topk_ids, checks off (the launcher reads no contents), with an entry ``2**32 + e`` (``e`` in int32:
    an expert other copies chose, whose rows it would join and shift). Outside ``[0, E)``, it is left unplaced
    as any such id is (the CPU reference refuses it): ``permuted_index`` -1 there, ``expert_offsets`` those of
    the other copies, each placed copy's row where the stable order of the placed ids puts it; the rows past
    the placed copies keep their poison; the same bits as the entry -1."""
    from tileops_cuda.kernels.moe_permute import MoEPermuteBuildKey, build_moe_permute

    T, K, E, H = 9, 8, 256, 2048
    run = build_moe_permute(MoEPermuteBuildKey("bfloat16", "int64", H, K, E, cuda_device[1],
                                               one_launch_copies=one_launch)).run
    x = torch.randn(T, H, device="cuda", generator=gen).bfloat16()
    ids = torch.randint(0, E, (T, K), device="cuda", generator=gen)
    ids[1, 2] = 2**32 + ids[4, 0]

    def permute(ids):
        outs = (torch.full((T * K, H), float("nan"), device="cuda").bfloat16(),
                torch.full((E + 1,), -7, dtype=torch.int32, device="cuda"),
                torch.full((T, K), -7, dtype=torch.int32, device="cuda"))
        return run(x, ids, E, *outs)

    permuted, offsets, index = permute(ids)
    flat = ids.flatten()
    placed = (flat >= 0) & (flat < E)
    order = torch.sort(torch.where(placed, flat, E), stable=True).indices[: int(placed.sum())]
    want_index = torch.full((T * K,), -1, dtype=torch.int32, device="cuda")
    want_index[order] = torch.arange(order.numel(), dtype=torch.int32, device="cuda")
    want_offsets = torch.searchsorted(flat[order], torch.arange(E + 1, device="cuda"), out_int32=True)
    assert torch.equal(index.flatten(), want_index) and torch.equal(offsets, want_offsets)
    assert torch.equal(permuted[: order.numel()], x[order // K])
    assert permuted[order.numel() :].isnan().all()
    minus = ids.clone()
    minus[1, 2] = -1
    for got, want in zip((permuted, offsets, index), permute(minus)):
        assert torch.equal(got.view(torch.int16 if got.is_floating_point() else got.dtype),
                           want.view(torch.int16 if want.is_floating_point() else want.dtype))


def test_permute_reads_strided_hidden_states_in_place(cuda_device, gen):
    from tileops_core.ops.moe import MoEPermuteFwdOp

    T, K, E, H = 77, 8, 256, 2048
    wide = torch.randn(T, 3 * H, device="cuda", generator=gen).bfloat16()
    x = wide[:, H:2 * H]
    ids = torch.rand(T, E, device="cuda", generator=gen).argsort(dim=1)[:, :K]
    op = MoEPermuteFwdOp(num_experts=E)
    assert all(torch.equal(a, b) for a, b in zip(op(x, ids), op(x.contiguous(), ids)))


#: Decode sizes take the 64-row tiling; 4k tokens and (300, 2, 8), with 75 rows per expert, the 128-row one.
@pytest.mark.parametrize("tokens,top_k,experts", [(1, 10, 512), (64, 8, 256), (4096, 10, 512), (300, 2, 8)])
def test_grouped_experts_match_torch_grouped_mm_at_real_sizes(cuda_device, gen, tokens, top_k, experts):
    """Qwen3-Next / Qwen3.5 sizes (H=2048, I=512) against two ``torch._grouped_mm`` and the
    spec's SiLU-and-multiply: both round each GEMM once, so they differ by accumulation order."""
    from tileops_core.ops.moe import MoEGroupedExpertsFwdOp

    _check_grouped_experts(gen, tokens, top_k, experts, MoEGroupedExpertsFwdOp())


#: The warp-per-feature programs (a key whose ``skinny_max_rows`` takes every call): decode sizes,
#: with an expert of more rows than a tile (5 tokens all on experts 0..3: 5 rows each, two 4-row
#: tiles) and (40, 2, 8) below the prefill tiling's 256 rows (10 an expert: three tiles each); one down
#: feature a warp, the registered tiling (two, launched as the registered keys launch it), and that with a
#: gate row and an up row to two warps (``gate_up_split``).
@pytest.mark.parametrize("tiling", ["one-feature", "registered", "split"])
@pytest.mark.parametrize("tokens,top_k,experts", [(1, 10, 512), (1, 8, 256), (5, 4, 4), (64, 8, 256), (40, 2, 8)])
def test_the_skinny_routed_programs_match_torch_grouped_mm(cuda_device, gen, tokens, top_k, experts, tiling):
    from tileops_cuda.kernels.moe_grouped_experts import MoEGroupedExpertsBuildKey
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling, routed_skinny_tiling
    from tileops_cuda.launch_policy import registered_key
    from tileops_cuda.registered_model import TileLangMoEGroupedExperts

    key = MoEGroupedExpertsBuildKey("bfloat16", experts, 2048, 512, "int32", cuda_device[1],
                                    skinny_max_rows=tokens * top_k, skinny_tiling=MoESkinnyTiling())
    if tiling != "one-feature":
        key = registered_key(dataclasses.replace(key, skinny_tiling=routed_skinny_tiling(512, "bfloat16")))
        assert key.skinny_tiling.down_features == 2
    if tiling == "split":
        key = dataclasses.replace(key, skinny_tiling=dataclasses.replace(key.skinny_tiling, gate_up_split=True))
    launch = TileLangMoEGroupedExperts.launcher(key)

    def poisoned(x, offsets, gate_up, down):
        out = torch.full_like(x, float("nan"))
        return launch(x, offsets, gate_up, down, out)

    _check_grouped_experts(gen, tokens, top_k, experts, poisoned)


def _check_grouped_experts(gen, tokens, top_k, experts, run):
    """``run(x, offsets, gate_up, down)`` at H=2048, I=512 against torch's grouped path (or a loop)."""
    from tileops_cpu_ref.moe import grouped_linear_by_loop

    H, I = 2048, 512
    ids = torch.rand(tokens, experts, device="cuda", generator=gen).argsort(dim=1)[:, :top_k].flatten()
    counts = torch.bincount(ids, minlength=experts)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)
    x = torch.randn(tokens * top_k, H, device="cuda", generator=gen).bfloat16()
    gate_up = (torch.randn(experts, 2 * I, H, device="cuda", generator=gen) / H ** 0.5).bfloat16()
    down = (torch.randn(experts, H, I, device="cuda", generator=gen) / I ** 0.5).bfloat16()
    got = run(x, offsets, gate_up, down)
    ends = offsets[1:]
    if hasattr(torch, "_grouped_mm"):
        g, u = torch._grouped_mm(x, gate_up.transpose(1, 2), offs=ends).float().chunk(2, dim=-1)
        want = torch._grouped_mm((torch.nn.functional.silu(g) * u).bfloat16(), down.transpose(1, 2), offs=ends)
    else:
        host = offsets.cpu().long()
        g, u = grouped_linear_by_loop(x, gate_up, host).float().chunk(2, dim=-1)
        want = grouped_linear_by_loop((torch.nn.functional.silu(g) * u).bfloat16(), down, host)
    err = float((got.float() - want.float()).norm() / want.float().norm())
    assert not torch.isnan(got).any() and err < 1e-2, err


#: Unchecked expert_offsets over E = 8 experts and N rows (contents checks off, as in serving), by case: rising
#: from 0 to N (two experts empty); decreasing (experts starting below an earlier one's end); negative first
#: entries and entries past N; a head and a tail no expert covers (a positive first entry, a last below N);
#: int64 entries past int32 (made int32 first, ``-2**32 + N // 3`` would start the rows at N // 3 and
#: ``2**32 + 5N // 6`` would end expert 6 there).
_UNCHECKED_OFFSETS = {
    "valid": lambda N: [0, N // 8, N // 8, N // 3, N // 2, N // 2, 2 * N // 3, 5 * N // 6, N],
    "decreasing": lambda N: [0, N // 2, N // 4, 3 * N // 4, N // 8, N // 8, N, N // 3, N],
    "negative-first-past-N": lambda N: [-N, -1, N // 3, 2 * N, N // 2, N + 7, N, 3 * N, N],
    "head-and-tail-uncovered": lambda N: [N // 5, N // 5, -3, N // 2, N // 3, 2 * N // 3, 2 * N // 3, 3 * N // 4,
                                          3 * N // 4],
    "int64-past-int32": lambda N: [-(2**32) + N // 3, N // 4, N // 4, N // 2, N // 2 + 1, 2 * N // 3, 3 * N // 4,
                                   2**32 + 5 * N // 6, N],
}


#: E = 8 (the key the (300, 2, 8) row above builds): at most 8 rows take the skinny programs
#: (``skinny_max_rows``), fewer than 256 the 64-row tiling, at least 256 (``PREFILL_ROWS_PER_EXPERT``) the
#: 128-row one.
@pytest.mark.parametrize("rows", [6, 200, 600], ids=["skinny", "64-row-tiles", "128-row-tiles"])
@pytest.mark.parametrize("case", list(_UNCHECKED_OFFSETS))
def test_grouped_experts_read_unchecked_offsets_as_clipped_ranges_and_zero_the_rows_none_covers(cuda_device, gen,
                                                                                                 case, rows):
    """The spec's reading with contents checks off: expert e's rows are ``[b_e, b_{e+1})`` with ``b_e =
    clip(max(expert_offsets[0..e]))`` into ``[0, N]``, the rows outside ``[b_0, b_E)`` zeros. Through the op
    (checks off), and through the same build on a NaN-poisoned ``out`` (every row written, the op's bits);
    the covered rows against the reference on the clipped offsets, which it accepts (a float32 loop here)."""
    from itertools import accumulate

    from tileops_core.kernels import CallSpec
    from tileops_core.ops.moe import MoEGroupedExpertsFwdOp
    from tileops_cpu_ref.moe import moe_grouped_experts
    from tileops_cuda.registered_model import TileLangMoEGroupedExperts

    E, H, I = 8, 2048, 512
    offsets_dtype = "int64" if case == "int64-past-int32" else "int32"
    offsets = _UNCHECKED_OFFSETS[case](rows)
    bounds = [min(max(b, 0), rows) for b in accumulate(offsets, max)]
    x = torch.randn(rows, H, device="cuda", generator=gen).bfloat16()
    gate_up = (torch.randn(E, 2 * I, H, device="cuda", generator=gen) / H ** 0.5).bfloat16()
    down = (torch.randn(E, H, I, device="cuda", generator=gen) / I ** 0.5).bfloat16()
    expert_offsets = torch.tensor(offsets, dtype=getattr(torch, offsets_dtype), device="cuda")

    got = MoEGroupedExpertsFwdOp(check_contents=False)(x, expert_offsets, gate_up, down)
    call = CallSpec("MoEGroupedExpertsFwdOp", "MoEGroupedExpertsKernel", "cuda", cuda_device[1],
                    {"hidden_states": "bfloat16", "expert_offsets": offsets_dtype}, {"E": E, "H": H, "I": I}, {})
    poisoned = torch.full_like(x, float("nan"))
    TileLangMoEGroupedExperts.launcher(TileLangMoEGroupedExperts.key(call))(x, expert_offsets, gate_up, down, poisoned)
    torch.cuda.synchronize()
    assert torch.equal(poisoned.view(torch.int16), got.view(torch.int16))
    head, tail = bounds[0], bounds[E]
    assert torch.equal(got[:head], torch.zeros_like(got[:head])) and torch.equal(got[tail:],
                                                                                   torch.zeros_like(got[tail:]))
    want = moe_grouped_experts(x[head:tail], torch.tensor([b - head for b in bounds]), gate_up, down)
    err = float((got[head:tail].float() - want.float()).norm() / want.float().norm())
    assert err < 1e-2, err
