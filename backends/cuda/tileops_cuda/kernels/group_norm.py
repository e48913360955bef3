"""GroupNorm as a TileLang kernel: ``x [N, C, *] -> (x - mean_g) * rstd_g * w[c] + b[c]``.

One program per (sample, group) row of ``D = C/G * prod(*)`` contiguous elements. Pass 1
reads the row once for shifted sums (shift = the row's first element, which keeps
``E[(x-s)^2] - E[x-s]^2`` free of the cancellation of the naive formula); pass 2 re-reads
it (mostly from L2) and writes the normalised row. fp32 math, biased variance, as torch.
Specialised on dtype, channels per group, spatial size and affine presence; N is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, arch_refusal, compile_once

__all__ = ["GroupNormBuildKey", "build_group_norm", "group_norm_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
_THREADS = 256


@dataclass(frozen=True)
class GroupNormBuildKey:
    """Build identity: dtype, groups, channels, spatial size (product of trailing dims), affine."""

    dtype: str
    num_groups: int
    channels: int
    spatial: int
    affine: bool = True
    arch: str = "sm_90"


def group_norm_refusal(key: GroupNormBuildKey, contiguous: bool = True) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"GroupNorm TileLang kernel: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.channels % key.num_groups:
        return f"GroupNorm: channels={key.channels} is not a multiple of num_groups={key.num_groups}"
    if not contiguous:
        return "GroupNorm TileLang kernel: input is not contiguous; call .contiguous() or use the reference"
    vec = 16 // ELEM_BYTES[key.dtype]
    if (key.channels // key.num_groups * key.spatial) % vec:
        return (
            f"GroupNorm TileLang kernel: group size C/G*spatial="
            f"{key.channels // key.num_groups * key.spatial} must be a multiple of {vec} (16-byte vectors)"
        )
    return arch_refusal("GroupNorm TileLang kernel", key.arch)


def _program(key: GroupNormBuildKey):
    import tilelang.language as T

    G, C, HW, dt, f32 = key.num_groups, key.channels, key.spatial, key.dtype, "float32"
    CG = C // G
    D = CG * HW
    vec = 16 // ELEM_BYTES[dt]
    BD = _THREADS * vec
    while BD > vec and BD // 2 >= D:
        BD //= 2
    NT = (D + BD - 1) // BD
    Nn = T.dynamic("N")

    @T.macro
    def body(x, w, b, y, eps):
        with T.Kernel(Nn * G, threads=_THREADS) as bx:  # one axis, groups varying fastest: N may pass 65535
            bg, bn = bx % G, bx // G
            s1 = T.alloc_fragment((BD,), f32)
            s2 = T.alloc_fragment((BD,), f32)
            r1 = T.alloc_fragment((1,), f32)
            r2 = T.alloc_fragment((1,), f32)
            shift = T.alloc_var(f32)
            mean = T.alloc_var(f32)
            rstd = T.alloc_var(f32)
            # A lone scalar load of `x` next to its vector loads trips TileLang 0.1.15's
            # pointer-type rewrite; stage the first vector through shared memory instead.
            head = T.alloc_shared((vec,), dt)
            T.copy(x[bn, bg, 0:vec], head)
            shift = T.cast(head[0], f32)
            T.clear(s1)
            T.clear(s2)
            for t in T.serial(NT):
                for j in T.Parallel(BD):
                    v = T.if_then_else(t * BD + j < D, T.cast(x[bn, bg, t * BD + j], f32) - shift, T.float32(0))
                    s1[j] = s1[j] + v
                    s2[j] = s2[j] + v * v
            T.reduce_sum(s1, r1, dim=0)
            T.reduce_sum(s2, r2, dim=0)
            mean = r1[0] / T.float32(D)
            rstd = T.rsqrt(T.max(r2[0] / T.float32(D) - mean * mean, T.float32(0)) + eps)
            mean = mean + shift
            for t in T.serial(NT):
                for j in T.Parallel(BD):
                    if t * BD + j < D:
                        if key.affine:
                            c = bg * CG + (t * BD + j) // HW
                            y[bn, bg, t * BD + j] = T.cast(
                                (T.cast(x[bn, bg, t * BD + j], f32) - mean) * rstd * T.cast(w[c], f32)
                                + T.cast(b[c], f32),
                                dt,
                            )
                        else:
                            y[bn, bg, t * BD + j] = T.cast((T.cast(x[bn, bg, t * BD + j], f32) - mean) * rstd, dt)

    x_t = T.Tensor((Nn, G, D), dt)
    y_t = T.Tensor((Nn, G, D), dt)
    w_t = T.Tensor((C,), dt)
    b_t = T.Tensor((C,), dt)
    if key.affine:

        @T.prim_func
        def group_norm_fwd(x: x_t, weight: w_t, bias: b_t, y: y_t, eps: T.float32):
            body(x, weight, bias, y, eps)

    else:

        @T.prim_func
        def group_norm_fwd(x: x_t, y: y_t, eps: T.float32):
            body(x, None, None, y, eps)

    return group_norm_fwd


def build_group_norm(key: GroupNormBuildKey) -> Compiled:
    """Compile once per process; ``.fn(x3d, [weight, bias,] y3d, eps)`` launches it (x3d and y3d
    ``[N, G, D]`` contiguous, N positive). ValueError with the refusal reason."""
    return compile_once(("group_norm", key), group_norm_refusal(key), lambda: _program(key), key.arch)
