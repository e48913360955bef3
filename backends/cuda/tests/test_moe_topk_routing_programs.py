"""MoE routing's two TileLang programs without a GPU: the registered key takes its program from the
block-shapes table and falls back to ``rounds`` where ``candidates`` has no block, bad block shapes
are refused with the fix, and the candidates program lowers for sm_90a with 16-byte loads issued
before any math, warp-level syncs only, and no spilled registers (where tilelang and nvcc are
installed). Numerics (bit-equal to ``rounds``, float64) run on the GPU
(``test_moe_topk_routing_gpu.py``)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import Any, Callable

import pytest

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels import block_shapes
from tileops_cuda.kernels.moe_topk_routing import (
    MoETopKRoutingBuildKey, moe_topk_routing_refusal, with_fitting_routing_program,
)
from tileops_cuda.registered_model import TileLangMoETopKRouting
from lowered_source import lowered_source

_NEXT = MoETopKRoutingBuildKey("bfloat16", "int64", 512, 10, True, "sm_90a")
_CANDIDATES = dataclasses.replace(_NEXT, program="candidates")


def _call(dtype: str, experts: int, top_k: int, arch: str = "sm_90a") -> CallSpec:
    return CallSpec("MoETopKRoutingFwdOp", "moe_topk_routing", "cuda", arch,
                    {"router_logits": dtype, "topk_weights": dtype, "topk_ids": "int64"},
                    {"T": 4096, "E": experts, "top_k": top_k}, {"renormalize": True})


def test_the_registered_key_takes_its_program_from_the_block_shapes_table(monkeypatch):
    one_token = dataclasses.replace(_NEXT, program="logits", tokens=1, unchecked_index=True, dependent_launch=True)
    # Qwen3-Next's E=512 rows: 4 tokens a program, 16 a program with 4 heads a lane from 2048 tokens on
    registered = dataclasses.replace(one_token, tokens=4, long_from=2048, long_tokens=16, long_heads=4)
    assert TileLangMoETopKRouting.key(_call("bfloat16", 512, 10)) == registered
    # launched plainly where the arch cannot launch a dependent
    plain = dataclasses.replace(registered, arch="sm_80", dependent_launch=False)
    assert TileLangMoETopKRouting.key(_call("bfloat16", 512, 10, "sm_80")) == plain
    # Qwen3.5's E=256 rows (512 bytes): calls of 2048 tokens and more run 32 tokens a program as a dependent, 4 heads
    # a lane, the refilling rounds only for a lane run dry
    assert TileLangMoETopKRouting.key(_call("bfloat16", 256, 8)) == dataclasses.replace(
        one_token, experts=256, top_k=8, long_from=2048, long_tokens=32, long_heads=4, late_refill=True)
    # rows wider than 1 KiB (float32 logits at E=512) keep one program, one token a program
    assert TileLangMoETopKRouting.key(_call("float32", 512, 10)) == dataclasses.replace(one_token, dtype="float32")
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangMoETopKRouting",
                        ((None, {"program": "candidates", "tokens": 8}),))
    # the registered keys launch as dependents where the program can (tileops_cuda.launch_policy)
    assert TileLangMoETopKRouting.key(_call("bfloat16", 512, 10)) == dataclasses.replace(_CANDIDATES, tokens=8,
                                                                                         dependent_launch=True)


def test_a_long_program_serves_calls_of_long_from_tokens_and_more(monkeypatch):
    """``long_from``: the launcher compiles the key's program and its long one (``long_tokens`` tokens a program,
    plain where ``long_plain``) and launches one by the call's token count, on the outputs as given."""
    from types import SimpleNamespace

    import torch

    from tileops_cuda.kernels import moe_topk_routing

    key = dataclasses.replace(_NEXT, program="logits", tokens=4, dependent_launch=True, long_from=1024,
                              long_tokens=1, long_plain=True)
    assert moe_topk_routing_refusal(key) is None
    short = dataclasses.replace(key, long_from=0, long_tokens=0, long_plain=False)
    long = dataclasses.replace(short, tokens=1, dependent_launch=False)
    assert moe_topk_routing.long_program_key(key) == long and moe_topk_routing.long_program_key(short) is None
    # long_tokens 0 keeps the key's tokens; a plain key's long program is plain
    assert moe_topk_routing.long_program_key(dataclasses.replace(key, long_tokens=0, long_plain=False)) == \
        dataclasses.replace(long, tokens=4, dependent_launch=True)
    calls, built = [], []

    def build(name, k, *rest):
        built.append(k)
        return SimpleNamespace(fn=lambda logits, *args, k=k: calls.append((k, logits.shape[0], args)))

    monkeypatch.setattr(moe_topk_routing, "build_run_launcher", build)
    launcher = moe_topk_routing.build_moe_topk_routing(key)
    assert sorted(built, key=lambda k: k.tokens) == [long, short]
    for T in (1, 1023, 1024, 4096):
        launcher.run(torch.empty(T, 512, dtype=torch.bfloat16), 10, True, torch.int64, "w", "i")
    assert [(k, T) for k, T, _ in calls] == [(short, 1), (short, 1023), (long, 1024), (long, 4096)]
    assert all(args == ("w", "i") for _, _, args in calls)  # the outputs as given
    assert moe_topk_routing.build_moe_topk_routing(key) is launcher  # built once a process


