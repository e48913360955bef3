"""The GQA decode's split pass on CUDA cores: the ``lanes`` program (issue 21, a candidate for small batches).

Why: at B <= 8 the tensor-core split programs are latency-bound (NOTES "ncudec": a 64-position tile of
keys and values, 66 KB, took 10.5 us in one program an SM, issue slots 6% busy); the rows were at 32-72%
of a same-size copy. This program has none of their machinery (no bulk copies, barriers on shared-memory
stages, warp specialisation or mma tiles): every thread issues all of its tile's key and value loads at
once, 16-byte vectors straight into registers, so a one-wave grid has the whole cache in flight, then
multiplies on CUDA cores (``G`` query heads a key/value head give ``G`` multiply-adds a loaded element).

Layout (:func:`lanes_shape`): a cache row of ``D`` channels is ``LR = D / VW`` lanes of ``VW``-element
16-byte vectors, so a warp holds ``RW = 32 / LR`` rows at once; thread (warp ``w``, lane) holds rows
``(w · U + u) · RW + lane // LR`` of a ``BN = W · RW · U``-position tile, channels ``(lane % LR) · VW``
on. A row's ``G`` partial scores are summed over its ``LR`` lanes by a transposing butterfly (each
exchange halves the values a lane holds while their count is even: 9 shuffles for 8 heads over 32
lanes, not 40), then stored for the tile's softmax, which one warp a query head runs (online, across
the program's tiles: running maximum and sum in that warp's registers). The value product accumulates
``G x VW`` float32 sums a thread over its rows; the threads' sums meet in shared memory at the end.

Semantics are :mod:`~.attention_decode_program`'s split pass (its docstring): same signature, same
partials and log2-sum-exps, position ``n`` from the inputs (and written to its slot by the program owning
it), rows past ``n`` masked by selection (a NaN there stays out), padding sequences zeros where one split
writes the output. Scores, probabilities and sums are float32 throughout (the tensor-core programs round
the probabilities to the input dtype for their product): the results differ from theirs within the
conformance tolerance, not bit for bit. Rows are read clamped inside the sequence's row (contiguous) or
through the block-table entry of the clamped position (paged, any block size: one row a load, so no
tile needs to fit a block; entries of the table's row past the sequence's last block may be read, and
any value there is clamped into the pool), so no load waits on the length.

tilelang is imported inside the builder, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._common import ELEM_BYTES, dependent_launch
from ._index_metadata import index_or_padding

if TYPE_CHECKING:
    from .attention_decode import DecodeBuildKey, DecodeTiling

__all__ = ["LANES_MAX_HEAD_VALUES", "LanesShape", "decode_lanes_split_program", "lanes_refusal", "lanes_shape"]

#: The most query values a thread of the lanes program holds (``G · VW``, float32): it holds as many
#: value-product sums beside them, and 64 + 64 leaves room for a tile's keys and values in 255 registers.
LANES_MAX_HEAD_VALUES = 64


@dataclass(frozen=True)
class LanesShape:
    """How the lanes program lays a tile over its threads: ``vector`` elements a 16-byte load,
    ``row_lanes`` lanes a cache row (``D / vector``), ``warp_rows`` rows a warp holds at once,
    ``warps`` warps, ``rows`` rows a thread loads a tile; ``block_n`` the tile's positions."""

    vector: int
    row_lanes: int
    warp_rows: int
    warps: int
    rows: int

    @property
    def block_n(self) -> int:
        return self.warps * self.warp_rows * self.rows


def lanes_refusal(dtype: str, head_dim: int, group: int) -> str | None:
    """Why the lanes program cannot serve ``group`` query heads a key/value head of ``head_dim``
    channels in ``dtype`` (a sentence naming the fix), or None."""
    name = "attention decode TileLang kernel"
    vector = 16 // ELEM_BYTES[dtype]
    lanes = head_dim // vector
    if head_dim % vector or lanes < 1 or lanes > 32 or lanes & (lanes - 1):
        return (f"{name}: DecodeSchedule(program='lanes') reads a row of {head_dim} channels as 16-byte vectors of "
                f"{vector} {dtype} over a power-of-two count of at most 32 lanes; pin program='tiles'")
    if group * vector > LANES_MAX_HEAD_VALUES:
        return (f"{name}: DecodeSchedule(program='lanes') holds {group} query heads x {vector} channels a thread, "
                f"more than {LANES_MAX_HEAD_VALUES} (registers); pin program='tiles'")
    return None


