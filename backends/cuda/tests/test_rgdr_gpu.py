"""The RGDR TileLang kernel against the float64 reference on the GPU (skips without one)."""

from __future__ import annotations

import pytest

from tileops_cuda.kernels.rgdr import STREAM_CUTS, TILED_CUTS, RGDRBuildKey, RGDRTiling, build_rgdr
from tileops_cuda.testing import check_rgdr, rgdr_case

from graph_replays import assert_replays_like_eager

# Each key covers a different corner of the build identity (dtypes, metadata style and
# width, g / gk forms, accepted tokens, l2 norm, head dims).
KEYS = {
    "qwen_bf16_in_fp32_state": RGDRBuildKey("bfloat16", "float32", 4, 8, 128, 128),
    "fp16_state_cu_i64_vector_gk_accepted_l2": RGDRBuildKey(
        "float16", "float16", 2, 4, 128, 64, "cu_seqlens", "int64", "int64", "int32", True, "vector", True
    ),
    "fp32_in_bf16_state_scalar_gk_only": RGDRBuildKey(
        "float32", "bfloat16", 2, 2, 64, 32, "lengths", "int64", "int32", "int64", False, "scalar", True
    ),
    "bf16_state_g_and_scalar_gk": RGDRBuildKey(
        "bfloat16", "bfloat16", 1, 4, 64, 48, "cu_seqlens", "int32", "int64", None, True, "scalar", False
    ),
    "fp32_everything_no_decay_dk256": RGDRBuildKey("float32", "float32", 2, 2, 256, 16, has_g=False),
    "fp16_in_fp32_state_vector_gk_only_accepted": RGDRBuildKey(
        "float16", "float32", 2, 6, 128, 32, "lengths", "int32", "int32", "int64", False, "vector", False
    ),
}


@pytest.fixture(scope="module")
def arch(cuda_device):
    """The device's arch (kernels build on first use; run with pytest-xdist to spread builds)."""
    return cuda_device[1]


def _with_arch(key: RGDRBuildKey, arch: str) -> RGDRBuildKey:
    from dataclasses import replace

    return replace(key, arch=arch)


@pytest.mark.parametrize("name", list(KEYS))
def test_matches_float64_reference_on_ragged_batch_with_padding(name, arch, cuda_device, gen):
    key = _with_arch(KEYS[name], arch)
    lengths = [3, 0, 1, 37, 2, 8, 1, 16, 17]  # empty, single, multi-chunk sequences
    case = rgdr_case(key, lengths, device=cuda_device[0], generator=gen, padding=0.15, pad_first_of=4, repeat_slots_of=5)
    res = check_rgdr(build_rgdr(key), case)
    assert res["ok"], res


@pytest.mark.parametrize("name", ["qwen_bf16_in_fp32_state", "bf16_state_g_and_scalar_gk"])
def test_explicit_scale_is_used(name, arch, cuda_device, gen):
    key = _with_arch(KEYS[name], arch)
    case = rgdr_case(key, [2, 5], device=cuda_device[0], generator=gen, scale=0.37)
    res = check_rgdr(build_rgdr(key), case)
    assert res["ok"], res


