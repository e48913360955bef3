"""The routed experts of a sparse MoE block as TileLang kernels on Hopper tensor cores
(``manifest/moe.yaml``, MoEGroupedExpertsFwdOp): each expert's SwiGLU MLP over its rows of the
permuted hidden states, the experts' row ranges read from ``expert_offsets`` on the device.

Three kernels, no host synchronisation:

1. ``tiles`` (one program, a thread per expert): each expert's rows cut into tiles of BM, the
   tile counts scanned across the block, and a tile map written: tile -> (expert, first row, row
   bound), expert -1 past the last tile. The rows are the spec's reading of ``expert_offsets``:
   ``[b_e, b_{e+1})`` with ``b_e = clip(max(expert_offsets[0..e]))`` into ``[0, N]`` (valid
   offsets as written; unchecked ones, with contents checks off, laid end to end inside the rows,
   since a kernel cannot raise without a device sync), and the rows no expert covers get zeros
   here. The map has ``min(N, ceil(N / BM) + E)`` slots (a host-side bound: every tile holds a
   row, and at most one partial tile per expert, whatever the offsets hold), so the GEMM grids
   need no count from the device, and no tile reaches past N;
2. ``gate_up`` (a program per tile and BN columns of I): ``g = x @ gate_rows.T`` and
   ``u = x @ up_rows.T`` share the x tile (two wgmma accumulators, float32), rounded to the
   input dtype, then ``act = round(silu(g) · u)`` in float32 (the spec's roundings);
3. ``down`` (a program per tile and BN columns of H): ``out = act @ down_proj[e].T``, rounded.

Two tilings are built and the row count picks one per call (it is known on the host, so no
sync): 64-row tiles and narrow programs when experts hold few rows (decode: many programs
stream the weights), 128-row tiles with two consumer warpgroups when they hold many (prefill:
an expert's rows fit one or two tiles, so its weights are read about once). Operand tiles
stream through a multi-stage shared-memory pipeline (TMA, warp-specialised) into
``T.gemm``; rows of a tile past its row bound are computed on (they belong to the next
expert or lie past N) but never stored. A program whose map slot is -1 does nothing. Experts without rows cost
nothing; each used expert's weights are read once per row tile. Specialised on dtype, E, H, I
and the offsets' dtype; the row count N is dynamic. float32 is refused (the tensor cores would
round its operands to TF32), as are H or I not a multiple of 8 (16-byte bulk copies).

The bodies of the gate/up and down programs are macros over an expert bank ``[E, rows, cols]``,
an expert index and a row range (:func:`gate_up_tile`, :func:`down_tile`): the shared expert's
programs (:mod:`.moe_shared_expert`) inline the same text over ``[1, I, H]`` views of its
separate weights and a static tile map, so the two never drift apart.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import (arch_refusal, block_scan_macro, cached_build, compile_prim_func, dependent_launch,
                      dependent_launch_refusal, direct_entry, uncovered_rows_macro)
from ._index_metadata import clip_tokens
from ._row_views import packed
from ._workspace import workspace_allocator
from .moe_permute import expert_threads
from .moe_skinny import SKINNY_ROWS, MoESkinnyTiling, skinny_routed_programs, skinny_tiling_refusal

__all__ = ["GroupedTiling", "MoEGroupedExpertsBuildKey", "build_moe_grouped_experts", "moe_grouped_experts_refusal",
           "tile_slots", "DECODE_TILING", "PREFILL_TILING", "ExpertsLauncher", "build_experts", "gate_up_tile",
           "down_tile", "experts_refusal", "skinny_max_rows"]

_DTYPES = ("float16", "bfloat16")
_OFFSET_DTYPES = ("int32", "int64")
_NAME = "MoEGroupedExperts TileLang kernel"
MAX_EXPERTS = 1024
BK, STAGES = 64, 4


@dataclass(frozen=True)
class GroupedTiling:
    """Rows per tile (``block_m``), output columns per program of the gate/up kernel (of I, two
    accumulators) and of the down kernel (of H), consumer threads (a warpgroup per 64 rows), and
    the pipeline's depth in BK-wide operand tiles (what a program has in flight)."""

    block_m: int
    block_n_gate_up: int
    block_n_down: int
    threads: int
    stages: int = STAGES


