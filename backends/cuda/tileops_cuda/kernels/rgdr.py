"""RGDR decode step (RecurrentGatedDeltaRuleFwdOp) as a TileLang kernel for NVIDIA GPUs.

Semantics are those of ``tileops_cpu_ref.rgdr.recurrent_gated_delta_rule`` (see RGDR.md):
packed variable-length sequences, GQA, per-token slot writes into a state pool
``[S, NV, DV, DK]``, optional ``g`` / ``gk`` (scalar or per-channel) decays, optional
in-kernel q/k l2 normalisation, padding slots, ``num_accepted_tokens``, and the running
state re-quantised to the state dtype after every token.

Kernel shape (why it looks like this; numbers in backends/cuda/NOTES.md):

* Tiled layout: one program per (sequence, value head, tile of ``BV`` value rows). The
  ``[BV, DK]`` state tile is read once, kept in registers (16-bit states stay packed: they
  are re-quantised every token, so registers lose nothing) for all tokens of the sequence,
  and written once per token: the kernel moves ``B*(1+T_b)`` state tiles, the bytes floor.
* Streaming layout: one program per (sequence, key head) or a runtime share of its
  ``GRP*DV`` rows; rows of the state evolve independently, so the program streams
  ``BV``-row chunks through registers, the next chunk's state loading while the current one
  runs every token. The metadata chain and q/k staging are paid once per program.
* Inside a program a state row belongs to ``threads_per_row`` consecutive lanes, each owning
  16-byte runs interleaved across the lanes (coalesced); both row dot products end in xor
  shuffles: no shared memory or barrier per token.
* Tokens are staged in chunks: q and k (l2-normalised and scaled once), values, beta, decays
  and slots in one burst, overlapping the state load; the first slot is loaded without
  waiting for the sequence length, so the chain to the state is two round trips.
* Nothing depends on B or T at compile time: both are dynamic shapes; the prefix sum of
  ``lengths``-style metadata is computed in the kernel. :class:`RGDRSchedule` picks among
  compiled tilings per call from the number of sequences and tokens (host-side shapes).

The build identity is :class:`RGDRBuildKey`; :func:`build_rgdr` compiles it (tilelang is
imported there, never at module import) and returns an :class:`RGDRLauncher`.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations,
# which name closure variables, at decoration time.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES as _ELEM_BYTES
from ._common import SUPPORTED_ARCHS as _SUPPORTED_ARCHS
from ._common import cached_build, compile_prim_func

__all__ = [
    "RGDRBuildKey",
    "RGDRSchedule",
    "RGDRTiling",
    "RGDRLauncher",
    "build_rgdr",
    "default_schedule",
    "default_tiling",
    "rgdr_refusal",
    "build_key_for",
    "L2NORM_EPS",
]

#: The epsilon of the in-kernel q/k l2 normalisation (the reference's value).
L2NORM_EPS = 1e-6

_FLOAT_DTYPES = ("float16", "bfloat16", "float32")
_INDEX_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class RGDRBuildKey:
    """Everything the compiled RGDR kernel is specialised on (never B, T or the pool size).

    ``accepted_dtype`` is None when ``num_accepted_tokens`` is absent; ``gk_form`` is None
    (absent), ``"scalar"`` (``gk`` is ``[T, NV]``) or ``"vector"`` (``[T, NV, DK]``).
    """

    input_dtype: str
    state_dtype: str
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    seq_lens_style: str = "lengths"
    seq_lens_dtype: str = "int32"
    slot_dtype: str = "int32"
    accepted_dtype: str | None = None
    has_g: bool = True
    gk_form: str | None = None
    use_qk_l2norm: bool = False
    arch: str = "sm_90"

    def __post_init__(self) -> None:
        def bad(field: str, value: Any, allowed: Any) -> ValueError:
            return ValueError(f"RGDRBuildKey.{field}={value!r} is not one of {allowed}")

        if self.input_dtype not in _FLOAT_DTYPES:
            raise bad("input_dtype", self.input_dtype, _FLOAT_DTYPES)
        if self.state_dtype not in _FLOAT_DTYPES:
            raise bad("state_dtype", self.state_dtype, _FLOAT_DTYPES)
        if self.seq_lens_style not in ("lengths", "cu_seqlens"):
            raise bad("seq_lens_style", self.seq_lens_style, ("lengths", "cu_seqlens"))
        for field in ("seq_lens_dtype", "slot_dtype"):
            if getattr(self, field) not in _INDEX_DTYPES:
                raise bad(field, getattr(self, field), _INDEX_DTYPES)
        if self.accepted_dtype is not None and self.accepted_dtype not in _INDEX_DTYPES:
            raise bad("accepted_dtype", self.accepted_dtype, (*_INDEX_DTYPES, None))
        if self.gk_form not in (None, "scalar", "vector"):
            raise bad("gk_form", self.gk_form, (None, "scalar", "vector"))
        for field in ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"):
            if int(getattr(self, field)) <= 0:
                raise ValueError(f"RGDRBuildKey.{field} must be positive, got {getattr(self, field)}")
        if self.num_v_heads % self.num_k_heads:
            raise ValueError(
                f"RGDRBuildKey: num_v_heads={self.num_v_heads} must be a multiple of "
                f"num_k_heads={self.num_k_heads} (GQA)"
            )


@dataclass(frozen=True)
class RGDRTiling:
    """How one build key is laid onto threads; chosen by :func:`default_tiling`.

    ``threads_per_row`` lanes share one state row; each thread holds ``rows_per_thread``
    rows, so a program covers ``BV = rows_per_thread * threads / threads_per_row`` rows.
    ``min_blocks`` is the ``__launch_bounds__`` occupancy hint (caps registers).

    ``stream``: a program owns a (sequence, key head) pair, or a runtime-chosen share of
    its ``GRP * DV`` rows, and streams them through registers ``BV`` rows at a time, the next
    chunk's state loading while the current one runs all tokens (rows of the state evolve
    independently). The metadata chain and the q/k staging are then paid once per program
    instead of once per tile. Otherwise one program per (sequence, value head, tile).
    """

    threads: int = 128
    threads_per_row: int = 8
    rows_per_thread: int = 1
    min_blocks: int = 4
    stream: bool = False

    @property
    def block_v(self) -> int:
        return self.rows_per_thread * self.threads // self.threads_per_row

    @property
    def chunk(self) -> int:
        """Tokens staged per burst: one token per row group of the block."""
        return self.threads // self.threads_per_row


@dataclass(frozen=True)
class RGDRSchedule:
    """Tilings of one build key, chosen per call from the number of sequences and tokens.

    Both counts are tensor shapes on the host, so the choice is free, and the compile never
    specialises on B or T: every variant accepts any B and T. Small batches want many small
    programs (latency); large ones want big tiles (bytes in flight per register); large
    batches of short sequences (decode) can use ``short``, typically the streaming layout.
    """

    small: RGDRTiling
    large: RGDRTiling
    large_from_seqs: int
    short: RGDRTiling | None = None
    short_from_seqs: int = 1 << 62
    short_max_tokens: int = 0  # average tokens per sequence at or below which ``short`` runs

    def pick(self, n_seq: int, n_tokens: int | None = None) -> RGDRTiling:
        if (
            self.short is not None
            and n_seq >= self.short_from_seqs
            and n_tokens is not None
            and n_tokens <= self.short_max_tokens * n_seq
        ):
            return self.short
        return self.large if n_seq >= self.large_from_seqs else self.small

    def tilings(self) -> tuple[RGDRTiling, ...]:
        return tuple(dict.fromkeys(t for t in (self.small, self.large, self.short) if t is not None))


_STREAM_SMEM_LIMIT = 48 * 1024

# The schedule rule, as data (measured on the H200, see NOTES.md): state bytes ->
# (small, large, sequences from which large runs, short, sequences from which short runs,
#  average tokens per sequence up to which short runs).
_SCHEDULES = {
    4: (RGDRTiling(128, 16, 2, 8), RGDRTiling(128, 16, 8, 3), 8, None, 1 << 62, 0),
    2: (RGDRTiling(128, 16, 2, 8), RGDRTiling(128, 16, 4, 4), 8, RGDRTiling(128, 16, 4, 5, True), 32, 4),
}


def default_tiling(key: RGDRBuildKey) -> RGDRTiling:
    """The small-batch tiling (16-row tiles; the most permissive about head_v_dim)."""
    return default_schedule(key).small


def default_schedule(key: RGDRBuildKey) -> RGDRSchedule:
    """The schedule rule: the table above; a variant the key cannot use (its tile does not
    divide head_v_dim, or the streaming layout would stage too many value rows) falls back
    to the small tiling."""
    small, large, n, short, short_n, short_tokens = _SCHEDULES[_ELEM_BYTES[key.state_dtype]]
    if rgdr_refusal(key, large) is not None:
        large = small
    if short is not None and rgdr_refusal(key, short) is not None:
        short = None
    return RGDRSchedule(small, large, n, short, short_n, short_tokens)


def rgdr_refusal(key: RGDRBuildKey, tiling: RGDRTiling | None = None) -> str | None:
    """Why this kernel cannot serve ``key`` (a sentence naming the fix), or None if it can."""
    tiling = tiling or default_tiling(key)
    if key.arch not in _SUPPORTED_ARCHS:
        return (
            f"RGDR TileLang kernel: arch {key.arch} is not supported (written for "
            f"{', '.join(_SUPPORTED_ARCHS)}; measured on sm_90); use the reference"
        )
    tpr = tiling.threads_per_row
    if key.head_k_dim % tpr or (key.head_k_dim // tpr) & (key.head_k_dim // tpr - 1):
        return (
            f"RGDR TileLang kernel: head_k_dim={key.head_k_dim} must be {tpr} times a power of two "
            "(each lane owns a power-of-two run of columns); use the reference"
        )
    if key.head_k_dim // tpr > 32:
        return (
            f"RGDR TileLang kernel: head_k_dim={key.head_k_dim} > {32 * tpr} would keep more than 32 state "
            "columns per lane in registers; use the reference"
        )
    if key.head_v_dim % tiling.block_v:
        return (
            f"RGDR TileLang kernel: head_v_dim={key.head_v_dim} must be a multiple of the "
            f"value tile ({tiling.block_v}); use the reference"
        )
    group_rows = key.num_v_heads // key.num_k_heads * key.head_v_dim
    if tiling.stream and tiling.chunk * group_rows * 4 > _STREAM_SMEM_LIMIT:
        return (
            f"RGDR TileLang kernel (stream layout): {group_rows} value rows per key head need "
            f"{tiling.chunk * group_rows * 4} bytes of staged values (> {_STREAM_SMEM_LIMIT}); use a tiled layout"
        )
    return None


def build_key_for(
    query: Any,
    state: Any,
    actual_seq_lengths: Any,
    ssm_state_indices: Any,
    g: Any = None,
    gk: Any = None,
    num_accepted_tokens: Any = None,
    *,
    value: Any = None,
    seq_lens_style: str = "lengths",
    use_qk_l2norm_in_kernel: bool = False,
    arch: str = "sm_90",
) -> RGDRBuildKey:
    """Derive the build key from call tensors (dtypes and per-head shapes only)."""

    def name(t: Any) -> str:
        return str(t.dtype).replace("torch.", "")

    _, nk, dk = query.shape
    _, nv, dv, _ = state.shape
    return RGDRBuildKey(
        input_dtype=name(query),
        state_dtype=name(state),
        num_k_heads=int(nk),
        num_v_heads=int(nv),
        head_k_dim=int(dk),
        head_v_dim=int(dv),
        seq_lens_style=seq_lens_style,
        seq_lens_dtype=name(actual_seq_lengths),
        slot_dtype=name(ssm_state_indices),
        accepted_dtype=None if num_accepted_tokens is None else name(num_accepted_tokens),
        has_g=g is not None,
        gk_form=None if gk is None else ("vector" if gk.dim() == 3 else "scalar"),
        use_qk_l2norm=bool(use_qk_l2norm_in_kernel),
        arch=arch,
    )


def _pow2_at_most(n: int, cap: int) -> int:
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


def _rgdr_program(key: RGDRBuildKey, tiling: RGDRTiling):  # noqa: C901 - one kernel, read top to bottom
    """The TileLang PrimFunc for ``key`` laid out by ``tiling``."""
    import tilelang.language as T

    f32, i32 = "float32", "int32"
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    GRP = NV // NK
    THREADS, TPR, R = tiling.threads, tiling.threads_per_row, tiling.rows_per_thread
    ROWS = THREADS // TPR  # rows of the tile covered by one pass of the block
    BV = tiling.block_v
    C = tiling.chunk  # tokens per staging burst
    EPT = DK // TPR  # columns per lane
    SV = _pow2_at_most(EPT, 16 // _ELEM_BYTES[key.state_dtype])  # state vector width
    IV = _pow2_at_most(EPT, 16 // _ELEM_BYTES[key.input_dtype])  # q/k vector width
    GV = _pow2_at_most(EPT, 4)  # gk (fp32) vector width
    NVT = DV // BV
    NWARP = THREADS // 32
    PS = max(1, min(4, EPT // 4))  # partial sums per dot product (shortens the add chain)
    NSH = TPR.bit_length() - 1  # xor-shuffle rounds: offsets TPR/2 .. 1
    sdt, idt = key.state_dtype, key.input_dtype
    lengths_style = key.seq_lens_style == "lengths"
    has_g, gk_form, has_acc, l2 = key.has_g, key.gk_form, key.accepted_dtype is not None, key.use_qk_l2norm
    scalar_decay = has_g or gk_form == "scalar"
    vector_decay = gk_form == "vector"
    requant = sdt != f32
    rdt = sdt  # registers hold the state in its own dtype: a 16-bit state is exact there

    def decayed(x, dsc, dvec, e):
        """fp32 value of state element ``x`` after this token's decays (same op order each time)."""
        v = T.cast(x, f32)
        if scalar_decay:
            v = v * dsc
        if vector_decay:
            v = v * dvec[e]
        return v

    Tn, S, BM, NA = T.dynamic("T"), T.dynamic("S"), T.dynamic("BM"), T.dynamic("NA")
    NB = BM if lengths_style else BM - 1

    def col(cc, lane, vec, e):
        """Column of element ``cc*vec + e`` of a lane: 16-byte runs interleaved across lanes."""
        return (cc * TPR + lane) * vec + e

    @T.macro
    def body_tiled(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        with T.Kernel(NV * NVT, NB, threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            h = bx // NVT
            vt = bx % NVT
            hk = h // GRP

            red = T.alloc_shared((NWARP,), i32)
            qk_s = T.alloc_shared((C, 2, DK), f32)
            v_s = T.alloc_shared((C, BV), f32)
            b_s = T.alloc_shared((C,), f32)
            d_s = T.alloc_shared((C,), f32)
            sl_s = T.alloc_shared((C,), i32)
            w_s = T.alloc_shared((C,), i32)
            if vector_decay:
                dv_s = T.alloc_shared((C, DK), f32)

            Sx = T.alloc_local((R, EPT), rdt)  # the running state, in the state dtype's bits
            kq = T.alloc_local((EPT,), f32)
            xq = T.alloc_local((EPT,), f32)
            xk = T.alloc_local((EPT,), f32)
            dvec = T.alloc_local((EPT,), f32) if vector_decay else None
            pacc = T.alloc_local((R, PS), f32)
            acc = T.alloc_local((R,), f32)
            start = T.alloc_var(i32)
            L = T.alloc_var(i32)

            # -- where sequence `by` starts and how long it is --------------------------
            # Latency is the cost at small B: every load below is issued as early as its
            # inputs allow (L and the accepted count beside the prefix sum, the first slot
            # without waiting on L), so the chain to the state load is two round trips.
            acc_n = T.alloc_var(i32)
            acc_n = T.cast(nacc[by], i32) if has_acc else 1
            if lengths_style:
                part = T.alloc_var(i32)
                part = 0
                L = T.cast(seq_meta[by], i32)
                for it in T.serial(T.ceildiv(by, THREADS)):
                    if it * THREADS + tid < by:
                        part = part + T.cast(seq_meta[it * THREADS + tid], i32)
                for off in T.unroll(5):
                    part = part + T.shfl_xor(part, 16 >> off)
                if tid % 32 == 0:
                    red[tid // 32] = part
                T.sync_threads()
                start = 0
                for w in T.unroll(NWARP):
                    start = start + red[w]
            else:
                start = T.cast(seq_meta[by], i32)
                L = T.cast(seq_meta[by + 1], i32) - start

            # -- initial state: the slot of the first accepted token, zeros if padding ------
            # (the index is clamped so the load need not wait for L; an empty sequence skips
            # everything below through the L > 0 predicate)
            slot0 = T.cast(slots[T.max(T.min(start + acc_n - 1, Tn - 1), 0)], i32)
            for r in T.unroll(R):
                for cc in T.unroll(EPT // SV):
                    for e in T.vectorized(SV):
                        Sx[r, cc * SV + e] = T.if_then_else(
                            slot0 >= 0 and L > 0,
                            state[slot0, h, vt * BV + r * ROWS + rg, col(cc, lane, SV, e)],
                            T.cast(0, rdt),
                        )

            if L > 0:
                for ch in T.serial(T.ceildiv(L, C)):
                    base = ch * C
                    T.sync_threads()  # the previous chunk's staging buffers are free
                    # -- stage a chunk: row group `rg` stages token `base + rg` ---------------
                    tok = start + base + rg
                    live = base + rg < L
                    for cc in T.unroll(EPT // IV):
                        for e in T.vectorized(IV):
                            xq[cc * IV + e] = T.if_then_else(
                                live, T.cast(query[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0)
                            )
                            xk[cc * IV + e] = T.if_then_else(
                                live, T.cast(key_[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0)
                            )
                    if vector_decay:
                        for cc in T.unroll(EPT // GV):
                            for e in T.vectorized(GV):
                                dvec[cc * GV + e] = T.if_then_else(
                                    live, T.exp(gk[tok, h, col(cc, lane, GV, e)]), T.float32(1)
                                )
                    fq = T.alloc_var(f32)
                    fk = T.alloc_var(f32)
                    fq = scale
                    fk = T.float32(1)
                    if l2:
                        ssq = T.alloc_var(f32)
                        ssk = T.alloc_var(f32)
                        ssq = 0.0
                        ssk = 0.0
                        for e in T.unroll(EPT):
                            ssq = ssq + xq[e] * xq[e]
                            ssk = ssk + xk[e] * xk[e]
                        for s in T.unroll(NSH):
                            ssq = ssq + T.shfl_xor(ssq, TPR >> (s + 1))
                            ssk = ssk + T.shfl_xor(ssk, TPR >> (s + 1))
                        fq = T.rsqrt(ssq + T.float32(L2NORM_EPS)) * scale
                        fk = T.rsqrt(ssk + T.float32(L2NORM_EPS))
                    if live:
                        for cc in T.unroll(EPT // IV):
                            for e in T.vectorized(IV):
                                qk_s[rg, 0, col(cc, lane, IV, e)] = xq[cc * IV + e] * fq
                                qk_s[rg, 1, col(cc, lane, IV, e)] = xk[cc * IV + e] * fk
                        if vector_decay:
                            for cc in T.unroll(EPT // GV):
                                for e in T.vectorized(GV):
                                    dv_s[rg, col(cc, lane, GV, e)] = dvec[cc * GV + e]
                    for it in T.unroll((C * BV + THREADS - 1) // THREADS):
                        idx = it * THREADS + tid
                        if idx < C * BV and base + idx // BV < L:
                            v_s[idx // BV, idx % BV] = T.cast(value[start + base + idx // BV, h, vt * BV + idx % BV], f32)
                    if tid < C and base + tid < L:
                        tt = start + base + tid
                        b_s[tid] = T.cast(beta[tt, h], f32)
                        if scalar_decay:
                            if has_g and gk_form == "scalar":
                                d_s[tid] = T.exp(g[tt, h]) * T.exp(gk[tt, h])
                            elif has_g:
                                d_s[tid] = T.exp(g[tt, h])
                            else:
                                d_s[tid] = T.exp(gk[tt, h])
                        sl = T.cast(slots[tt], i32)
                        sl_s[tid] = sl
                        # A slot that the next token of this sequence writes again is skipped:
                        # nothing reads it in between, so the final contents are identical.
                        nxt = T.if_then_else(base + tid + 1 < L, T.cast(slots[T.min(tt + 1, Tn - 1)], i32), -1)
                        w_s[tid] = T.if_then_else(sl >= 0 and sl != nxt, 1, 0)
                    T.sync_threads()

                    # -- the recurrence, token by token, state in registers -------------------
                    for c2 in T.serial(C):
                        if base + c2 < L:
                            for cc in T.unroll(EPT // SV):
                                for e in T.vectorized(SV):
                                    kq[cc * SV + e] = qk_s[c2, 1, col(cc, lane, SV, e)]
                            if vector_decay:
                                for cc in T.unroll(EPT // SV):
                                    for e in T.vectorized(SV):
                                        dvec[cc * SV + e] = dv_s[c2, col(cc, lane, SV, e)]
                            dsc = d_s[c2] if scalar_decay else T.float32(1)
                            for r in T.unroll(R):
                                for p in T.unroll(PS):
                                    pacc[r, p] = 0.0
                                for e in T.unroll(EPT):
                                    if requant:
                                        # 16-bit state stays packed in registers; the decayed value
                                        # is recomputed (bit-identically) for the update below.
                                        pacc[r, e % PS] = pacc[r, e % PS] + decayed(Sx[r, e], dsc, dvec, e) * kq[e]
                                    else:
                                        Sx[r, e] = decayed(Sx[r, e], dsc, dvec, e)
                                        pacc[r, e % PS] = pacc[r, e % PS] + Sx[r, e] * kq[e]
                                acc[r] = pacc[r, 0]
                                for p in T.unroll(PS - 1):
                                    acc[r] = acc[r] + pacc[r, p + 1]
                            for r in T.unroll(R):
                                for s in T.unroll(NSH):
                                    acc[r] = acc[r] + T.shfl_xor(acc[r], TPR >> (s + 1))
                            for cc in T.unroll(EPT // SV):
                                for e in T.vectorized(SV):
                                    xq[cc * SV + e] = qk_s[c2, 0, col(cc, lane, SV, e)]
                            for r in T.unroll(R):
                                dl = b_s[c2] * (v_s[c2, r * ROWS + rg] - acc[r])
                                for p in T.unroll(PS):
                                    pacc[r, p] = 0.0
                                for e in T.unroll(EPT):
                                    if requant:
                                        # The output reads the updated state before it is re-quantised; the
                                        # recurrence continues from the rounded value (RGDR.md).
                                        nv = decayed(Sx[r, e], dsc, dvec, e) + dl * kq[e]
                                        pacc[r, e % PS] = pacc[r, e % PS] + nv * xq[e]
                                        Sx[r, e] = T.cast(nv, sdt)
                                    else:
                                        Sx[r, e] = Sx[r, e] + dl * kq[e]
                                        pacc[r, e % PS] = pacc[r, e % PS] + Sx[r, e] * xq[e]
                                acc[r] = pacc[r, 0]
                                for p in T.unroll(PS - 1):
                                    acc[r] = acc[r] + pacc[r, p + 1]
                            for r in T.unroll(R):
                                for s in T.unroll(NSH):
                                    acc[r] = acc[r] + T.shfl_xor(acc[r], TPR >> (s + 1))
                            if lane == 0:
                                for r in T.unroll(R):
                                    out[start + base + c2, h, vt * BV + r * ROWS + rg] = T.cast(acc[r], idt)
                            if w_s[c2] != 0:
                                for r in T.unroll(R):
                                    for cc in T.unroll(EPT // SV):
                                        for e in T.vectorized(SV):
                                            state[sl_s[c2], h, vt * BV + r * ROWS + rg, col(cc, lane, SV, e)] = Sx[
                                                r, cc * SV + e
                                            ]

    NCH = GRP * DV // BV  # row chunks of one key-head group (stream mode)
    GR = GRP * DV  # rows of one key-head group
    VV = _pow2_at_most(GR, 16 // _ELEM_BYTES[key.input_dtype])  # value staging vector width

    @T.macro
    def body_stream(query, key_, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits):
        with T.Kernel(NK * splits, NB, threads=THREADS) as (bx, by):
            T.annotate_min_blocks_per_sm(tiling.min_blocks)
            tid = T.get_thread_binding()
            lane = tid % TPR
            rg = tid // TPR
            # Materialised once: with `splits` a runtime value, TileLang would otherwise expand
            # these floor divisions at every use.
            hk = T.alloc_var(i32)
            c_lo = T.alloc_var(i32)
            nch = T.alloc_var(i32)
            hk = T.truncdiv(bx, splits)
            c_lo = T.truncmod(bx, splits) * T.truncdiv(NCH + splits - 1, splits)
            nch = T.max(T.min(NCH - c_lo, T.truncdiv(NCH + splits - 1, splits)), 0)

            red = T.alloc_shared((NWARP,), i32)
            qk_s = T.alloc_shared((C, 2, DK), f32)
            v_s = T.alloc_shared((C, GR), f32)
            b_s = T.alloc_shared((C, GRP), f32)
            d_s = T.alloc_shared((C, GRP), f32)
            sl_s = T.alloc_shared((C,), i32)
            w_s = T.alloc_shared((C,), i32)
            dv_s = T.alloc_shared((C, GRP, DK), f32) if vector_decay else None

            Sa = T.alloc_local((R, EPT), rdt)  # the chunk being run, in the state dtype's bits
            Sb = T.alloc_local((R, EPT), rdt)  # the next chunk, loading meanwhile
            kq = T.alloc_local((EPT,), f32)
            xq = T.alloc_local((EPT,), f32)
            xk = T.alloc_local((EPT,), f32)
            dvec = T.alloc_local((EPT,), f32) if vector_decay else None
            pacc = T.alloc_local((R, PS), f32)
            acc = T.alloc_local((R,), f32)
            start = T.alloc_var(i32)
            L = T.alloc_var(i32)
            acc_n = T.alloc_var(i32)
            acc_n = T.cast(nacc[by], i32) if has_acc else 1
            if lengths_style:
                part = T.alloc_var(i32)
                part = 0
                L = T.cast(seq_meta[by], i32)
                for it in T.serial(T.ceildiv(by, THREADS)):
                    if it * THREADS + tid < by:
                        part = part + T.cast(seq_meta[it * THREADS + tid], i32)
                for off in T.unroll(5):
                    part = part + T.shfl_xor(part, 16 >> off)
                if tid % 32 == 0:
                    red[tid // 32] = part
                T.sync_threads()
                start = 0
                for w in T.unroll(NWARP):
                    start = start + red[w]
            else:
                start = T.cast(seq_meta[by], i32)
                L = T.cast(seq_meta[by + 1], i32) - start
            slot0 = T.cast(slots[T.max(T.min(start + acc_n - 1, Tn - 1), 0)], i32)

            # first chunk of this program's rows
            for r in T.unroll(R):
                for cc in T.unroll(EPT // SV):
                    for e in T.vectorized(SV):
                        Sa[r, cc * SV + e] = T.if_then_else(
                            slot0 >= 0 and L > 0 and nch > 0,
                            state[slot0, hk * GRP + T.truncdiv(c_lo * BV, DV), T.truncmod(c_lo * BV, DV) + r * ROWS + rg,
                                  col(cc, lane, SV, e)],
                            T.cast(0, rdt),
                        )  # fmt: skip
            ntc = T.ceildiv(L, C)
            if L > 0:
                rc = T.alloc_var(i32)
                hl = T.alloc_var(i32)
                h = T.alloc_var(i32)
                v0 = T.alloc_var(i32)
                for ci in T.serial(nch):
                    rc = c_lo + ci
                    hl = T.truncdiv(rc * BV, DV)
                    h = hk * GRP + hl
                    v0 = T.truncmod(rc * BV, DV)
                    # Prefetch: the next chunk's state is in flight while this one runs.
                    for r in T.unroll(R):
                        for cc in T.unroll(EPT // SV):
                            for e in T.vectorized(SV):
                                Sb[r, cc * SV + e] = T.if_then_else(
                                    slot0 >= 0 and ci + 1 < nch,
                                    state[slot0, hk * GRP + T.truncdiv((rc + 1) * BV, DV),
                                          T.truncmod((rc + 1) * BV, DV) + r * ROWS + rg, col(cc, lane, SV, e)],
                                    T.cast(0, rdt),
                                )  # fmt: skip
                    for tc in T.serial(ntc):
                        base = tc * C
                        # Stage a token chunk: once per program when the sequence fits one chunk.
                        if ntc > 1 or ci == 0:
                            T.sync_threads()
                            tok = start + base + rg
                            live = base + rg < L
                            for cc in T.unroll(EPT // IV):
                                for e in T.vectorized(IV):
                                    xq[cc * IV + e] = T.if_then_else(
                                        live, T.cast(query[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0)
                                    )
                                    xk[cc * IV + e] = T.if_then_else(
                                        live, T.cast(key_[tok, hk, col(cc, lane, IV, e)], f32), T.float32(0)
                                    )
                            fq = T.alloc_var(f32)
                            fk = T.alloc_var(f32)
                            fq = scale
                            fk = T.float32(1)
                            if l2:
                                ssq = T.alloc_var(f32)
                                ssk = T.alloc_var(f32)
                                ssq = 0.0
                                ssk = 0.0
                                for e in T.unroll(EPT):
                                    ssq = ssq + xq[e] * xq[e]
                                    ssk = ssk + xk[e] * xk[e]
                                for s in T.unroll(NSH):
                                    ssq = ssq + T.shfl_xor(ssq, TPR >> (s + 1))
                                    ssk = ssk + T.shfl_xor(ssk, TPR >> (s + 1))
                                fq = T.rsqrt(ssq + T.float32(L2NORM_EPS)) * scale
                                fk = T.rsqrt(ssk + T.float32(L2NORM_EPS))
                            if live:
                                for cc in T.unroll(EPT // IV):
                                    for e in T.vectorized(IV):
                                        qk_s[rg, 0, col(cc, lane, IV, e)] = xq[cc * IV + e] * fq
                                        qk_s[rg, 1, col(cc, lane, IV, e)] = xk[cc * IV + e] * fk
                            for it in T.unroll((C * GR // VV + THREADS - 1) // THREADS):
                                for e in T.vectorized(VV):
                                    idx = (it * THREADS + tid) * VV + e
                                    if idx < C * GR and base + idx // GR < L:
                                        v_s[idx // GR, idx % GR] = T.cast(
                                            value[start + base + idx // GR, hk * GRP + (idx % GR) // DV, (idx % GR) % DV], f32
                                        )
                            for it in T.unroll((C * GRP + THREADS - 1) // THREADS):
                                idx = it * THREADS + tid
                                if idx < C * GRP and base + idx // GRP < L:
                                    tt = start + base + idx // GRP
                                    hh = hk * GRP + idx % GRP
                                    b_s[idx // GRP, idx % GRP] = T.cast(beta[tt, hh], f32)
                                    if scalar_decay:
                                        if has_g and gk_form == "scalar":
                                            d_s[idx // GRP, idx % GRP] = T.exp(g[tt, hh]) * T.exp(gk[tt, hh])
                                        elif has_g:
                                            d_s[idx // GRP, idx % GRP] = T.exp(g[tt, hh])
                                        else:
                                            d_s[idx // GRP, idx % GRP] = T.exp(gk[tt, hh])
                            if vector_decay:
                                for it in T.unroll((C * GRP * DK // GV + THREADS - 1) // THREADS):
                                    for e in T.vectorized(GV):
                                        idx = (it * THREADS + tid) * GV + e
                                        if idx < C * GRP * DK and base + idx // (GRP * DK) < L:
                                            dv_s[idx // (GRP * DK), (idx // DK) % GRP, idx % DK] = T.exp(
                                                gk[start + base + idx // (GRP * DK), hk * GRP + (idx // DK) % GRP, idx % DK]
                                            )
                            if tid < C and base + tid < L:
                                tt = start + base + tid
                                sl = T.cast(slots[tt], i32)
                                sl_s[tid] = sl
                                # A slot the next token of this sequence writes again is skipped:
                                # nothing reads it in between, so the final contents are identical.
                                nxt = T.if_then_else(base + tid + 1 < L, T.cast(slots[T.min(tt + 1, Tn - 1)], i32), -1)
                                w_s[tid] = T.if_then_else(sl >= 0 and sl != nxt, 1, 0)
                            T.sync_threads()

                        # -- the recurrence on this chunk's rows, token by token --------------
                        for c2 in T.serial(C):
                            if base + c2 < L:
                                for cc in T.unroll(EPT // SV):
                                    for e in T.vectorized(SV):
                                        kq[cc * SV + e] = qk_s[c2, 1, col(cc, lane, SV, e)]
                                if vector_decay:
                                    for cc in T.unroll(EPT // SV):
                                        for e in T.vectorized(SV):
                                            dvec[cc * SV + e] = dv_s[c2, hl, col(cc, lane, SV, e)]
                                dsc = d_s[c2, hl] if scalar_decay else T.float32(1)
                                for r in T.unroll(R):
                                    for p in T.unroll(PS):
                                        pacc[r, p] = 0.0
                                    for e in T.unroll(EPT):
                                        if requant:
                                            pacc[r, e % PS] = pacc[r, e % PS] + decayed(Sa[r, e], dsc, dvec, e) * kq[e]
                                        else:
                                            Sa[r, e] = decayed(Sa[r, e], dsc, dvec, e)
                                            pacc[r, e % PS] = pacc[r, e % PS] + Sa[r, e] * kq[e]
                                    acc[r] = pacc[r, 0]
                                    for p in T.unroll(PS - 1):
                                        acc[r] = acc[r] + pacc[r, p + 1]
                                for r in T.unroll(R):
                                    for s in T.unroll(NSH):
                                        acc[r] = acc[r] + T.shfl_xor(acc[r], TPR >> (s + 1))
                                for cc in T.unroll(EPT // SV):
                                    for e in T.vectorized(SV):
                                        xq[cc * SV + e] = qk_s[c2, 0, col(cc, lane, SV, e)]
                                for r in T.unroll(R):
                                    dl = b_s[c2, hl] * (v_s[c2, rc * BV + r * ROWS + rg] - acc[r])
                                    for p in T.unroll(PS):
                                        pacc[r, p] = 0.0
                                    for e in T.unroll(EPT):
                                        if requant:
                                            # The output reads the updated state before it is re-quantised; the
                                            # recurrence continues from the rounded value (RGDR.md).
                                            nv = decayed(Sa[r, e], dsc, dvec, e) + dl * kq[e]
                                            pacc[r, e % PS] = pacc[r, e % PS] + nv * xq[e]
                                            Sa[r, e] = T.cast(nv, sdt)
                                        else:
                                            Sa[r, e] = Sa[r, e] + dl * kq[e]
                                            pacc[r, e % PS] = pacc[r, e % PS] + Sa[r, e] * xq[e]
                                    acc[r] = pacc[r, 0]
                                    for p in T.unroll(PS - 1):
                                        acc[r] = acc[r] + pacc[r, p + 1]
                                for r in T.unroll(R):
                                    for s in T.unroll(NSH):
                                        acc[r] = acc[r] + T.shfl_xor(acc[r], TPR >> (s + 1))
                                if lane == 0:
                                    for r in T.unroll(R):
                                        out[start + base + c2, h, v0 + r * ROWS + rg] = T.cast(acc[r], idt)
                                if w_s[c2] != 0:
                                    for r in T.unroll(R):
                                        for cc in T.unroll(EPT // SV):
                                            for e in T.vectorized(SV):
                                                state[sl_s[c2], h, v0 + r * ROWS + rg, col(cc, lane, SV, e)] = Sa[
                                                    r, cc * SV + e
                                                ]
                    for r in T.unroll(R):
                        for i in T.unroll(EPT):
                            Sa[r, i] = Sb[r, i]

    if tiling.stream:
        body = body_stream  # noqa: F811 - the streaming layout replaces the tiled one
    else:
        body = body_tiled

    # The signature carries only the tensors this key uses. Each parameter needs its own
    # annotation object: TileLang binds one buffer per annotation instance.
    q_t = T.Tensor((Tn, NK, DK), idt)
    k_t = T.Tensor((Tn, NK, DK), idt)
    v_t = T.Tensor((Tn, NV, DV), idt)
    o_t = T.Tensor((Tn, NV, DV), idt)
    b_t = T.Tensor((Tn, NV), idt)
    s_t = T.Tensor((S, NV, DV, DK), sdt)
    m_t = T.Tensor((BM,), key.seq_lens_dtype)
    i_t = T.Tensor((Tn,), key.slot_dtype)
    g_t = T.Tensor((Tn, NV), f32)
    gk_t = T.Tensor((Tn, NV, DK), f32) if vector_decay else T.Tensor((Tn, NV), f32)
    a_t = T.Tensor((NA,), key.accepted_dtype or i32)

    # TileLang reads the signature from annotations, so each presence pattern is its own
    # function; all share `body`.
    if has_g and gk_form and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, gk: gk_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, gk, nacc, out, scale, splits)

    elif has_g and gk_form:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, gk: gk_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, gk, None, out, scale, splits)

    elif has_g and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, None, nacc, out, scale, splits)

    elif has_g:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 g: g_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, g, None, None, out, scale, splits)

    elif gk_form and has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 gk: gk_t, nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, gk, nacc, out, scale, splits)

    elif gk_form:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 gk: gk_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, gk, None, out, scale, splits)

    elif has_acc:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 nacc: a_t, out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, None, nacc, out, scale, splits)

    else:

        @T.prim_func
        def rgdr(query: q_t, key: k_t, value: v_t, beta: b_t, state: s_t, seq_meta: m_t, slots: i_t,
                 out: o_t, scale: T.float32, splits: T.int32):  # fmt: skip
            body(query, key, value, beta, state, seq_meta, slots, None, None, None, out, scale, splits)

    return rgdr


class RGDRLauncher:
    """A compiled RGDR kernel for one :class:`RGDRBuildKey`; call it with CUDA tensors.

    ``launcher(query, key, value, beta, state, actual_seq_lengths, ssm_state_indices,
    g, gk, num_accepted_tokens, out, scale)`` writes ``out`` and ``state`` in place on the
    current CUDA stream (so it captures into CUDA graphs) and returns ``out``. Tensors must
    be contiguous and match the key; optional inputs must be present exactly when the key
    says so. B and T may change from call to call.
    """

    def __init__(self, key: RGDRBuildKey, schedule: RGDRSchedule, kernels: dict[RGDRTiling, Any]) -> None:
        self.key = key
        self.schedule = schedule
        self.kernels = kernels
        self._default_scale = float(key.head_k_dim) ** -0.5
        self._cu = key.seq_lens_style == "cu_seqlens"
        self._programs_wanted = 0  # set on the first call from the device's SM count

    def source(self, tiling: RGDRTiling | None = None) -> str:
        """The generated CUDA source of one variant (the small-batch one by default)."""
        return self.kernels[tiling or self.schedule.small].get_kernel_source()

    def __call__(
        self,
        query: Any,
        key: Any,
        value: Any,
        beta: Any,
        state: Any,
        actual_seq_lengths: Any,
        ssm_state_indices: Any,
        g: Any = None,
        gk: Any = None,
        num_accepted_tokens: Any = None,
        out: Any = None,
        scale: float | None = None,
    ) -> Any:
        k = self.key
        if (g is not None) != k.has_g:
            raise ValueError(f"RGDR kernel built with has_g={k.has_g} but g is {'absent' if g is None else 'given'}")
        if (gk is None) != (k.gk_form is None):
            raise ValueError(f"RGDR kernel built with gk_form={k.gk_form!r} but gk is {'absent' if gk is None else 'given'}")
        if (num_accepted_tokens is None) != (k.accepted_dtype is None):
            raise ValueError(
                f"RGDR kernel built with accepted_dtype={k.accepted_dtype!r} but num_accepted_tokens is "
                f"{'absent' if num_accepted_tokens is None else 'given'}"
            )
        if out is None:
            raise ValueError("RGDR launcher needs an `out` buffer of shape [T, NV, DV] and value's dtype")
        n_seq = actual_seq_lengths.shape[0] - (1 if self._cu else 0)
        if n_seq <= 0 or query.shape[0] == 0:
            return out  # nothing to do; a zero-sized grid is not launchable
        args = [query, key, value, beta, state, actual_seq_lengths, ssm_state_indices]
        if k.has_g:
            args.append(g)
        if k.gk_form is not None:
            args.append(gk)
        if k.accepted_dtype is not None:
            args.append(num_accepted_tokens)
        args.append(out)
        args.append(self._default_scale if scale is None else float(scale))
        tiling = self.schedule.pick(n_seq, query.shape[0])
        args.append(self._splits(tiling, n_seq, query))
        self.kernels[tiling](*args)
        return out

    def _splits(self, tiling: RGDRTiling, n_seq: int, query: Any) -> int:
        """Stream layout: programs per (sequence, key head), enough to fill the GPU at small B."""
        if not tiling.stream:
            return 1
        if not self._programs_wanted:
            import torch

            self._programs_wanted = 8 * torch.cuda.get_device_properties(query.device).multi_processor_count
        k = self.key
        chunks = k.num_v_heads // k.num_k_heads * k.head_v_dim // tiling.block_v
        base = n_seq * k.num_k_heads
        return max(1, min(chunks, -(-self._programs_wanted // base)))


def build_rgdr(key: RGDRBuildKey, tiling: RGDRTiling | RGDRSchedule | None = None) -> RGDRLauncher:
    """Compile (once per process; tilelang's disk cache across processes) and return the launcher.

    ``tiling`` pins one tiling or a schedule (benchmarks); by default :func:`default_schedule`.
    Raises ValueError with the refusal reason if the kernel was not written for ``key``.
    """
    if tiling is None:
        schedule = default_schedule(key)
    elif isinstance(tiling, RGDRTiling):
        schedule = RGDRSchedule(tiling, tiling, 1 << 62)
    else:
        schedule = tiling
    for t in schedule.tilings():
        reason = rgdr_refusal(key, t)
        if reason is not None:
            raise ValueError(reason)

    def compile_one(t: RGDRTiling) -> Any:
        return cached_build(("rgdr-kernel", key, t), lambda: compile_prim_func(_rgdr_program(key, t), key.arch))

    def make() -> RGDRLauncher:
        return RGDRLauncher(key, schedule, {t: compile_one(t) for t in schedule.tilings()})

    return cached_build(("rgdr", key, schedule), make)