def lanes_shape(dtype: str, head_dim: int, threads: int) -> LanesShape:
    """The lanes program's layout for ``head_dim`` channels of ``dtype`` (a shape
    :func:`lanes_refusal` accepts) at ``threads`` threads: rows a thread loads so that a tile is
    about 32 positions (at least one row a thread)."""
    vector = 16 // ELEM_BYTES[dtype]
    row_lanes = head_dim // vector
    warp_rows = 32 // row_lanes
    warps = threads // 32
    return LanesShape(vector, row_lanes, warp_rows, warps, max(1, 32 // (warps * warp_rows)))


def _butterfly(count: int, lanes: int) -> tuple[list[tuple[int, int]], int]:
    """The transposing butterfly summing ``count`` values over ``lanes`` lanes: ``(splits, plain)``,
    ``splits`` the ``(offset, half)`` exchanges that halve the values a lane holds (while their count
    is even: the lane keeps the upper half where ``lane & offset``), ``plain`` the mask of the offsets
    that exchange every value (after those, lanes differing in them hold the same sums)."""
    splits, plain, offset = [], 0, lanes // 2
    while offset:
        if count > 1 and count % 2 == 0:
            count //= 2
            splits.append((offset, count))
        else:
            plain |= offset
        offset //= 2
    return splits, plain


def decode_lanes_split_program(key: "DecodeBuildKey", tiling: "DecodeTiling", page: int | None) -> Any:  # noqa: C901
    """The lanes split PrimFunc, with :func:`~.attention_decode_program.decode_split_program`'s signature
    ``(query, key, value, key_cache, value_cache, cache_seqlens, block_table, o_part, lse_part, out,
    cache_len, capacity, chunk, scale_log2)``. ``page``: None for the contiguous layout, else the block
    size (compiled in: a shift or a multiply a row)."""
    import tilelang.language as T

    dt, f32, i32 = key.dtype, "float32", "int32"
    DEPENDENT = key.dependent_launch
    NQ, NKV, D = key.num_q_heads, key.num_kv_heads, key.head_dim
    G = NQ // NKV
    shape = lanes_shape(dt, D, tiling.threads)
    VW, LR, RW, W, U = shape.vector, shape.row_lanes, shape.warp_rows, shape.warps, shape.rows
    BN, TH = shape.block_n, tiling.threads
    assert BN == tiling.block_n, (shape, tiling)
    HW = -(-G // W)  # query heads a warp runs the softmax of
    SPLITS, PLAIN = _butterfly(G, LR)
    KEPT = G >> len(SPLITS)  # partial scores a lane holds after the butterfly
    SLOTS = W * RW  # threads holding one channel vector's sums
    B, NL, TB, MB, S = (T.dynamic(n) for n in ("B", "NL", "TB", "MB", "S"))
    NEG = -T.infinity(f32)

    def pool_entry(table: Any, b: Any, p: Any) -> Any:
        """The block-table entry of position ``p`` of sequence ``b`` (paged) clamped, unsigned in its own
        dtype, to N (one past the pool): a negative or too large entry reads as N."""
        u = "uint64" if table.dtype == "int64" else "uint32"
        return T.cast(T.min(T.cast(table[b, p // page], u), T.cast(NL // page, u)), i32)

    def cache_row(table: Any, b: Any, p: Any, cache_len: Any) -> Any:
        """The flat cache row of position ``p`` of sequence ``b`` (``p`` below the capacity), inside the
        pool: an entry outside ``[0, N)`` reads the pool's last block (that sequence's output is then
        unspecified, as in the other programs; nothing outside the caches is read)."""
        if page is None:
            return b * cache_len + p
        return T.min(pool_entry(table, b, p), NL // page - 1) * page + p % page

    def each(count: int, bound: int, index: Any) -> Any:
        """Whether ``index`` (of a loop over ``ceil(bound / count)`` strides of ``count``) lies below
        ``bound``: always where ``count`` divides it (no test emitted)."""
        return True if bound % count == 0 else index < bound

    @T.prim_func
    def decode_split(
        query: T.Tensor((B, NQ, D), dt),
        key_new: T.Tensor((B, NKV, D), dt),
        value_new: T.Tensor((B, NKV, D), dt),
        key_cache: T.Tensor((NL, NKV, D), dt),
        value_cache: T.Tensor((NL, NKV, D), dt),
        cache_seqlens: T.Tensor((B,), key.seqlens_dtype),
        block_table: T.Tensor((TB, MB), key.table_dtype or i32),
        o_part: T.Tensor((S, B, NQ, D), f32),
        lse_part: T.Tensor((S, B, NQ), f32),
        out: T.Tensor((B, NQ, D), dt),
        cache_len: T.int32,
        capacity: T.int32,
        chunk: T.int32,
        scale_log2: T.float32,
    ):
        with T.Kernel(S, NKV, B, threads=TH) as (sid, h, b):
            T.annotate_min_blocks_per_sm(tiling.launch_bound)
            dependent_launch(DEPENDENT)
            tid = T.get_thread_binding()
            w = tid // 32
            lane = tid % 32
            sub = lane // LR  # the row of the warp's RW
            c = lane % LR  # the channel vector
            qr = T.alloc_local((G * VW,), dt)
            qf = T.alloc_local((G * VW,), f32)  # the query heads' channels, times scale · log2(e)
            kr = T.alloc_local((U * VW,), dt)
            vr = T.alloc_local((U * VW,), dt)
            kn = T.alloc_local((VW,), dt)  # the step's key and value (position n)
            vn = T.alloc_local((VW,), dt)
            sc = T.alloc_local((G,), f32)  # a row's partial scores, summed in place by the butterfly
            vf = T.alloc_local((VW,), f32)  # a row's values
            acc = T.alloc_local((G * VW,), f32)
            mr = T.alloc_local((HW,), f32)  # the running maximum and sum of the warp's query heads
            lr = T.alloc_local((HW,), f32)
            st = T.alloc_local((3,), f32)  # the tile's maximum, its sum, the rescale; an output's sum
            s_s = T.alloc_shared((G, BN), f32)  # a tile's scores, then its probabilities
            a_s = T.alloc_shared((G,), f32)  # the tile's rescale of the sums
            ml_s = T.alloc_shared((2, G), f32)  # the final maximum and sum
            o_s = T.alloc_shared((SLOTS, G, D), f32)

            # Every load before any wait: the queries, the new row, the length.
            for g in T.unroll(G):
                for v in T.vectorized(VW):
                    qr[g * VW + v] = query[b, h * G + g, c * VW + v]
            for v in T.vectorized(VW):
                kn[v] = key_new[b, h, c * VW + v]
            for v in T.vectorized(VW):
                vn[v] = value_new[b, h, c * VW + v]
            n = index_or_padding(cache_seqlens[b], capacity)
            lo = sid * chunk
            hi = T.min(lo + chunk, n + 1)  # this program's positions: [lo, hi)
            active = n >= 0 and lo <= n
            tiles = T.if_then_else(active, T.ceildiv(hi - lo, BN), 0)
            for i in T.unroll(G * VW):
                qf[i] = T.cast(qr[i], f32) * scale_log2
                acc[i] = T.float32(0)
            for t in T.unroll(HW):
                mr[t] = NEG
                lr[t] = T.float32(0)

            if active and n < lo + chunk and tid < LR:
                # The step's key/value into position n's slot (paged: where its entry is in the pool). Rows read
                # at n are replaced by the inputs and rows past n masked, so no load needs ordering against it.
                if page is None or pool_entry(block_table, b, n) < NL // page:
                    for v in T.vectorized(VW):
                        key_cache[cache_row(block_table, b, n, cache_len), h, c * VW + v] = kn[v]
                    for v in T.vectorized(VW):
                        value_cache[cache_row(block_table, b, n, cache_len), h, c * VW + v] = vn[v]

            for k in T.serial(tiles):
                base = lo + k * BN
                # 1. The tile's keys and values, every load issued before the first product.
                for u in T.unroll(U):
                    p = T.min(base + (w * U + u) * RW + sub, capacity - 1)
                    for v in T.vectorized(VW):
                        kr[u * VW + v] = key_cache[cache_row(block_table, b, p, cache_len), h, c * VW + v]
                    for v in T.vectorized(VW):
                        vr[u * VW + v] = value_cache[cache_row(block_table, b, p, cache_len), h, c * VW + v]
                # 2. Scores: a row's G partial dot products, summed over its lanes, stored once (-inf past hi).
                for u in T.unroll(U):
                    r = (w * U + u) * RW + sub
                    for v in T.unroll(VW):
                        vf[v] = T.cast(T.if_then_else(base + r == n, kn[v], kr[u * VW + v]), f32)
                    for g in T.unroll(G):
                        sc[g] = T.float32(0)
                        for v in T.unroll(VW):
                            sc[g] = sc[g] + qf[g * VW + v] * vf[v]
                    held = G
                    for offset, half in SPLITS:
                        for i in T.unroll(half):
                            sc[i] = T.if_then_else((lane & offset) != 0, sc[i + half], sc[i]) + T.shfl_xor(
                                T.if_then_else((lane & offset) != 0, sc[i], sc[i + half]), offset)
                        held = half
                    for offset in [1 << j for j in range(5) if PLAIN >> j & 1]:
                        for i in T.unroll(held):
                            sc[i] = sc[i] + T.shfl_xor(sc[i], offset)
                    if (lane & PLAIN) == 0:
                        for i in T.unroll(KEPT):
                            s_s[i + sum(T.if_then_else((lane & o) != 0, hf, 0) for o, hf in SPLITS), r] = \
                                T.if_then_else(base + r < hi, sc[i], NEG)
                T.sync_threads()
                # 3. The online softmax of the tile, a warp a query head.
                for t in T.unroll(HW):
                    if t * W + w < G:
                        st[0] = NEG
                        for j in T.unroll(-(-BN // 32)):
                            if each(32, BN, j * 32 + lane):
                                st[0] = T.max(st[0], s_s[t * W + w, j * 32 + lane])
                        st[0] = T.max(mr[t], T.warp_reduce_max(st[0]))  # the new running maximum
                        st[1] = T.float32(0)
                        for j in T.unroll(-(-BN // 32)):
                            if each(32, BN, j * 32 + lane):
                                s_s[t * W + w, j * 32 + lane] = T.exp2(s_s[t * W + w, j * 32 + lane] - st[0])
                                st[1] = st[1] + s_s[t * W + w, j * 32 + lane]
                        st[2] = T.exp2(mr[t] - st[0])  # the rescale of the sums so far
                        lr[t] = lr[t] * st[2] + T.warp_reduce_sum(st[1])
                        mr[t] = st[0]
                        if lane == 0:
                            a_s[t * W + w] = st[2]
                T.sync_threads()
                # 4. The value product: rows past hi read as zeros (whatever their slots hold stays out).
                for i in T.unroll(G * VW):
                    acc[i] = acc[i] * a_s[i // VW]
                for u in T.unroll(U):
                    r = (w * U + u) * RW + sub
                    for v in T.unroll(VW):
                        vf[v] = T.if_then_else(base + r < hi, T.cast(
                            T.if_then_else(base + r == n, vn[v], vr[u * VW + v]), f32), T.float32(0))
                    for g in T.unroll(G):
                        for v in T.unroll(VW):
                            acc[g * VW + v] = acc[g * VW + v] + s_s[g, r] * vf[v]
                T.sync_threads()  # the next tile's scores overwrite s_s and a_s

            # 5. The threads' sums meet in shared memory; each thread writes G · D / TH outputs.
            for t in T.unroll(HW):
                if t * W + w < G and lane == 0:
                    ml_s[0, t * W + w] = mr[t]
                    ml_s[1, t * W + w] = lr[t]
            for g in T.unroll(G):
                for v in T.vectorized(VW):
                    o_s[w * RW + sub, g, c * VW + v] = acc[g * VW + v]
            T.sync_threads()
            for e in T.unroll(-(-(G * D) // TH)):
                if each(TH, G * D, e * TH + tid):
                    st[0] = T.float32(0)
                    for j in T.unroll(SLOTS):
                        st[0] = st[0] + o_s[j, (e * TH + tid) // D, (e * TH + tid) % D]
                    if S == 1:
                        out[b, h * G + (e * TH + tid) // D, (e * TH + tid) % D] = T.if_then_else(
                            active, T.cast(st[0] / ml_s[1, (e * TH + tid) // D], dt), T.cast(0, dt))
                    elif active:
                        o_part[sid, b, h * G + (e * TH + tid) // D, (e * TH + tid) % D] = \
                            st[0] / ml_s[1, (e * TH + tid) // D]
            if S > 1 and active and tid < G:
                lse_part[sid, b, h * G + tid] = T.log2(ml_s[1, tid]) + ml_s[0, tid]

    return decode_split
