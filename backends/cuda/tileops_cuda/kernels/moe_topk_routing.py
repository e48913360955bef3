"""MoE top-k routing as a TileLang kernel: softmax over the experts, the top_k largest
probabilities (ties to the lower expert id), renormalised when asked (``manifest/moe.yaml``).

The first program (``rounds``), per token, in float32: ``p = exp(l - max) / sum(exp(l - max))``;
then top_k rounds, each one max-reduction over a 64-bit key per expert,
``(bits(p) << 32) | (E - 1 - e)``: a probability is never negative, so its float bits order as
integers, and among equal probabilities the key of the lower expert id is larger. A chosen
expert's key becomes -1, below every live one. The chosen probabilities are divided by their
float32 sum (k order) when ``renormalize``, then rounded once to the logits' dtype. A token's
row stays in registers, so the logits are read once and only ``top_k`` weights and ids per token
are written: the bytes floor. One token per program (a warp for E up to 512 in 16-bit logits:
every reduction is a warp shuffle).
Specialised on the logits' dtype, the ids' dtype, E, top_k and renormalize; the token count
is dynamic.

Two programs (the build key's ``program``; ``block_shapes.py`` registers ``"candidates"``, measured 1.4-1.9x
faster on the H200; ``"rounds"`` serves keys it cannot hold and is its bit-for-bit reference):

* ``"rounds"``: the program above, a token per program of one
  warp. top_k + 2 dependent chains of warp shuffles a token, and a float32 division per expert.
* ``"candidates"``: ``tokens`` tokens a program, one warp each, the same layout and float32 math
  (so the same softmax bits), then an exact top-k by a small candidate set. ``tau`` is the
  (top_k + 1)-th largest of the 32 lanes' largest ``e = exp(l - max)`` (one ``redux`` a step);
  the candidates are the experts with ``e >= tau`` (at least top_k + 1 of them, usually a few
  more), compacted into the warp's shared slots, one a lane. Only they are divided by the sum,
  and each ranks itself against the others on the very key of ``"rounds"``. An expert outside
  has ``e`` at most the float below ``tau``, so a probability at most ``q = pred(tau) / sum``
  (division rounds monotonically): when ``q`` is below the k-th candidate's probability no
  outsider can enter the top_k, and the result is the one ``"rounds"`` computes. Otherwise
  (more than 32 candidates, as with long runs of equal logits; distinct ``e`` that round to one
  probability at the boundary; a non-finite sum) the warp runs the ``"rounds"`` selection on
  its registers. Warps sync by ``__syncwarp`` (a token's work never leaves its warp), so the
  block-wide barrier pass is off.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

import dataclasses
from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, annotate_pass_configs, arch_refusal, dependent_launch, dependent_launch_refusal
from ._launcher import RunLauncher, build_run_launcher
from ._row_views import packed

__all__ = ["MoETopKRoutingBuildKey", "build_moe_topk_routing", "moe_topk_routing_refusal",
           "with_fitting_routing_program"]

_DTYPES = ("float16", "bfloat16", "float32")
_ID_DTYPES = ("int32", "int64")
_NAME = "MoETopKRouting TileLang kernel"
_PROGRAMS = ("rounds", "candidates")
#: The candidates program's tokens a program when the key leaves it to the plan (0).
_TOKENS = 4
#: Candidate slots a warp: one a lane, and one more that takes the stores of the other experts.
_SLOTS = 33


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
    #: The candidates program compiled without TileLang's bounds checks (pass config
    #: ``tl.disable_safe_memory_legalize``): every access is in bounds by construction (see
    #: ``_candidates_program``); registered (block_shapes.py: 1.01-1.06x on the H200).
    unchecked_index: bool = False
    #: The candidates program launched as a programmatic dependent of the stream's previous kernel
    #: (``_common.dependent_launch``): its launch and block scheduling overlap that kernel's tail, the
    #: same bits. Hopper only; registered (block_shapes.py: 1.04-1.22x in graphs of back-to-back calls).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: MoETopKRoutingBuildKey) -> tuple[int, int] | None:
    """``(threads, padded E)`` of a program holding one token: the fewest threads (a warp where E
    allows) that keep at most 16 experts per thread (a float32 value and a 64-bit key each), so
    the top_k + 2 reductions are warp shuffles; None past 256 threads."""
    vec = _vec(key.dtype)
    for threads in (32, 64, 128, 256):
        unit = threads * vec
        padded = -(-key.experts // unit) * unit
        if padded // threads <= 16:
            return threads, padded
    return None


def moe_topk_routing_refusal(key: MoETopKRoutingBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"{_NAME}: logits dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.ids_dtype not in _ID_DTYPES:
        return f"{_NAME}: ids dtype {key.ids_dtype} is not one of {_ID_DTYPES}; use the reference"
    if not 1 <= key.top_k <= min(key.experts, 64):
        return f"{_NAME}: top_k={key.top_k} must lie in [1, min(E, 64)] (one reduction per choice); use the reference"
    if _plan(key) is None:
        return (f"{_NAME}: E={key.experts} does not fit the registers of one program (at most 16 experts per "
                "thread, 256 threads); use the reference")
    if key.program not in _PROGRAMS:
        return f"{_NAME}: program={key.program!r} is not one of {_PROGRAMS}"
    for field in ("unchecked_index", "dependent_launch"):
        if getattr(key, field) and key.program != "candidates":
            return f"{_NAME}: {field} is a field of the candidates program (program={key.program!r}); drop it"
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
    if key.program == "candidates":
        why = _candidates_misfit(key)
        if why:
            return f"{_NAME}: the candidates program {why}; use program='rounds'"
    return arch_refusal(_NAME, key.arch)


def _candidates_misfit(key: MoETopKRoutingBuildKey) -> str | None:
    """Why the candidates program has no block for ``key`` (its plan given), or None."""
    plan = _plan(key)
    if plan is not None and plan[0] != 32:
        return f"holds a token in one warp (E={key.experts} in {key.dtype} takes {plan[0]} threads)"
    if key.top_k + 1 > 32:
        return f"ranks top_k + 1 <= 32 lanes (top_k={key.top_k})"
    if not 0 <= key.tokens <= 32:
        return f"takes 0-32 tokens a program (tokens={key.tokens})"
    return None


def with_fitting_routing_program(key: MoETopKRoutingBuildKey) -> MoETopKRoutingBuildKey:
    """``key`` itself, or with the ``rounds`` program where ``candidates`` has no block for it (the
    registered kernel's rule: never a refusal that the other program could serve), without the
    candidates program's fields (a ``rounds`` key with ``dependent_launch`` was refused into the CPU
    reference until 2026-12-04e)."""
    if key.program == "candidates" and _plan(key) is not None and _candidates_misfit(key):
        return dataclasses.replace(key, program="rounds", tokens=0, unchecked_index=False, dependent_launch=False)
    return key


def _sum_in_order(terms: list) -> Any:
    """``((t0 + t1) + t2) + ...``: the chosen probabilities summed in k order, one expression."""
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _program(key: MoETopKRoutingBuildKey):
    return _candidates_program(key) if key.program == "candidates" else _rounds_program(key)


def _rounds_program(key: MoETopKRoutingBuildKey):
    import tilelang.language as T

    E, K, dt, idt, f32, i64 = key.experts, key.top_k, key.dtype, key.ids_dtype, "float32", "int64"
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, EP = plan
    BM = 1
    M = T.dynamic("M")

    @T.prim_func
    def moe_topk_routing(router_logits: T.Tensor((M, E), dt), topk_weights: T.Tensor((M, K), dt),
                         topk_ids: T.Tensor((M, K), idt)):
        with T.Kernel(T.ceildiv(M, BM), threads=threads) as bx:
            prob = T.alloc_fragment((BM, EP), f32)
            keys = T.alloc_fragment((BM, EP), i64)
            top = T.alloc_fragment((BM,), f32)
            total = T.alloc_fragment((BM,), f32)
            best = T.alloc_fragment((BM,), i64)
            chosen_p = T.alloc_shared((BM, K), f32)
            chosen_id = T.alloc_shared((BM, K), "int32")
            # Experts past E (padding to whole vectors per thread) read as -inf: exp gives 0.
            for i, j in T.Parallel(BM, EP):
                prob[i, j] = T.if_then_else(j < E, T.cast(router_logits[bx * BM + i, j], f32), -T.infinity(f32))
            T.reduce_max(prob, top, dim=1)
            for i, j in T.Parallel(BM, EP):
                prob[i, j] = T.exp(prob[i, j] - top[i])
            T.reduce_sum(prob, total, dim=1)
            for i, j in T.Parallel(BM, EP):
                keys[i, j] = T.if_then_else(
                    j < E,
                    T.shift_left(T.cast(T.reinterpret("int32", prob[i, j] / total[i]), i64), T.int64(32))
                    | T.cast(E - 1 - j, i64),
                    T.int64(-1))
            for k in range(K):  # unrolled: top_k is part of the build
                T.reduce_max(keys, best, dim=1)
                for i in T.Parallel(BM):
                    chosen_p[i, k] = T.reinterpret(f32, T.cast(T.shift_right(best[i], T.int64(32)), "int32"))
                    chosen_id[i, k] = T.cast(E - 1 - (best[i] & T.int64(0xFFFFFFFF)), "int32")
                if k + 1 < K:
                    for i, j in T.Parallel(BM, EP):
                        keys[i, j] = T.if_then_else(keys[i, j] == best[i], T.int64(-1), keys[i, j])
            for i in T.Parallel(BM):
                total[i] = _sum_in_order([chosen_p[i, k] for k in range(K)])
            for i, k in T.Parallel(BM, K):
                if bx * BM + i < M:
                    if key.renormalize:
                        topk_weights[bx * BM + i, k] = T.cast(chosen_p[i, k] / total[i], dt)
                    else:
                        topk_weights[bx * BM + i, k] = T.cast(chosen_p[i, k], dt)
                    topk_ids[bx * BM + i, k] = T.cast(chosen_id[i, k], idt)

    return moe_topk_routing


def _candidates_program(key: MoETopKRoutingBuildKey):
    """The ``candidates`` program (module docstring): warp ``w`` of program ``bx`` holds token
    ``bx * TOK + w`` (a warp past the rows repeats the last token and stores nothing), lane ``t``
    the experts ``i * 32 * vw + t * vw + j`` as "rounds" lays them, so every float32 step below is
    the one "rounds" takes, in its order. ``vw`` is the vector TileLang's layout gave "rounds": the
    16-byte vector, or the largest power of two dividing E below it (E=12 in bf16: 4), so that the
    ``expert < E`` mask is uniform across a vector.

    Bounds (why ``unchecked_index`` may drop TileLang's checks): the launcher launches nothing for
    M = 0, so ``tok = min(bx * TOK + w, M - 1)`` is a row in ``[0, M)`` for every warp; a logit is
    read only where its expert is below E (the program's own mask); outputs are written at
    ``[tok, lane]`` with ``lane < K``. Shared slots: a candidate's slot is its exclusive-scan
    position, below the count ``N <= 32`` (the branch's condition), every other expert's store
    goes to slot 32; ranks and chosen slots are read at ``lane < N`` and written at rank < K. The
    logits' values (NaN, infinities) choose paths, never indices."""
    import tilelang.language as T

    E, K, dt, idt, f32, i32, i64 = key.experts, key.top_k, key.dtype, key.ids_dtype, "float32", "int32", "int64"
    plan = _plan(key)
    assert plan is not None and not _candidates_misfit(key)  # the refusal turned the others away
    vw = min(_vec(dt), E & -E)
    PER = plan[1] // 32  # values a lane
    NV = PER // vw  # vectors a lane
    TOK = key.tokens or _TOKENS
    K1 = K + 1
    PADDED = plan[1] != E  # lanes hold experts past E (-inf logits: exp gives 0)
    OUT = 2 * _SLOTS  # the chosen top_k's slots
    M = T.dynamic("M")

    def expert(r, lane):
        return (r // vw) * 32 * vw + lane * vw + r % vw

    @T.prim_func
    def moe_topk_routing(router_logits: T.Tensor((M, E), dt), topk_weights: T.Tensor((M, K), dt),
                         topk_ids: T.Tensor((M, K), idt)):
        # A token's work never leaves its warp: __syncwarp where its lanes meet in shared memory, and
        # no block-wide barrier (warps take different branches below).
        annotate_pass_configs(key.unchecked_index, {"tl.disable_thread_storage_sync": True})
        with T.Kernel(T.ceildiv(M, TOK), threads=32 * TOK) as bx:
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            ev = T.alloc_local((PER,), f32)
            keys = T.alloc_local((PER,), i64)  # the rounds selection (the fallback)
            fv = T.alloc_local((5,), f32)  # top, lane sum / total, the lane's candidate's p, the k-th p, renorm sum
            iv = T.alloc_local((8,), i32)  # h, tau, count, lane count, position, N, rank, path (1: candidates)
            kv = T.alloc_local((2,), i64)  # the lane's candidate key, the round's best
            # A warp's slots, one buffer so that no two of them share memory: the candidates' e bits
            # [0, 33) and ids [33, 66) (slot 32 of each takes the other experts' stores: no branch),
            # then the chosen probabilities' bits [66, 66 + K) and ids [66 + K, 66 + 2K).
            slots = T.alloc_shared((TOK, OUT + 2 * K), i32)
            w = tid // 32
            lane = tid % 32
            tok = T.min(bx * TOK + w, M - 1)
            # 1. The row, every load first (vw-wide vectors: 16 bytes on the model rows); then softmax
            #    as "rounds" computes it.
            for i in T.unroll(NV):
                for j in T.vectorized(vw):
                    ev[i * vw + j] = T.if_then_else(
                        i * 32 * vw + lane * vw + j < E,
                        T.cast(router_logits[tok, i * 32 * vw + lane * vw + j], f32), -T.infinity(f32))
            fv[0] = -T.infinity(f32)
            for r in T.unroll(PER):
                fv[0] = T.max(fv[0], ev[r])
            fv[0] = T.warp_reduce_max(fv[0])
            for r in T.unroll(PER):
                ev[r] = T.exp(ev[r] - fv[0])
            fv[1] = T.float32(0)
            for rv in T.unroll(PER):  # "rounds"' order: a lane's vectors interleaved, then the butterfly
                fv[1] = fv[1] + ev[(rv % NV) * vw + rv // NV]
            fv[1] = T.warp_reduce_sum(fv[1])
            # 2. tau: the (top_k + 1)-th largest lane maximum of e (float bits order as integers:
            #    e >= 0); 0 (every expert) where fewer lanes hold experts.
            iv[0] = -1
            for r in T.unroll(PER):
                if not PADDED or expert(r, lane) < E:
                    iv[0] = T.max(iv[0], T.reinterpret(i32, ev[r]))
            iv[1] = 0
            iv[2] = 0
            for _ in T.unroll(K1):
                iv[4] = T.warp_reduce_max(iv[0])
                if iv[2] < K1:
                    iv[1] = T.max(iv[4], 0)
                iv[2] = iv[2] + T.cast(T.popcount(T.ballot_sync(iv[0] == iv[4])), i32)
                iv[0] = T.if_then_else(iv[0] == iv[4], -1, iv[0])
            # 3. The candidates (e >= tau) and each lane's first slot: an inclusive scan of the counts.
            iv[3] = 0
            for r in T.unroll(PER):
                if not PADDED or expert(r, lane) < E:
                    iv[3] = iv[3] + T.if_then_else(T.reinterpret(i32, ev[r]) >= iv[1], 1, 0)
            iv[4] = iv[3]
            for o in T.unroll(5):
                iv[5] = T.shfl_up(iv[4], 1 << o)
                if lane >= (1 << o):
                    iv[4] = iv[4] + iv[5]
            iv[5] = T.shfl_sync(iv[4], 31)
            iv[4] = iv[4] - iv[3]
            iv[7] = 0
            if fv[1] <= T.float32(E) and iv[5] <= 32:  # a finite sum; at most 32 candidates, one a lane
                for r in T.unroll(PER):
                    if not PADDED or expert(r, lane) < E:
                        iv[6] = T.if_then_else(T.reinterpret(i32, ev[r]) >= iv[1], iv[4], _SLOTS - 1)
                        slots[w, iv[6]] = T.reinterpret(i32, ev[r])
                        slots[w, _SLOTS + iv[6]] = expert(r, lane)
                        iv[4] = iv[4] + T.if_then_else(T.reinterpret(i32, ev[r]) >= iv[1], 1, 0)
                T.sync_warp()
                # 4. Each candidate's probability and "rounds"' key; its rank among the candidates.
                kv[0] = T.int64(-1)
                fv[2] = T.float32(0)
                if lane < iv[5]:
                    fv[2] = T.reinterpret(f32, slots[w, lane]) / fv[1]
                    kv[0] = (T.shift_left(T.cast(T.reinterpret(i32, fv[2]), i64), T.int64(32))
                             | T.cast(E - 1 - slots[w, _SLOTS + lane], i64))
                iv[6] = 0
                for j in T.serial(iv[5]):
                    iv[6] = iv[6] + T.if_then_else(T.shfl_sync(kv[0], j) > kv[0], 1, 0)
                # 5. Exact when every expert outside (e <= the float below tau) has a probability
                #    below the k-th candidate's: division rounds monotonically.
                fv[3] = T.shfl_sync(fv[2], T.cast(T.popcount(
                    T.ballot_sync(lane < iv[5] and iv[6] == K - 1) - T.uint64(1)), i32))
                if iv[1] == 0 or T.reinterpret(f32, iv[1] - 1) / fv[1] < fv[3]:
                    iv[7] = 1
                    if lane < iv[5] and iv[6] < K:
                        slots[w, OUT + iv[6]] = T.reinterpret(i32, fv[2])
                        slots[w, OUT + K + iv[6]] = slots[w, _SLOTS + lane]
            if iv[7] == 0:
                # The rounds selection on the warp's registers (same keys, same order).
                for r in T.unroll(PER):
                    keys[r] = T.if_then_else(
                        expert(r, lane) < E,
                        T.shift_left(T.cast(T.reinterpret(i32, ev[r] / fv[1]), i64), T.int64(32))
                        | T.cast(E - 1 - expert(r, lane), i64),
                        T.int64(-1))
                for k in T.serial(K):  # rolled, as "rounds" runs it: the fallback is rare
                    kv[1] = T.int64(-1)
                    for r in T.unroll(PER):
                        kv[1] = T.max(kv[1], keys[r])
                    kv[1] = T.warp_reduce_max(kv[1])
                    if lane == 0:
                        slots[w, OUT + k] = T.cast(T.shift_right(kv[1], T.int64(32)), i32)
                        slots[w, OUT + K + k] = T.cast(E - 1 - (kv[1] & T.int64(0xFFFFFFFF)), i32)
                    for r in T.unroll(PER):
                        keys[r] = T.if_then_else(keys[r] == kv[1], T.int64(-1), keys[r])
            T.sync_warp()
            # 6. Renormalised in k order as "rounds" sums, rounded once; a lane an output.
            fv[4] = _sum_in_order([T.reinterpret(f32, slots[w, OUT + k]) for k in range(K)])
            if lane < K and bx * TOK + w < M:
                fv[2] = T.reinterpret(f32, slots[w, OUT + lane])
                topk_weights[tok, lane] = T.cast(fv[2] / fv[4] if key.renormalize else fv[2], dt)
                topk_ids[tok, lane] = T.cast(slots[w, OUT + K + lane], idt)

    return moe_topk_routing


def _make_run(key: MoETopKRoutingBuildKey, fn: Any) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``)."""
    import torch

    K = key.top_k

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
            fn(router_logits, topk_weights, topk_ids)
        return topk_weights, topk_ids

    return moe_topk_routing


def build_moe_topk_routing(key: MoETopKRoutingBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("moe_topk_routing", key, moe_topk_routing_refusal, _program, _make_run)