#: Few rows per expert (decode): small tiles, many programs streaming the experts' weights.
DECODE_TILING = GroupedTiling(64, 64, 128, 128)
#: Many rows per expert (prefill): an expert's rows fit one or two tiles, so its weights are
#: read about once, and the wider gate/up tile reads the rows fewer times.
PREFILL_TILING = GroupedTiling(128, 128, 128, 256)
#: The prefill tiling serves calls with at least this many rows per expert on average.
PREFILL_ROWS_PER_EXPERT = 32


@dataclass(frozen=True)
class MoEGroupedExpertsBuildKey:
    """Build identity: dtype (rows, weights, output), experts, hidden and intermediate sizes,
    the offsets' dtype."""

    dtype: str
    experts: int
    hidden: int
    intermediate: int
    offsets_dtype: str = "int32"
    arch: str = "sm_90"
    #: Calls of at most this many rows (and below the prefill tiling's) run the warp-per-feature
    #: programs (:mod:`.moe_skinny`, ``SKINNY_ROWS``-row tiles) instead of the decode tiling's; 0: never.
    #: The registered key takes :func:`skinny_max_rows`.
    skinny_max_rows: int = 0
    #: How the skinny programs run (:class:`.moe_skinny.MoESkinnyTiling`).
    skinny_tiling: MoESkinnyTiling = MoESkinnyTiling()
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def skinny_max_rows(experts: int) -> int:
    """The rows up to which the skinny programs serve a call: a row an expert on average.

    Measured on the H200 (``moe_skinny_bench.py``, bf16 H=2048 I=512, CUDA graphs): with two down features
    a warp (:data:`.moe_skinny.ROUTED_SKINNY_TILING`, 2026-12-04f) the skinny programs won at 1 and 0.625
    rows an expert (B=32 on 256 experts top-8: 290.5 against the decode tiling's 304.7 µs; on 512 top-10:
    396.7 against 429.3) and lost at 1.25 and 2 (B=64: 707.1 against 650.6; 479.2 against 400.3), where
    experts hold more than a 4-row tile and the skinny programs read their weights once a tile. (With one
    feature a warp, 2026-12-04d, they lost at B=32 too, and the bound was half a row an expert.)"""
    return experts