@pytest.mark.parametrize("name", ["qwen_bf16_in_fp32_state", "fp32_in_bf16_state_scalar_gk_only"])
def test_one_call_of_l_tokens_equals_l_calls_of_one_token_on_one_slot(name, arch, cuda_device, gen):
    """The decode pattern: every token of a sequence reads and writes one slot."""
    import torch

    key = _with_arch(KEYS[name], arch)
    if key.accepted_dtype is not None:
        from dataclasses import replace

        key = replace(key, accepted_dtype=None)
    L = 6
    case = rgdr_case(key, [L], device=cuda_device[0], generator=gen)
    case["ssm_state_indices"].fill_(2)
    launcher = build_rgdr(key)

    def run(c, state, out):
        launcher(c["query"], c["key"], c["value"], c["beta"], state, c["actual_seq_lengths"], c["ssm_state_indices"],
                 c["g"], c["gk"], c["num_accepted_tokens"], out, c["scale"])  # fmt: skip

    state_all = case["state"].clone()
    out_all = torch.full_like(case["value"], float("nan"))
    run(case, state_all, out_all)
    state_one = case["state"].clone()
    out_one = torch.full_like(case["value"], float("nan"))
    for t in range(L):
        step = {
            k: (v[t : t + 1] if k in ("query", "key", "value", "beta", "g", "gk", "ssm_state_indices") and v is not None else v)
            for k, v in case.items()
        }
        meta = [1] if key.seq_lens_style == "lengths" else [0, 1]
        step["actual_seq_lengths"] = torch.tensor(meta, dtype=case["actual_seq_lengths"].dtype, device=cuda_device[0])
        run(step, state_one, out_one[t : t + 1])
    torch.cuda.synchronize()
    assert torch.equal(state_all, state_one)
    assert torch.equal(out_all, out_one)


def test_zero_sequences_launch_nothing(arch, cuda_device, gen):
    import torch

    key = _with_arch(KEYS["qwen_bf16_in_fp32_state"], arch)
    case = rgdr_case(key, [0, 0], device=cuda_device[0], generator=gen)
    state = case["state"].clone()
    out = torch.empty_like(case["value"])
    build_rgdr(key)(case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
                    case["ssm_state_indices"], case["g"], None, None, out, None)  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(state, case["state"])


def test_missing_optional_input_is_a_clear_error(arch, cuda_device, gen):
    key = _with_arch(KEYS["qwen_bf16_in_fp32_state"], arch)
    case = rgdr_case(key, [1], device=cuda_device[0], generator=gen)
    with pytest.raises(ValueError, match="built with has_g=True but g is absent"):
        build_rgdr(key)(case["query"], case["key"], case["value"], case["beta"], case["state"], case["actual_seq_lengths"],
                        case["ssm_state_indices"], None, None, None, case["value"].clone(), None)  # fmt: skip


