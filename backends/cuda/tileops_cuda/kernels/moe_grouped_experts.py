"""The routed experts of a sparse MoE block as TileLang kernels on Hopper tensor cores
(``manifest/moe.yaml``, MoEGroupedExpertsFwdOp): each expert's SwiGLU MLP over its rows of the
permuted hidden states, the experts' row ranges read from ``expert_offsets`` on the device.

Three kernels, no host synchronisation:

1. ``tiles`` (one program, a thread per expert): each expert's rows cut into tiles of BM, the
   tile counts scanned in shared memory, and a tile map written: tile -> (expert, first row),
   -1 past the last tile. The map has ``min(N, ceil(N / BM) + E)`` slots (a host-side bound:
   every tile holds a row, and at most one partial tile per expert), so the GEMM grids need
   no count from the device;
2. ``gate_up`` (a program per tile and BN columns of I): ``g = x @ gate_rows.T`` and
   ``u = x @ up_rows.T`` share the x tile (two wgmma accumulators, float32), rounded to the
   input dtype, then ``act = round(silu(g) · u)`` in float32 (the spec's roundings);
3. ``down`` (a program per tile and BN columns of H): ``out = act @ down_proj[e].T``, rounded.

Two tilings are built and the row count picks one per call (it is known on the host, so no
sync): 64-row tiles and narrow programs when experts hold few rows (decode: many programs
stream the weights), 128-row tiles with two consumer warpgroups when they hold many (prefill:
an expert's rows fit one or two tiles, so its weights are read about once). Operand tiles
stream through a multi-stage shared-memory pipeline (TMA, warp-specialised) into
``T.gemm``; rows of a tile past its expert's range are computed on (they belong to the next
expert or lie past N) but never stored. A program whose map slot is -1 does nothing. Experts without rows cost
nothing; each used expert's weights are read once per row tile. Specialised on dtype, E, H, I
and the offsets' dtype; the row count N is dynamic. float32 is refused (the tensor cores would
round its operands to TF32), as are H or I not a multiple of 8 (16-byte bulk copies).
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import arch_refusal, cached_build, compile_prim_func, direct_entry
from .moe_permute import expert_threads

__all__ = ["GroupedTiling", "MoEGroupedExpertsBuildKey", "build_moe_grouped_experts", "moe_grouped_experts_refusal",
           "tile_slots", "DECODE_TILING", "PREFILL_TILING"]

_DTYPES = ("float16", "bfloat16")
_OFFSET_DTYPES = ("int32", "int64")
_NAME = "MoEGroupedExperts TileLang kernel"
MAX_EXPERTS = 1024
BK, STAGES = 64, 4


@dataclass(frozen=True)
class GroupedTiling:
    """Rows per tile (``block_m``), output columns per program of the gate/up kernel (of I, two
    accumulators) and of the down kernel (of H), consumer threads (a warpgroup per 64 rows)."""

    block_m: int
    block_n_gate_up: int
    block_n_down: int
    threads: int


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


def tile_slots(rows: int, experts: int, block_m: int) -> int:
    """Slots of the tile map: every tile holds a row, and only an expert's last tile is partial."""
    return min(rows, -(-rows // block_m) + experts)


def moe_grouped_experts_refusal(key: MoEGroupedExpertsBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return (f"{_NAME}: dtype {key.dtype} is not one of {_DTYPES} (float32 operands would be rounded to TF32 "
                "on the tensor cores); use the reference")
    if key.offsets_dtype not in _OFFSET_DTYPES:
        return f"{_NAME}: expert_offsets dtype {key.offsets_dtype} is not one of {_OFFSET_DTYPES}; use the reference"
    if key.hidden % 8 or key.intermediate % 8:
        return (f"{_NAME}: H={key.hidden} and I={key.intermediate} must be multiples of 8 (16-byte rows for the "
                "bulk copies); use the reference")
    if not 1 <= key.experts <= MAX_EXPERTS:
        return f"{_NAME}: E={key.experts} must lie in [1, {MAX_EXPERTS}] (a thread each for the tile map)"
    return arch_refusal(_NAME, key.arch, ("sm_90", "sm_90a"))


def _tiles_program(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling):
    import tilelang.language as T

    E, i32, TE, BM = key.experts, "int32", expert_threads(key.experts), tiling.block_m
    S = T.dynamic("S")  # tile map slots

    @T.prim_func
    def moe_expert_tiles(expert_offsets: T.Tensor((E + 1,), key.offsets_dtype), tile_expert: T.Tensor((S,), i32),
                         tile_row: T.Tensor((S,), i32)):
        with T.Kernel(1, threads=TE):
            e = T.get_thread_binding()
            ends = T.alloc_shared((TE,), i32)
            first = T.alloc_var(i32, init=0)
            count = T.alloc_var(i32, init=0)
            if e < E:
                first = T.cast(expert_offsets[e], i32)
                count = T.ceildiv(T.cast(expert_offsets[e + 1], i32) - first, BM)
            ends[e] = count
            T.sync_threads()
            T.cumsum(src=ends, dim=0)
            T.sync_threads()
            start = ends[e] - count
            for q in T.serial(count):
                tile_expert[start + q] = e
                tile_row[start + q] = first + q * BM
            used = ends[TE - 1]
            for q in T.serial(T.ceildiv(S, TE)):
                if q * TE + e >= used and q * TE + e < S:
                    tile_expert[q * TE + e] = -1

    return moe_expert_tiles


def _gate_up_program(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling):
    import tilelang.language as T

    E, H, I, dt, f32 = key.experts, key.hidden, key.intermediate, key.dtype, "float32"
    BM, BN, THREADS = tiling.block_m, tiling.block_n_gate_up, tiling.threads
    N, S = T.dynamic("N"), T.dynamic("S")

    @T.prim_func
    def moe_gate_up(hidden_states: T.Tensor((N, H), dt), expert_offsets: T.Tensor((E + 1,), key.offsets_dtype),
                    gate_up_proj: T.Tensor((E, 2 * I, H), dt), tile_expert: T.Tensor((S,), "int32"),
                    tile_row: T.Tensor((S,), "int32"), act: T.Tensor((N, I), dt)):
        with T.Kernel(S, T.ceildiv(I, BN), threads=THREADS) as (bx, by):
            x_s = T.alloc_shared((BM, BK), dt)
            g_s = T.alloc_shared((BN, BK), dt)
            u_s = T.alloc_shared((BN, BK), dt)
            g_l = T.alloc_fragment((BM, BN), f32)
            u_l = T.alloc_fragment((BM, BN), f32)
            e = tile_expert[bx]
            if e >= 0:
                r0 = tile_row[bx]
                end = T.cast(expert_offsets[e + 1], "int32")
                T.clear(g_l)
                T.clear(u_l)
                for kk in T.Pipelined(T.ceildiv(H, BK), num_stages=STAGES):
                    T.copy(hidden_states[r0 : r0 + BM, kk * BK : (kk + 1) * BK], x_s)
                    T.copy(gate_up_proj[e, by * BN : (by + 1) * BN, kk * BK : (kk + 1) * BK], g_s)
                    T.copy(gate_up_proj[e, I + by * BN : I + (by + 1) * BN, kk * BK : (kk + 1) * BK], u_s)
                    T.gemm(x_s, g_s, g_l, transpose_B=True)
                    T.gemm(x_s, u_s, u_l, transpose_B=True)
                for i, j in T.Parallel(BM, BN):
                    if r0 + i < end and by * BN + j < I:
                        g = T.cast(T.cast(g_l[i, j], dt), f32)
                        u = T.cast(T.cast(u_l[i, j], dt), f32)
                        act[r0 + i, by * BN + j] = T.cast(g / (T.float32(1) + T.exp(-g)) * u, dt)

    return moe_gate_up


def _down_program(key: MoEGroupedExpertsBuildKey, tiling: GroupedTiling):
    import tilelang.language as T

    E, H, I, dt, f32 = key.experts, key.hidden, key.intermediate, key.dtype, "float32"
    BM, BN, THREADS = tiling.block_m, tiling.block_n_down, tiling.threads
    N, S = T.dynamic("N"), T.dynamic("S")

    @T.prim_func
    def moe_down(act: T.Tensor((N, I), dt), expert_offsets: T.Tensor((E + 1,), key.offsets_dtype),
                 down_proj: T.Tensor((E, H, I), dt), tile_expert: T.Tensor((S,), "int32"),
                 tile_row: T.Tensor((S,), "int32"), out: T.Tensor((N, H), dt)):
        with T.Kernel(S, T.ceildiv(H, BN), threads=THREADS) as (bx, by):
            a_s = T.alloc_shared((BM, BK), dt)
            w_s = T.alloc_shared((BN, BK), dt)
            o_l = T.alloc_fragment((BM, BN), f32)
            e = tile_expert[bx]
            if e >= 0:
                r0 = tile_row[bx]
                end = T.cast(expert_offsets[e + 1], "int32")
                T.clear(o_l)
                for kk in T.Pipelined(T.ceildiv(I, BK), num_stages=STAGES):
                    T.copy(act[r0 : r0 + BM, kk * BK : (kk + 1) * BK], a_s)
                    T.copy(down_proj[e, by * BN : (by + 1) * BN, kk * BK : (kk + 1) * BK], w_s)
                    T.gemm(a_s, w_s, o_l, transpose_B=True)
                for i, j in T.Parallel(BM, BN):
                    if r0 + i < end and by * BN + j < H:
                        out[r0 + i, by * BN + j] = T.cast(o_l[i, j], dt)

    return moe_down


def _make_run(key: MoEGroupedExpertsBuildKey, decode: tuple[Any, ...], prefill: tuple[Any, ...]) -> Any:
    """The launch function: the tiling the row count calls for (known on the host: no sync),
    its tile map and the activations (workspaces), then its three kernels."""
    import torch

    E, I = key.experts, key.intermediate
    prefill_from = PREFILL_ROWS_PER_EXPERT * E

    def moe_grouped_experts(hidden_states: Any, expert_offsets: Any, gate_up_proj: Any, down_proj: Any,
                            out: Any = None) -> Any:
        N = hidden_states.shape[0]
        if out is None:
            out = torch.empty(hidden_states.shape, dtype=hidden_states.dtype, device=hidden_states.device)
        if N == 0:
            return out
        (tiles, gate_up, down), tiling = ((prefill, PREFILL_TILING) if N >= prefill_from
                                          else (decode, DECODE_TILING))
        slots = tile_slots(N, E, tiling.block_m)
        dev = hidden_states.device
        tile_map = torch.empty((2, slots), dtype=torch.int32, device=dev)
        act = torch.empty((N, I), dtype=hidden_states.dtype, device=dev)
        x, offsets = hidden_states.contiguous(), expert_offsets.contiguous()
        tiles(offsets, tile_map[0], tile_map[1])
        gate_up(x, offsets, gate_up_proj.contiguous(), tile_map[0], tile_map[1], act)
        down(act, offsets, down_proj.contiguous(), tile_map[0], tile_map[1], out)
        return out

    return moe_grouped_experts


_PROGRAMS = (_tiles_program, _gate_up_program, _down_program)


class MoEGroupedExpertsLauncher:
    """The compiled kernels of both tilings (``kernels[tiling]``: ``JITKernel`` objects) and
    ``run``, the interface-shaped launch function over their direct entries."""

    def __init__(self, key: MoEGroupedExpertsBuildKey, kernels: dict[GroupedTiling, tuple[Any, ...]]) -> None:
        self.key = key
        self.kernels = kernels
        entries = {t: tuple(direct_entry(k) for k in ks) for t, ks in kernels.items()}
        self.run = _make_run(key, entries[DECODE_TILING], entries[PREFILL_TILING])


def build_moe_grouped_experts(key: MoEGroupedExpertsBuildKey) -> MoEGroupedExpertsLauncher:
    """Compile both tilings' kernels once per process; ValueError with the refusal reason."""
    reason = moe_grouped_experts_refusal(key)
    if reason is not None:
        raise ValueError(reason)
    # Warp specialisation (setmaxnreg) and wgmma need the arch-specific sm_90a target (as the GEMM's).
    target = "sm_90a"

    def build() -> MoEGroupedExpertsLauncher:
        return MoEGroupedExpertsLauncher(key, {
            t: tuple(compile_prim_func(program(key, t), target) for program in _PROGRAMS)
            for t in (DECODE_TILING, PREFILL_TILING)})

    return cached_build(("moe_grouped_experts", key), build)
