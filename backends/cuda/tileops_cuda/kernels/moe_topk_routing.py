"""MoE top-k routing as a TileLang kernel: softmax over the experts, the top_k largest
probabilities (ties to the lower expert id), renormalised when asked (``manifest/moe.yaml``).

One token a warp-sized program at the model rows; three programs (the build key's ``program``:
``"rounds"``, ``"candidates"``, ``"logits"``), whose selection, bounds and the proof that the fast ones keep
``rounds``' ids are :mod:`tileops_cuda.kernels.moe_topk_routing_program`'s. ``block_shapes.py`` registers
``"logits"``, measured 1.2-1.4x faster than ``"candidates"`` on an H100 and that 1.4-1.9x faster than
``"rounds"`` on the H200; ``"rounds"`` serves keys the warp programs cannot hold.
Specialised on the logits' dtype, the ids' dtype, E, top_k and renormalize; the token count
is dynamic. A key may carry a second program for long calls (``long_from``), which the launcher
(:class:`ByTokenCount`) runs by the call's token count.
"""

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from ._common import arch_refusal, cached_build, compile_many, dependent_launch_refusal
from ._launcher import RunLauncher, build_run_launcher
from ._row_views import packed
from .moe_topk_routing_program import candidates_misfit, routing_plan, routing_program

__all__ = ["ByTokenCount", "MoETopKRoutingBuildKey", "build_moe_topk_routing", "long_program_key",
           "moe_topk_routing_refusal", "with_fitting_routing_program"]

_DTYPES = ("float16", "bfloat16", "float32")
_ID_DTYPES = ("int32", "int64")
_NAME = "MoETopKRouting TileLang kernel"
_PROGRAMS = ("rounds", "candidates", "logits")
#: The programs of a warp a token (``tokens`` a program): their fields, their one misfit rule.
_WARP_PROGRAMS = ("candidates", "logits")


@dataclass(frozen=True)
class MoETopKRoutingBuildKey:
    """Build identity: logits dtype (= weights dtype), ids dtype, experts, top_k, renormalize;
    then the block shape: the program and, for ``candidates``, tokens a program (0: 4)."""

    dtype: str
    ids_dtype: str
    experts: int
    top_k: int
    renormalize: bool = True
    arch: str = "sm_90"
    program: str = "rounds"
    tokens: int = 0
    #: A warp program compiled without TileLang's bounds checks (pass config
    #: ``tl.disable_safe_memory_legalize``): every access is in bounds by construction (see
    #: ``moe_topk_routing_program``'s ``_candidates_program`` and ``_logits_program``); registered (block_shapes.py: the candidates program
    #: 1.01-1.06x on the H200, the logits program a tie).
    unchecked_index: bool = False
    #: A warp program launched as a programmatic dependent of the stream's previous kernel
    #: (``_common.dependent_launch``): its launch and block scheduling overlap that kernel's tail, the
    #: same bits. Hopper only; registered (block_shapes.py: 1.04-1.37x in graphs of back-to-back calls,
    #: but 0.85x for the logits program at Qwen3.5's 4k row).
    dependent_launch: bool = False
    #: A second program for long calls: a call of at least ``long_from`` tokens (0: none) runs this key's
    #: program at ``long_tokens`` tokens a program (0: ``tokens``), launched plainly where ``long_plain``; the
    #: same bits (the ids and weights a token gets do not depend on its program's width or launch). The
    #: launcher picks by the call's token count, which a build key (shapes only) cannot: one wave of 4k one-warp
    #: programs ran Qwen3.5's row 0.8-1.0 µs faster launched plainly (H200, thirty-ninth session, twice) while
    #: the 64-token rows gain as dependents, and 4 tokens a program won the 64-token rows (thirty-second and
    #: thirty-third sessions) where one token a program won Qwen3-Next's 4k row (thirty-third).
    long_from: int = 0
    long_tokens: int = 0
    long_plain: bool = False
    #: The logits program's heads a lane (0: 8, and a token whose lane holds more of its selection than 8 runs
    #: the rounds selection). 2 or 4: a lane that pops its last head refills it from its row, so that no token
    #: falls back for it; the heads network and each round's shift shrink with the heads (the fast path ~14%
    #: fewer static instructions at E=512 top-10 with 4). The same ids and weights. On an H100 (forty-fourth
    #: session) 4 heads won Qwen3.5's 4k row by 0.2 us on three seeds and lost 1.1-1.2 us on a fourth (a tie at
    #: the k-th logit sent a token to the rounds selection: since, the lane reads its row again), and lost
    #: Qwen3-Next's by 2.3-3.3 us, where the program held 2592 static SASS instructions (a refill copy a round;
    #: 1504 since the rounds that refill are one loop). With both changes (forty-fifth session) 4 heads won both
    #: 4k rows and lost both 64-token rows: :attr:`long_heads`.
    heads: int = 0
    #: The long program's heads a lane (0: :attr:`heads`). A one-wave 64-token call waits for its slowest warp,
    #: and a lane refilling its heads is one more row read on that path: with 4 heads the 64-token rows lost
    #: 0.07-0.47 us on an H100 (forty-fifth session, s45a1 and s45b1 route_sweep.json) where the 4k rows gained
    #: 0.1-0.2 us (many warps an SM hide a refill).
    long_heads: int = 0
    #: With fewer heads a lane (``heads`` / ``long_heads``): the top_k rounds but the last run unrolled with no
    #: refill vote, and a token whose lane ran dry before the last round starts again with the refilling rounds.
    #: Why: the refilling rounds are one rolled loop with a vote a round (about 20 instructions a round at E=512
    #: top-10 against 8 unrolled), and routing's 4k rows are issue-bound (447 warp instructions a token, s51d);
    #: a lane pops 4 heads within 9 rounds for about one token in a few hundred. The same ids and weights.
    late_refill: bool = False
    #: The logits program's rounds with less work on the ALU pipe (16-bit logits): each round's maximum stored to
    #: a shared slot by the whole warp (lane r reads slot r after the rounds) in place of a compare and a select
    #: a lane and round, and the winning lane's heads shifted by integer multiply-adds on the FMA pipe (``mad``:
    #: head + won x (next - head)) in place of a select a head. Why: on sm_90 the ALU pipe takes a warp instruction
    #: every other cycle, and Qwen3-Next's 4k row keeps it the busiest pipe (35.3% against 23.5% of issue slots,
    #: s42c; 293 of the fast path's 444 instructions a token): 255 of 499 at E=512 top-10 with 4 heads (sm_90a
    #: SASS), the rest mostly on the FMA pipe. The same ids and weights.
    lean_rounds: bool = False


