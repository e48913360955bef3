"""The shared expert of a MoE block at a decode step's few rows: warp-per-feature programs.

Why (issue 21's model at decode, backends/cuda/NOTES.md, nineteenth session): the Qwen3.5-MoE decode
step spent 45.0 + 16.0 µs a step (four layers) in the shared expert's tensor-core programs for 6 MB
of weights a layer, about a tenth of the copy's rate: their decode tiling gives gate/up 32
programs (16 columns of I = 512 each) and down 64. The linear layers had the same shape of
problem, and the skinny linear program (:mod:`.skinny_linear`) read their weights at 72-97% of
the same-size copy. These programs use its macros:

1. ``gate_up`` (a program per ``WARPS`` features of I, a warp each): the x rows staged in shared
   memory; the warp loads its gate row and its up row (both chunks before either is used), then
   ``g`` and ``u`` as float32 dot products reduced across the warp, each rounded to the dtype, and
   ``act = round(silu(g) · u)`` in float32: the roundings of the tensor-core body
   (``moe_grouped_experts.gate_up_tile``);
2. ``down`` (a program per ``WARPS`` features of H): the act rows staged; ``o = round(act ·
   down_proj[h])``, times ``sigmoid(logit)`` in float32 and rounded once with the gate
   (``down_tile``'s roundings); the logit comes from the decode tiling's gate-logit program.

Sums run in another order than the tensor cores' (lane-strided, then the warp's butterfly), so the
results equal the tensor-core programs' within a rounding, not bit for bit; both are checked
against float64 (tests/test_moe_shared_expert_gpu.py). Up to ``SKINNY_ROWS`` rows (the linear's
measured limit); H and I multiples of 8 (the experts' refusal). Not yet run on a GPU: the launcher
reaches these programs only when the build key asks (``MoESharedExpertBuildKey.skinny_rows``).

tilelang is imported inside the builders, never at module import.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from typing import Any

from ._common import ELEM_BYTES
from .skinny_linear import stage_rows_macro, weight_chunks

__all__ = ["SKINNY_ROWS", "WARPS", "skinny_shared_programs"]

#: Rows the programs hold at most (the skinny linear's registered limit).
SKINNY_ROWS = 4
#: Warps a program, a feature each.
WARPS = 8
#: 16-byte vectors a lane loads before it computes (a weight's chunk).
_UNROLL = 8


def skinny_shared_programs(key: Any) -> tuple[Any, Any]:
    """``(gate_up, down)`` PrimFuncs for ``key`` (a ``MoESharedExpertBuildKey``): ``gate_up(x [N, H],
    gate_proj [I, H], up_proj [I, H], act [N, I])`` and ``down(act [N, I], down_proj [H, I],
    logit [N], out [N, H])`` (no ``logit`` without the gate), N at most ``SKINNY_ROWS``."""
    import tilelang.language as T

    H, I, dt, f32 = key.hidden, key.intermediate, key.dtype, "float32"
    R, W, TH = SKINNY_ROWS, WARPS, 32 * WARPS
    VEC = 16 // ELEM_BYTES[dt]
    N = T.dynamic("N")
    stage_x, stage_act = stage_rows_macro(R, H, dt, TH), stage_rows_macro(R, I, dt, TH)
    NCH_GU, U_GU, load_gu, dot_gu = weight_chunks(R, H, dt, _UNROLL)
    NCH_D, U_D, load_d, dot_d = weight_chunks(R, I, dt, _UNROLL)

    @T.prim_func
    def moe_shared_skinny_gate_up(x: T.Tensor((N, H), dt), gate_proj: T.Tensor((I, H), dt),
                                  up_proj: T.Tensor((I, H), dt), act: T.Tensor((N, I), dt)):
        with T.Kernel(T.ceildiv(I, W), threads=TH) as bx:
            tid = T.get_thread_binding()
            lane = tid % 32
            j = bx * W + tid // 32
            row = T.min(j, I - 1)  # a warp past I reads a real row and stores nothing
            x_s = T.alloc_shared((R, H), dt)
            g_acc = T.alloc_local((R,), f32)
            u_acc = T.alloc_local((R,), f32)
            g_w = T.alloc_local((U_GU * VEC,), dt)
            u_w = T.alloc_local((U_GU * VEC,), dt)
            xv = T.alloc_local((VEC,), dt)
            stage_x(x, x_s, 0, N, tid)
            for m in T.unroll(R):
                g_acc[m] = T.float32(0)
                u_acc[m] = T.float32(0)
            for c in T.serial(NCH_GU):
                load_gu(gate_proj, row, g_w, lane, c)
                load_gu(up_proj, row, u_w, lane, c)
                dot_gu(x_s, g_acc, g_w, xv, lane, c, 0, N)
                dot_gu(x_s, u_acc, u_w, xv, lane, c, 0, N)
            for m in T.unroll(R):
                g_acc[m] = T.warp_reduce_sum(g_acc[m])
                u_acc[m] = T.warp_reduce_sum(u_acc[m])
            if lane == 0 and j < I:
                for m in T.unroll(R):
                    if m < N:
                        g = T.cast(T.cast(g_acc[m], dt), f32)
                        u = T.cast(T.cast(u_acc[m], dt), f32)
                        act[m, j] = T.cast(g / (T.float32(1) + T.exp(-g)) * u, dt)

    @T.macro
    def down(act, down_proj, logit, out, bx, gated: bool):
        tid = T.get_thread_binding()
        lane = tid % 32
        h = bx * W + tid // 32
        row = T.min(h, H - 1)
        a_s = T.alloc_shared((R, I), dt)
        o_acc = T.alloc_local((R,), f32)
        d_w = T.alloc_local((U_D * VEC,), dt)
        av = T.alloc_local((VEC,), dt)
        stage_act(act, a_s, 0, N, tid)
        for m in T.unroll(R):
            o_acc[m] = T.float32(0)
        for c in T.serial(NCH_D):
            load_d(down_proj, row, d_w, lane, c)
            dot_d(a_s, o_acc, d_w, av, lane, c, 0, N)
        for m in T.unroll(R):
            o_acc[m] = T.warp_reduce_sum(o_acc[m])
        if lane == 0 and h < H:
            for m in T.unroll(R):
                if m < N:
                    if gated:
                        z = T.cast(logit[m], f32)
                        out[m, h] = T.cast(T.cast(T.cast(o_acc[m], dt), f32) / (T.float32(1) + T.exp(-z)), dt)
                    else:
                        out[m, h] = T.cast(o_acc[m], dt)

    if key.gated:

        @T.prim_func
        def moe_shared_skinny_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((H, I), dt),
                                   logit: T.Tensor((N,), dt), out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(H, W), threads=TH) as bx:
                down(act, down_proj, logit, out, bx, True)

    else:

        @T.prim_func
        def moe_shared_skinny_down(act: T.Tensor((N, I), dt), down_proj: T.Tensor((H, I), dt),
                                   out: T.Tensor((N, H), dt)):
            with T.Kernel(T.ceildiv(H, W), threads=TH) as bx:
                down(act, down_proj, None, out, bx, False)

    return moe_shared_skinny_gate_up, moe_shared_skinny_down
