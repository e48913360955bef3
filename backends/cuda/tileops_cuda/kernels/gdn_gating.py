"""GDN gating as a TileLang kernel: ``g = -exp(A_log) · softplus(a + dt_bias)`` (float32) and
``beta = sigmoid(b)`` (b's dtype), per token and value head.

Pure streaming: the ``[M, NV]`` elements are cut into 16-byte vectors of a (NV is a whole
number of them, so a vector never straddles a row) and each thread owns ``vectors`` of
them, strided by the block so every load and store of a warp is one coalesced 512-byte
run. All of a thread's a and b loads are issued before the first use; g is written as
float32 vectors, beta as one vector in its own dtype. a and b are strided rows, so slices of
the fused ba projection are read in place; A_log and dt_bias are a few hundred bytes that
stay in L1. softplus is torch's (beta 1, threshold 20: ``x`` above 20, ``log1p(exp(x))``
below). Specialised on NV and the four dtypes (and the block shape, ``threads`` x
``vectors``, from ``block_shapes.BLOCK_SHAPES``, swept by ``bench/layer_ops_sweep.py``); M and
the row strides are dynamic.

Where a block's span of vectors is a whole number of rows (``threads x 16 bytes`` a multiple of
NV's), a thread meets the same columns in every vector it owns, so ``-exp(A_log)`` and
``dt_bias`` are formed once per thread, before its loads, not once per element. ``fast_math``
computes softplus with the approximate exp and log (log1p through Kahan's ``log(u) · t / (u -
1)``, accurate where ``1 + t`` rounds): the exact path is ~50 instructions an element, which a
10 MB single-wave launch cannot hide behind its loads.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass

from ._common import ELEM_BYTES, Compiled, arch_refusal, compile_once, dependent_launch, dependent_launch_refusal

__all__ = ["GDNGatingBuildKey", "build_gdn_gating", "gdn_gating_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class GDNGatingBuildKey:
    """Build identity: the projections' dtype (a and b share it), A_log's and dt_bias's, and NV;
    ``threads`` and ``vectors`` (16-byte vectors of a per thread) shape the block."""

    dtype: str
    a_log_dtype: str
    dt_bias_dtype: str
    heads: int
    arch: str = "sm_90"
    threads: int = 256
    vectors: int = 2
    fast_math: bool = False
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def gdn_gating_refusal(key: GDNGatingBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, "GDNGating TileLang kernel", key.arch,
                                      "drop dependent_launch")
    if reason is not None:
        return reason
    name = "GDNGating TileLang kernel"
    for what, dtype in (("a/b", key.dtype), ("A_log", key.a_log_dtype), ("dt_bias", key.dt_bias_dtype)):
        if dtype not in _DTYPES:
            return f"{name}: {what} dtype {dtype} is not one of {_DTYPES}; use the reference"
    vec = 16 // ELEM_BYTES[key.dtype]
    if key.heads % vec:
        return f"{name}: NV={key.heads} must be a multiple of {vec} (16-byte vectors of a and b); use the reference"
    if key.threads not in (32, 64, 128, 256, 512, 1024) or not 1 <= key.vectors <= 8:
        return f"{name}: threads={key.threads} must be a power of two in [32, 1024] and vectors={key.vectors} in [1, 8]"
    return arch_refusal(name, key.arch)


def _program(key: GDNGatingBuildKey):
    import tilelang.language as T

    NV, dt, f32 = key.heads, key.dtype, "float32"
    vec = 16 // ELEM_BYTES[dt]
    TH, U = key.threads, key.vectors
    M = T.dynamic("M")
    SA, SB = T.dynamic("SA"), T.dynamic("SB")
    same_columns = TH * vec % NV == 0

    def exp(x):
        return T.__exp(x) if key.fast_math else T.exp(x)

    def softplus(x, ur, k):
        """torch's softplus (beta 1, threshold 20); ``ur[k]`` holds 1 + exp(x) in fast math (a
        register the simplifier cannot see through: it would fold ``(1 + t) - 1`` into ``t``)."""
        if not key.fast_math:
            return T.if_then_else(x > T.float32(20), x, T.log1p(T.exp(x)))
        t = T.__exp(x)
        # log1p(t) = log(u) * t / (u - 1) with u = fl(1 + t): exact to a few ulp; t where u is 1.
        return T.if_then_else(x > T.float32(20), x, T.if_then_else(
            ur[k] == T.float32(1), t, T.__log(ur[k]) * (t * T.fast_rcp(ur[k] - T.float32(1)))))

    @T.prim_func
    def gdn_gating(a: T.StridedTensor((M, NV), (SA, 1), dt), b: T.StridedTensor((M, NV), (SB, 1), dt),
                   A_log: T.Tensor((NV,), key.a_log_dtype), dt_bias: T.Tensor((NV,), key.dt_bias_dtype),
                   g: T.Tensor((M, NV), f32), beta: T.Tensor((M, NV), dt)):
        # The launcher passes only strides that are whole vectors (_row_views.readable).
        T.assume(SA % vec == 0)
        T.assume(SB % vec == 0)
        with T.Kernel(T.ceildiv(M * NV, TH * U * vec), threads=TH) as bx:
            dependent_launch(key.dependent_launch)
            tid = T.get_thread_binding()
            ar = T.alloc_local((U * vec,), dt)
            br = T.alloc_local((U * vec,), dt)
            gr = T.alloc_local((U * vec,), f32)
            sr = T.alloc_local((U * vec,), dt)
            na = T.alloc_local((vec,), f32)  # -exp(A_log) and dt_bias of the thread's columns
            bias = T.alloc_local((vec,), f32)
            ur = T.alloc_local((U * vec,), f32)
            if same_columns:
                for e in T.unroll(vec):
                    na[e] = -exp(T.cast(A_log[tid * vec % NV + e], f32))
                    bias[e] = T.cast(dt_bias[tid * vec % NV + e], f32)
            for u in T.unroll(U):  # every load in flight before the first use
                e0 = ((bx * U + u) * TH + tid) * vec
                if e0 < M * NV:
                    for e in T.vectorized(vec):
                        ar[u * vec + e] = a[e0 // NV, e0 % NV + e]
                    for e in T.vectorized(vec):
                        br[u * vec + e] = b[e0 // NV, e0 % NV + e]
            for u in T.unroll(U):
                e0 = ((bx * U + u) * TH + tid) * vec
                for e in T.unroll(vec):
                    col = e0 % NV + e
                    k = u * vec + e
                    if same_columns:
                        x = T.cast(ar[k], f32) + bias[e]
                    else:
                        x = T.cast(ar[k], f32) + T.cast(dt_bias[col], f32)
                    if key.fast_math:
                        ur[k] = T.float32(1) + T.__exp(x)
                    if same_columns:
                        gr[k] = na[e] * softplus(x, ur, k)
                    else:
                        gr[k] = -exp(T.cast(A_log[col], f32)) * softplus(x, ur, k)
                    s = T.cast(br[u * vec + e], f32)
                    sr[u * vec + e] = T.cast(T.fast_rcp(T.float32(1) + T.__exp(-s)), dt)
                if e0 < M * NV:
                    for e in T.vectorized(vec):
                        g[e0 // NV, e0 % NV + e] = gr[u * vec + e]
                    for e in T.vectorized(vec):
                        beta[e0 // NV, e0 % NV + e] = sr[u * vec + e]

    return gdn_gating


def build_gdn_gating(key: GDNGatingBuildKey) -> Compiled:
    """Compile once per process; ``.fn(a2d, b2d, A_log, dt_bias, g2d, beta2d)`` launches it (2-D
    row views, M positive). ValueError with the refusal reason."""
    return compile_once(("gdn_gating", key), gdn_gating_refusal(key), lambda: _program(key), key.arch)