def test_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    key = _with_arch(KEYS["qwen_bf16_in_fp32_state"], arch)
    case = rgdr_case(key, [2, 3], device=cuda_device[0], generator=gen)
    launcher = build_rgdr(key)
    state = case["state"].clone()
    out = torch.full_like(case["value"], float("nan"))
    args = (case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
            case["ssm_state_indices"], case["g"], None, None, out, None)  # fmt: skip
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launcher(*args)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    state.copy_(case["state"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launcher(*args)
    state.copy_(case["state"])
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    eager_state = case["state"].clone()
    eager_out = torch.full_like(out, float("nan"))
    launcher(*args[:4], eager_state, *args[5:10], eager_out, None)
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out) and torch.equal(state, eager_state)


@pytest.mark.parametrize(
    "tiling",
    [RGDRTiling(128, 8, 1, 4), RGDRTiling(128, 16, 2, 8), RGDRTiling(128, 16, 4, 4), RGDRTiling(128, 16, 8, 4),
     RGDRTiling(128, 8, 4, 4), RGDRTiling(128, 32, 8, 4), RGDRTiling(128, 4, 1, 4),
     RGDRTiling(128, 16, 2, 8, True), RGDRTiling(128, 16, 4, 5, True), RGDRTiling(128, 16, 8, 3, True),
     RGDRTiling(128, 8, 1, 4, True)],  # fmt: skip
)
@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_every_tiling_computes_the_same_function(tiling, state, arch, cuda_device, gen):
    key = _with_arch(RGDRBuildKey("bfloat16", state, 2, 4, 128, 128, use_qk_l2norm=True), arch)
    case = rgdr_case(key, [3, 1, 9, 0, 17], device=cuda_device[0], generator=gen, padding=0.1, pad_first_of=1)
    res = check_rgdr(build_rgdr(key, tiling), case)
    assert res["ok"], res


@pytest.mark.parametrize("name", list(KEYS))
def test_stream_layout_matches_float64_reference(name, arch, cuda_device, gen):
    """The streaming layout (rows of a key-head group through registers) on every key corner,
    with long sequences that need several token chunks per row chunk."""
    key = _with_arch(KEYS[name], arch)
    case = rgdr_case(key, [3, 0, 1, 37, 2, 8, 1, 16, 17], device=cuda_device[0], generator=gen, padding=0.15,
                     pad_first_of=4, repeat_slots_of=5)  # fmt: skip
    res = check_rgdr(build_rgdr(key, RGDRTiling(128, 16, 2, 8, True)), case)
    assert res["ok"], res


# Speculative programs (RGDRTiling.speculate): the small tiled tiling, fp32's large one (B = 8..31),
# and the two streamed ones the default schedules run at B >= 32, one of them at a lower register cap.
SPECULATIVE = [RGDRTiling(128, 16, 2, 8, speculate=True), RGDRTiling(128, 16, 8, 4, speculate=True),
               RGDRTiling(128, 16, 4, 4, True, True), RGDRTiling(128, 16, 4, 5, True, True)]  # fmt: skip


def _run(launcher, case):
    """One call on copies: (out, state), the output poisoned with NaN first."""
    import torch

    state = case["state"].clone()
    out = torch.full(case["value"].shape, float("nan"), dtype=case["value"].dtype, device=case["value"].device)
    launcher(case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
             case["ssm_state_indices"], case["g"], case["gk"], case["num_accepted_tokens"], out,
             case["scale"])  # fmt: skip
    torch.cuda.synchronize()
    return out, state


@pytest.mark.parametrize("tiling", SPECULATIVE)
@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_a_speculative_program_equals_its_general_twin_bit_for_bit(tiling, state, arch, cuda_device, gen):
    """Decode steps (every guess hits, padding slots included) and ragged batches (guesses
    miss, or hit on the one-token sequences): the float64 check, and the very bits of the
    same tiling without speculation (same arithmetic in the same order)."""
    import torch
    from dataclasses import replace

    key = _with_arch(RGDRBuildKey("bfloat16", state, 2, 4, 128, 128, use_qk_l2norm=True), arch)
    spec, twin = build_rgdr(key, tiling), build_rgdr(key, replace(tiling, speculate=False))
    for lengths in ([1] * 37, [3, 1, 9, 0, 17, 1, 1]):
        case = rgdr_case(key, lengths, device=cuda_device[0], generator=gen, padding=0.15, pad_first_of=1)
        res = check_rgdr(spec, case)
        assert res["ok"], (lengths, res)
        (out_s, st_s), (out_t, st_t) = _run(spec, case), _run(twin, case)
        assert torch.equal(out_s, out_t) and torch.equal(st_s, st_t), lengths


@pytest.mark.parametrize("name", list(KEYS))
def test_speculative_decode_steps_match_float64_reference(name, arch, cuda_device, gen):
    """Every key corner (cu_seqlens, 64-bit metadata, accepted counts, every gate form) on a
    decode step, tiled and streamed, through a schedule that speculates on decode steps."""
    from dataclasses import replace

    from tileops_cuda.kernels.rgdr import default_schedule

    key = _with_arch(KEYS[name], arch)
    case = rgdr_case(key, [1] * 33, device=cuda_device[0], generator=gen, padding=0.15, pad_first_of=4)
    for tiling in (RGDRTiling(128, 16, 2, 8), RGDRTiling(128, 16, 2, 8, True)):
        schedule = replace(default_schedule(key), small=tiling, large=tiling, short=None,
                           speculating=frozenset({"small", "large"}))
        res = check_rgdr(build_rgdr(key, schedule), case)
        assert res["ok"], (tiling, res)


@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_the_default_schedule_on_decode_steps_of_every_role_matches_float64(state, arch, cuda_device, gen):
    """Decode steps at batch sizes that reach every role of the default schedule (small, large,
    short, and bf16's decode-step tilings at 1 and 17 sequences), so each tiling and each
    speculative twin it runs is checked, not only pinned ones."""
    from tileops_cuda.kernels.rgdr import default_schedule

    key = _with_arch(RGDRBuildKey("bfloat16", state, 2, 4, 128, 128, use_qk_l2norm=True), arch)
    launcher, schedule = build_rgdr(key), default_schedule(key)
    seen = set()
    for B in (1, 5, schedule.large_from_seqs, 17, schedule.short_from_seqs, 70):
        seen.add(schedule.pick(B, B))
        # A padding first slot in the second sequence where there is one (B=1 pads by chance only).
        case = rgdr_case(key, [1] * B, device=cuda_device[0], generator=gen, padding=0.15,
                         pad_first_of=1 if B > 1 else None)  # fmt: skip
        res = check_rgdr(launcher, case)
        assert res["ok"], (B, schedule.pick(B, B), res)
    assert {t for t in schedule.tilings() if t.speculate} <= seen


# Fewer instructions a state element (RGDRTiling's exact_tokens, unchecked_index, pingpong, flat_rows,
# reduce_rows; NOTES.md "RGDR: instructions a state element"): each candidate next to the registered
# tiling it leans, which must give the very same bits (same arithmetic in the same order).
LEAN, TILED_LEAN = STREAM_CUTS, TILED_CUTS
UB, RD, SW = dict(unpack_bits=True), dict(row_deltas=True), dict(stage_live_warps=True)
PDL = dict(dependent_launch=True)
LEAN_CANDIDATES = {
    "bf16-stream-lean": ("bfloat16", RGDRTiling(128, 16, 4, 6, True, **LEAN)),
    "bf16-stream-lean-8rows": ("bfloat16", RGDRTiling(128, 16, 8, 4, True, **LEAN)),  # bf16's short role
    "bf16-stream-lean-8rows-speculative": ("bfloat16", RGDRTiling(128, 16, 8, 4, True, True, **LEAN)),
    "bf16-stream-lean-8rows-3blk": ("bfloat16", RGDRTiling(128, 16, 8, 3, True, **LEAN)),
    "bf16-stream-lean-8rows-256t": ("bfloat16", RGDRTiling(256, 16, 8, 2, True, **LEAN)),
    "bf16-tiled-small-lean-speculative": ("bfloat16", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN)),
    "fp32-tiled-small-lean-speculative": ("float32", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN)),
    "fp32-stream-lean-speculative-3blk": ("float32", RGDRTiling(128, 16, 4, 3, True, True, **LEAN)),
    "fp32-stream-lean-8rows-speculative-3blk": ("float32", RGDRTiling(128, 16, 8, 3, True, True, **LEAN)),
    "fp32-tiled-large-lean": ("float32", RGDRTiling(128, 16, 8, 4, **TILED_LEAN)),
    # Round 2's fields (unpack_bits, row_deltas, stage_live_warps; NOTES.md "... round 2"), on the roles they cut.
    "bf16-stream-lean-8rows-unpack-bits": ("bfloat16", RGDRTiling(128, 16, 8, 4, True, **LEAN, **UB)),
    "bf16-stream-lean-8rows-unpack-bits-speculative": ("bfloat16", RGDRTiling(128, 16, 8, 4, True, True, **LEAN, **UB)),
    "bf16-stream-lean-8rows-unpack-bits-deltas-3blk": ("bfloat16", RGDRTiling(128, 16, 8, 3, True, **LEAN, **UB, **RD)),
    "bf16-tiled-8rows-round2": ("bfloat16", RGDRTiling(128, 16, 8, 4, **TILED_LEAN, **UB, **RD, **SW)),
    "bf16-tiled-small-round2-speculative": ("bfloat16", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN, **UB, **RD,
                                                                   **SW)),
    "fp32-tiled-small-round2-speculative": ("float32", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN, **RD, **SW)),
    "fp32-tiled-large-round2": ("float32", RGDRTiling(128, 16, 8, 4, **TILED_LEAN, **RD, **SW)),
    # Round 4 (dependent_launch) on every registered role.
    "bf16-tiled-small-pdl-speculative": ("bfloat16", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN, **PDL)),
    "bf16-stream-8rows-pdl-speculative": ("bfloat16", RGDRTiling(128, 16, 8, 4, True, True, **LEAN, **PDL)),
    "bf16-tiled-large-pdl": ("bfloat16", RGDRTiling(128, 16, 8, 4, **TILED_LEAN, **PDL)),
    "fp32-tiled-small-pdl-speculative": ("float32", RGDRTiling(128, 16, 2, 8, False, True, **TILED_LEAN, **PDL)),
    "fp32-tiled-large-pdl": ("float32", RGDRTiling(128, 16, 8, 4, **TILED_LEAN, **PDL)),
    # Round 5: bf16's decode steps of one sequence and of 16..63 (RGDRSchedule.decode_steps).
    "bf16-tiled-1row-pdl-speculative": ("bfloat16", RGDRTiling(128, 16, 1, 8, False, True, **TILED_LEAN, **PDL)),
    "bf16-stream-4rows-pdl-speculative": ("bfloat16", RGDRTiling(128, 16, 4, 6, True, True, **LEAN, **PDL)),
}  # fmt: skip