def test_long_heads_are_the_long_programs_heads_and_the_short_program_keeps_its_own():
    from tileops_cuda.kernels import moe_topk_routing

    key = dataclasses.replace(_NEXT, program="logits", tokens=4, dependent_launch=True, long_from=1024,
                              long_tokens=16, long_heads=4)
    assert moe_topk_routing_refusal(key) is None
    assert moe_topk_routing.long_program_key(key) == dataclasses.replace(
        key, tokens=16, long_from=0, long_tokens=0, long_heads=0, heads=4)
    assert moe_topk_routing.long_program_key(dataclasses.replace(key, long_heads=0, heads=2)).heads == 2


def test_late_refill_goes_with_the_program_of_fewer_heads_and_is_refused_without_one():
    """``late_refill`` orders the rounds of a program with fewer heads a lane: the long program of a key with
    ``long_heads`` keeps it, the short 8-head program drops it (the same program either way), and a key with no
    such program is refused by name."""
    from tileops_cuda.kernels import moe_topk_routing

    key = dataclasses.replace(_NEXT, program="logits", tokens=4, dependent_launch=True, long_from=1024,
                              long_tokens=16, long_heads=4, late_refill=True)
    assert moe_topk_routing_refusal(key) is None
    assert moe_topk_routing.long_program_key(key).late_refill
    assert moe_topk_routing._without_long(key) == dataclasses.replace(
        key, long_from=0, long_tokens=0, long_heads=0, late_refill=False)
    assert moe_topk_routing_refusal(dataclasses.replace(_NEXT, program="logits", heads=4, late_refill=True)) is None
    reason = moe_topk_routing_refusal(dataclasses.replace(_NEXT, program="logits", late_refill=True))
    assert reason.endswith("late_refill reorders the rounds of a logits program with fewer heads a lane (heads or "
                           "long_heads 2 or 4); set one or drop it")


@pytest.mark.parametrize("changes", [dict(long_heads=3), dict(long_from=0, long_tokens=0), dict(program="candidates")],
                         ids=["not-a-power", "no-long-program", "candidates"])
def test_long_heads_outside_the_logits_programs_long_program_are_refused_by_name(changes):
    key = dataclasses.replace(_NEXT, program="logits", tokens=4, long_from=1024, long_tokens=16, long_heads=4)
    reason = moe_topk_routing_refusal(dataclasses.replace(key, **changes))
    assert reason is not None and "long_heads=" in reason and reason.endswith("drop it")


@pytest.mark.parametrize("program", ["candidates", "logits"])
@pytest.mark.parametrize("dtype,experts,top_k", [("float32", 1024, 8), ("bfloat16", 64, 40)],
                         ids=["two-warps-a-token", "top_k-past-31"])
def test_a_key_the_warp_programs_cannot_hold_falls_back_to_rounds(monkeypatch, program, dtype, experts, top_k):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangMoETopKRouting", ((None, {"program": program}),))
    key = TileLangMoETopKRouting.key(_call(dtype, experts, top_k))
    # launched plainly: the rounds program has no dependent form
    assert key.program == "rounds" and not key.dependent_launch and TileLangMoETopKRouting.reason(None, key) is None
    fitting = dataclasses.replace(_CANDIDATES, program=program)
    assert with_fitting_routing_program(fitting) == fitting


