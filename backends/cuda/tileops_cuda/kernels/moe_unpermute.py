"""MoE un-permute (the weighted combine) as a TileLang kernel (``manifest/moe.yaml``).

``out[t] = shared_output[t] + sum_k topk_weights[t, k] · expert_output[permuted_index[t, k]]``
in float32, in k order, rounded once to expert_output's dtype. A gather per token: no atomics,
so the result never depends on the order experts finish in. A program holds one token's slice
of BH channels; the K gathers are unrolled (K is part of the build) so their loads are all in
flight together. Every byte is read once (each expert row is read by the one token that owns
it) and the output written once: the bytes floor.

The kernel does not read indices on the host (that would cost a device synchronisation per
call): the op's contents check (``TILEOPS_CHECK_CONTENTS=1``) names an index outside
``[0, N)`` before anything runs; unchecked, such an index reads as a zero row. Specialised on
the three dtypes (rows, indices, weights), H, K and the shared output's presence; the token
count is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, arch_refusal, dependent_launch, dependent_launch_refusal
from ._launcher import RunLauncher, build_run_launcher
from ._row_views import packed

__all__ = ["MoEUnpermuteBuildKey", "build_moe_unpermute", "moe_unpermute_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
_INDEX_DTYPES = ("int32", "int64")
_NAME = "MoEUnpermute TileLang kernel"


@dataclass(frozen=True)
class MoEUnpermuteBuildKey:
    """Build identity: dtypes of the rows (= output, shared output), indices and weights; H, K,
    whether a shared output is added."""

    dtype: str
    index_dtype: str
    weight_dtype: str
    hidden: int
    top_k: int
    has_shared: bool = True
    arch: str = "sm_90"
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: MoEUnpermuteBuildKey) -> tuple[int, int]:
    """``(threads, channels per program)``: one 16-byte vector per thread per gathered row
    (K of them in flight), 128 threads, fewer for narrow rows."""
    vec = _vec(key.dtype)
    threads = 128
    while threads > 32 and threads * vec > key.hidden:
        threads //= 2
    return threads, threads * vec


def moe_unpermute_refusal(key: MoEUnpermuteBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
    if key.dtype not in _DTYPES or key.weight_dtype not in _DTYPES:
        return f"{_NAME}: dtypes {key.dtype} / {key.weight_dtype} must be among {_DTYPES}; use the reference"
    if key.index_dtype not in _INDEX_DTYPES:
        return f"{_NAME}: index dtype {key.index_dtype} is not one of {_INDEX_DTYPES}; use the reference"
    if key.hidden % _vec(key.dtype):
        return f"{_NAME}: H={key.hidden} must be a multiple of {_vec(key.dtype)} (16-byte vectors); use the reference"
    if not 1 <= key.top_k <= 64:
        return f"{_NAME}: K={key.top_k} must lie in [1, 64] (the gathers are unrolled); use the reference"
    return arch_refusal(_NAME, key.arch)


def _program(key: MoEUnpermuteBuildKey):
    import tilelang.language as T

    H, K, dt, f32 = key.hidden, key.top_k, key.dtype, "float32"
    threads, BH = _plan(key)
    Tn = T.dynamic("T")
    N = T.dynamic("N")

    @T.macro
    def combine(Y, Idx, W, S, out):
        with T.Kernel(Tn, T.ceildiv(H, BH), threads=threads) as (bx, by):
            dependent_launch(key.dependent_launch)
            acc = T.alloc_fragment((BH,), f32)
            for j in T.Parallel(BH):
                if key.has_shared:
                    acc[j] = T.cast(S[bx, by * BH + j], f32)
                else:
                    acc[j] = T.float32(0)
            for k in T.unroll(K):  # K is part of the build: its loads are all in flight together
                for j in T.Parallel(BH):
                    r = Idx[bx, k]
                    row = T.if_then_else(r >= 0, T.if_then_else(r < N, T.cast(Y[r, by * BH + j], f32),
                                                                T.float32(0)), T.float32(0))
                    acc[j] = acc[j] + T.cast(W[bx, k], f32) * row
            for j in T.Parallel(BH):
                if by * BH + j < H:
                    out[bx, by * BH + j] = T.cast(acc[j], dt)

    y_t = T.Tensor((N, H), dt)
    idx_t = T.Tensor((Tn, K), key.index_dtype)
    w_t = T.Tensor((Tn, K), key.weight_dtype)
    shared_t = T.Tensor((Tn, H), dt)
    out_t = T.Tensor((Tn, H), dt)
    if key.has_shared:

        @T.prim_func
        def moe_unpermute(expert_output: y_t, permuted_index: idx_t, topk_weights: w_t, shared_output: shared_t,
                          out: out_t):
            combine(expert_output, permuted_index, topk_weights, shared_output, out)

    else:

        @T.prim_func
        def moe_unpermute(expert_output: y_t, permuted_index: idx_t, topk_weights: w_t, out: out_t):
            combine(expert_output, permuted_index, topk_weights, None, out)

    return moe_unpermute


def _make_run(key: MoEUnpermuteBuildKey, fn: Any) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``)."""
    import torch

    H = key.hidden

    def moe_unpermute(expert_output: Any, permuted_index: Any, topk_weights: Any, shared_output: Any,
                      out: Any = None) -> Any:
        T = permuted_index.shape[0]
        if out is None:
            out = torch.empty((T, H), dtype=expert_output.dtype, device=expert_output.device)
        if T == 0:
            return out
        # The expert rows and the shared output are read in 16-byte vectors, the index and weights an element
        # at a time: only the rows need an aligned start.
        y, idx, w = expert_output, permuted_index.contiguous(), topk_weights.contiguous()
        if not y.is_contiguous() or y.data_ptr() % 16:
            y = packed(y)
        if key.has_shared:
            if not shared_output.is_contiguous() or shared_output.data_ptr() % 16:
                shared_output = packed(shared_output)
            fn(y, idx, w, shared_output, out)
        else:
            fn(y, idx, w, out)
        return out

    return moe_unpermute


def build_moe_unpermute(key: MoEUnpermuteBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("moe_unpermute", key, moe_unpermute_refusal, _program, _make_run)