def _plain(tiling: RGDRTiling) -> RGDRTiling:
    """The tiling without the candidate fields (the registered program it leans)."""
    from dataclasses import replace

    return replace(tiling, exact_tokens=False, unchecked_index=False, pingpong=False, flat_rows=False,
                   reduce_rows="butterfly", unpack_bits=False, row_deltas=False, stage_live_warps=False,
                   dependent_launch=False)  # fmt: skip


@pytest.mark.parametrize("name", list(LEAN_CANDIDATES))
def test_a_lean_candidate_matches_float64_and_its_plain_tiling_bit_for_bit(name, arch, cuda_device, gen):
    """Decode steps with padding slots (one token a chunk: the exact token loop's one trip),
    ragged batches across token chunks (9 and 17 tokens: a partial last chunk), an empty
    sequence and 4-token steps, at Qwen3.5's head counts. On 132 SMs the streamed programs split
    a key-head group's row chunks 3 ways at 29 sequences (3, 3 and 2 chunks at 4 rows a thread,
    2, 2 and none at 8: a pingpong program's odd last trip and an empty share) and 8 ways at 6
    and 7 (one chunk each). The float64 check on a NaN-poisoned output with the unwritten slots
    bit-identical, then the very bits of the plain tiling."""
    import torch

    state, tiling = LEAN_CANDIDATES[name]
    key = _with_arch(RGDRBuildKey("bfloat16", state, 16, 32, 128, 128, use_qk_l2norm=True), arch)
    lean, plain = build_rgdr(key, tiling), build_rgdr(key, _plain(tiling))
    for lengths in ([1] * 29, [3, 1, 9, 0, 17, 1, 2], [4] * 6):
        case = rgdr_case(key, lengths, device=cuda_device[0], generator=gen, padding=0.15, pad_first_of=1,
                         repeat_slots_of=2 if len(lengths) > 6 else None)  # fmt: skip
        res = check_rgdr(lean, case)
        assert res["ok"], (lengths, res)
        (out_l, st_l), (out_p, st_p) = _run(lean, case), _run(plain, case)
        assert torch.equal(out_l, out_p) and torch.equal(st_l, st_p), lengths


