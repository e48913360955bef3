"""The shared expert of a sparse MoE block as TileLang kernels on Hopper tensor cores
(``manifest/moe.yaml``, MoESharedExpertFwdOp): ``out = down_proj @ (silu(gate_proj @ x) ·
(up_proj @ x))``, times ``sigmoid(expert_gate @ x)`` when the gate is given.

One expert over all T rows, so the routed experts' programs serve it with a static tile map
(:mod:`.moe_grouped_experts`: their gate/up and down bodies are the same macros): program ``bx``
owns rows ``[bx·BM, bx·BM + BM)``, every row below T is the expert's, so there is no ``tiles``
kernel and no offsets. The separate ``[I, H]`` gate and up weights and the ``[H, I]`` down
weights enter as ``[1, ·, ·]`` views of one-expert banks (no copy). Two or three kernels:

1. ``gate_up`` (a program per BM rows and BN columns of I): both GEMMs share the x tile, each
   rounded, then ``act = round(silu(g) · u)`` in float32;
2. ``gate_logit`` (with the gate only; a program per row): ``round(x · expert_gate)``, the
   products summed in float32. Its own program because the logit needs all H columns of a row:
   the down programs own BN columns of H each (16 a row tile at H = 2048), and the gate/up
   programs BN columns of I (32 to 4), so computing it in either would read every row of x that
   many times, or serialise a reduction into the first column's program; alone it reads x once
   (T·H elements) for one more launch;
3. ``down`` (a program per BM rows and BN columns of H): ``o = round(act @ down_proj.T)``; with
   the gate, ``round(o · sigmoid(logit))`` in float32 (the spec's roundings: the GEMM's output
   is rounded before the scaling, as HF's Linear rounds it).

Tilings: the routed prefill tiling (128-row tiles, two consumer warpgroups) from
``PREFILL_ROWS`` rows, where its grid (T/128 · I/128 gate/up programs) covers the GPU; below it a
decode tiling of 64-row tiles, narrow columns (16 of I, 32 of H: 32 and 64 programs at Qwen's
I = 512, H = 2048) and an 8-deep pipeline, so that many programs keep much of the 6 MB of
weights a decode step reads in flight (not yet timed on a GPU: ``SHARED_DECODE_TILING``).
Specialised on dtype, H, I and the gate's presence; T is dynamic. Refused like the routed
experts: float32 (TF32 rounding on the tensor cores), H or I not a multiple of 8 (16-byte bulk
copies), archs other than sm_90.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import dependent_launch
from ._row_views import packed
from ._workspace import workspace_allocator
from .moe_grouped_experts import (PREFILL_TILING, ExpertsLauncher, GroupedTiling, build_experts, down_tile,
                                  experts_refusal, gate_up_tile)
from .moe_skinny import SKINNY_ROWS, MoESkinnyTiling, skinny_shared_programs

__all__ = ["MoESharedExpertBuildKey", "build_moe_shared_expert", "moe_shared_expert_refusal", "shared_programs",
           "SHARED_DECODE_TILING", "PREFILL_ROWS"]

_NAME = "MoESharedExpert TileLang kernel"
#: Few rows (decode): one row tile, narrow columns so that many programs stream the weights, and a
#: pipeline twice the routed one's: a decode step is bound by the weight bytes in flight, which at
#: a fixed BK are ``I · 2 · BK · stages`` for gate/up whatever the columns per program (1 MB at 8).
SHARED_DECODE_TILING = GroupedTiling(64, 16, 32, 128, stages=8)
#: Rows from which the routed prefill tiling serves (its gate/up grid reaches 64 programs at I = 512).
PREFILL_ROWS = 2048
#: Threads of the gate-logit program; each sums LOGIT_VEC-element vectors of the row.
LOGIT_THREADS, LOGIT_VEC = 128, 8


@dataclass(frozen=True)
class MoESharedExpertBuildKey:
    """Build identity: dtype (x, weights, output), hidden and intermediate sizes, whether the
    sigmoid gate is given."""

    dtype: str
    hidden: int
    intermediate: int
    gated: bool
    arch: str = "sm_90"
    #: Calls of at most this many rows run the warp-per-feature programs (:mod:`.moe_skinny`)
    #: instead of the decode tiling's tensor-core ones; 0: never. The registered key takes
    #: ``SKINNY_ROWS`` (H200, bf16 H=2048 I=512, 2026-12-04d: 1.55-2.17x the decode tiling at 1-4 rows).
    skinny_rows: int = 0
    #: How the skinny programs run (:class:`.moe_skinny.MoESkinnyTiling`).
    skinny_tiling: MoESkinnyTiling = MoESkinnyTiling()
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def moe_shared_expert_refusal(key: MoESharedExpertBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if not 0 <= key.skinny_rows <= SKINNY_ROWS:
        return f"{_NAME}: skinny_rows={key.skinny_rows} must lie in [0, {SKINNY_ROWS}] (the rows its programs stage)"
    return experts_refusal(_NAME, key, bool(key.skinny_rows))


def _gate_logit_program(key: MoESharedExpertBuildKey):
    import tilelang.language as T

    H, dt, f32 = key.hidden, key.dtype, "float32"
    BH = LOGIT_THREADS * LOGIT_VEC
    N = T.dynamic("N")

    @T.prim_func
    def moe_shared_gate_logit(x: T.Tensor((N, H), dt), expert_gate: T.Tensor((1, H), dt), logit: T.Tensor((N,), dt)):
        with T.Kernel(N, threads=LOGIT_THREADS) as bx:
            dependent_launch(key.dependent_launch)
            acc = T.alloc_fragment((1, BH), f32)
            total = T.alloc_fragment((1,), f32)
            T.clear(acc)
            for kk in T.serial(T.ceildiv(H, BH)):
                for i, j in T.Parallel(1, BH):
                    acc[i, j] = acc[i, j] + T.if_then_else(
                        kk * BH + j < H, T.cast(x[bx, kk * BH + j], f32) * T.cast(expert_gate[0, kk * BH + j], f32),
                        T.float32(0))
            T.reduce_sum(acc, total, dim=1)
            for i in T.Parallel(1):
                logit[bx] = T.cast(total[i], dt)

    return moe_shared_gate_logit


def shared_programs(key: MoESharedExpertBuildKey, tiling: GroupedTiling) -> tuple[Any, ...]:
    """``(gate_up, down)`` for ``tiling``: the routed experts' bodies over one expert and a static
    tile map (the launch passes the weights as ``[1, ·, ·]`` views). With the gate, the decode
    tiling's tuple also holds the gate-logit program, which no tiling shapes (built once, both
    tilings' launches use it)."""
    import tilelang.language as T

    H, I, dt = key.hidden, key.intermediate, key.dtype
    BM = tiling.block_m
    N = T.dynamic("N")
    gate_up, down = gate_up_tile(key, tiling), down_tile(key, tiling, key.gated)
    logit_t = T.Tensor((N,), dt)

    @T.prim_func
    def moe_shared_gate_up(x: T.Tensor((N, H), dt), gate_proj: T.Tensor((1, I, H), dt),
                           up_proj: T.Tensor((1, I, H), dt), act: T.Tensor((N, I), dt)):
        with T.Kernel(T.ceildiv(N, BM), T.ceildiv(I, tiling.block_n_gate_up), threads=tiling.threads) as (bx, by):
            dependent_launch(key.dependent_launch)
            gate_up(x, gate_proj, 0, up_proj, 0, 0, bx * BM, N, by, act)

    if key.gated:

        @T.prim_func
        def moe_shared_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((1, H, I), dt), logit: logit_t,
                            out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(N, BM), T.ceildiv(H, tiling.block_n_down), threads=tiling.threads) as (bx, by):
                dependent_launch(key.dependent_launch)
                down(act, down_proj, 0, bx * BM, N, by, logit, out)

    else:

        @T.prim_func
        def moe_shared_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((1, H, I), dt),
                            out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(N, BM), T.ceildiv(H, tiling.block_n_down), threads=tiling.threads) as (bx, by):
                dependent_launch(key.dependent_launch)
                down(act, down_proj, 0, bx * BM, N, by, None, out)

    programs: tuple[Any, ...] = (moe_shared_gate_up, moe_shared_down)
    if tiling == SHARED_DECODE_TILING:
        programs += (_gate_logit_program(key),) if key.gated else ()
        programs += skinny_shared_programs(key) if key.skinny_rows else ()
    return programs


