"""What the attention kernels' host sides share: the refusal of what their tensor-core
programs were not written for, and the flat ``[N · L, NKV, D]`` view of a KV cache.

Nothing here imports tilelang or torch at module import.
"""

from __future__ import annotations

from typing import Any

from ._common import arch_refusal
from ._row_views import packed

__all__ = ["FlatCache", "attention_refusal", "compile_arch"]

_DTYPES = ("float16", "bfloat16")
_INDEX_DTYPES = ("int32", "int64")
_INT32_LIMIT = 2**31 - 1


def attention_refusal(name: str, dtype: str, num_q_heads: int, num_kv_heads: int, head_dim: int,
                      index_dtypes: dict[str, str | None], paged: bool, layout_field: str, rows: int,
                      arch: str) -> str | None:
    """Why a tensor-core attention program (``rows`` score rows a warpgroup tile) cannot serve a
    key: dtype, metadata dtypes (``index_dtypes``, None for an absent input), a paged flag that
    disagrees with ``layout_field``'s presence, head size, head grouping, arch; or None."""
    if dtype not in _DTYPES:
        return (f"{name}: dtype {dtype} is not one of {_DTYPES} (scores are tensor-core products of the "
                "input dtype); use the reference")
    for field, value in index_dtypes.items():
        if value is not None and value not in _INDEX_DTYPES:
            return f"{name}: {field} {value} is not one of {_INDEX_DTYPES}; use the reference"
    if paged != (index_dtypes[layout_field] is not None):
        return f"{name}: paged={paged} but {layout_field}={index_dtypes[layout_field]}; the key is inconsistent"
    if head_dim % 16 or not 16 <= head_dim <= 256:
        return (f"{name}: D={head_dim} must be a multiple of 16 in [16, 256] (the tensor-core reduction step; "
                f"registers hold a [{rows}, D] float32 accumulator); use the reference")
    if num_kv_heads <= 0 or num_q_heads % num_kv_heads:
        return f"{name}: NQ={num_q_heads} is not a multiple of NKV={num_kv_heads}"
    return arch_refusal(name, arch)


def compile_arch(arch: str) -> str:
    """The target the attention programs compile for on ``arch``: on Hopper the arch-specific
    ``sm_90a``, which TileLang's warp-specialised pipelines (``setmaxnreg``) and ``wgmma`` need
    (the GEMM kernel does the same); the sm_90a code runs on every sm_90 GPU."""
    return "sm_90a" if arch in ("sm_90", "sm_90a") else arch


class FlatCache:
    """A cache ``[N, L, NKV, D]`` as the programs read it, ``[N · L, NKV, D]``: a view of a
    contiguous cache at a 16-byte aligned start (the programs' tensor maps and vector stores need
    one), else a packed copy that :meth:`write_back` copies back (correct, not fast)."""

    __slots__ = ("cache", "flat", "copied")

    def __init__(self, name: str, cache: Any, kv_heads: int, head_dim: int) -> None:
        if cache.numel() > _INT32_LIMIT:
            raise ValueError(f"{name}: a cache of {cache.numel()} elements exceeds int32 indexing; use a smaller "
                             "pool per call")
        self.cache = cache
        self.copied = not cache.is_contiguous() or cache.data_ptr() % 16 != 0
        self.flat = (packed(cache) if self.copied else cache).view(-1, kv_heads, head_dim)

    def write_back(self) -> None:
        if self.copied:
            self.cache.copy_(self.flat.view(self.cache.shape))
