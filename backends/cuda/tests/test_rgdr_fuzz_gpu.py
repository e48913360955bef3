"""The TileLang RGDR kernel under fuzzed metadata (issue 19), through the op on the GPU.

The metadata strategy and tensors are the CPU test's (``tests/test_rgdr_metadata_fuzz.py``),
at head sizes the TileLang kernel serves. With contents checks off the kernel follows the rule
every backend follows (``tileops_cpu_ref.rgdr.clipped_bounds``; a slot outside the pool is
padding): it writes every output element, zeros on the tokens no sequence covers, and leaves
every slot no index names bit-identical; or the call fails before writing. Unwritten output is
found by running each case twice with the caching allocator's block for the output filled
first with NaN and then with 7.0: an element the kernel never writes keeps the fill, so the
runs differ. Where no slot is written by two sequences (so the result does not depend on the
order programs run in), outputs and written slots match the float64 reference on the same rule.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from test_rgdr_metadata_fuzz import rgdr_metadata, rgdr_tensors, uncovered_rows, unnamed_slots  # noqa: E402

from tileops_cpu_ref.rgdr import clipped_bounds  # noqa: E402

DIMS = (2, 4, 128, 32)  # NK, NV, DK, DV: a shape the TileLang kernel serves


def _key(arch: str, style: str, accepted: str | None):
    """The build key of the examples below: bf16 inputs, a float32 pool, int64 metadata (the
    fuzzed tensors'), ``g``, no ``gk``, no in-kernel l2 norm."""
    from tileops_cuda.kernels.rgdr import RGDRBuildKey

    return RGDRBuildKey("bfloat16", "float32", *DIMS, style, "int64", "int64", accepted, True, None, False, arch)


def _pinned(stream: bool, speculate: bool):
    """The speculative test's programs: one tiling, tiled or streamed, speculating or its twin."""
    from tileops_cuda.kernels.rgdr import RGDRTiling

    return RGDRTiling(128, 16, 2, 8, stream, speculate=speculate)


@pytest.fixture(scope="module", autouse=True)
def _prebuilt(cuda_device):
    """Every kernel the examples can reach, compiled concurrently before the first one. Drawn
    example by example, the builds ran one after another (the op's default schedule a key, then
    each pinned program and its twin) and outran a 5-minute slot on the H200."""
    from tileops_cuda.kernels._common import compile_many
    from tileops_cuda.kernels.rgdr import build_rgdr

    keys = [_key(cuda_device[1], style, accepted)
            for style in ("lengths", "cu_seqlens") for accepted in (None, "int64")]
    thunks = [functools.partial(build_rgdr, key) for key in keys]
    thunks += [functools.partial(build_rgdr, key, _pinned(stream, speculate)) for key in keys
               for stream in (False, True) for speculate in (False, True)]
    failed = [built for built in compile_many(thunks) if isinstance(built, BaseException)]
    assert not failed, failed[0]


def _one_writer_per_slot(m: dict, starts: list[int], lengths: list[int]) -> bool:
    """No pool slot is named by covered tokens of two sequences (programs race on such a slot)."""
    owner: dict[int, int] = {}
    for b, (start, n) in enumerate(zip(starts, lengths)):
        for t in range(start, start + n):
            slot = m["indices"][t]
            if 0 <= slot < m["pool"] and owner.setdefault(slot, b) != b:
                return False
    return True


def _expected(args: dict, m: dict) -> tuple:
    """The float64 reference's (out, state) under the kernel's rule for slots outside the pool
    (padding; the reference itself refuses them), on CPU copies."""
    import torch

    from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

    cpu = {k: v.cpu() for k, v in args.items()}
    idx = cpu["ssm_state_indices"]
    cpu["ssm_state_indices"] = torch.where((idx >= 0) & (idx < m["pool"]), idx, -1)
    cpu["state"] = cpu["state"].double()
    out = torch.empty(cpu["value"].shape, dtype=torch.float64)
    recurrent_gated_delta_rule(**cpu, seq_lens_style=m["style"], compute_dtype=torch.float64, out=out)
    return out, cpu["state"]


@settings(max_examples=60, deadline=None)
@given(m=rgdr_metadata())
# The two cases the first H200 run found: a sequence past T whose token names a slot past the
# pool (the kernel read token 1 of 1 and wrote pool slot 0), and a token no sequence covers.
@example(m={"T": 1, "pool": 1, "style": "lengths", "seq": [2], "indices": [1], "accepted": None, "seed": 0})
@example(m={"T": 1, "pool": 1, "style": "lengths", "seq": [0], "indices": [0], "accepted": None, "seed": 0})
# 64-bit metadata past int32 is clipped, never wrapped onto a real token or slot.
@example(m={"T": 3, "pool": 2, "style": "cu_seqlens", "seq": [2**32, 2**32 + 1, 2], "indices": [2**32, 1, 2**32 + 1],
            "accepted": [2**32 + 1, 1], "seed": 1})
@example(m={"T": 4, "pool": 3, "style": "cu_seqlens", "seq": [1, 3, 2, 9], "indices": [0, 1, 2, 0],
            "accepted": None, "seed": 2})
def test_unchecked_garbage_metadata_writes_every_output_element_and_no_unnamed_slot_on_the_gpu(m, cuda_device):
    import torch

    from tileops_core import TileOpsError
    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
    from tileops_cpu_ref.rgdr import clipped_bounds
    from tileops_cuda.testing import rel_err

    device = cuda_device[0]
    args = rgdr_tensors(m, DIMS, torch.bfloat16, device)
    before = args["state"].clone()
    op = RecurrentGatedDeltaRuleFwdOp(seq_lens_style=m["style"], check_contents=False)
    runs = []
    for fill in (float("nan"), 7.0):
        state = before.clone()
        junk = torch.full(args["value"].shape, fill, dtype=args["value"].dtype, device=device)
        del junk  # the output's allocation reuses this block
        try:
            out = op(**{**args, "state": state})
            torch.cuda.synchronize()
        except TileOpsError:
            assert torch.equal(state.view(torch.uint8), before.view(torch.uint8)), "failed after writing"
            return
        runs.append((out.clone(), state))
    (out_a, state_a), (out_b, state_b) = runs
    assert not torch.isnan(out_a).any() and torch.equal(out_a, out_b), "an output element was left unwritten"
    starts, lengths = clipped_bounds(m["seq"], m["style"], m["T"])
    assert not uncovered_rows(out_a, starts, lengths).any(), "a token no sequence covers is not zero"
    keep = torch.as_tensor(unnamed_slots(m), device=device)
    assert torch.equal(state_a[keep].view(torch.uint8), before[keep].view(torch.uint8))
    plan = op.last_plan
    assert plan is not None
    served = [impl.qualname() for bound in plan.bound.values() for impl in bound.kernels.values()]
    assert any(name.endswith(":TileLangRGDR") for name in served), served  # not the reference
    if _one_writer_per_slot(m, starts, lengths):
        out64, state64 = _expected(args, m)
        assert rel_err(out_a.cpu(), out64) <= 1e-2, rel_err(out_a.cpu(), out64)
        assert rel_err(state_a.cpu(), state64) <= 1e-4, rel_err(state_a.cpu(), state64)


@st.composite
def decode_like_metadata(draw: st.DrawFn) -> dict:
    """``rgdr_metadata``'s fields for T = B: a decode step's metadata, perturbed in up to two
    places (a speculative program's guesses then hit, miss, or meet a layout that only looks
    like decode), or anything of that width."""
    B = draw(st.integers(1, 7))
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    seq = [1] * B if style == "lengths" else list(range(B + 1))
    for _ in range(draw(st.integers(0, 2))):
        seq[draw(st.integers(0, len(seq) - 1))] = draw(st.integers(-2, B + 3) | st.just(2**32 + 1))
    pool = draw(st.integers(1, 9))
    indices = draw(st.lists(st.integers(-3, pool + 2) | st.just(2**32), min_size=B, max_size=B))
    accepted = draw(st.none() | st.lists(st.integers(-2, 3) | st.just(2**32 + 1), min_size=B, max_size=B))
    return {"T": B, "pool": pool, "style": style, "seq": seq, "indices": indices, "accepted": accepted,
            "seed": draw(st.integers(0, 2**31 - 1))}


@settings(max_examples=40, deadline=None)
@given(m=decode_like_metadata() | rgdr_metadata(), layout=st.sampled_from(["tiled", "stream"]))
@example(m={"T": 3, "pool": 4, "style": "lengths", "seq": [1, 2, 0], "indices": [0, 1, 2], "accepted": None, "seed": 3},
         layout="tiled")  # a miss on sequence 1, a guess past its span on sequence 2
@example(m={"T": 2, "pool": 3, "style": "cu_seqlens", "seq": [1, 1, 2], "indices": [2, 0], "accepted": [3, 2**32 + 1],
            "seed": 4}, layout="stream")  # sequence 0 starts at 1: every guess misses
def test_a_speculative_program_under_garbage_metadata_gives_the_general_programs_answer(m, layout, cuda_device):
    """The speculative programs, launched directly (the op's default schedule does not
    speculate yet) on unchecked metadata: every output element written, slots no index names
    bit-identical, and where no slot has two writers, the general twin's bits exactly."""
    import torch

    from tileops_cuda.kernels.rgdr import build_rgdr

    device, arch = cuda_device
    args = rgdr_tensors(m, DIMS, torch.bfloat16, device)
    key = _key(arch, m["style"], None if m["accepted"] is None else "int64")
    spec, twin = build_rgdr(key, _pinned(layout == "stream", True)), build_rgdr(key, _pinned(layout == "stream", False))
    before = args["state"].clone()

    def run(launcher, fill):
        state = before.clone()
        out = torch.full(args["value"].shape, fill, dtype=args["value"].dtype, device=device)
        launcher(args["query"], args["key"], args["value"], args["beta"], state, args["actual_seq_lengths"],
                 args["ssm_state_indices"], args["g"], None, args.get("num_accepted_tokens"), out, None)  # fmt: skip
        torch.cuda.synchronize()
        return out, state

    (out_a, state_a), (out_b, _) = run(spec, float("nan")), run(spec, 7.0)
    assert not torch.isnan(out_a).any() and torch.equal(out_a, out_b), "an output element was left unwritten"
    keep = torch.as_tensor(unnamed_slots(m), device=device)
    assert torch.equal(state_a[keep].view(torch.uint8), before[keep].view(torch.uint8))
    starts, lengths = clipped_bounds(m["seq"], m["style"], m["T"])
    if _one_writer_per_slot(m, starts, lengths):
        out_t, state_t = run(twin, float("nan"))
        assert torch.equal(out_a, out_t) and torch.equal(state_a, state_t)
