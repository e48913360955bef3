"""MoE routing's candidates and logits programs on an NVIDIA GPU, at every block shape the sweep times:
the candidates program bit for bit the ``rounds`` program's outputs (weights compared as integers, ids
exactly) on poisoned outputs; the logits program the same ids exactly and weights within the conformance
suite's tolerance of rounds' (bit for bit where its guard sends a token to the rounds selection: non-finite
rows); both within the tolerance of float64 on the spec's rows. The inputs
reach each of its paths: random logits (the candidate set), long runs of equal logits and
probabilities underflowed to zero (more than 32 candidates), an outsider whose probability rounds
onto the k-th candidate's (the outsider check), non-finite logits (a non-finite sum), and token counts
that leave a program's last warps without a token. Skips without a GPU or tilelang."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import sys

import pytest
import torch

from tileops_core import load_manifest
from tileops_cuda.kernels.moe_topk_routing import MoETopKRoutingBuildKey, build_moe_topk_routing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402

#: The candidates program's block shapes in the sweep (tokens a program, one warp each), the
#: registered one without TileLang's bounds checks (``unchecked_index``), and that launched as a
#: programmatic dependent (``dependent_launch``, a sweep candidate): bit for bit the rounds
#: program's outputs on every case below, as the checked programs are.
SHAPES = [*({"program": "candidates", "tokens": t} for t in (1, 4, 8)),
          {"program": "candidates", "tokens": 1, "unchecked_index": True},
          {"program": "candidates", "tokens": 1, "unchecked_index": True, "dependent_launch": True},
          # the logits program (selection on the logits' keys): plain and as the sweep races it
          {"program": "logits", "tokens": 1}, {"program": "logits", "tokens": 4},
          {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True},
          # with a long program (calls of 1024 tokens and more): four tokens a program below, one plainly from there;
          # and as E=512 registers it, sixteen tokens a program from there as a dependent
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 1, "long_plain": True},
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 16},
          # and as E=256 registers it: one token a program below, 32 (1024-thread blocks) from there, as dependents
          {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 32},
          # both with 4 heads a lane in the long program (``long_heads``), as they are registered since the forty-fifth
          # session
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 16, "long_heads": 4},
          {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 32, "long_heads": 4},
          # fewer heads a lane, refilled from the row: 4 (a candidate), and 2, where most tokens refill some lane
          {"program": "logits", "tokens": 4, "unchecked_index": True, "heads": 4},
          {"program": "logits", "tokens": 1, "heads": 2},
          # the refilling rounds only for a token whose lane ran dry before the last round (``late_refill``): the
          # registered long forms, and 2 heads a lane (most tokens start again)
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 16, "long_heads": 4, "late_refill": True},
          {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 32, "long_heads": 4, "late_refill": True},
          {"program": "logits", "tokens": 1, "heads": 2, "late_refill": True},
          # the rounds' record and pops off the ALU pipe (``lean_rounds``; 16-bit logits only, the cases on float32
          # logits skip): the registered long forms, E=512's with the late refill too
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 16, "long_heads": 4, "lean_rounds": True},
          {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 16, "long_heads": 4, "late_refill": True, "lean_rounds": True},
          {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True, "long_from": 1024,
           "long_tokens": 32, "long_heads": 4, "late_refill": True, "lean_rounds": True}]
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _shape_id(shape: dict) -> str:
    return (f"{shape['program']}-tokens{shape['tokens']}" + ("-unchecked" if shape.get("unchecked_index") else "")
            + ("-dependent" if shape.get("dependent_launch") else "")
            + (f"-long{shape['long_from']}x{shape.get('long_tokens', 0)}" if shape.get("long_from") else "")
            + ("-plain" if shape.get("long_plain") else "") + (f"-heads{shape['heads']}" if shape.get("heads") else "")
            + (f"-longheads{shape['long_heads']}" if shape.get("long_heads") else "")
            + ("-late" if shape.get("late_refill") else "") + ("-lean" if shape.get("lean_rounds") else ""))


def _rounds_of(key: MoETopKRoutingBuildKey) -> MoETopKRoutingBuildKey:
    """The rounds program of ``key``'s row: the reference of every warp program's ids (and, for the candidates
    program, weights)."""
    return dataclasses.replace(key, program="rounds", tokens=0, unchecked_index=False, dependent_launch=False,
                               long_from=0, long_tokens=0, long_plain=False, heads=0, long_heads=0,
                               late_refill=False, lean_rounds=False)


def _spec_rows() -> list:
    """``(label, dtype, T, E, top_k, renormalize, ids dtype)`` of every MoETopKRouting workload row."""
    rows = []
    for row in load_manifest()["MoETopKRoutingFwdOp"].workloads:
        d = row.values
        for dtype in d["dtypes"]:
            rows.append(pytest.param(dtype, d["T"], d["E"], d["top_k"], d.get("renormalize", True),
                                     d.get("ids_dtype", "int64"), id=f"{row.label}[{dtype}]"))
    return rows


def _has_program(shape: dict, dtype: str) -> bool:
    """Whether ``shape`` has a program for ``dtype`` logits (``lean_rounds`` keeps to 16-bit logits)."""
    return not (shape.get("lean_rounds") and dtype == "float32")


def _key(dtype: str, experts: int, top_k: int, renormalize: bool, ids_dtype: str, arch: str,
         **shape) -> MoETopKRoutingBuildKey:
    """The build key of a case; a case whose shape has no program for its logits is skipped."""
    if not _has_program(shape, dtype):
        pytest.skip("lean_rounds keeps to 16-bit logits")
    return MoETopKRoutingBuildKey(dtype, ids_dtype, experts, top_k, renormalize, arch, **shape)


_MODELS = [pytest.param(512, 10, id="E512-k10"), pytest.param(256, 8, id="E256-k8")]
_RENORM = [pytest.param(True, id="renorm"), pytest.param(False, id="no-renorm")]
#: The outsider test's rows: (dtype, E, top_k).
_OUTSIDER = [("float32", 256, 1), ("float32", 256, 4), ("float32", 256, 8), ("bfloat16", 512, 10)]
#: The fast-path test's rows: float32 logits of both model widths (E=512: more keys a lane than heads).
_FAST_PATH = [("float32", 512, 10), ("float32", 256, 8)]


@pytest.fixture(scope="module", autouse=True)
def _prebuilt(cuda_device, request):
    """Every kernel the tests below launch, compiled concurrently before the first one (one at a
    time, some seventy builds outrun the section's slot): the rounds program and the shapes of
    the tests selected (``-k unchecked`` compiles the unchecked shape's only)."""
    from tileops_cuda.kernels._common import compile_many

    arch = cuda_device[1]
    bases = {(p.values[0], p.values[2], p.values[3], p.values[4], p.values[5]) for p in _spec_rows()}
    bases |= {("bfloat16", m.values[0], m.values[1], r, "int64") for m in _MODELS for r in (True, False)}
    bases |= {(d, e, k, r, "int64") for d, e, k in _OUTSIDER for r in (True, False)}
    bases |= {(d, e, k, True, "int64") for d, e, k in _FAST_PATH}
    selected = [item.callspec.params.get("shape") for item in request.session.items if hasattr(item, "callspec")]
    shapes = [{}, *(s for s in SHAPES if s in selected)]
    keys = [MoETopKRoutingBuildKey(d, i, e, k, r, arch, **shape) for d, e, k, r, i in sorted(bases)
            for shape in shapes if _has_program(shape, d)]
    failed = [built for built in compile_many([functools.partial(build_moe_topk_routing, k) for k in keys])
              if isinstance(built, BaseException)]
    assert not failed, failed[0]


def _route(key: MoETopKRoutingBuildKey, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's outputs, written over NaN weights and the most negative id."""
    T, K = logits.shape[0], key.top_k
    ids_dtype = getattr(torch, key.ids_dtype)
    weights = torch.full((T, K), float("nan"), dtype=logits.dtype, device=logits.device)
    ids = torch.full((T, K), torch.iinfo(ids_dtype).min, dtype=ids_dtype, device=logits.device)
    build_moe_topk_routing(key).run(logits, K, key.renormalize, ids_dtype, weights, ids)
    torch.cuda.synchronize()
    return weights, ids


def _assert_bits_of_rounds(key: MoETopKRoutingBuildKey, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``key``'s outputs equal the rounds program's (candidates: bit for bit; logits: the ids exactly, the
    weights of every token whose rounds weights are finite within tolerance of them, the others' bit for
    bit); returns them."""
    weights, ids = _route(key, logits)
    want_weights, want_ids = _route(_rounds_of(key), logits)
    bits = _BITS[logits.dtype]
    differ = weights.view(bits) != want_weights.view(bits)
    if key.program == "logits":
        finite = want_weights.isfinite().all(1)
        close = ((weights.float() - want_weights.float()).abs()
                 <= TOLERANCE[weights.dtype] * want_weights.float().abs().clamp_min(2.0**-126)).all(1)
        differ = (differ & ~finite[:, None]) | (finite & ~close)[:, None]
    rows = (ids != want_ids).any(1) | differ.any(1)
    assert not rows.any(), (f"{key}: {int(rows.sum())} of {logits.shape[0]} tokens differ from rounds, first "
                            f"{rows.nonzero()[:4].flatten().tolist()}")
    return weights, ids


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("dtype,T,E,top_k,renormalize,ids_dtype", _spec_rows())
def test_the_spec_rows_match_rounds_bit_for_bit_and_float64(cuda_device, gen, shape, dtype, T, E, top_k,
                                                            renormalize, ids_dtype):
    key = _key(dtype, E, top_k, renormalize, ids_dtype, cuda_device[1], **shape)
    logits = (2 * torch.randn(T, E, device="cuda", generator=gen)).to(getattr(torch, dtype))
    weights, ids = _assert_bits_of_rounds(key, logits)
    want = REFERENCES["MoETopKRoutingFwdOp"](None, {"router_logits": logits.cpu()},
                                             {"top_k": top_k, "renormalize": renormalize})
    assert torch.equal(ids.cpu().long(), want["topk_ids"])
    err = relative_error(weights.cpu(), want["topk_weights"])
    assert err <= TOLERANCE[weights.dtype], f"{key}: relative error {err:.3g} > {TOLERANCE[weights.dtype]:g}"


@pytest.mark.parametrize("renormalize", _RENORM)
@pytest.mark.parametrize("E,top_k", _MODELS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_long_runs_of_equal_logits_keep_the_lower_ids(cuda_device, gen, shape, E, top_k, renormalize):
    # Integers in [-3, 3]: ~E/7 experts share the largest value, far more than 32 candidates.
    from tileops_cpu_ref.moe import moe_topk_routing

    logits = torch.randint(-3, 4, (1000, E), device="cuda", generator=gen).bfloat16()
    key = _key("bfloat16", E, top_k, renormalize, "int64", cuda_device[1], **shape)
    _, ids = _assert_bits_of_rounds(key, logits)
    assert torch.equal(ids.cpu(), moe_topk_routing(logits.cpu(), top_k, renormalize)[1])


@pytest.mark.parametrize("E,top_k", _MODELS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_a_few_equal_logits_among_the_largest_are_ranked_by_id(cuda_device, gen, shape, E, top_k):
    # Logits on a grid of 1/8: ties among the top_k + 1 largest on most tokens, a few candidates each.
    logits = (torch.randn(4096, E, device="cuda", generator=gen) * 8).round().div(8).bfloat16()
    _assert_bits_of_rounds(_key("bfloat16", E, top_k, True, "int64", cuda_device[1], **shape), logits)


@pytest.mark.parametrize("E,top_k", _MODELS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_a_kth_expert_tied_with_tau_across_lanes_is_ranked_as_rounds_ranks_it(cuda_device, gen, shape, E, top_k):
    # top_k - 1 experts with larger logits, then two or three equal logits (0.5) at the boundary, the rest far
    # below: the (top_k + 1)-th lane maximum (tau) is the k-th expert's e itself, the case whose old bound (the
    # float below tau) divided onto the k-th's probability about every other token; the outsiders' largest e now
    # bounds them. Candidates path or not, the bits are rounds'.
    T = 2048
    logits = torch.rand(T, E, device="cuda", generator=gen) * 6 - 12
    order = torch.rand(T, E, device="cuda", generator=gen).argsort(dim=1)
    logits.scatter_(1, order[:, :top_k - 1], torch.rand(T, top_k - 1, device="cuda", generator=gen) * 3 + 1)
    ties = 2 + (torch.arange(T, device="cuda") % 2)[:, None]  # two or three tied experts a token
    at_boundary = order[:, top_k - 1:top_k + 2]
    logits.scatter_(1, at_boundary, torch.where(torch.arange(3, device="cuda") < ties, 0.5, -6.0))
    _assert_bits_of_rounds(_key("bfloat16", E, top_k, True, "int64", cuda_device[1], **shape), logits.bfloat16())


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_probabilities_underflowed_to_zero_tie_at_the_lower_ids(cuda_device, gen, shape):
    # One or two experts near 100, the rest near -100: every other probability is 0.0 and the
    # top_k is filled by the lowest ids among them.
    E, top_k = 512, 10
    logits = torch.full((257, E), -100.0, device="cuda")
    logits[:, torch.randint(0, E, (2,), device="cuda", generator=gen)] = 100.0
    logits[::2, 7] = 99.0
    _assert_bits_of_rounds(_key("bfloat16", E, top_k, True, "int64", cuda_device[1], **shape), logits.bfloat16())


@pytest.mark.parametrize("renormalize", _RENORM)
@pytest.mark.parametrize("dtype,E,top_k", _OUTSIDER)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_an_outsider_whose_probability_rounds_onto_the_kth_is_not_left_out(cuda_device, gen, shape, dtype, E,
                                                                          top_k, renormalize):
    # top_k + 1 equal largest logits (0) and expert 0 one float below them (-2**-24: e is the float
    # below 1). Only the top_k + 1 are candidates; where the sum (varied by 64 small logits) makes
    # expert 0's probability round onto theirs, it belongs in the top_k by its id and the check must
    # send the token to the rounds selection (about a third of the tokens, by a CPU model).
    T = 1024
    logits = torch.full((T, E), -20.0, device="cuda")
    small = torch.randint(1, E, (T, 64), device="cuda", generator=gen)
    logits.scatter_(1, small, torch.rand(T, 64, device="cuda", generator=gen) * 6 - 12)
    tied = torch.rand(T, E - 1, device="cuda", generator=gen).argsort(dim=1)[:, :top_k + 1] + 1
    logits.scatter_(1, tied, 0.0)
    logits[:, 0] = -(2.0**-24)
    logits = logits.to(getattr(torch, dtype))
    _, ids = _assert_bits_of_rounds(_key(dtype, E, top_k, renormalize, "int64", cuda_device[1], **shape), logits)
    assert bool((ids == 0).any()), "no token had expert 0 in its top_k: the rows test nothing"


@pytest.mark.parametrize("dtype,E,top_k", _FAST_PATH)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s["program"] == "logits"], ids=_shape_id)
def test_the_logits_program_keeps_random_tokens_on_its_fast_path(cuda_device, gen, shape, dtype, E, top_k):
    # The fast path's float32 weights (a butterfly sum, __fdividef) differ from rounds' in the last bits on
    # nearly every token (99% by a CPU model); the fallback gives rounds' bits. A guard that sends every token
    # to the fallback, as the unknown-outsider test did at E=512 until the thirtieth session, shows as none.
    logits = torch.randn(4096, E, device="cuda", generator=gen)
    key = _key(dtype, E, top_k, True, "int64", cuda_device[1], **shape)
    weights, _ = _assert_bits_of_rounds(key, logits)
    want, _ = _route(_rounds_of(key), logits)
    differ = (weights.view(torch.int32) != want.view(torch.int32)).any(1).float().mean().item()
    assert differ > 0.5, f"{key}: only {differ:.1%} of random tokens took the fast path"


def _lane_experts(vw: int, per: int, lane: int) -> list:
    """The experts a lane of the warp programs holds, in its order (vectors of ``vw``; ``_warp_layout``)."""
    return [(r // vw) * 32 * vw + lane * vw + r % vw for r in range(per)]


@pytest.mark.parametrize("E,top_k", [(512, 10), (256, 8)], ids=["E512", "E256"])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s["program"] == "logits"], ids=_shape_id)
def test_a_lane_holding_most_of_the_selection_gives_the_rounds_ids(cuda_device, gen, shape, E, top_k):
    """Tokens whose top_k + 1 lie in one lane's experts (every other token), or half of them: that lane pops
    all its heads and, with ``heads``, refills and pops again (or the token falls back); ids bit for bit
    the rounds program's, weights within tolerance of them."""
    vw, per = 8, E // 32  # bf16: 16-byte vectors of 8 experts, a lane's per experts
    logits = torch.randn(256, E, device="cuda", generator=gen).clamp(max=3.0)
    held = []
    for t in range(256):
        lane = t % 32
        experts = _lane_experts(vw, per, lane)
        count = min(top_k + 1, per) if t % 2 else top_k // 2 + 1
        order = torch.randperm(count, generator=gen, device="cuda").float()
        logits[t, experts[:count]] = 4.0 + 0.25 * order  # distinct in bf16, above every other logit
        held.append(set(experts[:count]))
    _, ids = _assert_bits_of_rounds(_key("bfloat16", E, top_k, True, "int64", cuda_device[1], **shape),
                                    logits.bfloat16())
    chosen = ids.cpu().tolist()
    assert all(len(held[t] & set(chosen[t])) == min(len(held[t]), top_k) for t in range(256))  # as built


@pytest.mark.parametrize("E,top_k", [(512, 10), (256, 8)], ids=["E512", "E256"])
@pytest.mark.parametrize("shape", [s for s in SHAPES if s.get("heads")], ids=_shape_id)
def test_a_lane_whose_last_head_ties_the_kth_logit_keeps_the_token_on_the_fast_path(cuda_device, gen, shape, E,
                                                                                   top_k):
    """``heads``: a lane holding three of the top_k, then a key of the k-th's logit that loses to it on its id,
    then the first outsider (every token). Its last head is not below the k-th's logit, so its heads cannot tell
    the outsider: the lane reads its row again for it, where the token fell back before (forty-fourth session).
    Ids bit for bit the rounds program's; the weights take the fast path's bits (float32 logits: its butterfly
    sum differs from rounds' in the last bits on nearly every token), not the fallback's."""
    vw, per, T = 4, E // 32, 256  # float32: 16-byte vectors of 4 experts
    logits = (torch.randn(T, E, device="cuda", generator=gen) * 0.5 - 2.0).clamp(max=0.0)

    def experts_of(lane: int) -> list:
        return _lane_experts(vw, per, lane)

    for t in range(T):
        lane = t % 32
        mine = experts_of(lane)
        logits[t, mine[:3]] = torch.tensor([6.0, 5.5, 5.0], device="cuda")
        for i in range(top_k - 4):  # the other winners, in other lanes
            logits[t, experts_of((lane + 2 + i) % 32)[0]] = 4.5 - 0.05 * i
        kth = experts_of((lane + 1) % 32)[0]
        assert kth < mine[-1]
        logits[t, kth] = 4.0
        logits[t, mine[-1]] = 4.0  # the k-th's logit at a higher id: below the k-th, the lane's fourth key
        logits[t, mine[3]] = 3.5  # the first outsider, among the lane's keys past its heads
    key = _key("float32", E, top_k, True, "int64", cuda_device[1], **shape)
    weights, ids = _assert_bits_of_rounds(key, logits)
    assert bool((ids == torch.tensor([experts_of((t % 32 + 1) % 32)[0] for t in range(T)],
                                     device="cuda")[:, None]).any(1).all())
    want, _ = _route(_rounds_of(key), logits)
    differ = (weights.view(torch.int32) != want.view(torch.int32)).any(1).float().mean().item()
    assert differ > 0.5, f"{key}: only {differ:.1%} of the tokens took the fast path"


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_non_finite_logits_take_the_rounds_selection_bit_for_bit(cuda_device, gen, shape):
    E, top_k = 256, 8
    logits = torch.randn(64, E, device="cuda", generator=gen)
    logits[0, 5] = float("nan")
    logits[1, 9] = float("inf")
    logits[2] = float("-inf")
    logits[3, :200] = float("-inf")
    _assert_bits_of_rounds(_key("bfloat16", E, top_k, True, "int64", cuda_device[1], **shape), logits.bfloat16())


@pytest.mark.parametrize("program", ["candidates", "logits"])
@pytest.mark.parametrize("unchecked", [False, True], ids=["checked", "unchecked"])
@pytest.mark.parametrize("T", [1, 3, 33, 4099])
def test_a_last_program_with_fewer_tokens_than_warps_writes_only_its_tokens(cuda_device, gen, T, unchecked, program):
    key = _key("bfloat16", 512, 10, True, "int64", cuda_device[1], program=program, tokens=8,
               unchecked_index=unchecked)
    logits = torch.randn(T, 512, device="cuda", generator=gen).bfloat16()
    # Outputs are the first T rows of poisoned buffers 8 rows longer: the rows past T stay poisoned.
    weights = torch.full((T + 8, 10), float("nan"), dtype=torch.bfloat16, device="cuda")
    ids = torch.full((T + 8, 10), -1, dtype=torch.int64, device="cuda")
    build_moe_topk_routing(key).run(logits, 10, True, torch.int64, weights[:T], ids[:T])
    want_weights, want_ids = _route(_rounds_of(key), logits)
    assert torch.equal(ids[:T], want_ids)
    if program == "candidates":
        assert torch.equal(weights[:T].view(torch.int16), want_weights.view(torch.int16))
    else:
        assert relative_error(weights[:T], want_weights) <= TOLERANCE[torch.bfloat16]
    assert weights[T:].isnan().all() and bool((ids[T:] == -1).all())
