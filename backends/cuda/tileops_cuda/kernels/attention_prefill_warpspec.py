"""Causal varlen GQA prefill attention with its pipeline written out: a producer warpgroup, barriers of
its own, asynchronous tensor-core products.

Why: TileLang's automatic pipeline (:func:`.attention_prefill_program.prefill_attention_program`) waits for
each product as it issues it; here the softmax of one key tile overlaps the P·V product of the previous one.
Same semantics, same entry (:func:`.attention_prefill_program.attention_entry`: grid, tile search, masking);
the build key's ``program`` picks it.
With the key's ``cache_write`` ``"attention"`` its producer warpgroup also does the cache write's
job once its loads are issued (:func:`.attention_prefill_program.cache_rows_writer`), and the cache-write
program is not launched.
The program (:func:`prefill_attention_overlap_program`) is one producer warpgroup
(:func:`producer_warpgroup`) and two consumer warpgroups of 64 query rows (:func:`consumer_warpgroup`).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from typing import TYPE_CHECKING, Any

from .attention_decode_program import online_softmax_statistics, row_reciprocals
from .attention_prefill_program import attention_entry, cache_rows_writer, causal_scaled_scores

if TYPE_CHECKING:
    from .attention_prefill import PrefillBuildKey, PrefillTiling

__all__ = ["CONSUMER_REGISTERS", "consumer_warpgroup", "prefill_attention_overlap_program", "producer_warpgroup"]


#: Rows of a consumer warpgroup's tensor-core tile (wgmma's M) in the warp-specialised program.
CONSUMER_ROWS = 64
#: Threads of a warpgroup (the unit ``setmaxnreg`` reallocates registers by).
WARPGROUP = 128
#: Consumer warpgroups of the warp-specialised program (:data:`CONSUMER_ROWS` query rows each).
CONSUMERS = 2
#: Registers a producer thread keeps after ``setmaxnreg``; what it gives back goes to the consumers.
PRODUCER_REGISTERS = 24
#: Registers a thread has at launch: ptxas gives each of the program's threads (a producer and :data:`CONSUMERS`
#: consumer warpgroups, one program an SM) an equal share of the SM's 64 Ki, rounded down to 8 (168).
LAUNCH_REGISTERS = 65536 // ((CONSUMERS + 1) * WARPGROUP) // 8 * 8
#: Registers a consumer thread takes with ``setmaxnreg``: the producer gives back all but
#: :data:`PRODUCER_REGISTERS` of its :data:`LAUNCH_REGISTERS`, the consumers share that evenly (240).
CONSUMER_REGISTERS = (LAUNCH_REGISTERS * (CONSUMERS + 1) - PRODUCER_REGISTERS) // CONSUMERS // 8 * 8


def _offset(base: Any, rows: int) -> Any:
    """``base + rows``, or ``base`` itself for no rows (no ``+ 0`` in the lowered index)."""
    return base + rows if rows else base


def producer_warpgroup(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The TileLang macro ``producer(tx, q_tiles, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty,
    query, key_new, value_new, out, hq, h, start, length, q0, tiles, b, bx, cache)`` of the
    warp-specialised program: its warpgroup keeps :data:`PRODUCER_REGISTERS`, loads the query
    tile's 64-row parts (``q_tiles``, one a consumer) onto ``q_full``, then streams the K and V
    tiles through their ``stages``-deep rings (a stage refilled once its empty barrier says every
    consumer warp is done with it); with the key's ``cache_write`` ``"attention"`` it then writes
    the program's share of the caches (:func:`cache_rows_writer`)."""
    import tilelang.language as T

    BN, S = tiling.block_n, tiling.stages
    writes_caches = key.cache_write == "attention"
    write_caches = cache_rows_writer(key, tiling, WARPGROUP)
    parts = tuple(range(CONSUMERS))

    @T.macro
    def producer(tx: Any, q_tiles: Any, k_s: Any, v_s: Any, q_full: Any, k_full: Any, k_empty: Any, v_full: Any,
                 v_empty: Any, query: Any, key_new: Any, value_new: Any, out: Any, hq: Any, h: Any, start: Any,
                 length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
        T.dec_max_nreg(PRODUCER_REGISTERS)
        if tiles > 0:
            for part in parts:  # a Python tuple: unrolled as the program is built
                T.tma_copy(query[_offset(start + q0, part * CONSUMER_ROWS) : start + q0 + (part + 1) * CONSUMER_ROWS,
                                 hq, :], q_tiles[part], barrier=q_full[0])
            T.barrier_arrive(q_full[0])
        for j in T.serial(tiles):
            slot = j % S
            T.barrier_wait(k_empty[slot], ((j // S) & 1) ^ 1)
            T.tma_copy(key_new[start + j * BN : start + j * BN + BN, h, :], k_s[slot, :, :], barrier=k_full[slot])
            T.barrier_arrive(k_full[slot])
            T.barrier_wait(v_empty[slot], ((j // S) & 1) ^ 1)
            T.tma_copy(value_new[start + j * BN : start + j * BN + BN, h, :], v_s[slot, :, :],
                       barrier=v_full[slot])
            T.barrier_arrive(v_full[slot])
        if writes_caches:  # the loads are issued: the idle producer writes this program's share of rows
            write_caches(tx, key_new, value_new, out, hq, h, start, length, q0, b, bx, *cache)

    return producer


def consumer_warpgroup(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The TileLang macro ``consumer(wg, q_s, k_s, v_s, q_full, k_full, k_empty, v_full, v_empty,
    acc_s, acc_p, acc_o, m_cur, m_prev, rescale, row_sum, l_sum, out, start, length, q0, hq, tiles,
    scale_log2)`` of the warp-specialised program: consumer warpgroup ``wg`` (:data:`CONSUMER_REGISTERS`
    a thread by ``setmaxnreg``) owns query rows ``q0 + 64 · wg ..`` and overlaps the softmax of key tile j
    with the P·V product of tile j - 1, as FlashAttention-3 does. ``acc_o`` is the output accumulator.

    Per step j: issue ``S_j = Q·K_jᵀ`` and ``O += P_{j-1}·V_{j-1}`` (asynchronous wgmma), wait for
    ``S_j`` only, run the softmax statistics of ``S_j`` in float32 while the P·V product runs, then
    wait for it, rescale ``O`` and round ``P_j`` to the input dtype. Each K and V stage's empty
    barrier counts one arrival a consumer warp. The output is staged through the warpgroup's query
    tile in shared memory and written with 16-byte row stores (rows past the sequence's end are not
    written)."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    WM, BN, S = CONSUMER_ROWS, tiling.block_n, tiling.stages
    NEG = -T.infinity(f32)
    softmax_statistics = online_softmax_statistics(WM, BN)
    causal_scores = causal_scaled_scores(WM, BN)
    inverted = row_reciprocals(WM)

    @T.macro
    def scores(wg: int, j: Any, q_s: Any, k_s: Any, k_full: Any, acc_s: Any):
        """Issue ``S_j = Q·K_jᵀ`` (asynchronous; nothing waits here)."""
        T.barrier_wait(k_full[j % S], (j // S) & 1)
        T.wgmma_gemm(q_s, k_s[j % S, :, :], acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                     clear_accum=True)

    @T.macro
    def statistics(wg: int, j: Any, k_empty: Any, acc_s: Any, m_cur: Any, m_prev: Any, rescale: Any, row_sum: Any,
                   l_sum: Any, r0: Any, length: Any, scale_log2: Any):
        """After ``S_j`` landed: free its K stage, mask and scale it, update the running maximum
        and sum; ``acc_s`` ends as the float32 probabilities (the accumulator is not touched)."""
        T.warpgroup_fence_operand(acc_s, num_regs=WM * BN // 128)
        if T.get_thread_binding() % 32 == 0:
            T.mbarrier_arrive(k_empty[j % S])
        causal_scores(acc_s, j * BN, r0, length, scale_log2)
        softmax_statistics(acc_s, m_cur, m_prev, rescale, row_sum, l_sum)

    @T.macro
    def value_product(j: Any, v_s: Any, acc_p: Any, acc_o: Any):
        """Issue ``O += P_j·V_j`` (one asynchronous product)."""
        T.wgmma_gemm(acc_p, v_s[j % S, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def values(j: Any, v_s: Any, v_full: Any, acc_p: Any, acc_o: Any):
        """Issue ``O += P_j·V_j`` (asynchronous)."""
        T.barrier_wait(v_full[j % S], (j // S) & 1)
        value_product(j, v_s, acc_p, acc_o)

    @T.macro
    def values_done(j: Any, v_empty: Any, acc_o: Any):
        T.warpgroup_fence_operand(acc_o, num_regs=WM * D // 128)
        if T.get_thread_binding() % 32 == 0:
            T.mbarrier_arrive(v_empty[j % S])

    @T.macro
    def consumer(wg: int, q_s: Any, k_s: Any, v_s: Any, q_full: Any, k_full: Any, k_empty: Any, v_full: Any,
                 v_empty: Any, acc_s: Any, acc_p: Any, acc_o: Any, m_cur: Any, m_prev: Any, rescale: Any,
                 row_sum: Any, l_sum: Any, out: Any, start: Any, length: Any, q0: Any, hq: Any, tiles: Any,
                 scale_log2: Any):
        """One consumer warpgroup's rows: tile 0, the overlapped steady state (straight-line, so
        ptxas keeps the products asynchronous), its last P·V product, the output."""
        T.inc_max_nreg(CONSUMER_REGISTERS)
        r0 = q0 + wg * WM  # this warpgroup's first query row
        # Key tiles with a key at or before one of this warpgroup's rows: the first warpgroup skips
        # the program's last tile when it lies wholly after its rows (every score masked). Its stage is never
        # refilled (the producer waits on an empty barrier only for a tile ``stages`` later), so the
        # other warpgroup alone releasing it deadlocks nothing.
        mine = T.min(tiles, T.ceildiv(r0 + WM, BN))
        if tiles > 0:
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, NEG)
            T.barrier_wait(q_full[0], 0)
            scores(wg, 0, q_s, k_s, k_full, acc_s)
            T.wait_wgmma(0)
            statistics(wg, 0, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
            T.copy(acc_s, acc_p)
            for j in T.serial(1, mine):
                scores(wg, j, q_s, k_s, k_full, acc_s)
                values(j - 1, v_s, v_full, acc_p, acc_o)
                T.wait_wgmma(1)  # S_j landed; the value product may still run
                statistics(wg, j, k_empty, acc_s, m_cur, m_prev, rescale, row_sum, l_sum, r0, length, scale_log2)
                T.wait_wgmma(0)
                values_done(j - 1, v_empty, acc_o)
                for i, d in T.Parallel(WM, D):
                    acc_o[i, d] *= rescale[i]
                T.copy(acc_s, acc_p)
            last = mine - 1
            T.barrier_wait(v_full[last % S], (last // S) & 1)
            if last * BN + BN > length:  # the end tile: value rows past the end become zeros
                for i, d in T.Parallel(BN, D):
                    if last * BN + i >= length:
                        v_s[last % S, i, d] = T.cast(0, dt)
                T.fence_proxy_async()
                T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            value_product(last, v_s, acc_p, acc_o)
            T.wait_wgmma(0)
            values_done(last, v_empty, acc_o)
            inverted(l_sum)
            for i, d in T.Parallel(WM, D):
                q_s[i, d] = T.cast(acc_o[i, d] * l_sum[i], dt)
            T.sync_threads(barrier_id=1 + wg, arrive_count=128)
            for i, d in T.Parallel(WM, D):
                if r0 + i < length:
                    out[start + r0 + i, hq, d] = q_s[i, d]

    return consumer


def prefill_attention_overlap_program(key: "PrefillBuildKey", tiling: "PrefillTiling") -> Any:
    """The attention PrimFunc with its pipeline written out (same parameters, grid and
    semantics as :func:`prefill_attention_program`): warpgroup 0 loads (TMA,
    :func:`producer_warpgroup`), warpgroups 1 and 2 own 64 query rows each (:func:`consumer_warpgroup`:
    the softmax of key tile j overlaps the P·V product of tile j - 1); 128 query rows a program, one
    program an SM (193 KiB of shared memory with 64-key stages at D = 256). The K and V ring
    (``stages`` deep each) has full/empty barriers of its own, so a K stage is refilled as soon as both
    warpgroups' score products are done with it."""
    import tilelang.language as T

    dt, f32 = key.dtype, "float32"
    D = key.head_dim
    BM, BN, S = tiling.block_m, tiling.block_n, tiling.stages
    WM = CONSUMER_ROWS
    if (BM, tiling.threads) != (CONSUMERS * WM, CONSUMERS * WARPGROUP):
        raise ValueError(f"the warp-specialised prefill program of {CONSUMERS} consumer warpgroups of {WM} query rows "
                         f"needs block_m={CONSUMERS * WM}, threads={CONSUMERS * WARPGROUP}, not block_m={BM}, "
                         f"threads={tiling.threads}")
    consumer_warps = CONSUMERS * WARPGROUP // 32
    producer = producer_warpgroup(key, tiling)
    consumer = consumer_warpgroup(key, tiling)

    @T.macro
    def warp_specialised(query: Any, key_new: Any, value_new: Any, out: Any, scale_log2: Any, hq: Any, h: Any,
                         start: Any, length: Any, q0: Any, tiles: Any, b: Any, bx: Any, cache: Any):
        # Each consumer warpgroup's query tile and fragments are its own buffers, named by the
        # assignment (TileLang lays a fragment out over the threads of the branch that uses it).
        q_s0 = T.alloc_shared((WM, D), dt)
        q_s1 = T.alloc_shared((WM, D), dt)
        k_s = T.alloc_shared((S, BN, D), dt)
        v_s = T.alloc_shared((S, BN, D), dt)
        acc_s0 = T.alloc_fragment((WM, BN), f32)
        acc_p0 = T.alloc_fragment((WM, BN), dt)
        acc_o0 = T.alloc_fragment((WM, D), f32)
        acc_s1 = T.alloc_fragment((WM, BN), f32)
        acc_p1 = T.alloc_fragment((WM, BN), dt)
        acc_o1 = T.alloc_fragment((WM, D), f32)
        stats0 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        stats1 = [T.alloc_fragment((WM,), f32) for _ in range(5)]
        # full: the producer's 128 threads arrive (and the bytes land); empty: lane 0 of each
        # consumer warp arrives when its products no longer read the stage.
        q_full = T.alloc_barrier([WARPGROUP])
        k_full = T.alloc_barrier([WARPGROUP] * S)
        k_empty = T.alloc_barrier([consumer_warps] * S)
        v_full = T.alloc_barrier([WARPGROUP] * S)
        v_empty = T.alloc_barrier([consumer_warps] * S)
        ring = (k_s, v_s, q_full, k_full, k_empty, v_full, v_empty)
        rest = (out, start, length, q0, hq, tiles, scale_log2)

        tx = T.get_thread_binding()
        if tx < WARPGROUP:
            producer(tx, (q_s0, q_s1), *ring, query, key_new, value_new, out, hq, h, start, length, q0, tiles, b,
                     bx, cache)
        elif tx < 2 * WARPGROUP:
            consumer(0, q_s0, *ring, acc_s0, acc_p0, acc_o0, *stats0, *rest)
        else:
            consumer(1, q_s1, *ring, acc_s1, acc_p1, acc_o1, *stats1, *rest)

    # The consumers' threads and a producer warpgroup, as TileLang's automatic pipeline launches.
    return attention_entry(key, tiling, tiling.threads + WARPGROUP, warp_specialised)
