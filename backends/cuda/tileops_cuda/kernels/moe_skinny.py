"""MoE experts at a decode step's few rows: warp-per-feature programs for the shared expert and the
routed experts.

Why (issue 21's model at decode, backends/cuda/NOTES.md, nineteenth session): the Qwen3.5-MoE decode
step spent 45.0 + 16.0 µs a step (four layers) in the shared expert's tensor-core programs for 6 MB
of weights a layer, about a tenth of the copy's rate (their decode tiling gives gate/up 32
programs), and 66.3 + 31.9 µs in the routed experts' for 50 MB (about half of it). The linear layers
had the same shape of problem, and the skinny linear program (:mod:`.skinny_linear`) read their
weights at 72-97% of the same-size copy. These programs use its macros, a warp a feature:

* gate/up: the rows staged in shared memory; the warp loads its feature's gate row and up row
  (both chunks before either is used), then ``g`` and ``u`` as float32 dot products reduced
  across the warp, each rounded to the dtype, and ``act = round(silu(g) · u)`` in float32: the
  roundings of the tensor-core body (``moe_grouped_experts.gate_up_tile``);
* down: the act rows staged; ``o = round(act · down[h])``, for the shared expert's gate times
  ``sigmoid(logit)`` in float32 and rounded once (``down_tile``'s roundings; the logit from the
  decode tiling's gate-logit program, or with ``MoESkinnyTiling.fused_logit`` from one more
  program of the gate/up kernel).

A program holds at most ``SKINNY_ROWS`` rows: the shared expert's call, or one tile of an expert's
rows of the routed map (the routed experts' ``tiles`` program at ``SKINNY_ROWS``-row tiles), and
``WARPS`` features. The routed banks enter flat (``[E · 2I, H]``, ``[E · H, I]``: expert ``e``'s gate
row ``j`` is row ``e · 2I + j``, its up row ``e · 2I + I + j``). Sums run in another order than the
tensor cores' (lane-strided, then the warp's butterfly), so results equal the tensor-core programs'
within a rounding, not bit for bit; both are checked against float64. The launchers reach these
programs where the build key asks (``MoESharedExpertBuildKey.skinny_rows``,
``MoEGroupedExpertsBuildKey.skinny_max_rows``); the registered keys do since the H200 timed them
(2026-12-04d, ``moe_skinny_bench.py``): the shared expert 1.55-2.17x the decode tiling at 1-4 rows, the
routed experts 1.07-1.25x at up to half a row an expert. :class:`MoESkinnyTiling` is how they run (the keys'
``skinny_tiling``; the registered ones are :data:`SHARED_SKINNY_TILING` and :data:`ROUTED_SKINNY_TILING`).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

import dataclasses
from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, dependent_launch, dependent_launch_refusal
from .skinny_linear import stage_rows_macro, staged_row_dot, weight_chunks

__all__ = ["ROUTED_SKINNY_TILING", "SHARED_SKINNY_TILING", "SKINNY_ROWS", "WARPS", "MoESkinnyTiling",
           "routed_skinny_tiling", "skinny_routed_programs", "skinny_shared_programs", "skinny_tiling_refusal"]

#: Rows a program holds at most (the skinny linear's registered limit).
SKINNY_ROWS = 4
#: Warps a program, a feature each.
WARPS = 8
#: 16-byte vectors a lane loads before it computes (a weight's chunk).
_UNROLL = 8


@dataclass(frozen=True)
class MoESkinnyTiling:
    """How the skinny programs run (timed by ``moe_skinny_bench.py``; the registered forms are
    :data:`SHARED_SKINNY_TILING` and :data:`ROUTED_SKINNY_TILING`).

    ``weights_first``: a warp issues its first weight chunk's loads before the rows are staged, so the
    two reads' latencies overlap (``SkinnyLinearTiling.weights_first``). ``down_features``: output
    features a warp of the down program owns. Its rows are short (I = 512 in bf16: two 16-byte vectors
    a lane), so one feature a warp leaves a lane two loads in flight and the program little work for its
    staging; with F features a lane loads ``F`` rows' vectors before any is used, and the grid has F
    times fewer programs. All keep the sums and their order: the same bits."""

    weights_first: bool = False
    down_features: int = 1
    #: Every skinny program launched as a programmatic dependent of the stream's previous kernel
    #: (``_common.dependent_launch``; ``SkinnyLinearTiling.dependent_launch``).
    dependent_launch: bool = False
    #: The shared expert's gate logit computed by one more program of its skinny gate/up kernel (a
    #: warp's dot product of the staged rows with ``expert_gate``) instead of its own launch: a
    #: launch fewer a layer. Its float32 sum is formed by the same macro as the other skinny dots
    #: (``skinny_linear.staged_row_dot``); it measured bit-equal to the logit program's on the bench's
    #: rows (2026-12-04e), and either is within a rounding of float64.
    fused_logit: bool = False
    #: The gate/up program gives a gate row and an up row to two warps instead of both to one: half the
    #: warps of a program take feature ``j``'s gate row, the other half its up row, and the two sums meet
    #: in shared memory (each rounded, then ``act``, as before). A lane then holds one row's vectors in
    #: flight, not two (the registers that held two programs an SM to 25% occupancy at B=1, NCU
    #: 2026-12-04f), at twice the programs. Each sum keeps its lanes, vectors and order: the same bits.
    gate_up_split: bool = False

    @property
    def gate_up_features(self) -> int:
        """Features a gate/up program computes: a warp each, or a pair of warps each with
        ``gate_up_split``."""
        return WARPS // 2 if self.gate_up_split else WARPS


#: The shared expert's registered skinny tiling: weights first, its gate logit formed by one more program
#: of the gate/up kernel (session-2026-12-04e, moe_skinny_bench.py, CUDA graphs of 16 calls on rotating
#: weights, bf16 H=2048 I=512 gated; the registered keys launch it as a dependent, ``launch_policy``):
#: 5.41 / 6.61 / 7.85 / 9.07 us at T = 1-4 against 8.25 / 9.33 / 10.51 / 11.56 for the plain programs,
#: bit-equal to them on every bench row;
#: float64 on NaN-poisoned outputs in ``test_moe_shared_expert_gpu.py``.
SHARED_SKINNY_TILING = MoESkinnyTiling(weights_first=True, fused_logit=True)

#: The routed experts' registered skinny tiling where its down rows fit (:func:`routed_skinny_tiling`): two
#: features a warp of the down program (session-2026-12-04f) and a gate row and an up row to two warps
#: (``gate_up_split``, session-2026-12-05c), ``moe_skinny_bench.py``, CUDA graphs, bf16 H=2048 I=512, bit-equal
#: to the one-feature programs on every row; the registered keys launch it as a dependent. µs at B =
#: 1/4/16/32/64, Qwen3.5-35B 21.13 / 54.90 / 165.26 / 284.94 / 470.91 and Qwen3-Next 24.58 / 67.12 / 216.31 /
#: 388.15 / 686.30, against 21.95 / 56.28 / 168.29 / 290.63 / 478.55 and 25.55 / 68.63 / 221.21 / 396.72 / 705.06
#: without the split (the former key, same run), and 22.71 / 59.90 / 185.45 / 323.13 / 527.55 and 26.19 /
#: 73.74 / 244.69 / 441.78 / 795.73 for one feature a warp.
ROUTED_SKINNY_TILING = MoESkinnyTiling(down_features=2, gate_up_split=True)


def skinny_tiling_refusal(name: str, tiling: MoESkinnyTiling, intermediate: int, dtype: str,
                          arch: str) -> str | None:
    """Why ``tiling`` cannot serve these sizes on ``arch`` (with the fix), or None: the down program's
    features must fit a lane's loads in flight (``_UNROLL`` vectors) with each row in one chunk, and a
    dependent launch needs an arch that has it."""
    reason = dependent_launch_refusal(tiling.dependent_launch, name, arch, "drop the skinny tiling's dependent_launch")
    if reason is not None:
        return reason
    f = tiling.down_features
    per = -(-intermediate * ELEM_BYTES.get(dtype, 2) // 16 // 32)
    if f < 1 or (f > 1 and f * per > _UNROLL):
        return (f"{name}: down_features={f} must be 1, or at most {_UNROLL // max(per, 1)} where a down row "
                f"(I={intermediate}) takes {per} vectors a lane; use down_features=1")
    return None


def routed_skinny_tiling(intermediate: int, dtype: str) -> MoESkinnyTiling:
    """:data:`ROUTED_SKINNY_TILING` where its down features fit a lane's loads (``skinny_tiling_refusal``);
    one feature a warp elsewhere (a wide ``I``), so that a registered key never refuses for its tiling. The
    gate/up split stays: its rows are ``H`` long whatever ``I`` is."""
    fits = skinny_tiling_refusal("", ROUTED_SKINNY_TILING, intermediate, dtype, "sm_90") is None
    return ROUTED_SKINNY_TILING if fits else dataclasses.replace(ROUTED_SKINNY_TILING, down_features=1)


def _bodies(hidden: int, intermediate: int, dtype: str, tiling: MoESkinnyTiling) -> tuple[Any, Any, Any]:
    """``(gate_up, down_one, down_features)``: the TileLang macros of one program's rows
    ``[r0, min(r0 + R, end))`` (``tiling``'s candidates: :class:`MoESkinnyTiling`; ``down_features``
    serves ``tiling.down_features`` > 1, its docstring says how).

    ``gate_up(x, w_gate, g_row, w_up, u_row, r0, end, j, act, tid)`` writes ``act[r, j]`` from gate
    row ``g_row`` and up row ``u_row`` (a warp's feature ``j``: ``tid // 32`` for a warp a feature,
    ``(tid // 32) % gate_up_features`` with ``gate_up_split``); ``down_one(act, w_down, d_row, r0, end, h, logit, out, tid, gated)``
    writes ``out[r, h]`` from down row ``d_row``. A warp past the features (``j >= I``, ``h >= H``)
    reads a real row (the caller clamps it) and stores nothing."""
    import tilelang.language as T

    H, I, dt, f32 = hidden, intermediate, dtype, "float32"
    R, TH = SKINNY_ROWS, 32 * WARPS
    VEC = 16 // ELEM_BYTES[dt]
    stage_x, stage_act = stage_rows_macro(R, H, dt, TH), stage_rows_macro(R, I, dt, TH)
    NCH_GU, U_GU, load_gu, dot_gu = weight_chunks(R, H, dt, _UNROLL)
    U_D = weight_chunks(R, I, dt, _UNROLL)[1]  # vectors a lane holds of a down row (down_features)
    down_dot = staged_row_dot(R, I, dt, _UNROLL, TH)
    row_dot = staged_row_dot(R, H, dt, _UNROLL, TH)  # a gate or an up row (``gate_up_split``)
    weights_first, F = tiling.weights_first, tiling.down_features
    KV_D = I // VEC

    FG = tiling.gate_up_features

    @T.macro
    def gate_up_pairs(x, w_gate, g_row, w_up, u_row, r0, end, j, act, tid):
        """``gate_up`` with ``tiling.gate_up_split``: warp ``w`` sums feature ``j``'s gate row (``w < FG``)
        or its up row (``w >= FG``, the same ``j``); lane 0 leaves the sums in ``gu_s``, and after the
        barrier the gate warp forms ``act``."""
        lane, w = tid % 32, tid // 32
        x_s = T.alloc_shared((R, H), dt)
        gu_s = T.alloc_shared((WARPS, R), f32)
        acc = T.alloc_local((R,), f32)
        row_dot(w_gate, g_row, x, x_s, acc, r0, end, tid, weights_first, w_up, u_row, w >= FG)
        if lane == 0:
            for m in T.unroll(R):
                gu_s[w, m] = acc[m]
        T.sync_threads()
        if lane == 0 and w < FG and j < I:
            for m in T.unroll(R):
                if r0 + m < end:
                    g = T.cast(T.cast(gu_s[w, m], dt), f32)
                    u = T.cast(T.cast(gu_s[w + FG, m], dt), f32)
                    act[r0 + m, j] = T.cast(g / (T.float32(1) + T.exp(-g)) * u, dt)

    @T.macro
    def gate_up_one(x, w_gate, g_row, w_up, u_row, r0, end, j, act, tid):
        lane = tid % 32
        x_s = T.alloc_shared((R, H), dt)
        g_acc = T.alloc_local((R,), f32)
        u_acc = T.alloc_local((R,), f32)
        g_w = T.alloc_local((U_GU * VEC,), dt)
        u_w = T.alloc_local((U_GU * VEC,), dt)
        xv = T.alloc_local((VEC,), dt)
        if weights_first:
            load_gu(w_gate, g_row, g_w, lane, 0)
            load_gu(w_up, u_row, u_w, lane, 0)
        stage_x(x, x_s, r0, end, tid)
        for m in T.unroll(R):
            g_acc[m] = T.float32(0)
            u_acc[m] = T.float32(0)
        for c in T.serial(NCH_GU):
            if not weights_first or c > 0:
                load_gu(w_gate, g_row, g_w, lane, c)
                load_gu(w_up, u_row, u_w, lane, c)
            dot_gu(x_s, g_acc, g_w, xv, lane, c, r0, end)
            dot_gu(x_s, u_acc, u_w, xv, lane, c, r0, end)
        for m in T.unroll(R):
            g_acc[m] = T.warp_reduce_sum(g_acc[m])
            u_acc[m] = T.warp_reduce_sum(u_acc[m])
        if lane == 0 and j < I:
            for m in T.unroll(R):
                if r0 + m < end:
                    g = T.cast(T.cast(g_acc[m], dt), f32)
                    u = T.cast(T.cast(u_acc[m], dt), f32)
                    act[r0 + m, j] = T.cast(g / (T.float32(1) + T.exp(-g)) * u, dt)

    @T.macro
    def down_features(act, w_down, base, r0, end, h0, logit, out, tid, gated: bool):
        """Features ``h0 .. h0 + F - 1`` (rows ``base + h``, clamped to a real one past H): every
        row's vectors loaded (one chunk each) before the rows are staged; ``weight_chunks``' order per sum."""
        lane = tid % 32
        a_s = T.alloc_shared((R, I), dt)
        acc = T.alloc_local((F * R,), f32)
        d_w = T.alloc_local((F * U_D * VEC,), dt)
        av = T.alloc_local((VEC,), dt)
        for f in T.unroll(F):
            for u in T.unroll(U_D):
                if u * 32 + lane < KV_D:
                    for e in T.vectorized(VEC):
                        d_w[(f * U_D + u) * VEC + e] = w_down[base + T.min(h0 + f, H - 1), (u * 32 + lane) * VEC + e]
                else:
                    for e in T.vectorized(VEC):
                        d_w[(f * U_D + u) * VEC + e] = T.cast(0, dt)
        stage_act(act, a_s, r0, end, tid)
        for i in T.unroll(F * R):
            acc[i] = T.float32(0)
        for m in T.unroll(R):
            if r0 + m < end:
                for u in T.unroll(U_D):
                    for e in T.vectorized(VEC):
                        av[e] = a_s[m, T.min(u * 32 + lane, KV_D - 1) * VEC + e]
                    for f in T.unroll(F):
                        for e in T.unroll(VEC):
                            acc[f * R + m] = acc[f * R + m] + T.cast(d_w[(f * U_D + u) * VEC + e], f32) * T.cast(av[e], f32)
        for i in T.unroll(F * R):
            acc[i] = T.warp_reduce_sum(acc[i])
        if lane == 0:
            for f in T.unroll(F):
                if h0 + f < H:
                    for m in T.unroll(R):
                        if r0 + m < end:
                            if gated:
                                z = T.cast(logit[r0 + m], f32)
                                out[r0 + m, h0 + f] = T.cast(
                                    T.cast(T.cast(acc[f * R + m], dt), f32) / (T.float32(1) + T.exp(-z)), dt)
                            else:
                                out[r0 + m, h0 + f] = T.cast(acc[f * R + m], dt)

    @T.macro
    def down_one(act, w_down, d_row, r0, end, h, logit, out, tid, gated: bool):
        lane = tid % 32
        a_s = T.alloc_shared((R, I), dt)
        o_acc = T.alloc_local((R,), f32)
        down_dot(w_down, d_row, act, a_s, o_acc, r0, end, tid, weights_first)
        if lane == 0 and h < H:
            for m in T.unroll(R):
                if r0 + m < end:
                    if gated:
                        z = T.cast(logit[r0 + m], f32)
                        out[r0 + m, h] = T.cast(
                            T.cast(T.cast(o_acc[m], dt), f32) / (T.float32(1) + T.exp(-z)), dt)
                    else:
                        out[r0 + m, h] = T.cast(o_acc[m], dt)

    return (gate_up_pairs if tiling.gate_up_split else gate_up_one), down_one, down_features


def skinny_shared_programs(key: Any) -> tuple[Any, Any]:
    """``(gate_up, down)`` PrimFuncs for a ``MoESharedExpertBuildKey``: ``gate_up(x [N, H],
    gate_proj [I, H], up_proj [I, H], act [N, I])`` and ``down(act [N, I], down_proj [H, I],
    logit [N], out [N, H])`` (no ``logit`` without the gate), N at most ``SKINNY_ROWS``. With the
    gate and ``skinny_tiling.fused_logit``, ``gate_up(x, gate_proj, up_proj, expert_gate [1, H],
    act, logit [N])`` also writes the gate logit (its last program)."""
    import tilelang.language as T

    H, I, dt = key.hidden, key.intermediate, key.dtype
    W = WARPS
    N = T.dynamic("N")
    F, DL, FG = key.skinny_tiling.down_features, key.skinny_tiling.dependent_launch, key.skinny_tiling.gate_up_features
    gate_up, down_one, down_features = _bodies(H, I, dt, key.skinny_tiling)
    R = SKINNY_ROWS
    logit_dot = staged_row_dot(R, H, dt, _UNROLL, 32 * W)

    @T.macro
    def logit_rows(x, expert_gate, r0, end, logit, tid):
        """``logit[r] = round(x[r] · expert_gate[0])`` for the staged rows (every warp forms it, the
        first thread stores it)."""
        x_s = T.alloc_shared((R, H), dt)
        acc = T.alloc_local((R,), "float32")
        logit_dot(expert_gate, 0, x, x_s, acc, r0, end, tid, False)
        if tid == 0:
            for m in T.unroll(R):
                if r0 + m < end:
                    logit[r0 + m] = T.cast(acc[m], dt)

    @T.macro
    def down(act, down_proj, logit, out, bx, gated: bool):
        tid = T.get_thread_binding()
        if F > 1:
            down_features(act, down_proj, 0, 0, N, (bx * W + tid // 32) * F, logit, out, tid, gated)
        else:
            h = bx * W + tid // 32
            down_one(act, down_proj, T.min(h, H - 1), 0, N, h, logit, out, tid, gated)

    @T.prim_func
    def moe_shared_skinny_gate_up(x: T.Tensor((N, H), dt), gate_proj: T.Tensor((I, H), dt),
                                  up_proj: T.Tensor((I, H), dt), act: T.Tensor((N, I), dt)):
        with T.Kernel(T.ceildiv(I, FG), threads=32 * W) as bx:
            dependent_launch(DL)
            tid = T.get_thread_binding()
            j = bx * FG + (tid // 32) % FG
            gate_up(x, gate_proj, T.min(j, I - 1), up_proj, T.min(j, I - 1), 0, N, j, act, tid)

    @T.prim_func
    def moe_shared_skinny_gate_up_logit(x: T.Tensor((N, H), dt), gate_proj: T.Tensor((I, H), dt),
                                        up_proj: T.Tensor((I, H), dt), expert_gate: T.Tensor((1, H), dt),
                                        act: T.Tensor((N, I), dt), logit: T.Tensor((N,), dt)):
        with T.Kernel(T.ceildiv(I, FG) + 1, threads=32 * W) as bx:
            dependent_launch(DL)
            tid = T.get_thread_binding()
            if bx < T.ceildiv(I, FG):
                j = bx * FG + (tid // 32) % FG
                gate_up(x, gate_proj, T.min(j, I - 1), up_proj, T.min(j, I - 1), 0, N, j, act, tid)
            else:
                logit_rows(x, expert_gate, 0, N, logit, tid)

    if key.gated:

        @T.prim_func
        def moe_shared_skinny_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((H, I), dt),
                                   logit: T.Tensor((N,), dt), out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(H, W * F), threads=32 * W) as bx:
                dependent_launch(DL)
                down(act, down_proj, logit, out, bx, True)

    else:

        @T.prim_func
        def moe_shared_skinny_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((H, I), dt),
                                   out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(H, W * F), threads=32 * W) as bx:
                dependent_launch(DL)
                down(act, down_proj, None, out, bx, False)

    fused = key.gated and key.skinny_tiling.fused_logit
    return (moe_shared_skinny_gate_up_logit if fused else moe_shared_skinny_gate_up), moe_shared_skinny_down


def skinny_routed_programs(key: Any) -> tuple[Any, Any]:
    """``(gate_up, down)`` PrimFuncs for a ``MoEGroupedExpertsBuildKey``, over the tile map of
    ``SKINNY_ROWS``-row tiles (program ``(slot, features)``; a slot of expert -1 does nothing; a tile's
    rows are ``[tile_row, tile_end)``, bounds the map's program has clipped into ``[0, N]``):
    ``gate_up(hidden_states [N, H], tile_end [S], gate_up_proj [E · 2I, H], tile_expert [S], tile_row [S],
    act [N, I])`` and ``down(act [N, I], tile_end, down_proj [E · H, I], tile_expert, tile_row, out [N, H])``."""
    import tilelang.language as T

    E, H, I, dt, i32 = key.experts, key.hidden, key.intermediate, key.dtype, "int32"
    W = WARPS
    N, S = T.dynamic("N"), T.dynamic("S")
    F, DL, FG = key.skinny_tiling.down_features, key.skinny_tiling.dependent_launch, key.skinny_tiling.gate_up_features
    gate_up, down_one, down_features = _bodies(H, I, dt, key.skinny_tiling)

    @T.macro
    def slot(x, tile_end, bank, tile_expert, tile_row, out, bx, by, stage: str):
        """Map slot ``bx``'s tile through ``stage`` ("gate_up" or "down"), features ``by``'s warps
        (``FG`` features a gate/up program, ``F`` features a warp in the down program)."""
        e = tile_expert[bx]
        if e >= 0:
            tid = T.get_thread_binding()
            end = tile_end[bx]
            if stage == "gate_up":
                j = by * FG + (tid // 32) % FG
                g_row = e * 2 * I + T.min(j, I - 1)
                gate_up(x, bank, g_row, bank, g_row + I, tile_row[bx], end, j, out, tid)
            elif F > 1:
                f = by * W + tid // 32
                down_features(x, bank, e * H, tile_row[bx], end, f * F, None, out, tid, False)
            else:
                f = by * W + tid // 32
                down_one(x, bank, e * H + T.min(f, H - 1), tile_row[bx], end, f, None, out, tid, False)

    @T.prim_func
    def moe_skinny_gate_up(hidden_states: T.Tensor((N, H), dt), tile_end: T.Tensor((S,), i32),
                           gate_up_proj: T.Tensor((E * 2 * I, H), dt), tile_expert: T.Tensor((S,), i32),
                           tile_row: T.Tensor((S,), i32), act: T.Tensor((N, I), dt)):
        with T.Kernel(S, T.ceildiv(I, FG), threads=32 * W) as (bx, by):
            dependent_launch(DL)
            slot(hidden_states, tile_end, gate_up_proj, tile_expert, tile_row, act, bx, by, "gate_up")

    @T.prim_func
    def moe_skinny_down(act: T.Tensor((N, I), dt), tile_end: T.Tensor((S,), i32), down_proj: T.Tensor((E * H, I), dt),
                        tile_expert: T.Tensor((S,), i32), tile_row: T.Tensor((S,), i32), out: T.Tensor((N, H), dt)):
        with T.Kernel(S, T.ceildiv(H, W * F), threads=32 * W) as (bx, by):
            dependent_launch(DL)
            slot(act, tile_end, down_proj, tile_expert, tile_row, out, bx, by, "down")

    return moe_skinny_gate_up, moe_skinny_down
