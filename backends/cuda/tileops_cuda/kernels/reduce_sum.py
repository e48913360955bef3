"""Sum over a contiguous run of dims (or all dims) as TileLang kernels, fp32 accumulation.

Any reduction over adjacent dims of a contiguous tensor is ``[A, K, B] -> [A, B]``:

* ``B == 1`` (trailing dims, or a full reduction): rows of length K, split over ``P``
  programs per row when A is too small to fill the GPU; 16-byte loads.
* ``B > 1``: columns, vectorised across B, K walked by each program (split likewise).

Partials are fp32 ``[A, P(, B)]``; a second tiny launch folds them and casts to the
output dtype (torch.sum keeps the input dtype for floating inputs). Non-adjacent dims are
refused. Both passes launch one grid axis (x, up to 2^31 - 1 programs) in the order a
``(P, A)`` / ``(B/BB, P, A)`` grid would run: A is any number of rows, and CUDA caps grid
y and z at 65535.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any, Callable

from ._common import ELEM_BYTES, Compiled, arch_refusal, compile_once
from ._row_views import packed

__all__ = ["SumBuildKey", "build_sum", "sum_launch", "sum_refusal", "plan_sum"]

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
        with T.Kernel(A * P, threads=_THREADS) as bx:  # one axis: A may pass grid y's 65535
            ba, bp = bx // P, bx % P
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
        with T.Kernel(A * P * (B // BB), threads=_THREADS) as bx:  # one axis, column tiles varying fastest
            bb, bp, ba = bx % (B // BB), bx // (B // BB) % P, bx // (B // BB) // P
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
    program = _rows_program if key.kind == "rows" else _cols_program
    return compile_once(("sum", key), arch_refusal("Sum TileLang kernel", key.arch), lambda: program(key), key.arch)


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


def _reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...] | None, keepdim: bool) -> tuple[int, ...]:
    nd = len(shape)
    red = set(range(nd)) if not dims else {d % nd for d in dims}
    if keepdim:
        return tuple(1 if i in red else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in red)


def sum_launch(dtype: str, out_dtype: str, arch: str) -> Callable[..., Any]:
    """The launch function of the Sum interface for one input dtype, output dtype and arch:
    ``total(input, dim, keepdim, dtype, out=None)`` is ``torch.sum(input, dim, keepdim,
    dtype=dtype)`` over adjacent axes (all of them when ``dim`` is None or empty), written
    into ``out`` (allocated when None).

    The two passes are compiled for a reduced length (rows) or a kept inner size (columns),
    which are shapes of the call, so they are found per call shape, once: a repeated shape
    calls the compiled functions directly. ``input`` is packed (``_row_views.packed``) where it is
    not contiguous or not 16-byte aligned (the passes read it in 16-byte vectors; the interface
    guarantees neither)."""
    import torch

    vec = 16 // ELEM_BYTES[dtype]
    result_dtype = getattr(torch, out_dtype)
    f32 = torch.float32
    #: (K, B) -> (first pass, fold, K tiles, work items per output row).
    passes: dict[tuple[int, int], tuple[Callable[..., Any], Callable[..., Any], int, int]] = {}

    def passes_of(K: int, B: int) -> tuple[Callable[..., Any], Callable[..., Any], int, int]:
        if B == 1:  # rows of length K
            first = build_sum(SumBuildKey("rows", dtype, "float32", K, arch)).fn
            k_tiles, items = (K + _THREADS * vec * _UNROLL - 1) // (_THREADS * vec * _UNROLL), 1
        else:  # columns vectorised across B, K walked by each program
            first = build_sum(SumBuildKey("cols", dtype, "float32", B, arch)).fn
            bb, rk = _col_tile(B, vec)
            k_tiles, items = (K + rk - 1) // rk, B // bb
        fold = build_sum(SumBuildKey("cols", "float32", out_dtype, B, arch)).fn
        found = passes[(K, B)] = (first, fold, k_tiles, items)
        return found

    def total(input: Any, dim: Any, keepdim: bool, dtype: Any, out: Any = None) -> Any:
        dims = None if dim is None else (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,))
        if input.dim() == 0:
            dims = None  # a 0-d input's dim 0 / -1 is the whole of it, as in torch (found in review: modulo by 0)
        if not input.is_contiguous() or input.data_ptr() % 16:
            input = packed(input)
        if out is None:
            out = torch.empty(_reduced_shape(tuple(input.shape), dims, keepdim), dtype=result_dtype,
                              device=input.device)
        if out.numel() == 0:
            return out
        A, K, B = plan_sum(tuple(input.shape), dims)
        if K == 0:
            return out.zero_()
        first, fold, k_tiles, items = passes.get((K, B)) or passes_of(K, B)
        P = _splits(A * items, k_tiles)
        part = torch.empty((A, P, B), dtype=f32, device=input.device)
        if B == 1:
            first(input.view(A, K), part.view(A, P))
        else:
            first(input.view(A, K, B), part)
        fold(part, out.view(A, 1, B))
        return out

    return total