def _without_long(key: MoETopKRoutingBuildKey, **changes: Any) -> MoETopKRoutingBuildKey:
    """``key`` with ``changes`` and no long program (``MoETopKRoutingBuildKey.long_from``); ``late_refill`` only
    where the program keeps fewer heads a lane (it orders no rounds of the 8-head program)."""
    short = dataclasses.replace(key, long_from=0, long_tokens=0, long_plain=False, long_heads=0, **changes)
    return short if short.heads else dataclasses.replace(short, late_refill=False)


def long_program_key(key: MoETopKRoutingBuildKey) -> MoETopKRoutingBuildKey | None:
    """The key of the program a call of at least ``key.long_from`` tokens runs, or None where every call
    runs ``key``'s."""
    if not key.long_from:
        return None
    return _without_long(key, tokens=key.long_tokens or key.tokens, heads=key.long_heads or key.heads,
                         dependent_launch=key.dependent_launch and not key.long_plain)


def moe_topk_routing_refusal(key: MoETopKRoutingBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"{_NAME}: logits dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.ids_dtype not in _ID_DTYPES:
        return f"{_NAME}: ids dtype {key.ids_dtype} is not one of {_ID_DTYPES}; use the reference"
    if not 1 <= key.top_k <= min(key.experts, 64):
        return f"{_NAME}: top_k={key.top_k} must lie in [1, min(E, 64)] (one reduction per choice); use the reference"
    if routing_plan(key) is None:
        return (f"{_NAME}: E={key.experts} does not fit the registers of one program (at most 16 experts per "
                "thread, 256 threads); use the reference")
    if key.program not in _PROGRAMS:
        return f"{_NAME}: program={key.program!r} is not one of {_PROGRAMS}"
    for field in ("unchecked_index", "dependent_launch"):
        if getattr(key, field) and key.program not in _WARP_PROGRAMS:
            return (f"{_NAME}: {field} is a field of the candidates and logits programs (program={key.program!r}); "
                    "drop it")
    if key.long_from < 0 or (not key.long_from and (key.long_tokens or key.long_plain)):
        return (f"{_NAME}: long_from={key.long_from} must be a token count (0: no long program) and set where "
                f"long_tokens={key.long_tokens} or long_plain={key.long_plain} is; set it or drop them")
    if key.long_from and key.program not in _WARP_PROGRAMS:
        return (f"{_NAME}: long_from is a field of the candidates and logits programs (program={key.program!r}); "
                "drop it")
    if key.heads not in (0, 2, 4, 8) or (key.heads and key.program != "logits"):
        return (f"{_NAME}: heads={key.heads} is 2, 4 or 8 heads a lane of the logits program (0: its default); "
                "drop it")
    if key.long_heads not in (0, 2, 4, 8) or (key.long_heads and (key.program != "logits" or not key.long_from)):
        return (f"{_NAME}: long_heads={key.long_heads} is 2, 4 or 8 heads a lane of the logits program's long "
                "program (0: heads; set where long_from is); drop it")
    if key.lean_rounds and (key.program != "logits" or key.dtype == "float32"):
        return (f"{_NAME}: lean_rounds is a field of the logits program on 16-bit logits (program={key.program!r}, "
                f"dtype={key.dtype}: 32-bit keys); drop it")
    if key.late_refill and not (key.heads or key.long_heads):
        return (f"{_NAME}: late_refill reorders the rounds of a logits program with fewer heads a lane (heads or "
                "long_heads 2 or 4); set one or drop it")
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
    if key.program in _WARP_PROGRAMS:
        why = candidates_misfit(key)
        if why:
            return f"{_NAME}: the {key.program} program {why}; use program='rounds'"
    long = long_program_key(key)
    why = candidates_misfit(long) if long is not None else None
    if why:
        return f"{_NAME}: the long program (long_tokens={key.long_tokens}) {why}"
    return arch_refusal(_NAME, key.arch)


def with_fitting_routing_program(key: MoETopKRoutingBuildKey) -> MoETopKRoutingBuildKey:
    """``key`` itself, or with the ``rounds`` program where ``candidates`` has no block for it (the
    registered kernel's rule: never a refusal that the other program could serve), without the
    candidates program's fields (a ``rounds`` key with ``dependent_launch`` was refused into the CPU
    reference until 2026-12-04e)."""
    if key.program in _WARP_PROGRAMS and routing_plan(key) is not None and candidates_misfit(key):
        return _without_long(key, program="rounds", tokens=0, unchecked_index=False, dependent_launch=False,
                             heads=0, lean_rounds=False)
    return key


def _make_run(key: MoETopKRoutingBuildKey, fn: Any, long_fn: Any = None) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``); ``long_fn``,
    where given, serves calls of at least ``key.long_from`` tokens."""
    import torch

    K = key.top_k
    most = key.long_from if long_fn is not None else None

    def moe_topk_routing(router_logits: Any, top_k: int, renormalize: bool, ids_dtype: Any,
                         topk_weights: Any = None, topk_ids: Any = None) -> Any:
        T = router_logits.shape[0]
        if topk_weights is None:
            topk_weights = torch.empty((T, K), dtype=router_logits.dtype, device=router_logits.device)
        if topk_ids is None:
            topk_ids = torch.empty((T, K), dtype=ids_dtype, device=router_logits.device)
        if T:
            if not router_logits.is_contiguous() or router_logits.data_ptr() % 16:
                router_logits = packed(router_logits)  # (read in 16-byte vectors)
            (long_fn if most is not None and T >= most else fn)(router_logits, topk_weights, topk_ids)
        return topk_weights, topk_ids

    return moe_topk_routing


class ByTokenCount:
    """The launcher of a key with a long program (``MoETopKRoutingBuildKey.long_from``): ``run`` launches
    ``long``'s compiled function for a call of at least ``long_from`` tokens and ``short``'s for the others,
    the choice made in the one launch function: 0.03 us a call on the CPU machine, where a frame of its own
    in front of two launch functions cost 0.30."""

    __slots__ = ("key", "short", "long", "run")

    def __init__(self, key: MoETopKRoutingBuildKey, short: RunLauncher, long: RunLauncher) -> None:
        self.key, self.short, self.long = key, short, long
        self.run = _make_run(key, short.fn, long.fn)


def build_moe_topk_routing(key: MoETopKRoutingBuildKey) -> RunLauncher | ByTokenCount:
    """Compile once per process and return the launcher (with a long program, both compiled concurrently);
    ValueError with the refusal reason."""
    long = long_program_key(key)
    if long is None:
        return build_run_launcher("moe_topk_routing", key, moe_topk_routing_refusal, routing_program, _make_run)
    reason = moe_topk_routing_refusal(key)
    if reason is not None:
        raise ValueError(reason)
    short = _without_long(key)

    def make() -> ByTokenCount:
        built = compile_many([functools.partial(build_moe_topk_routing, k) for k in (short, long)])
        failed = [b for b in built if isinstance(b, BaseException)]
        if failed:
            raise failed[0]
        return ByTokenCount(key, *built)

    return cached_build(("moe_topk_routing", key), make)