@pytest.mark.parametrize("name", ["bf16-stream-lean-8rows", "fp32-stream-lean-speculative-3blk", "fp32-tiled-large-lean",
                                  "fp32-tiled-small-round2-speculative"])
def test_a_lean_candidate_follows_unchecked_metadata_like_its_plain_tiling(name, arch, cuda_device, gen):
    """Without TileLang's bounds checks (``unchecked_index``) every access must stay in bounds by
    construction: lengths that overrun T, a negative length and slots outside the pool give the
    plain tiling's bits (which kept the checks)."""
    import torch

    state, tiling = LEAN_CANDIDATES[name]
    key = _with_arch(RGDRBuildKey("bfloat16", state, 16, 32, 128, 128, use_qk_l2norm=True), arch)
    lean, plain = build_rgdr(key, tiling), build_rgdr(key, _plain(tiling))
    case = rgdr_case(key, [2, 1, 3, 1], device=cuda_device[0], generator=gen)
    case["actual_seq_lengths"].copy_(torch.tensor([2, -1, 9, 1], dtype=case["actual_seq_lengths"].dtype))
    pool = case["state"].shape[0]
    case["ssm_state_indices"][1] = pool + 3
    case["ssm_state_indices"][4] = -7
    (out_l, st_l), (out_p, st_p) = _run(lean, case), _run(plain, case)
    assert torch.equal(out_l.nan_to_num(7.0), out_p.nan_to_num(7.0)) and torch.equal(st_l, st_p)