def _make_run(key: MoESharedExpertBuildKey, decode: tuple[Any, ...], prefill: tuple[Any, ...]) -> Any:
    """The launch function: the tiling the row count calls for (known on the host), the
    activations (and the logits) as workspaces, then the two or three kernels."""
    import torch

    H, I, gated, skinny_rows = key.hidden, key.intermediate, key.gated, key.skinny_rows
    fused_logit = gated and key.skinny_tiling.fused_logit
    empty = workspace_allocator()

    def moe_shared_expert(x: Any, gate_proj: Any, up_proj: Any, down_proj: Any, expert_gate: Any,
                          out: Any = None) -> Any:
        if out is None:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        # The rows, the weights and the gate are read through tensor maps or in 16-byte vectors: packed and
        # 16-byte aligned (a contiguous tensor off a 16-byte boundary is copied too).
        if not x.is_contiguous() or x.data_ptr() % 16:
            x = packed(x)
        rows = x if x.dim() == 2 and x.shape[1] == H else x.view(-1, H)  # (a 2-D x is its rows: no new view)
        N = rows.shape[0]
        if N == 0:
            return out
        gate_proj, up_proj, down_proj = [t if t.is_contiguous() and t.data_ptr() % 16 == 0 else packed(t)
                                         for t in (gate_proj, up_proj, down_proj)]
        if gated and (not expert_gate.is_contiguous() or expert_gate.data_ptr() % 16):
            expert_gate = packed(expert_gate)
        act = empty((N, I), x.dtype, x.device)
        out_rows = out if out.dim() == 2 and out.shape[1] == H else out.view(N, H)
        if N <= skinny_rows:  # the skinny programs take the weights as they are, [I, H] and [H, I]
            gate_up, down = decode[-2:]
            w_down = down_proj
            if fused_logit:  # the gate/up kernel writes the logit too (MoESkinnyTiling.fused_logit)
                logit = empty((N,), x.dtype, x.device)
                gate_up(rows, gate_proj, up_proj, expert_gate, act, logit)
                down(act, w_down, logit, out_rows)
                return out
            gate_up(rows, gate_proj, up_proj, act)
        else:
            gate_up, down = prefill[:2] if N >= PREFILL_ROWS else decode[:2]  # the gate logit's is decode[2]
            gate_up(rows, gate_proj.view(1, I, H), up_proj.view(1, I, H), act)
            w_down = down_proj.view(1, H, I)
        if gated:
            logit = empty((N,), x.dtype, x.device)
            decode[2](rows, expert_gate, logit)
            down(act, w_down, logit, out_rows)
        else:
            down(act, w_down, out_rows)
        return out

    return moe_shared_expert


def build_moe_shared_expert(key: MoESharedExpertBuildKey) -> ExpertsLauncher:
    """Compile both tilings' kernels once per process; ValueError with the refusal reason."""
    return build_experts("moe_shared_expert", key, moe_shared_expert_refusal(key), shared_programs, _make_run,
                         (SHARED_DECODE_TILING, PREFILL_TILING))
