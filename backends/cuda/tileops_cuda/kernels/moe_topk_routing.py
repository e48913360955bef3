"""MoE top-k routing as a TileLang kernel: softmax over the experts, the top_k largest
probabilities (ties to the lower expert id), renormalised when asked (``manifest/moe.yaml``).

Per token, in float32: ``p = exp(l - max) / sum(exp(l - max))``; then top_k rounds, each one
max-reduction over a 64-bit key per expert, ``(bits(p) << 32) | (E - 1 - e)``: a probability
is never negative, so its float bits order as integers, and among equal probabilities the key
of the lower expert id is larger. A chosen expert's key becomes -1, below every live one.
The chosen probabilities are divided by their float32 sum (k order) when ``renormalize``,
then rounded once to the logits' dtype. A token's row stays in registers, so the logits are
read once and only ``top_k`` weights and ids per token are written: the bytes floor. One token
per program (a warp for E up to 512 in 16-bit logits: every reduction is a warp shuffle).
Specialised on the logits' dtype, the ids' dtype, E, top_k and renormalize; the token count
is dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import ELEM_BYTES, arch_refusal
from ._launcher import RunLauncher, build_run_launcher

__all__ = ["MoETopKRoutingBuildKey", "build_moe_topk_routing", "moe_topk_routing_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
_ID_DTYPES = ("int32", "int64")
_NAME = "MoETopKRouting TileLang kernel"


@dataclass(frozen=True)
class MoETopKRoutingBuildKey:
    """Build identity: logits dtype (= weights dtype), ids dtype, experts, top_k, renormalize."""

    dtype: str
    ids_dtype: str
    experts: int
    top_k: int
    renormalize: bool = True
    arch: str = "sm_90"


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _plan(key: MoETopKRoutingBuildKey) -> tuple[int, int] | None:
    """``(threads, padded E)`` of a program holding one token: the fewest threads (a warp where E
    allows) that keep at most 16 experts per thread (a float32 value and a 64-bit key each), so
    the top_k + 2 reductions are warp shuffles; None past 256 threads."""
    vec = _vec(key.dtype)
    for threads in (32, 64, 128, 256):
        unit = threads * vec
        padded = -(-key.experts // unit) * unit
        if padded // threads <= 16:
            return threads, padded
    return None


def moe_topk_routing_refusal(key: MoETopKRoutingBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    if key.dtype not in _DTYPES:
        return f"{_NAME}: logits dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.ids_dtype not in _ID_DTYPES:
        return f"{_NAME}: ids dtype {key.ids_dtype} is not one of {_ID_DTYPES}; use the reference"
    if not 1 <= key.top_k <= min(key.experts, 64):
        return f"{_NAME}: top_k={key.top_k} must lie in [1, min(E, 64)] (one reduction per choice); use the reference"
    if _plan(key) is None:
        return (f"{_NAME}: E={key.experts} does not fit the registers of one program (at most 16 experts per "
                "thread, 256 threads); use the reference")
    return arch_refusal(_NAME, key.arch)


def _sum_in_order(terms: list) -> Any:
    """``((t0 + t1) + t2) + ...``: the chosen probabilities summed in k order, one expression."""
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _program(key: MoETopKRoutingBuildKey):
    import tilelang.language as T

    E, K, dt, idt, f32, i64 = key.experts, key.top_k, key.dtype, key.ids_dtype, "float32", "int64"
    plan = _plan(key)
    assert plan is not None  # the refusal turned away every row no block holds
    threads, EP = plan
    BM = 1
    M = T.dynamic("M")

    @T.prim_func
    def moe_topk_routing(router_logits: T.Tensor((M, E), dt), topk_weights: T.Tensor((M, K), dt),
                         topk_ids: T.Tensor((M, K), idt)):
        with T.Kernel(T.ceildiv(M, BM), threads=threads) as bx:
            prob = T.alloc_fragment((BM, EP), f32)
            keys = T.alloc_fragment((BM, EP), i64)
            top = T.alloc_fragment((BM,), f32)
            total = T.alloc_fragment((BM,), f32)
            best = T.alloc_fragment((BM,), i64)
            chosen_p = T.alloc_shared((BM, K), f32)
            chosen_id = T.alloc_shared((BM, K), "int32")
            # Experts past E (padding to whole vectors per thread) read as -inf: exp gives 0.
            for i, j in T.Parallel(BM, EP):
                prob[i, j] = T.if_then_else(j < E, T.cast(router_logits[bx * BM + i, j], f32), -T.infinity(f32))
            T.reduce_max(prob, top, dim=1)
            for i, j in T.Parallel(BM, EP):
                prob[i, j] = T.exp(prob[i, j] - top[i])
            T.reduce_sum(prob, total, dim=1)
            for i, j in T.Parallel(BM, EP):
                keys[i, j] = T.if_then_else(
                    j < E,
                    T.shift_left(T.cast(T.reinterpret("int32", prob[i, j] / total[i]), i64), T.int64(32))
                    | T.cast(E - 1 - j, i64),
                    T.int64(-1))
            for k in range(K):  # unrolled: top_k is part of the build
                T.reduce_max(keys, best, dim=1)
                for i in T.Parallel(BM):
                    chosen_p[i, k] = T.reinterpret(f32, T.cast(T.shift_right(best[i], T.int64(32)), "int32"))
                    chosen_id[i, k] = T.cast(E - 1 - (best[i] & T.int64(0xFFFFFFFF)), "int32")
                if k + 1 < K:
                    for i, j in T.Parallel(BM, EP):
                        keys[i, j] = T.if_then_else(keys[i, j] == best[i], T.int64(-1), keys[i, j])
            for i in T.Parallel(BM):
                total[i] = _sum_in_order([chosen_p[i, k] for k in range(K)])
            for i, k in T.Parallel(BM, K):
                if bx * BM + i < M:
                    if key.renormalize:
                        topk_weights[bx * BM + i, k] = T.cast(chosen_p[i, k] / total[i], dt)
                    else:
                        topk_weights[bx * BM + i, k] = T.cast(chosen_p[i, k], dt)
                    topk_ids[bx * BM + i, k] = T.cast(chosen_id[i, k], idt)

    return moe_topk_routing


def _make_run(key: MoETopKRoutingBuildKey, fn: Any) -> Any:
    """The interface-shaped launch function around the compiled ``fn`` (see ``registered``)."""
    import torch

    K = key.top_k

    def moe_topk_routing(router_logits: Any, top_k: int, renormalize: bool, ids_dtype: Any,
                         topk_weights: Any = None, topk_ids: Any = None) -> Any:
        T = router_logits.shape[0]
        if topk_weights is None:
            topk_weights = torch.empty((T, K), dtype=router_logits.dtype, device=router_logits.device)
        if topk_ids is None:
            topk_ids = torch.empty((T, K), dtype=ids_dtype, device=router_logits.device)
        if T:
            fn(router_logits.contiguous(), topk_weights, topk_ids)
        return topk_weights, topk_ids

    return moe_topk_routing


def build_moe_topk_routing(key: MoETopKRoutingBuildKey) -> RunLauncher:
    """Compile once per process and return the launcher; ValueError with the refusal reason."""
    return build_run_launcher("moe_topk_routing", key, moe_topk_routing_refusal, _program, _make_run)
