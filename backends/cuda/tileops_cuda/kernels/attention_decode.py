"""GQA attention decode over a KV cache (AttentionDecodeFwdOp) on NVIDIA GPUs: the host side.

What gets compiled (the build key: dtype, head counts, head size, the layout, metadata
dtypes; never B, the context or the pool size; a paged key's split program once per block
size, the first time a call uses it), what the kernels were not
written for (:func:`decode_refusal`), how a call's context is split across programs
(:func:`split_plan`, from host-side shapes only: the capacity stands for the context, so
nothing synchronises and launches capture into CUDA graphs), and how a call is launched.
The programs are :mod:`tileops_cuda.kernels.attention_decode_program`.

A launch passes the caches flat (``[N · L, NKV, D]`` views); a cache that is not contiguous
goes through a contiguous copy that is copied back (correct, not fast). One launch (one
split) or two (split, then combine) per call; the float32 partials are allocated per call
from torch's caching allocator.

Ordering: each sequence's new key/value is written by the one program that reads position
``n``, which reads it from the inputs. A cache slot that one sequence writes while another
reads it in the same step (never the case in vLLM, where a block being written belongs to one
sequence) is read unordered here; the reference reads it after the write.
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

import math
from dataclasses import dataclass
from typing import Any, Callable

from ._attention_common import FlatCache, attention_refusal, compile_arch
from ._common import cached_build, compile_prim_func, direct_entry
from .attention_decode_program import LOG2E, decode_combine_program, decode_split_program

__all__ = ["DecodeBuildKey", "DecodeLauncher", "DecodeTiling", "build_attention_decode", "decode_refusal",
           "default_tiling", "page_layout", "split_plan"]

#: The most splits one sequence's context is cut into (bounds the partials and the combine loop).
MAX_SPLITS = 256


@dataclass(frozen=True)
class DecodeBuildKey:
    """The decode kernels' build identity. ``table_dtype`` is None for the contiguous layout."""

    dtype: str
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    paged: bool = False
    seqlens_dtype: str = "int32"
    table_dtype: str | None = None
    arch: str = "sm_90"


@dataclass(frozen=True)
class DecodeTiling:
    """How a build key is laid out: ``block_h`` score rows (the group's query heads, zero-padded
    to a tensor-core tile), ``block_n`` cache positions a pipeline stage, ``stages`` stages."""

    block_h: int = 64
    block_n: int = 64
    stages: int = 2
    threads: int = 128
    combine_threads: int = 128


def default_tiling(key: DecodeBuildKey) -> DecodeTiling:
    """The contiguous layout's tiling (and the paged layout's for blocks of a multiple of 64)."""
    return DecodeTiling()