@pytest.mark.parametrize("renormalize", [True, False], ids=["renorm", "no-renorm"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_the_logits_program_serves_the_model_rows_both_ways(dtype, renormalize):
    # No refusal that renormalize=False would need: the program sums every expert's e for it.
    for experts, top_k in ((512, 10), (256, 8)):
        key = MoETopKRoutingBuildKey(dtype, "int64", experts, top_k, renormalize, "sm_90a", "logits", 1, True, True)
        assert moe_topk_routing_refusal(key) is None and with_fitting_routing_program(key) == key


def _network_model(count: int, depth: int) -> Callable[[list], list]:
    """The logits program's heads network as Python: a lane's keys -> its ``depth`` largest, sorted."""
    from tileops_cuda.kernels.moe_topk_routing_program import _heads_network

    steps, slots = _heads_network(count, depth)

    def heads_of(keys: list) -> list:
        keys = list(keys)
        for op, a, b in steps:
            keys[a], keys[b] = (max(keys[a], keys[b]), min(keys[a], keys[b])) if op == "ce" else \
                (max(keys[a], keys[b]), keys[b])
        return [keys[h] for h in slots]

    return heads_of


def _rounds_model(lanes: list, depth: int, top_k: int, empty: Any) -> tuple[list, list, list]:
    """The logits program's steps 3-4 with ``heads`` on 32 lanes' keys: each lane's ``depth`` largest by the
    network, top_k rounds popping the warp's largest head, and after each round from the depth-th a refill of
    every lane whose first head is gone, from its keys below the round's max. Returns the rounds' keys, each
    lane's heads after them, and each lane's last head at its last fill (the program's ``kv[6]``)."""
    heads_of = _network_model(len(lanes[0]), depth)
    heads = [heads_of(keys) for keys in lanes]
    last = [h[depth - 1] for h in heads]
    chosen = []
    for r in range(top_k):
        best = max(h[0] for h in heads)
        chosen.append(best)
        for h in heads:
            if h[0] == best:
                h[:] = h[1:] + [empty]
        if r >= depth - 1:
            for lane, h in enumerate(heads):
                if h[0] == empty:
                    h[:] = heads_of([k if k < best else empty for k in lanes[lane]])
                    last[lane] = h[depth - 1]
    return chosen, heads, last


@pytest.mark.parametrize("count,depth", [(c, d) for c in (4, 8, 12, 16) for d in (1, 2, 4, 8) if d <= c])
def test_the_heads_network_leaves_a_lanes_largest_keys_sorted(count, depth):
    import random

    heads_of = _network_model(count, depth)
    rng = random.Random(count * 10 + depth)
    for _ in range(200):
        values = [rng.randint(0, 5) for _ in range(count)]  # many ties
        assert heads_of(values) == sorted(values, reverse=True)[:depth]


@pytest.mark.parametrize("per,top_k,depth", [(16, 10, 4), (16, 10, 2), (8, 8, 4), (8, 8, 2), (4, 11, 2)])
def test_rounds_over_lanes_heads_refilled_below_the_popped_key_select_the_warps_top_k(per, top_k, depth):
    """The logits program's selection with ``heads`` (a model of its steps 3-4 on 32 lanes): each lane's
    ``depth`` largest keys by the network, top_k rounds popping the warp's largest head, and after each
    round from the depth-th a refill of every lane whose first head is gone, from its keys below the
    round's max. Each round takes the next of the warp's largest keys, whichever lanes hold them (lanes
    holding many of them included), and after the rounds every lane's heads are its largest unpopped
    keys, at least one where any is left (what the outsider's search reads)."""
    import random

    empty = float("-inf")
    rng = random.Random(per * 100 + top_k * 10 + depth)
    for trial in range(300):
        values = rng.sample(range(100000), 32 * per)
        if trial % 3 == 0:  # a few lanes holding most of the selection
            values.sort(reverse=True)
            values = values[:per] + values[per:2 * per] + rng.sample(values[2 * per:], 30 * per)
        lanes = [values[lane * per:(lane + 1) * per] for lane in range(32)]
        chosen, heads, _ = _rounds_model(lanes, depth, top_k, empty)
        assert chosen == sorted(values, reverse=True)[:top_k]
        for lane, h in enumerate(heads):  # each lane's heads: its largest unpopped keys, one at least if any
            known = [k for k in h if k != empty]
            remaining = sorted((k for k in lanes[lane] if k not in chosen), reverse=True)
            assert known == remaining[:len(known)] and (known or not remaining)


@pytest.mark.parametrize("per,top_k,depth", [(16, 10, 4), (8, 8, 4), (8, 8, 2), (16, 10, 8)])
def test_the_outsider_of_a_refilled_selection_is_exact_where_logits_tie(per, top_k, depth):
    """The logits program's step 5 with ``heads`` (a model on 32 lanes, keys ``(logit, -expert)`` with many equal
    logits): the first outsider, the largest key of a logit below the k-th's, taken from each lane's heads, and
    from its keys below that logit where its last head at its last fill is not below it (the lane reads its row
    again), equals the largest such key of the whole row on every token; and the lanes that read their heads
    only hold their own largest key there among them."""
    import random

    empty = (float("-inf"), 0)
    heads_of = _network_model(per, depth)
    rng = random.Random(per * 100 + top_k * 10 + depth)
    reread = 0
    for trial in range(400):
        logits = [rng.randint(0, (40, 12, 3)[trial % 3]) for _ in range(32 * per)]  # runs of equal logits
        lanes = [[(logits[lane * per + i], -(lane * per + i)) for i in range(per)] for lane in range(32)]
        chosen, heads, last = _rounds_model(lanes, depth, top_k, empty)
        kth = chosen[-1][0]
        found = []
        for lane, h in enumerate(heads):
            from_heads = max((k for k in h if k[0] < kth), default=empty)
            below = max((k for k in lanes[lane] if k[0] < kth), default=empty)
            if per > depth and last[lane][0] >= kth:
                reread += 1
                from_heads = heads_of([k if k[0] < kth else empty for k in lanes[lane]])[0]
            else:
                assert from_heads == below, (trial, lane)
            found.append(from_heads)
        assert max(found) == max((k for lane in lanes for k in lane if k[0] < kth), default=empty), trial
    assert reread or per == depth  # the rows reach the reread


@pytest.mark.parametrize("count,depth", [(16, 6), (16, 3), (4, 8), (8, 0)])
def test_the_heads_network_refuses_a_depth_its_merges_cannot_sort(count, depth):
    from tileops_cuda.kernels.moe_topk_routing_program import _heads_network

    with pytest.raises(ValueError, match="must be a power of two and at most count"):
        _heads_network(count, depth)


def test_a_word_of_two_16_bit_logits_orders_both_halves_as_each_logit_alone():
    # The logits program builds its 16-bit keys from whole words: every pattern in either half, the
    # other half every sign (no borrow crosses), against the one-logit order.
    from tileops_cuda.kernels.moe_topk_routing_program import _ordered, _word_ordered

    for bits in range(1 << 16):
        want = _ordered(bits, 16) & 0xFFFF
        for other in (0x0000, 0x7FFF, 0x8000, 0xFFFF, 0x7F80, 0xFF80):
            assert _word_ordered(bits | other << 16) & 0xFFFF == want
            assert _word_ordered(other | bits << 16) >> 16 == want


@pytest.mark.parametrize("fields,reason", [
    ({"program": "heap"}, "program='heap' is not one of ('rounds', 'candidates', 'logits')"),
    ({"program": "candidates", "tokens": 33}, "the candidates program takes 0-32 tokens a program (tokens=33)"),
    ({"program": "candidates", "experts": 1024, "dtype": "float32"},
     "the candidates program holds a token in one warp (E=1024 in float32 takes 64 threads); use program='rounds'"),
    ({"program": "candidates", "top_k": 32}, "the candidates program ranks top_k + 1 <= 32 lanes (top_k=32)"),
    ({"unchecked_index": True},
     "unchecked_index is a field of the candidates and logits programs (program='rounds'); drop it"),
    ({"dependent_launch": True},
     "dependent_launch is a field of the candidates and logits programs (program='rounds'); drop it"),
    ({"program": "logits", "tokens": 33}, "the logits program takes 0-32 tokens a program (tokens=33)"),
    ({"program": "logits", "experts": 1024, "dtype": "float32"},
     "the logits program holds a token in one warp (E=1024 in float32 takes 64 threads); use program='rounds'"),
    ({"program": "logits", "top_k": 32}, "the logits program ranks top_k + 1 <= 32 lanes (top_k=32)"),
    ({"program": "candidates", "dependent_launch": True, "arch": "sm_80"},
     "dependent_launch needs programmatic dependent launch (sm_90, sm_90a), not sm_80; drop dependent_launch"),
    ({"program": "logits", "long_tokens": 4}, "long_from=0 must be a token count (0: no long program) and set where"),
    ({"program": "logits", "long_from": -1}, "long_from=-1 must be a token count"),
    ({"long_from": 1024}, "long_from is a field of the candidates and logits programs (program='rounds')"),
    ({"program": "logits", "long_from": 1024, "long_tokens": 33},
     "the long program (long_tokens=33) takes 0-32 tokens a program (tokens=33)"),
    ({"program": "logits", "heads": 3}, "heads=3 is 2, 4 or 8 heads a lane of the logits program (0: its default)"),
    ({"program": "candidates", "heads": 4}, "heads=4 is 2, 4 or 8 heads a lane of the logits program"),
    ({"program": "candidates", "lean_rounds": True}, "lean_rounds is a field of the logits program on 16-bit logits "
                                                     "(program='candidates', dtype=bfloat16"),
    ({"program": "logits", "dtype": "float32", "lean_rounds": True}, "(program='logits', dtype=float32: 32-bit keys)"),
], ids=["program", "tokens", "experts", "top_k", "unchecked-rounds", "dependent-rounds", "logits-tokens",
        "logits-experts", "logits-top_k", "dependent-sm80", "long-fields-without-long-from", "long-from-negative",
        "long-rounds", "long-tokens", "heads-3", "heads-candidates", "lean-candidates", "lean-float32"])
def test_the_kernel_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in moe_topk_routing_refusal(dataclasses.replace(_NEXT, **fields))


def _lowered(key: MoETopKRoutingBuildKey) -> str:
    from tileops_cuda.kernels.moe_topk_routing_program import routing_program

    return lowered_source(routing_program, key)


# The spec's model rows (16 and 8 experts a lane), rows with padded lanes (E below a warp of
# vectors, E not a whole vector), the ids dtypes, renormalisation off, one and eight tokens a program.
_LOWERED = [
    dataclasses.replace(_CANDIDATES, tokens=4),
    MoETopKRoutingBuildKey("bfloat16", "int64", 256, 8, True, "sm_90a", "candidates", 8),
    MoETopKRoutingBuildKey("float32", "int32", 12, 3, False, "sm_90a", "candidates", 1),
    MoETopKRoutingBuildKey("float16", "int64", 16, 4, True, "sm_90a", "candidates", 2),
]


@pytest.mark.parametrize("key", _LOWERED, ids=lambda k: f"{k.dtype}-E{k.experts}-k{k.top_k}-t{k.tokens}")
def test_the_candidates_program_loads_the_row_before_any_math_and_syncs_only_its_warp(key):
    source = _lowered(key)
    assert source.index("(router_logits + ") < source.index("expf(")
    assert "__syncthreads" not in source and source.count("__syncwarp()") == 2
    assert re.search(r"extern __shared__ __align__\(\d+\) int slots\[\];", source)  # one buffer: no aliasing
    assert "__ballot_sync" in source and "tl::warp_reduce_sum" in source


@pytest.mark.parametrize("key", _LOWERED[:2], ids=["qwen3-next-E512", "qwen3.5-E256"])
def test_the_candidates_program_reads_the_model_rows_as_16_byte_vectors(key):
    assert len(re.findall(r"\*\(uint4\*\)\(router_logits \+ ", _lowered(key))) == 1  # in an unrolled loop


def _layout(source: str) -> tuple:
    """What places an expert in a lane and orders a lane's sum, read from a program's source: the
    strides of the loop index and of the lane in the logits' load address, and the index
    expression of the local sum (its loop variable renamed)."""
    load = next(line for line in source.splitlines() if "(router_logits + " in line)
    lane = re.search(r"threadIdx\.x\)\)(?: & \(int64_t\)31\))? \* \(int64_t\)(\d+)\)", load)
    vector = re.search(r"\(\(int64_t\)i\) \* \(int64_t\)(\d+)\)", load)
    total = re.search(r"= \((?:total\[0\]|fv\[1\]) \+ (?:prob|ev)\[(.*)\]\);", source)
    return (lane and lane.group(1), vector and vector.group(1), re.sub(r"\brv(_\d+)?\b", "rv", total.group(1)))


@pytest.mark.parametrize("key", [
    _NEXT, MoETopKRoutingBuildKey("bfloat16", "int64", 256, 8), MoETopKRoutingBuildKey("float32", "int64", 512, 8),
    MoETopKRoutingBuildKey("float32", "int64", 256, 8), MoETopKRoutingBuildKey("bfloat16", "int32", 12, 3, False),
    MoETopKRoutingBuildKey("float16", "int64", 16, 4), MoETopKRoutingBuildKey("float32", "int64", 4, 4),
], ids=lambda k: f"{k.dtype}-E{k.experts}")
def test_the_candidates_program_lays_out_and_sums_a_token_as_rounds_does(key):
    # The bit-for-bit claim rests on this: the same expert in the same lane and local slot, and the
    # same order of float32 additions (E=12 in bf16: TileLang gave rounds 8-byte vectors).
    rounds = _lowered(dataclasses.replace(key, arch="sm_90a"))
    candidates = _lowered(dataclasses.replace(key, arch="sm_90a", program="candidates", tokens=2))
    assert _layout(candidates) == _layout(rounds)


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc: registers and spills are read from ptxas")
    return nvcc


def test_the_launcher_compiles_the_candidates_program_without_a_block_barrier():
    # The pass config that keeps TileLang from inserting __syncthreads is annotated on the program:
    # honoured by tilelang.compile (what the launcher runs), not by tilelang.lower alone. A block
    # barrier inside the warp-uniform branches would hang a program whose warps part ways.
    pytest.importorskip("tilelang")
    _nvcc()
    from tileops_cuda.kernels.moe_topk_routing import build_moe_topk_routing

    source = build_moe_topk_routing(dataclasses.replace(_CANDIDATES, tokens=8)).kernel.get_kernel_source()
    assert "__syncthreads" not in source and source.count("__syncwarp()") == 2


def test_unchecked_index_drops_the_row_and_output_bounds_checks_and_keeps_the_warp_sync():
    # The registered key (one token a program): TileLang guards the row's loads and the outputs'
    # stores with ``1 <= M`` (it cannot see that the launcher never launches M = 0); without the
    # checks (tl.disable_safe_memory_legalize) both go, the block-barrier pass stays off.
    checked, unchecked = (_lowered(dataclasses.replace(_CANDIDATES, tokens=1, unchecked_index=u))
                          for u in (False, True))
    assert checked.count("if ((1 <= M)) {") == 1 and checked.count("if (1 <= M) {") == 1
    assert "1 <= M" not in unchecked
    assert "__syncthreads" not in unchecked and unchecked.count("__syncwarp()") == 2


def test_a_key_that_falls_back_to_rounds_drops_unchecked_index():
    key = dataclasses.replace(_CANDIDATES, experts=1024, dtype="float32", unchecked_index=True)
    assert with_fitting_routing_program(key) == dataclasses.replace(key, program="rounds", tokens=0,
                                                                    unchecked_index=False)
    lean = dataclasses.replace(key, experts=2048, dtype="bfloat16", program="logits", lean_rounds=True)
    assert with_fitting_routing_program(lean) == dataclasses.replace(lean, program="rounds", tokens=0,
                                                                     unchecked_index=False, lean_rounds=False)


def test_a_dependent_launch_candidates_program_waits_before_its_first_memory_access():
    from lowered_source import waits_before_its_first_memory_access

    key = dataclasses.replace(_CANDIDATES, tokens=1, unchecked_index=True)
    assert waits_before_its_first_memory_access(_lowered(dataclasses.replace(key, dependent_launch=True)),
                                                "router_logits|topk_weights|topk_ids")
    assert "cudaGridDependencySynchronize" not in _lowered(key)


# The logits program: both model rows in every logits dtype, both ids dtypes, renormalisation both ways,
# one token a program (the registered block shape); and a padded row (E below a warp of vectors).
_LOGITS = [MoETopKRoutingBuildKey(dtype, ids, experts, top_k, renorm, "sm_90a", "logits", 1, True, True)
           for dtype in ("bfloat16", "float16", "float32") for experts, top_k in ((512, 10), (256, 8))
           for ids, renorm in (("int64", True), ("int32", False))]


_PADDED_LOGITS = MoETopKRoutingBuildKey("float32", "int32", 12, 3, False, "sm_90a", "logits", 2)


@pytest.mark.parametrize("key", [*_LOGITS, _PADDED_LOGITS],
                         ids=lambda k: f"{k.dtype}-E{k.experts}-k{k.top_k}-{k.ids_dtype}-renorm{k.renormalize}")
def test_the_logits_program_lowers_with_one_warp_sync_and_expf_only_in_its_fallback(key):
    source = _lowered(key)
    body = source[source.index("__launch_bounds__"):]
    assert re.search(r"router_logits( \+ |\[)", body).start() < body.index("expf(")  # every load first
    assert "__syncthreads" not in source and source.count("__syncwarp()") == 1  # the fallback's slots
    assert "__all_sync" in source and "__any_sync" in source
    # The fast path takes one expf a lane (the lane's selected expert) and, without renormalisation, one an
    # expert for the full sum; the fallback the rounds program's one an expert.
    per_lane = (key.experts + 31) // 32 if key.experts >= 256 else None
    fallback = source.index("if (if_condition) {")
    fast = source[:fallback].count("expf(")
    assert fast == (1 if key.renormalize else 2), fast
    if per_lane is not None:
        assert "tl::warp_reduce_max(keys[" in source  # the rounds over the lanes' heads


@pytest.mark.parametrize("key", [k for k in _LOGITS if k.dtype != "float32"][:4],
                         ids=lambda k: f"{k.dtype}-E{k.experts}-k{k.top_k}-renorm{k.renormalize}")
def test_the_logits_program_of_16_bit_logits_reads_16_byte_vectors_and_reduces_32_bit_keys(key):
    source = _lowered(key)
    assert len(re.findall(r"\*\(uint4\*\)\(raw \+ ", source)) == 1  # in an unrolled loop
    assert re.search(r"\bint keys\[\d+\];", source)  # one redux.sync a round, not a shuffle butterfly


@pytest.mark.parametrize("key", [*_LOWERED[:2], _LOGITS[0], _LOGITS[2],
                                 *(dataclasses.replace(_LOGITS[i], tokens=16, heads=4) for i in (0, 2)),
                                 *(dataclasses.replace(_LOGITS[i], tokens=16, heads=4, late_refill=True)
                                   for i in (0, 2)),
                                 *(dataclasses.replace(_LOGITS[i], tokens=16, heads=4, lean_rounds=True)
                                   for i in (0, 2))],
                         ids=[f"{p}-{row}" for p in ("candidates", "logits", "logits-heads4", "logits-heads4-late",
                                                     "logits-heads4-lean")
                              for row in ("qwen3-next-E512-k10", "qwen3.5-E256-k8")])
def test_the_warp_programs_of_the_model_rows_spill_nothing_for_sm_90a(key, tmp_path):
    pytest.importorskip("tilelang")
    nvcc = _nvcc()
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    cu = tmp_path / "routing.cu"
    cu.write_text(_lowered(key))
    out = subprocess.run([nvcc, "-arch=sm_90a", "-std=c++17", "-c", "-Xptxas", "-v", "-DENABLE_BF16",
                          f"-I{TILELANG_TEMPLATE_PATH}", f"-I{CUTLASS_INCLUDE_DIR}", "-o", os.devnull, str(cu)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out.stderr)
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", out.stderr)]
    assert spills and all(a == "0" and b == "0" for a, b in spills), out.stderr
    # At most 64: 32 warps an SM, so 4096 tokens are one wave on 132 SMs.
    assert registers and max(registers) <= 64, out.stderr


@pytest.mark.parametrize("heads", [2, 4])
def test_a_logits_program_of_fewer_heads_refills_a_lane_from_its_row_after_a_vote_a_round(heads):
    """``heads``: from the round a lane can first run out (the heads-th), one vote a round, and a refill
    (the row read again, the lane's keys below the popped one, the network) only under it, those rounds one
    rolled loop (one copy of the refill in the program, and one for the outsider's search); the first fill
    and the fallback as before. At 16 tokens a program the bound keeps 32 warps an SM resident."""
    key = dataclasses.replace(_LOGITS[0], tokens=16, heads=heads)  # Qwen3-Next: E=512 top-10, 16 keys a lane
    source = _lowered(key)
    assert f"for (int r = {heads - 1}; r < 10; ++r)" in source
    assert source.count("__any_sync") == 1 + 2  # the rounds' vote; the outsider's search again, the NaN-key test
    assert "__launch_bounds__(512, 2)" in source
    base = _lowered(dataclasses.replace(key, heads=0))
    assert "__any_sync" in base and "__launch_bounds__(512, 2)" not in base


def test_a_late_refilling_program_runs_its_rounds_unrolled_and_the_refilling_rounds_only_for_a_dry_lane():
    """``late_refill``: the first top_k - 1 rounds unrolled with no vote, one vote (a lane ran dry), and under it the
    token again from its row with the refilling rounds (their rolled loop and its vote); else the last round."""
    key = dataclasses.replace(_LOGITS[0], tokens=16, heads=4, late_refill=True)  # E=512 top-10, 16 keys a lane
    source = _lowered(key)
    first_loop = source.index("for (int r = 3; r < 10; ++r)")
    assert source.count("for (int r = 3; r < 10; ++r)") == 1  # the refilling rounds: once, under the dry vote
    dry_vote = source.index("__any_sync")
    assert dry_vote < first_loop
    assert source.count("__any_sync") == 1 + 1 + 2  # the dry vote, the refilling rounds', the outsider's, NaN keys
    assert source.count("tl::warp_reduce_max") >= 10 + 4  # each round unrolled; the refilling rounds (3 + a loop)


@pytest.mark.parametrize("late", [False, True], ids=["rolled", "late"])
def test_lean_rounds_store_each_rounds_maximum_once_a_warp_and_pop_heads_through_mad(late):
    """``lean_rounds``: each round's maximum goes to the warp's slot 2K + r, written by every lane with the same
    value (no compare and select a lane and round), and lane r < K reads slot 2K + r after the rounds; the winning
    lane's heads move up through two ``mad.lo.s32`` a head (the FMA pipe), the last one taking EMPTY; the slots are
    the fallback's buffer, 3K a warp (one buffer: no second allocation for TileLang to lay over it)."""
    key = dataclasses.replace(_LOGITS[0], tokens=16, heads=4, late_refill=late, lean_rounds=True)  # E=512 top-10
    source = _lowered(key)
    plain = _lowered(dataclasses.replace(key, lean_rounds=False))
    assert "tl_mad_s32" not in plain and 'asm("mad.lo.s32' in source
    assert source.count("__shared__") == plain.count("__shared__") == 1
    assert "* 30)" in source and "* 20)" in plain  # a warp's row of the slots: 3K entries (2K without)
    stores = re.findall(r"slots\[[^\]]*\] = kv\[1\];", source)
    assert "* 30) + 20)] = kv[1];" in stores[0] and "* 30) + 21)] = kv[1];" in stores[1]
    assert source.count("tl_mad_s32(iv[0], tl_mad_s32(keys[") == 4 * len(stores)  # each round pops 4 heads
    assert source.count("tl_mad_s32(keys[2], -1, -2147483648)") == len(stores)  # the last head takes EMPTY
    read = source.index("+ (((int)threadIdx.x) & 31)) + 20)]")  # lane r < K reads slot 2K + r
    rounds = source[source.index("tl::warp_reduce_max(keys["):read]
    # no lane keeps a round's maximum by a select of its own (the plain program's ``kv[2] = lane == r ? ...``)
    assert "= kv[2];" not in rounds and "= kv[2];" in plain[plain.index("tl::warp_reduce_max(keys["):]