def tile_slots(rows: int, experts: int, block_m: int) -> int:
    """Slots of the tile map: every tile holds a row, and only an expert's last tile is partial."""
    return min(rows, -(-rows // block_m) + experts)


def experts_refusal(name: str, key: Any, skinny: bool) -> str | None:
    """What the expert programs (routed or shared) refuse for ``key`` (either build key: dtype, hidden,
    intermediate, arch, ``dependent_launch``, ``skinny_tiling``), with the fix, or None; the skinny
    tiling only where the key runs the skinny programs (``skinny``)."""
    dtype, hidden, intermediate, arch = key.dtype, key.hidden, key.intermediate, key.arch
    reason = dependent_launch_refusal(key.dependent_launch, name, arch, "drop dependent_launch")
    if reason is None and skinny:
        reason = skinny_tiling_refusal(name, key.skinny_tiling, intermediate, dtype, arch)
    if reason is not None:
        return reason
    if dtype not in _DTYPES:
        return (f"{name}: dtype {dtype} is not one of {_DTYPES} (float32 operands would be rounded to TF32 "
                "on the tensor cores); use the reference")
    if hidden % 8 or intermediate % 8:
        return (f"{name}: H={hidden} and I={intermediate} must be multiples of 8 (16-byte rows for the "
                "bulk copies); use the reference")
    return arch_refusal(name, arch, ("sm_90", "sm_90a"))


def moe_grouped_experts_refusal(key: MoEGroupedExpertsBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.offsets_dtype not in _OFFSET_DTYPES:
        return f"{_NAME}: expert_offsets dtype {key.offsets_dtype} is not one of {_OFFSET_DTYPES}; use the reference"
    if not 1 <= key.experts <= MAX_EXPERTS:
        return f"{_NAME}: E={key.experts} must lie in [1, {MAX_EXPERTS}] (a thread each for the tile map)"
    return experts_refusal(_NAME, key, bool(key.skinny_max_rows))


def _tiles_program(key: MoEGroupedExpertsBuildKey, block_m: int):
    """The tile-map PrimFunc ``(expert_offsets, tile_expert, tile_row, tile_end, out)``: expert ``e``'s rows
    are ``[b_e, b_{e+1})`` with ``b_e = clip(max(expert_offsets[0..e]))`` and ``clip(x) = min(max(x, 0), N)``
    (the spec's reading: valid offsets as written, unchecked ones laid end to end inside ``[0, N)``), cut
    into ``block_m``-row tiles; slot ``s`` holds tile ``s``'s expert, first row and row bound ``b_{e+1}``,
    expert -1 past the last tile. A thread an expert: a max-scan of the clipped offsets gives each its
    start, a sum-scan of the tile counts its first slot. The ranges are disjoint inside ``[0, N)``, every
    tile holds a row and only an expert's last is partial, so the tiles fit ``tile_slots(N, E, block_m)``
    whatever the offsets hold. Offsets are clipped in their own dtype (an int64 entry past int32 made
    int32 first would wrap into ``[0, N]``). Then the rows no expert covers, ``[0, b_0)`` and ``[b_E, N)``
    (none for valid offsets: no iteration), get zero outputs, a 16-byte vector a thread and step: the
    GEMM programs write only the experts' rows."""
    import tilelang.language as T

    E, H, dt, i32, TE, BM = key.experts, key.hidden, key.dtype, "int32", expert_threads(key.experts), block_m
    S, N = T.dynamic("S"), T.dynamic("N")  # tile map slots, rows
    running_max, running_sum = block_scan_macro(TE, T.max), block_scan_macro(TE)
    zero_rows = uncovered_rows_macro(TE, (H,), dt)

    @T.prim_func
    def moe_expert_tiles(expert_offsets: T.Tensor((E + 1,), key.offsets_dtype), tile_expert: T.Tensor((S,), i32),
                         tile_row: T.Tensor((S,), i32), tile_end: T.Tensor((S,), i32), out: T.Tensor((N, H), dt)):
        with T.Kernel(1, threads=TE):
            dependent_launch(key.dependent_launch)
            e = T.get_thread_binding()
            wmax = T.alloc_shared((TE // 32,), i32)
            wsum = T.alloc_shared((TE // 32,), i32)
            start = T.alloc_local((1,), i32)  # b_e after the max-scan
            slots = T.alloc_local((1,), i32)  # the tiles of experts 0..e after the sum-scan
            end = T.alloc_var(i32, init=0)  # b_{e+1}
            count = T.alloc_var(i32, init=0)  # expert e's tiles
            tail = T.alloc_var(i32, init=0)  # b_E: where the uncovered tail starts
            used = T.alloc_var(i32, init=0)  # every expert's tiles
            start[0] = 0  # past the experts: the max-scan's identity (the clipped values are >= 0)
            if e < E:
                start[0] = clip_tokens(expert_offsets[e], N)
            running_max(start, wmax, e)
            if e < E:
                end = T.max(clip_tokens(expert_offsets[e + 1], N), start[0])
                count = T.ceildiv(end - start[0], BM)
            slots[0] = count
            running_sum(slots, wsum, e)  # wsum: a buffer of its own, so no fence after the max-scan
            for w in T.unroll(TE // 32):  # the block's maximum and total, the same in every thread
                tail = T.max(tail, wmax[w])
                used = used + wsum[w]
            tail = T.max(tail, clip_tokens(expert_offsets[E], N))
            first = slots[0] - count
            for q in T.serial(count):
                tile_expert[first + q] = e
                tile_row[first + q] = start[0] + q * BM
                tile_end[first + q] = end
            for q in T.serial(T.ceildiv(S, TE)):
                if q * TE + e >= used and q * TE + e < S:
                    tile_expert[q * TE + e] = -1
            # -- zeros for the rows no expert covers: [0, b_0) then [b_E, N) ---------------------------
            zero_rows(out, clip_tokens(expert_offsets[0], N), tail, e)

    return moe_expert_tiles


def gate_up_tile(key: Any, tiling: GroupedTiling):
    """The gate/up body of one program (a macro both experts' programs inline): ``g = x @ w_gate[e,
    g0 + cols].T`` and ``u = x @ w_up[e, u0 + cols].T`` over the BM rows from ``r0`` (two float32
    accumulators sharing the x tile), each rounded, then ``act = round(silu(g) · u)`` stored for the
    rows before ``end``. The routed experts pass one bank twice (``g0 = 0``, ``u0 = I``); the shared
    expert its two ``[1, I, H]`` views (both offsets 0)."""
    import tilelang.language as T

    H, I, dt, f32 = key.hidden, key.intermediate, key.dtype, "float32"
    BM, BN = tiling.block_m, tiling.block_n_gate_up

    @T.macro
    def gate_up_tile(x, w_gate, g0, w_up, u0, e, r0, end, by, act):
        x_s = T.alloc_shared((BM, BK), dt)
        g_s = T.alloc_shared((BN, BK), dt)
        u_s = T.alloc_shared((BN, BK), dt)
        g_l = T.alloc_fragment((BM, BN), f32)
        u_l = T.alloc_fragment((BM, BN), f32)
        T.clear(g_l)
        T.clear(u_l)
        for kk in T.Pipelined(T.ceildiv(H, BK), num_stages=tiling.stages):
            T.copy(x[r0 : r0 + BM, kk * BK : (kk + 1) * BK], x_s)
            T.copy(w_gate[e, g0 + by * BN : g0 + (by + 1) * BN, kk * BK : (kk + 1) * BK], g_s)
            T.copy(w_up[e, u0 + by * BN : u0 + (by + 1) * BN, kk * BK : (kk + 1) * BK], u_s)
            T.gemm(x_s, g_s, g_l, transpose_B=True)
            T.gemm(x_s, u_s, u_l, transpose_B=True)
        for i, j in T.Parallel(BM, BN):
            if r0 + i < end and by * BN + j < I:
                g = T.cast(T.cast(g_l[i, j], dt), f32)
                u = T.cast(T.cast(u_l[i, j], dt), f32)
                act[r0 + i, by * BN + j] = T.cast(g / (T.float32(1) + T.exp(-g)) * u, dt)

    return gate_up_tile


def down_tile(key: Any, tiling: GroupedTiling, gated: bool = False):
    """The down body of one program (a macro): ``o = act @ w_down[e, cols].T`` over the BM rows
    from ``r0``, rounded and stored for the rows before ``end``; ``gated`` (the shared expert's
    sigmoid gate): the rounded output times ``sigmoid(logit[row])``, formed in float32 and rounded
    once (the spec's roundings)."""
    import tilelang.language as T

    H, I, dt, f32 = key.hidden, key.intermediate, key.dtype, "float32"
    BM, BN = tiling.block_m, tiling.block_n_down

    @T.macro
    def down_tile(act, w_down, e, r0, end, by, logit, out):
        a_s = T.alloc_shared((BM, BK), dt)
        w_s = T.alloc_shared((BN, BK), dt)
        o_l = T.alloc_fragment((BM, BN), f32)
        T.clear(o_l)
        for kk in T.Pipelined(T.ceildiv(I, BK), num_stages=tiling.stages):
            T.copy(act[r0 : r0 + BM, kk * BK : (kk + 1) * BK], a_s)
            T.copy(w_down[e, by * BN : (by + 1) * BN, kk * BK : (kk + 1) * BK], w_s)
            T.gemm(a_s, w_s, o_l, transpose_B=True)
        for i, j in T.Parallel(BM, BN):
            if r0 + i < end and by * BN + j < H:
                if gated:
                    z = T.cast(logit[r0 + i], f32)
                    out[r0 + i, by * BN + j] = T.cast(
                        T.cast(T.cast(o_l[i, j], dt), f32) / (T.float32(1) + T.exp(-z)), dt)
                else:
                    out[r0 + i, by * BN + j] = T.cast(o_l[i, j], dt)

    return down_tile


def _gate_up_program(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling):
    import tilelang.language as T

    E, H, I, dt, i32 = key.experts, key.hidden, key.intermediate, key.dtype, "int32"
    N, S = T.dynamic("N"), T.dynamic("S")
    body = gate_up_tile(key, tiling)

    @T.prim_func
    def moe_gate_up(hidden_states: T.Tensor((N, H), dt), tile_end: T.Tensor((S,), i32),
                    gate_up_proj: T.Tensor((E, 2 * I, H), dt), tile_expert: T.Tensor((S,), i32),
                    tile_row: T.Tensor((S,), i32), act: T.Tensor((N, I), dt)):
        with T.Kernel(S, T.ceildiv(I, tiling.block_n_gate_up), threads=tiling.threads) as (bx, by):
            dependent_launch(key.dependent_launch)
            # The expert is read where it is used: bound once (``e = tile_expert[bx]``) and read by the
            # producer warps alone, it fails TileLang 0.1.15's host/device split ("used before definition").
            if tile_expert[bx] >= 0:
                body(hidden_states, gate_up_proj, 0, gate_up_proj, I, tile_expert[bx], tile_row[bx], tile_end[bx], by,
                     act)

    return moe_gate_up


def _down_program(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling):
    import tilelang.language as T

    E, H, I, dt, i32 = key.experts, key.hidden, key.intermediate, key.dtype, "int32"
    N, S = T.dynamic("N"), T.dynamic("S")
    body = down_tile(key, tiling)

    @T.prim_func
    def moe_down(act: T.Tensor((N, I), dt), tile_end: T.Tensor((S,), i32), down_proj: T.Tensor((E, H, I), dt),
                 tile_expert: T.Tensor((S,), i32), tile_row: T.Tensor((S,), i32), out: T.Tensor((N, H), dt)):
        with T.Kernel(S, T.ceildiv(H, tiling.block_n_down), threads=tiling.threads) as (bx, by):
            dependent_launch(key.dependent_launch)
            if tile_expert[bx] >= 0:  # the expert read where it is used, as in the gate/up program
                body(act, down_proj, tile_expert[bx], tile_row[bx], tile_end[bx], by, None, out)

    return moe_down


def _make_run(key: MoEGroupedExpertsBuildKey, decode: tuple[Any, ...], prefill: tuple[Any, ...]) -> Any:
    """The launch function: the tiling the row count calls for (known on the host: no sync),
    its tile map and the activations (workspaces), then its three kernels."""
    import torch

    E, H, I = key.experts, key.hidden, key.intermediate
    prefill_from = PREFILL_ROWS_PER_EXPERT * E
    empty = workspace_allocator()

    def moe_grouped_experts(hidden_states: Any, expert_offsets: Any, gate_up_proj: Any, down_proj: Any,
                            out: Any = None) -> Any:
        N = hidden_states.shape[0]
        if out is None:
            out = torch.empty(hidden_states.shape, dtype=hidden_states.dtype, device=hidden_states.device)
        if N == 0:
            return out
        # The rows and both banks are read through tensor maps or in 16-byte vectors: packed, 16-byte aligned.
        gate_up_proj, down_proj, hidden_states = [t if t.is_contiguous() and t.data_ptr() % 16 == 0 else packed(t)
                                                  for t in (gate_up_proj, down_proj, hidden_states)]
        if N >= prefill_from:
            (tiles, gate_up, down), block_m = prefill, PREFILL_TILING.block_m
        elif N <= key.skinny_max_rows:  # the warp-per-feature programs take the banks flat (.moe_skinny)
            (tiles, gate_up, down), block_m = decode[3:], SKINNY_ROWS
            gate_up_proj, down_proj = gate_up_proj.view(-1, H), down_proj.view(-1, I)
        else:
            (tiles, gate_up, down), block_m = decode[:3], DECODE_TILING.block_m
        slots = tile_slots(N, E, block_m)
        dev = hidden_states.device
        tile_map = empty((3, slots), torch.int32, dev)
        act = empty((N, I), hidden_states.dtype, dev)
        offsets = expert_offsets.contiguous()
        # The map's three rows, viewed once for the three launches (a view costs a tensor a call).
        tile_expert, tile_row, tile_end = tile_map.unbind()
        tiles(offsets, tile_expert, tile_row, tile_end, out)
        gate_up(hidden_states, tile_end, gate_up_proj, tile_expert, tile_row, act)
        down(act, tile_end, down_proj, tile_expert, tile_row, out)
        return out

    return moe_grouped_experts


def _routed_programs(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling) -> tuple[Any, ...]:
    programs: tuple[Any, ...] = (_tiles_program(key, tiling.block_m), _gate_up_program(key, tiling),
                                 _down_program(key, tiling))
    if key.skinny_max_rows and tiling == DECODE_TILING:
        programs += (_tiles_program(key, SKINNY_ROWS), *skinny_routed_programs(key))
    return programs


class ExpertsLauncher:
    """The compiled kernels of two tilings (``kernels[tiling]``: ``JITKernel`` objects, in the order
    the programs function gave them) and ``run = make_run(key, decode entries, prefill entries)``,
    the interface-shaped launch function over their direct entries."""

    def __init__(self, key: Any, kernels: dict[GroupedTiling, tuple[Any, ...]], make_run: Any,
                 tilings: tuple[GroupedTiling, GroupedTiling]) -> None:
        self.key = key
        self.kernels = kernels
        entries = {t: tuple(direct_entry(k) for k in ks) for t, ks in kernels.items()}
        self.run = make_run(key, *(entries[t] for t in tilings))


def build_experts(name: str, key: Any, reason: str | None, programs: Any, make_run: Any,
                  tilings: tuple[GroupedTiling, GroupedTiling]) -> ExpertsLauncher:
    """Compile ``programs(key, tiling)`` for both tilings (decode, prefill) once per process under
    ``(name, key)``; ValueError with ``reason`` (the kernel's refusal) when it is not None."""
    if reason is not None:
        raise ValueError(reason)
    # Warp specialisation (setmaxnreg) and wgmma need the arch-specific sm_90a target (as the GEMM's).
    target = "sm_90a"

    def build() -> ExpertsLauncher:
        return ExpertsLauncher(key, {t: tuple(compile_prim_func(f, target) for f in programs(key, t))
                                     for t in tilings}, make_run, tilings)

    return cached_build((name, key), build)


def build_moe_grouped_experts(key: MoEGroupedExpertsBuildKey) -> ExpertsLauncher:
    """Compile both tilings' kernels once per process; ValueError with the refusal reason."""
    return build_experts("moe_grouped_experts", key, moe_grouped_experts_refusal(key), _routed_programs, _make_run,
                         (DECODE_TILING, PREFILL_TILING))