def page_layout(block_size: int) -> tuple[int, DecodeTiling]:
    """``(page, tiling)`` of the paged programs for blocks of ``block_size`` tokens: tiles of the
    largest of 64, 32, 16 positions that divides the block (a tile inside one block is one bulk
    copy), the pipeline deepened so ~128 KiB of the cache is in flight; other block sizes get
    the row-by-row program (``page`` 0)."""
    for block_n in (64, 32, 16):
        if block_size % block_n == 0:
            return block_size, DecodeTiling(block_n=block_n, stages=2 * 64 // block_n)
    return 0, DecodeTiling()


def decode_refusal(key: DecodeBuildKey) -> str | None:
    """Why the decode kernels cannot serve ``key`` (a sentence naming the fix), or None."""
    name = "attention decode TileLang kernel"
    tiling = default_tiling(key)
    reason = attention_refusal(name, key.dtype, key.num_q_heads, key.num_kv_heads, key.head_dim,
                               {"seqlens_dtype": key.seqlens_dtype, "table_dtype": key.table_dtype}, key.paged,
                               "table_dtype", tiling.block_h, key.arch)
    if reason is None and key.num_q_heads // key.num_kv_heads > tiling.block_h:
        return (f"{name}: {key.num_q_heads // key.num_kv_heads} query heads a key/value head exceed the "
                f"{tiling.block_h}-row score tile; use the reference")
    return reason


def split_plan(batch: int, kv_heads: int, capacity: int, block_n: int, sms: int) -> tuple[int, int]:
    """``(num_splits, chunk)``: how many programs share one sequence's context, and how many
    positions (a multiple of ``block_n``) each owns; ``num_splits · chunk >= capacity``.

    Chooses the fewest splits (of whole tiles) whose grid of ``batch · kv_heads · splits`` programs fills the
    ``sms`` multiprocessors to within 90% of the best wave efficiency reachable (a program
    per multiprocessor at a time: each holds ~160 KiB of shared memory). The capacity stands
    for the context: a sequence shorter than it leaves its later splits idle (they return at
    once), and nothing on the device is read to decide.
    """
    tiles = max(1, -(-capacity // block_n))
    units = max(1, batch * kv_heads)
    # Splits reachable in whole tiles: s splits of ceil(tiles / s) tiles each leave
    # ceil(tiles / ceil(tiles / s)) splits that own positions.
    reachable = sorted({-(-tiles // -(-tiles // s)) for s in range(1, min(tiles, MAX_SPLITS) + 1)})

    def efficiency(s: int) -> float:
        waves = units * s / sms
        return waves / math.ceil(waves)

    best = max(efficiency(s) for s in reachable)
    splits = next(s for s in reachable if efficiency(s) >= 0.9 * best)
    return splits, -(-tiles // splits) * block_n


class DecodeLauncher:
    """The compiled kernels of one build key and ``run``: the interface's arguments, then ``out``
    (allocated when None); writes ``out`` and the caches in place on the current stream."""

    def __init__(self, key: DecodeBuildKey, kernels: list[Any], run: Callable[..., Any],
                 programs: Callable[[int | None], Any]) -> None:
        self.key = key
        self.kernels = kernels
        self.run = run
        self._programs = programs

    def prepare(self, block_size: int) -> None:
        """Compile the paged split program for ``block_size`` now (before a CUDA graph capture,
        or to compile several in parallel) instead of on the first call with it."""
        if not self.key.paged:
            raise ValueError(f"attention decode TileLang kernel: {self.key} is contiguous; it has no block size")
        self._programs(block_size)

    def source(self, index: int = 0) -> str:
        """The generated CUDA source of the combine kernel (0) or a split kernel (1, ...: in the
        order they were compiled)."""
        return self.kernels[index].get_kernel_source()


def _make_run(key: DecodeBuildKey, programs: Callable[[int | None], tuple[DecodeTiling, Callable[..., Any]]],
              combine_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The launch function. ``programs(page)`` returns the tiling and compiled split function for
    a layout (None: contiguous; a paged call passes its block size), compiled on first use."""
    import torch

    f32 = torch.float32
    D, NQ, NKV = key.head_dim, key.num_q_heads, key.num_kv_heads
    sms: dict[Any, int] = {}
    dummies: dict[Any, Any] = {}

    def multiprocessors(device: Any) -> int:
        count = sms.get(device)
        if count is None:
            count = sms[device] = torch.cuda.get_device_properties(device).multi_processor_count
        return count

    def dummy_table(device: Any) -> Any:
        t = dummies.get(device)
        if t is None:
            t = dummies[device] = torch.zeros((1, 1), dtype=torch.int32, device=device)
        return t

    def attention_decode(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cache_seqlens: Any,
                         block_table: Any, scale: Any, out: Any = None) -> Any:
        if out is None:
            out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        B = query.shape[0]
        if B == 0:
            return out  # a zero-sized grid is not launchable
        dev = query.device
        L = key_cache.shape[1]
        tiling, split_fn = programs(None if block_table is None else L)
        capacity = L if block_table is None else block_table.shape[1] * L
        splits, chunk = split_plan(B, NKV, capacity, tiling.block_n, multiprocessors(dev))
        kc = FlatCache("attention decode TileLang kernel", key_cache, NKV, D)
        vc = FlatCache("attention decode TileLang kernel", value_cache, NKV, D)
        o_part = torch.empty((splits, B, NQ, D), dtype=f32, device=dev)
        lse_part = torch.empty((splits, B, NQ), dtype=f32, device=dev)
        table = dummy_table(dev) if block_table is None else block_table.contiguous()
        scale_log2 = (D ** -0.5 if scale is None else float(scale)) * LOG2E
        seqlens = cache_seqlens.contiguous()
        split_fn(query.contiguous(), key.contiguous(), value.contiguous(), kc.flat, vc.flat, seqlens, table, o_part,
                 lse_part, out, L, chunk, scale_log2)
        if splits > 1:
            combine_fn(o_part, lse_part, seqlens, out, chunk)
        kc.write_back()
        vc.write_back()
        return out

    return attention_decode


def build_attention_decode(key: DecodeBuildKey) -> DecodeLauncher:
    """Compile the combine kernel and, for the contiguous layout, the split kernel (once per
    process) and return their launcher; ValueError with the refusal reason if they were not
    written for ``key``. A paged key's split kernel is compiled per block size, on the first
    call with it (a block size is a deployment's constant, so this happens once)."""
    reason = decode_refusal(key)
    if reason is not None:
        raise ValueError(reason)

    def split_for(page: int | None) -> tuple[DecodeTiling, Any, Callable[..., Any]]:
        tiling = default_tiling(key)
        if page is not None:
            page, tiling = page_layout(page)

        def make() -> tuple[DecodeTiling, Any, Callable[..., Any]]:
            kernel = compile_prim_func(decode_split_program(key, tiling, page), compile_arch(key.arch))
            return tiling, kernel, direct_entry(kernel)

        built: tuple[DecodeTiling, Any, Callable[..., Any]] = cached_build(
            ("attention_decode_split", key, page, tiling), make)
        return built

    def make() -> DecodeLauncher:
        combine = compile_prim_func(decode_combine_program(key, default_tiling(key)), compile_arch(key.arch))
        built: dict[int | None, tuple[DecodeTiling, Callable[..., Any]]] = {}
        kernels: list[Any] = [combine]

        def programs(page: int | None) -> tuple[DecodeTiling, Callable[..., Any]]:
            hit = built.get(page)
            if hit is None:
                tiling, kernel, fn = split_for(page)
                kernels.append(kernel)
                hit = built[page] = (tiling, fn)
            return hit

        if not key.paged:
            programs(None)
        return DecodeLauncher(key, kernels, _make_run(key, programs, direct_entry(combine)), programs)

    return cached_build(("attention_decode", key), make)
