"""The MoE top-k routing kernel's three TileLang programs, and the layout they share.

Host-side decisions (the build key, refusals, the launcher) live in
:mod:`tileops_cuda.kernels.moe_topk_routing`; semantics are ``manifest/moe.yaml``'s (the reference is
``tileops_cpu_ref.moe``).

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

Three programs (the build key's ``program``; ``block_shapes.py`` registers ``"logits"``, measured 1.2-1.4x
faster than ``"candidates"`` on an H100 and that 1.4-1.9x faster than ``"rounds"`` on the H200; ``"rounds"``
serves keys the warp programs cannot hold and is their reference: ids and, for ``"candidates"``, weights bit for bit):

* ``"rounds"``: the program above, a token per program of one
  warp. top_k + 2 dependent chains of warp shuffles a token, and a float32 division per expert.
* ``"candidates"``: ``tokens`` tokens a program, one warp each, the same layout and float32 math
  (so the same softmax bits), then an exact top-k by a small candidate set. ``tau`` is the
  (top_k + 1)-th largest of the 32 lanes' largest ``e = exp(l - max)`` (one ``redux`` a step);
  the candidates are the experts with ``e >= tau`` (at least top_k + 1 of them, usually a few
  more), compacted into the warp's shared slots, one a lane. Only they are divided by the sum,
  and each ranks itself against the others on the very key of ``"rounds"``. An expert outside
  has ``e`` at most ``o``, the largest ``e`` below ``tau`` (one more warp max), so a probability at
  most ``q = o / sum`` (division rounds monotonically): when ``q`` is below the k-th candidate's
  probability no outsider can enter the top_k, and the result is the one ``"rounds"`` computes.
  Otherwise (more than 32 candidates, as with long runs of equal logits; distinct ``e`` that round
  to one probability at the boundary; a non-finite sum) the warp runs the ``"rounds"`` selection on
  its registers. (The bound was ``pred(tau) / sum`` until the thirtieth session: with 16-bit logits
  the k-th expert often ties ``tau`` exactly, two lanes holding one logit, and the float below
  ``tau`` then divides to the k-th's probability about every other time; about one token of 64 fell
  back, and a 64-token call, one wave, took its fallback warp's 5.3 us instead of 2.3.) Warps sync
  by ``__syncwarp`` (a token's work never leaves its warp), so the block-wide barrier pass is off.
* ``"logits"`` (registered since the thirty-first session: ``block_shapes``): the candidates program's
  warps, rows and layout, selecting on the logits (softmax is monotonic) and taking ``expf`` of the top_k + 1
  only. Each logit becomes a unique integer key (its bits with the negatives' magnitude flipped, then
  ``E - 1 - expert``; int64 for float32 logits), a fixed max/min network leaves each lane's 8 largest
  sorted (``_HEADS``), and top_k rounds of one ``redux.sync`` each pop the warp's largest head. Then the first
  outsider of another logit than the k-th (``B``), ``e = expf(l - max)`` of the top_k and ``B``, and
  weights ``e / sum(top_k e)`` (``renormalize``; a butterfly sum, not k order) or ``e / sum(all e)``:
  within tolerance of ``rounds``' weights, not its bits. Its ids are ``rounds``' exactly: the warp
  keeps this result only when (a) the row is finite (largest key finite, no NaN key anywhere), (b) no
  lane held more of the selection than its heads, and (c) for each adjacent pair of the top_k
  (and the k-th against ``B``) of different logits, ``e_hi >= 2**-100`` and
  ``e_hi > e_lo * (1 + 2**-18)``. Why (c) suffices: ``rounds`` orders by ``p = e / S``, ``S`` in
  [1, E]; both programs' ``expf`` lie within 2 ulp of exp at the same ``fl(l - max)`` (rounding is
  monotonic), so ``e_hi`` exceeds any ``e`` at a logit at most ``e_lo``'s by more than 2**-21
  relatively; quotients that far apart round to distinct normal floats (``e_hi / S >= 2**-110``), so
  every expert outside, or below, keeps a smaller probability and equal logits keep equal ones
  (ordered by id in both). Otherwise (ties of -0 and +0, underflow, logits a few ulp apart,
  non-finite rows) the warp runs ``rounds``' selection on the reloaded row, bit for bit ``rounds``.
  Fast path, static SASS for sm_90a: ~450 instructions at E=512 top-10 bf16, ~300 at E=256 top-8
  (the candidates program ~650). With ``heads`` (2 or 4 heads a lane, a candidate): a lane that pops its
  last head refills its heads from its row, below the key it popped, so a token never falls back for it.

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from typing import TYPE_CHECKING, Any

from ._common import ELEM_BYTES, annotate_pass_configs, dependent_launch, programs_at_registers

if TYPE_CHECKING:
    from .moe_topk_routing import MoETopKRoutingBuildKey

__all__ = ["candidates_misfit", "routing_plan", "routing_program"]

#: The candidates program's tokens a program when the key leaves it to the plan (0).
_TOKENS = 4
#: Candidate slots a warp: one a lane, and one more that takes the stores of the other experts.
_SLOTS = 33


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def routing_plan(key: "MoETopKRoutingBuildKey") -> tuple[int, int] | None:
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


def candidates_misfit(key: "MoETopKRoutingBuildKey") -> str | None:
    """Why the candidates program has no block for ``key`` (its plan given), or None."""
    plan = routing_plan(key)
    if plan is not None and plan[0] != 32:
        return f"holds a token in one warp (E={key.experts} in {key.dtype} takes {plan[0]} threads)"
    if key.top_k + 1 > 32:
        return f"ranks top_k + 1 <= 32 lanes (top_k={key.top_k})"
    if not 0 <= key.tokens <= 32:
        return f"takes 0-32 tokens a program (tokens={key.tokens})"
    return None


def _warp_layout(key: "MoETopKRoutingBuildKey") -> tuple[int, int, int, int, bool, Any]:
    """How the candidates and logits programs lay a token on a warp, as ``rounds`` does: ``(vw, PER, NV, TOK,
    PADDED, expert)``. ``vw`` is the vector TileLang's layout gave ``rounds`` (the 16-byte vector, or the largest
    power of two dividing E below it, so that the ``expert < E`` mask is uniform across a vector), ``PER`` the
    values a lane holds in ``NV`` vectors, ``TOK`` the tokens (warps) a program, ``PADDED`` whether lanes hold
    experts past E, and ``expert(r, lane)`` the expert of a lane's ``r``-th value."""
    plan = routing_plan(key)
    assert plan is not None and not candidates_misfit(key)  # the refusal turned the others away
    vw = min(_vec(key.dtype), key.experts & -key.experts)
    per = plan[1] // 32

    def expert(r: Any, lane: Any) -> Any:
        return (r // vw) * 32 * vw + lane * vw + r % vw

    return vw, per, per // vw, key.tokens or _TOKENS, plan[1] != key.experts, expert


def _sum_in_order(terms: list) -> Any:
    """``((t0 + t1) + t2) + ...``: the chosen probabilities summed in k order, one expression."""
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def routing_program(key: "MoETopKRoutingBuildKey") -> Any:
    """The PrimFunc of ``key``'s program (the key passed its refusal)."""
    programs = {"rounds": _rounds_program, "candidates": _candidates_program, "logits": _logits_program}
    return programs[key.program](key)


def _rounds_program(key: "MoETopKRoutingBuildKey"):
    import tilelang.language as T

    E, K, dt, idt, f32, i64 = key.experts, key.top_k, key.dtype, key.ids_dtype, "float32", "int64"
    plan = routing_plan(key)
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


def _softmax_row_macro(E: int, NV: int, vw: int) -> Any:
    """A TileLang macro ``(router_logits, ev, fv, total, tok, lane)``: row ``tok``'s float32 ``e = exp(l - max)``
    in a lane's ``ev`` (the layout of the ``candidates`` program's docstring: ``NV`` vectors of ``vw``, experts
    past ``E`` as ``-inf``, so 0), the row's max in ``fv[0]`` and the sum of ``e`` in ``fv[total]``, each float32
    step the one ``"rounds"`` takes, in its order (a lane's vectors interleaved, then the butterfly). The
    ``candidates`` program runs it first; the ``logits`` program in its fallback (the same bits as ``rounds``)."""
    import tilelang.language as T

    f32, PER = "float32", NV * vw

    @T.macro
    def softmax_row(router_logits, ev, fv, total, tok, lane):
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
        fv[total] = T.float32(0)
        for rv in T.unroll(PER):
            fv[total] = fv[total] + ev[(rv % NV) * vw + rv // NV]
        fv[total] = T.warp_reduce_sum(fv[total])

    return softmax_row


def _candidates_program(key: "MoETopKRoutingBuildKey"):
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
    vw, PER, NV, TOK, PADDED, expert = _warp_layout(key)  # (padded experts: -inf logits, exp gives 0)
    softmax_row = _softmax_row_macro(E, NV, vw)
    K1 = K + 1
    OUT = 2 * _SLOTS  # the chosen top_k's slots
    M = T.dynamic("M")

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
            iv = T.alloc_local((8,), i32)  # h then o, tau, count, lane count, position, N, rank, path (1: candidates)
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
            softmax_row(router_logits, ev, fv, 1, tok, lane)
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
            # 3. The candidates (e >= tau) and each lane's first slot: an inclusive scan of the counts;
            #    beside them the largest e outside (o, bits; -1 where every expert is a candidate).
            iv[3] = 0
            iv[0] = -1
            for r in T.unroll(PER):
                if not PADDED or expert(r, lane) < E:
                    iv[3] = iv[3] + T.if_then_else(T.reinterpret(i32, ev[r]) >= iv[1], 1, 0)
                    iv[0] = T.if_then_else(T.reinterpret(i32, ev[r]) < iv[1],
                                           T.max(iv[0], T.reinterpret(i32, ev[r])), iv[0])
            iv[0] = T.warp_reduce_max(iv[0])
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
                # 5. Exact when every expert outside (e <= o) has a probability below the k-th
                #    candidate's: division rounds monotonically.
                fv[3] = T.shfl_sync(fv[2], T.cast(T.popcount(
                    T.ballot_sync(lane < iv[5] and iv[6] == K - 1) - T.uint64(1)), i32))
                if iv[0] < 0 or T.reinterpret(f32, iv[0]) / fv[1] < fv[3]:
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


#: The logits program's heads a lane keeps (its largest keys, sorted; a power of two, as the network's
#: merges need): a lane holding this many of a token's top_k sends the token to the rounds selection, at 4
#: 0.40% of random bf16 tokens at E=512 top-10 and 0.13% at E=256 top-8, at 8 none of 32k at either (every
#: key a head at E=256). The fast path grows 358 -> 451 static SASS instructions at E=512, 253 -> 304 at E=256
#: (nvcc 13, no spill), still under the candidates program's ~650. (The twenty-ninth session read the 4k
#: rows' loss, 19.1 / 10.1 us against 8.5 / 5.7, as those few tokens; the thirtieth found every token of a
#: row wider than the heads falling back, through the unknown-outsider test: ``_logits_program``.)
_HEADS = 8


def _heads_network(count: int, depth: int) -> tuple[list[tuple[str, int, int]], list[int]]:
    """The compare-exchanges that leave a lane's ``depth`` largest of ``count`` keys sorted, and where.

    Returns ``(steps, heads)``: each step ``("ce", i, j)`` puts the larger of slots i, j in i and the
    smaller in j; ``("max", i, j)`` keeps the larger in i (j is dropped). ``heads`` are the slots of
    the result, largest first. Blocks of sorted slots merge pairwise: ``c_i = max(A_i, B_{d-1-i})``
    is the union's top d in bitonic order, which half-cleaners sort (absent slots are known to be
    the least, so their steps vanish here, not in the program)."""
    if depth < 1 or depth & (depth - 1) or depth > count:
        raise ValueError(f"_heads_network: depth {depth} must be a power of two and at most count {count} (the "
                         "bitonic half-cleaners sort blocks of a power of two)")
    steps: list[tuple[str, int, int]] = []

    def sort_bitonic(block: list[int | None]) -> None:
        n = len(block)
        half = n // 2
        while half:
            for start in range(0, n, 2 * half):
                for i in range(start, start + half):
                    a, b = block[i], block[i + half]
                    if a is not None and b is not None:
                        steps.append(("ce", a, b))
                    elif a is None:  # the absent one is the least: the present one moves up
                        block[i], block[i + half] = b, None
            half //= 2

    def merge(a: list[int | None], b: list[int | None]) -> list[int | None]:
        out: list[int | None] = []
        for i in range(depth):
            x, y = a[i], b[depth - 1 - i]
            if x is not None and y is not None:
                steps.append(("max", x, y))
            out.append(x if x is not None else y)
        sort_bitonic(out)
        return out

    blocks = [[r] + [None] * (depth - 1) for r in range(count)]
    while len(blocks) > 1:
        merged = [merge(blocks[i], blocks[i + 1]) for i in range(0, len(blocks) - 1, 2)]
        blocks = merged + blocks[len(blocks) - len(blocks) % 2:]
    heads = blocks[0]
    assert all(h is not None for h in heads)
    return steps, [h for h in heads if h is not None]


def _word_ordered(word: int) -> int:
    """A 32-bit word of two 16-bit logits with both halves ordered at once (the logits program's
    keys): each half's sign bit less its lowest bit is the half's magnitude mask, no borrow across."""
    signs = word & 0x80008000
    return word ^ (signs - (signs >> 15))


def _ordered(bits: int, width: int) -> int:
    """The signed integer a logit's ``width``-bit pattern orders as (the float order: negatives'
    magnitude bits flipped, the sign kept)."""
    signed = bits - (1 << width) if bits >> (width - 1) else bits
    return signed ^ ((1 << (width - 1)) - 1) if signed < 0 else signed


#: A logit dtype's bits of +inf.
_INF_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80, "float32": 0x7F800000}
#: The logits program's margin: two experts of different logits keep their probabilities' order
#: (and an expert outside the selection stays below the k-th) when the larger ``e`` exceeds the
#: smaller times this, both expf's within 2 ulp of exp, and the larger at least ``_LEAST_E``.
_MARGIN = 1.0 + 2.0**-18
_LEAST_E = 2.0**-100


#: ``tl_mad_s32``: PTX's ``mad.lo.s32`` (``a * b + c``, wrapping), opaque to the compiler's own rewriting: written
#: as C its 0/1 multiplier turns back into a select on the ALU pipe (``MoETopKRoutingBuildKey.lean_rounds``).
_MAD_S32 = ("__device__ __forceinline__ int tl_mad_s32(int a, int b, int c) {\n"
            "  int d;\n  asm(\"mad.lo.s32 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(b), \"r\"(c));\n"
            "  return d;\n}\n")


def _logits_program(key: "MoETopKRoutingBuildKey"):
    """The ``logits`` program (module docstring): the candidates program's warps, rows and layout;
    the selection on integer keys of the logits, the exponentials of the top_k + 1 only.

    A key is ``(ordered(bits(l)) << VB) | 2**(VB-1) | (E - 1 - expert)`` (``VB`` the logits' width,
    16 or 32: an int32 key, an int64 one for float32 logits): unique, in the order of (logit, lower
    id) but for -0 below +0 (the guard's tie). Padded experts take ``PAD``, below every real key but
    the NaNs with the sign set; ``EMPTY`` (below all) fills a lane's heads as the rounds pop them.
    A lane holding more keys than heads knows nothing of the rest but that they lie below its last
    head as the network left it (``kv[6]``): where that head is not below the k-th's logit, the first
    outsider may be among them, or the lane ran out of heads, and the token falls back. (Until the
    thirtieth session the test read the last head after the rounds, where every lane that had won a
    round held the fill, then ``MARK``, above all: every token of a row wider than the heads, E=512
    at 8 heads and E=256 at 4, fell back, so the program lost those rows by about the rounds
    selection's time, 19.9 against 8.7 us at Qwen3-Next 4k on an H100.)

    Bounds (``unchecked_index``): as in the candidates program, rows ``tok`` in ``[0, M)``, logits
    read only below E, outputs at ``[tok, lane < K]``; the slots are written at ``k < K`` and
    ``K + k`` and read at ``lane < K`` (with ``lean_rounds`` also at ``2K + r``, r < K, and read at
    ``2K + lane``, lane < K)."""
    import tilelang.language as T

    E, K, dt, idt, f32, i32 = key.experts, key.top_k, key.dtype, key.ids_dtype, "float32", "int32"
    vw, PER, NV, TOK, PADDED, expert = _warp_layout(key)  # PER: keys a lane
    softmax_row = _softmax_row_macro(E, NV, vw)
    VB = 8 * ELEM_BYTES[dt]  # a logit's bits
    kt, st, ut = ("int64", "int32", "uint32") if VB == 32 else ("int32", "int16", "uint16")
    ukt = "uint64" if VB == 32 else "uint32"
    MAG = (1 << (VB - 1)) - 1
    FLAG = 1 << (VB - 1)  # set in every real expert's low half: none of them is PAD
    HI_INF = _ordered(_INF_BITS[dt], VB)
    HI_NINF = _ordered(_INF_BITS[dt] | FLAG, VB)
    PAD = HI_NINF << VB
    EMPTY, MARK = -(1 << (2 * VB - 1)), (1 << (2 * VB - 1)) - 1
    D = min(key.heads or _HEADS, PER)
    REFILL = bool(key.heads) and PER > D  # a lane that pops its last head refills from its row (below)
    LATE = REFILL and key.late_refill  # the rounds unrolled unchecked; a lane run dry redoes the token (below)
    LEAN = key.lean_rounds  # the rounds' record and pops off the ALU pipe (pop_round)
    STEPS, H = _heads_network(PER, D)
    K1 = min(K + 1, E)  # lanes holding a key: the top_k and the first outsider of another logit
    M = T.dynamic("M")
    KC = T.int64 if VB == 32 else T.int32  # a key constant
    # Keys built from 32-bit words of two logits: static SASS of the fast path 375 -> 364 a token at E=512
    # top-10, 266 -> 263 at E=256 top-8 (nvcc 13); not without renormalisation, where the full sum reads
    # the logits again (+20), nor on padded rows (+2 to +4).
    WORDS = VB == 16 and vw % 2 == 0 and key.renormalize and not PADDED

    def logit_of(k):
        """The float32 logit a key holds."""
        hv = T.shift_right(k, KC(VB))
        bits = T.if_then_else(hv >= 0, hv, hv ^ KC(MAG))
        return T.cast(T.reinterpret(dt, T.cast(bits, ut)), f32)

    def lane_heads_macro(refill: bool) -> Any:
        """A TileLang macro ``(router_logits, raw, keys, base, uw, kv, tok, lane)``: steps 1-3 of the program
        for a lane; with ``refill``, the lane's keys below ``kv[1]`` only (the key it has just popped: every
        larger one it held was popped before it), its row read again (from L1 or L2: the program read it at
        its start) and ``base`` and the lane's least key ``kv[3]`` kept from the first fill."""

        @T.macro
        def lane_heads(router_logits, raw, keys, base, uw, kv, tok, lane):
            # 1. The row as the candidates program loads it, every load first.
            for i in T.unroll(NV):
                for j in T.vectorized(vw):
                    raw[i * vw + j] = router_logits[tok, T.min(i * 32 * vw + lane * vw + j, E - 1)] \
                        if PADDED else router_logits[tok, i * 32 * vw + lane * vw + j]
            # 2. Keys. base[i] ^ j is the low half of expert (i, lane, j): E - 1 - expert ends in vw - 1
            #    ones (vw divides E), so subtracting j < vw is an exclusive or.
            if not refill:
                for i in T.unroll(NV):
                    base[i] = KC(FLAG | (E - 1)) - T.cast(i * 32 * vw + lane * vw, kt)
                kv[3] = KC(MARK)
            for r in T.unroll(PER) if not WORDS else list(range(PER)):
                if WORDS and r % 2 == 0:
                    # Two 16-bit logits a word (lo = r, hi = r + 1), both ordered at once: a half's sign
                    # bit 0x8000 less its 0x0001 is the half's magnitude mask 0x7FFF (_word_ordered).
                    uw[0] = T.shift_left(T.cast(T.reinterpret(ut, raw[r + 1]), ukt), T.cast(VB, ukt)) \
                        | T.cast(T.reinterpret(ut, raw[r]), ukt)
                    uw[1] = uw[0] & T.uint32(0x80008000)
                    uw[0] = uw[0] ^ (uw[1] - T.shift_right(uw[1], T.uint32(15)))
                if WORDS:
                    kv[0] = T.cast(T.shift_left(uw[0], T.uint32(16)) if r % 2 == 0 else uw[0] & T.uint32(0xFFFF0000),
                                   kt)
                else:
                    kv[0] = T.cast(T.shift_left(T.cast(T.reinterpret(ut, raw[r]), ukt), T.cast(VB, ukt)), kt)
                    kv[0] = kv[0] ^ (T.shift_right(kv[0], KC(2 * VB - 1)) & KC(MAG << VB))
                keys[r] = kv[0] | (base[r // vw] ^ KC(r % vw))
                if PADDED:
                    keys[r] = T.if_then_else(expert(r, lane) < E, keys[r], KC(PAD))
                if refill:
                    keys[r] = T.if_then_else(keys[r] < kv[1], keys[r], KC(EMPTY))
                else:
                    kv[3] = T.min(kv[3], keys[r])
            # 3. The lane's D largest keys, sorted, in slots H (a fixed network of max/min).
            for op, a, b in STEPS:
                if op == "ce":
                    kv[0] = T.max(keys[a], keys[b])
                    keys[b] = T.min(keys[a], keys[b])
                    keys[a] = kv[0]
                else:
                    keys[a] = T.max(keys[a], keys[b])
            if PER > D:
                kv[6] = keys[H[D - 1]]

        return lane_heads

    first_fill, refill = lane_heads_macro(False), lane_heads_macro(True)

    def mad(a, b, c):
        """``a * b + c`` on the FMA pipe (``tl_mad_s32``)."""
        return T.call_extern(kt, "tl_mad_s32", a, b, c)

    @T.macro
    def pop_round(keys, kv, iv, slots, w, lane, r, first):
        """Round ``r`` of step 4: the warp's largest head (``kv[1]``; the row's largest, ``kv[5]``, in the
        ``first``), kept by lane ``r`` (``kv[2]``; with ``lean_rounds`` stored to ``slots[w, 2K + r]`` by every
        lane) and popped by the lane holding it (with ``lean_rounds``, head d + won x (head d+1 - head d) in
        ``mad``s)."""
        kv[1] = T.warp_reduce_max(keys[H[0]])
        if first:
            kv[5] = kv[1]
        if LEAN:
            slots[w, 2 * K + r] = kv[1]
            iv[0] = T.if_then_else(keys[H[0]] == kv[1], 1, 0)
            for d in list(range(D - 1)):
                keys[H[d]] = mad(iv[0], mad(keys[H[d]], KC(-1), keys[H[d + 1]]), keys[H[d]])
            keys[H[D - 1]] = mad(iv[0], mad(keys[H[D - 1]], KC(-1), KC(EMPTY)), keys[H[D - 1]])
        else:
            kv[2] = T.if_then_else(lane == r, kv[1], kv[2])
            iv[0] = T.if_then_else(keys[H[0]] == kv[1], 1, 0)
            for d in list(range(D - 1)):
                keys[H[d]] = T.if_then_else(iv[0] == 1, keys[H[d + 1]], keys[H[d]])
            keys[H[D - 1]] = T.if_then_else(iv[0] == 1, KC(EMPTY), keys[H[D - 1]])

    @T.macro
    def refilling_rounds(router_logits, raw, keys, base, uw, kv, iv, slots, w, tok, lane):
        """Step 4 with ``heads``: the first D - 1 rounds (no lane can run dry in them), then from the D-th round a
        lane may pop its last head: it then takes its next D keys from its row before the next round (and before
        the outsider's search, after the last): one vote a round, the refill itself only in a token that needs
        it. The test is "below PAD" (EMPTY, or a NaN key with the sign set, whose row falls back anyway): TVM's
        simplifier overflows on an equality with int32's least value. A refill is exact in any lane at any round:
        every key of the lane at or above this round's max was popped before. These rounds are one rolled loop,
        so the program holds one copy of the refill, not one a round (E=512 top-10 bf16: 2592 static SASS
        instructions with seven, forty-fourth session)."""
        for r in list(range(min(K, D - 1))):
            pop_round(keys, kv, iv, slots, w, lane, r, r == 0)
        for r in T.serial(D - 1, K):
            pop_round(keys, kv, iv, slots, w, lane, r, False)
            if T.any_sync(keys[H[0]] < KC(PAD)) != 0:
                if keys[H[0]] < KC(PAD):
                    refill(router_logits, raw, keys, base, uw, kv, tok, lane)

    @T.prim_func
    def moe_topk_routing(router_logits: T.Tensor((M, E), dt), topk_weights: T.Tensor((M, K), dt),
                         topk_ids: T.Tensor((M, K), idt)):
        annotate_pass_configs(key.unchecked_index, {"tl.disable_thread_storage_sync": True})
        with T.Kernel(T.ceildiv(M, TOK), threads=32 * TOK) as bx:
            if REFILL:
                # The refills' row reads and key building held 68 registers at E=512 bf16 (55 without them) while
                # each round had its own copy: at 512 threads one program an SM. Bounded to 64, so that 32 warps an
                # SM stay resident (51 since the rounds that refill are one loop).
                T.annotate_min_blocks_per_sm(programs_at_registers(32 * TOK, 64))
            if LEAN:
                T.import_source(_MAD_S32)
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            raw = T.alloc_local((PER,), dt)
            keys = T.alloc_local((PER,), kt)
            base = T.alloc_local((NV,), kt)
            uw = T.alloc_local((2,), "uint32")  # a word of two 16-bit logits, its signs
            kv = T.alloc_local((7,), kt)  # swap, the round's best, the lane's key, the lane min, its outsider, top,
            #                                   the lane's last head before the rounds
            fv = T.alloc_local((6,), f32)  # max logit, e, the next lane's e, sum, weight, renorm sum
            iv = T.alloc_local((4,), i32)  # the round's winner, slow, fast, the lane's id
            ev = T.alloc_local((PER,), f32)  # the rounds selection (the fallback)
            rkeys = T.alloc_local((PER,), "int64")
            rbest = T.alloc_local((1,), "int64")
            # The fallback's chosen probabilities' bits, then ids; with ``lean_rounds`` then each round's maximum (one
            # buffer: TileLang's planner would lay a second one over this one, and the warps are not in step).
            slots = T.alloc_shared((TOK, (3 if LEAN else 2) * K), i32)
            w = tid // 32
            lane = tid % 32
            tok = T.min(bx * TOK + w, M - 1)
            # 1-3. The row, its keys, the lane's D largest sorted in slots H.
            first_fill(router_logits, raw, keys, base, uw, kv, tok, lane)
            # 4. top_k rounds over the lanes' first heads (keys are unique: one lane wins each);
            #    lane k keeps round k's key.
            kv[2] = KC(EMPTY)
            if LATE:
                # (``late_refill``) The rounds but the last, unrolled with no refill vote: a lane that pops its D-th
                # head before the last round offers EMPTY after it, so if any lane is dry then, the rounds since may
                # have passed over its next keys, and the token starts again from its row with the refilling rounds
                # (one token in a few hundred at E=512 top-10 with 4 heads); otherwise the last round, whose dry
                # lanes step 5 rereads as before. The same ids and weights as the refilling rounds: only which tokens
                # run them changes.
                for r in list(range(K - 1)):
                    pop_round(keys, kv, iv, slots, w, lane, r, r == 0)
                iv[1] = T.if_then_else(T.any_sync(keys[H[0]] < KC(PAD)) != 0, 1, 0)
                if iv[1] == 0:
                    pop_round(keys, kv, iv, slots, w, lane, K - 1, K == 1)
                else:
                    first_fill(router_logits, raw, keys, base, uw, kv, tok, lane)
                    kv[2] = KC(EMPTY)
                    refilling_rounds(router_logits, raw, keys, base, uw, kv, iv, slots, w, tok, lane)
            elif REFILL:
                refilling_rounds(router_logits, raw, keys, base, uw, kv, iv, slots, w, tok, lane)
            else:
                for r in list(range(K)):
                    pop_round(keys, kv, iv, slots, w, lane, r, r == 0)
            if LEAN:
                # Each lane wrote every slot with the warp's one value, so lane r reads its own write of round r.
                kv[2] = T.if_then_else(lane < K, slots[w, 2 * K + T.min(lane, K - 1)], KC(EMPTY))
            # 5. The first outsider of another logit than the k-th's: the largest key below the k-th's
            #    logit (its low half cleared); unknown where a lane holds more keys than heads and its
            #    last head before the rounds is not below it (a lane that ran out of heads included: that
            #    head was a winner, at or above the k-th), and the token falls back; with ``heads`` such a
            #    lane (its last head at its last fill) reads its row again for it.
            kv[0] = T.shift_left(T.shift_right(kv[1], KC(VB)), KC(VB))
            kv[4] = KC(EMPTY)
            for d in list(range(D - 1, -1, -1)):
                kv[4] = T.if_then_else(keys[H[d]] < kv[0], keys[H[d]], kv[4])
            if REFILL:
                # (``heads``) A lane whose last head at its last fill is not below the k-th's logit (it holds a
                # key of that logit that lost on its id among its heads: rare, one token in the fourth of four
                # random 4k rows at E=256, heads 4) may hold the outsider among its other keys: it fills its heads
                # once more from its keys below that logit, whose first is its largest there. Without it such a
                # token fell back, 1.1-1.2 us a 4k call that held one (forty-fourth session, s44d: its seed's rows
                # drawn again on the CPU hold that one token; 4-8 lanes a call refilled on every seed). Its heads
                # are not read again (the rounds are over); nor is kv[1] after kv[0].
                if T.any_sync(kv[6] >= kv[0]) != 0:
                    if kv[6] >= kv[0]:
                        kv[1] = kv[0]
                        refill(router_logits, raw, keys, base, uw, kv, tok, lane)
                        kv[4] = keys[H[0]]
            kv[4] = T.warp_reduce_max(kv[4])
            if K1 > K:
                kv[2] = T.if_then_else(lane == K, kv[4], kv[2])
            iv[1] = T.if_then_else(T.any_sync(kv[3] < KC(PAD)) != 0, 1, 0)  # a NaN with the sign set
            if PER > D and not REFILL:
                iv[1] = iv[1] | T.if_then_else(T.any_sync(kv[6] >= kv[0]) != 0, 1, 0)
            # 6. e = exp(l - max) of the lane's key; the order check against the next lane's.
            fv[0] = logit_of(kv[5])
            fv[1] = T.exp(logit_of(kv[2]) - fv[0])
            fv[2] = T.shfl_down(fv[1], 1)
            kv[0] = T.shfl_down(kv[2], 1)
            iv[3] = E - 1 - T.cast(kv[2] & KC(FLAG - 1), i32)
            iv[2] = T.if_then_else(T.all_sync(
                lane >= K or T.shift_right(kv[2], KC(VB)) == T.shift_right(kv[0], KC(VB))
                or (lane == K - 1 and kv[4] <= KC(PAD))
                or (fv[1] >= T.float32(_LEAST_E) and fv[1] > fv[2] * T.float32(_MARGIN))) != 0, 1, 0)
            iv[2] = T.if_then_else(iv[1] == 0 and T.shift_right(kv[5], KC(VB)) < KC(HI_INF)
                                   and T.shift_right(kv[5], KC(VB)) > KC(HI_NINF), iv[2], 0)
            # 7. The weights: over the top_k's e, or over every expert's.
            if key.renormalize:
                fv[3] = T.warp_reduce_sum(T.if_then_else(lane < K, fv[1], T.float32(0)))
            else:
                fv[3] = T.float32(0)
                for r in T.unroll(PER):
                    if not PADDED or expert(r, lane) < E:
                        fv[3] = fv[3] + T.exp(T.cast(raw[r], f32) - fv[0])
                fv[3] = T.warp_reduce_sum(fv[3])
            fv[4] = T.call_extern(f32, "__fdividef", fv[1], fv[3])  # the sum lies in [1, E]: no range issue
            if iv[2] == 0:
                # The rounds selection on the row, as the candidates program's fallback runs it.
                softmax_row(router_logits, ev, fv, 3, tok, lane)
                for r in T.unroll(PER):
                    rkeys[r] = T.if_then_else(
                        expert(r, lane) < E,
                        T.shift_left(T.cast(T.reinterpret(i32, ev[r] / fv[3]), "int64"), T.int64(32))
                        | T.cast(E - 1 - expert(r, lane), "int64"),
                        T.int64(-1))
                for k in T.serial(K):
                    rbest[0] = T.int64(-1)
                    for r in T.unroll(PER):
                        rbest[0] = T.max(rbest[0], rkeys[r])
                    rbest[0] = T.warp_reduce_max(rbest[0])
                    if lane == 0:
                        slots[w, k] = T.cast(T.shift_right(rbest[0], T.int64(32)), i32)
                        slots[w, K + k] = T.cast(E - 1 - (rbest[0] & T.int64(0xFFFFFFFF)), i32)
                    for r in T.unroll(PER):
                        rkeys[r] = T.if_then_else(rkeys[r] == rbest[0], T.int64(-1), rkeys[r])
                T.sync_warp()
                fv[5] = _sum_in_order([T.reinterpret(f32, slots[w, k]) for k in range(K)])
                if lane < K:
                    fv[4] = T.reinterpret(f32, slots[w, lane])
                    if key.renormalize:
                        fv[4] = fv[4] / fv[5]
                    iv[3] = slots[w, K + lane]
            if lane < K and bx * TOK + w < M:
                topk_weights[tok, lane] = T.cast(fv[4], dt)
                topk_ids[tok, lane] = T.cast(iv[3], idt)

    return moe_topk_routing
