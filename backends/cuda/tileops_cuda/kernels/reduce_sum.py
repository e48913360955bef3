"""Sum over a contiguous run of dims (or all dims) as TileLang kernels, fp32 accumulation.

Any reduction over adjacent dims of a contiguous tensor is ``[A, K, B] -> [A, B]``:

* ``B == 1`` (trailing dims, or a full reduction): rows of length K, split over ``P``
  programs per row when A is too small to fill the GPU; 16-byte loads.
* ``B > 1``: columns, vectorised across B, K walked by each program (split likewise).

Partials are fp32 ``[A, P(, B)]``; a second tiny launch folds them and casts to the
output dtype (torch.sum keeps the input dtype for floating inputs). Non-adjacent dims are
refused.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, Compiled, arch_refusal, cached_build, compile_prim_func, dtype_name

__all__ = ["SumBuildKey", "build_sum", "sum_refusal", "reduce_sum", "plan_sum"]

_DTYPES = ("float16", "bfloat16", "float32")
_THREADS = 256
_UNROLL = 4


@dataclass(frozen=True)
class SumBuildKey:
    """Build identity of one pass: ``kind`` is ``"rows"`` ([A, K] -> [A, P]) or ``"cols"``
    ([A, K, B] -> [A, P, B]); ``inner`` is K for rows and B for cols (static); ``out_dtype``
    is float32 for partials."""

    kind: str
    dtype: str
    out_dtype: str
    inner: int
    arch: str = "sm_90"


def sum_refusal(
    dtype: str, dims: tuple[int, ...] | None, ndim: int, contiguous: bool, arch: str = "sm_90", out_dtype: str | None = None
) -> str | None:
    """Why a Sum call cannot be served (with the fix), or None."""
    if dtype not in _DTYPES:
        return f"Sum TileLang kernel: dtype {dtype} is not one of {_DTYPES}; use the reference"
    if out_dtype is not None and out_dtype not in _DTYPES:
        return f"Sum TileLang kernel: output dtype {out_dtype} is not one of {_DTYPES} (it accumulates in float32)"
    if not contiguous:
        return "Sum TileLang kernel: input is not contiguous; call .contiguous() or use the reference"
    if dims is not None and dims:
        d = sorted(x % ndim for x in dims)
        if d != list(range(d[0], d[-1] + 1)):
            return f"Sum TileLang kernel: dims {tuple(dims)} are not adjacent; reduce them one run at a time"
    return arch_refusal("Sum TileLang kernel", arch)


def _rows_program(key: SumBuildKey):
    import tilelang.language as T

    K, f32 = key.inner, "float32"
    vec = 16 // ELEM_BYTES[key.dtype]
    BK = _THREADS * vec * _UNROLL  # several 16-byte loads per thread in flight per step
    NT = (K + BK - 1) // BK
    A, P = T.dynamic("A"), T.dynamic("P")

    @T.prim_func
    def sum_rows(x: T.Tensor((A, K), key.dtype), part: T.Tensor((A, P), key.out_dtype)):
        with T.Kernel(P, A, threads=_THREADS) as (bp, ba):
            acc = T.alloc_fragment((BK,), f32)
            tot = T.alloc_fragment((1,), f32)
            T.clear(acc)
            per = T.ceildiv(NT, P)
            for t in T.serial(per):
                tile = bp * per + t
                for j in T.Parallel(BK):
                    acc[j] = acc[j] + T.if_then_else(
                        tile < NT and tile * BK + j < K, T.cast(x[ba, tile * BK + j], f32), T.float32(0)
                    )
            T.reduce_sum(acc, tot, dim=0)
            part[ba, bp] = T.cast(tot[0], key.out_dtype)

    return sum_rows


def _col_tile(b: int, vec: int) -> tuple[int, int]:
    """(columns, rows) of a cols program's tile: powers of two, 16-byte vectors across B."""
    bb = 1
    while b % (bb * 2) == 0 and bb * 2 <= 64 * vec:
        bb *= 2
    return bb, max(1, _THREADS * vec * _UNROLL // bb)


def _cols_program(key: SumBuildKey):
    import tilelang.language as T

    B, f32 = key.inner, "float32"
    vec = 16 // ELEM_BYTES[key.dtype]
    BB, RK = _col_tile(B, vec)  # RK rows of K per step
    A, K, P = T.dynamic("A"), T.dynamic("K"), T.dynamic("P")

    @T.prim_func
    def sum_cols(x: T.Tensor((A, K, B), key.dtype), part: T.Tensor((A, P, B), key.out_dtype)):
        with T.Kernel(B // BB, P, A, threads=_THREADS) as (bb, bp, ba):
            acc = T.alloc_fragment((RK, BB), f32)
            tot = T.alloc_fragment((BB,), f32)
            T.clear(acc)
            steps = T.ceildiv(K, RK)
            per = T.ceildiv(steps, P)
            for t in T.serial(per):
                k0 = (bp * per + t) * RK
                for i, j in T.Parallel(RK, BB):
                    acc[i, j] = acc[i, j] + T.if_then_else(
                        k0 + i < K and bp * per + t < steps, T.cast(x[ba, k0 + i, bb * BB + j], f32), T.float32(0)
                    )
            T.reduce_sum(acc, tot, dim=0)
            for j in T.Parallel(BB):
                part[ba, bp, bb * BB + j] = T.cast(tot[j], key.out_dtype)

    return sum_cols


def build_sum(key: SumBuildKey) -> Compiled:
    """Compile one pass once per process; ``.fn(x, part)`` launches it."""
    reason = arch_refusal("Sum TileLang kernel", key.arch)
    if reason is not None:
        raise ValueError(reason)
    prog = _rows_program if key.kind == "rows" else _cols_program
    return cached_build(("sum", key), lambda: Compiled(compile_prim_func(prog(key), key.arch)))


def plan_sum(shape: tuple[int, ...], dims: tuple[int, ...] | None) -> tuple[int, int, int]:
    """``(A, K, B)`` of a reduction over adjacent ``dims`` (all dims when None/empty)."""
    nd = len(shape)
    if not dims:
        lo, hi = 0, nd - 1
    else:
        d = sorted(x % nd for x in dims)
        lo, hi = d[0], d[-1]
    a = 1
    for s in shape[:lo]:
        a *= s
    k = 1
    for s in shape[lo : hi + 1]:
        k *= s
    b = 1
    for s in shape[hi + 1 :]:
        b *= s
    return a, k, b


def _splits(work_items: int, k_tiles: int, sms: int = 132) -> int:
    """Programs per output so that about 4 waves of programs run, never more than K tiles."""
    want = max(1, (4 * sms + work_items - 1) // max(work_items, 1))
    return max(1, min(want, k_tiles))


def reduce_sum(
    x: Any, dims: tuple[int, ...] | None = None, keepdim: bool = False, dtype: Any = None, arch: str = "sm_90",
    out: Any = None,
) -> Any:
    """``torch.sum(x, dims, keepdim, dtype=dtype)`` for a contiguous CUDA tensor and adjacent dims,
    written into ``out`` (contiguous, the result's shape and dtype) when given."""
    import torch

    dt = dtype_name(x)
    odt = dt if dtype is None else dtype_name(dtype)
    reason = sum_refusal(dt, dims, x.dim(), x.is_contiguous(), arch, odt)
    if reason is not None:
        raise ValueError(reason)
    A, K, B = plan_sum(tuple(x.shape), dims)
    nd = x.dim()
    red = set(range(nd)) if not dims else {d % nd for d in dims}
    if keepdim:
        oshape = tuple(1 if i in red else s for i, s in enumerate(x.shape))
    else:
        oshape = tuple(s for i, s in enumerate(x.shape) if i not in red)
    if out is None:
        out = torch.empty(oshape, dtype=getattr(torch, odt), device=x.device)
    if out.numel() == 0:
        return out
    if K == 0:
        return out.zero_()
    if B == 1:
        vec = 16 // ELEM_BYTES[dt]
        k_tiles = (K + _THREADS * vec * _UNROLL - 1) // (_THREADS * vec * _UNROLL)
        P = _splits(A, k_tiles)
        part = torch.empty((A, P), dtype=torch.float32, device=x.device)
        build_sum(SumBuildKey("rows", dt, "float32", K, arch)).fn(x.view(A, K), part)
        build_sum(SumBuildKey("cols", "float32", odt, 1, arch)).fn(part.view(A, P, 1), out.view(A, 1, 1))
    else:
        key = SumBuildKey("cols", dt, "float32", B, arch)
        vec = 16 // ELEM_BYTES[dt]
        bb, rk = _col_tile(B, vec)
        P = _splits(A * (B // bb), (K + rk - 1) // rk)
        part = torch.empty((A, P, B), dtype=torch.float32, device=x.device)
        build_sum(key).fn(x.view(A, K, B), part)
        build_sum(SumBuildKey("cols", "float32", odt, B, arch)).fn(part, out.view(A, 1, B))
    return out