@pytest.mark.parametrize("name", [n for n, (_, t) in LEAN_CANDIDATES.items() if t.dependent_launch])
def test_a_lean_candidate_launched_as_a_dependent_chains_steps_on_one_pool_like_its_plain_tiling(
        name, arch, cuda_device, gen):
    """Six decode steps back to back on one stream, each reading the state the step before wrote (the
    same slots, no synchronisation between them), then the same six captured in a CUDA graph and
    replayed twice: a dependent launch that touched memory before the previous step ended would read
    a stale state. Every step's output and the final pool must be the plain tiling's bits."""
    import torch

    state, tiling = LEAN_CANDIDATES[name]
    key = _with_arch(RGDRBuildKey("bfloat16", state, 16, 32, 128, 128, use_qk_l2norm=True), arch)
    tokens = 1 if tiling.speculate else 3  # decode steps for the speculating roles, 3-token steps for the others
    steps = [rgdr_case(key, [tokens] * 3, device=cuda_device[0], generator=gen) for _ in range(6)]
    for c in steps[1:]:  # one pool and one set of slots for every step
        c["state"], c["ssm_state_indices"] = steps[0]["state"], steps[0]["ssm_state_indices"]

    def chain(launcher, pool, outs):
        for c, out in zip(steps, outs):
            launcher(c["query"], c["key"], c["value"], c["beta"], pool, c["actual_seq_lengths"],
                     c["ssm_state_indices"], c["g"], c["gk"], c["num_accepted_tokens"], out, c["scale"])  # fmt: skip

    def fresh():
        return steps[0]["state"].clone(), [torch.full_like(c["value"], float("nan")) for c in steps]

    lean, plain = build_rgdr(key, tiling), build_rgdr(key, _plain(tiling))
    want_pool, want_outs = fresh()
    chain(plain, want_pool, want_outs)
    pool, outs = fresh()
    chain(lean, pool, outs)
    torch.cuda.synchronize()
    assert torch.equal(pool, want_pool) and all(torch.equal(o, w) for o, w in zip(outs, want_outs))
    pool, outs = fresh()
    start = pool.clone()

    def reset() -> None:
        pool.copy_(start)
        for o in outs:
            o.fill_(float("nan"))

    def check() -> None:
        assert torch.equal(pool, want_pool) and all(torch.equal(o, w) for o, w in zip(outs, want_outs))

    assert_replays_like_eager(lambda: chain(lean, pool, outs), reset, check)
