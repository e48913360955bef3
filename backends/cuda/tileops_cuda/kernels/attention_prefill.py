"""Causal varlen GQA prefill writing the KV cache (AttentionPrefillFwdOp) on NVIDIA GPUs: the host side.

What gets compiled (the build key: dtype, head counts, head size, the layout, metadata dtypes,
which attention program and grid order; never B, T or the pool size), what the kernels were not written for
(:func:`prefill_refusal`), and how a call is launched: the cache write (which also zeroes
the outputs of tokens no sequence covers), then the attention, on the current stream, or, with
``cache_write="attention"``, the attention alone doing both; nothing synchronises, so launches
capture into CUDA graphs. The programs are
:mod:`tileops_cuda.kernels.attention_prefill_program`'s and, with the pipeline written out,
:mod:`tileops_cuda.kernels.attention_prefill_warpspec`'s.

The attention reads the step's own keys and values (prompts attend to their own tokens only,
no earlier context), so the cache write and the attention are independent; a cache that is not
contiguous goes through a contiguous copy that is copied back (correct, not fast).
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ._attention_common import FlatCache, attention_refusal, compile_arch
from ._common import cached_build, compile_prim_func, direct_entry
from ._row_views import packed
from .attention_decode_program import LOG2E
from .attention_prefill_program import prefill_attention_program, prefill_cache_program, prefill_tile_counts_program
from .attention_prefill_warpspec import prefill_attention_overlap_program

__all__ = ["PREFILL_CACHE_WRITES", "PREFILL_SETTINGS", "PREFILL_GRIDS", "PREFILL_PROGRAMS", "PREFILL_TILE_COUNTS",
           "PREFILL_WRITING_PROGRAMS", "PrefillBuildKey", "PrefillLauncher", "PrefillTiling",
           "REGISTERED_ATTENTION_WRITES_UPTO", "build_attention_prefill", "default_tiling", "prefill_refusal",
           "short_prompt_key"]

#: Tokens a cache-write program copies, and its threads.
CACHE_TOKENS, CACHE_THREADS = 16, 256

#: The attention programs a key can name. ``pipelined``: TileLang's automatic warp-specialised
#: pipeline, each product waited for as it is issued (the default until ``overlap`` was measured
#: faster); ``overlap`` (the default): the pipeline written out, the softmax of key tile j running
#: while the P·V product of tile j - 1 does (issue 21).
PREFILL_PROGRAMS = {"pipelined": prefill_attention_program, "overlap": prefill_attention_overlap_program}

#: The programs with a producer warpgroup, which can write the caches once its loads are issued.
PREFILL_WRITING_PROGRAMS = ("overlap",)
#: Those programs as a refusal names them.
_WRITING_CHOICES = " or ".join(f"program={program!r}" for program in PREFILL_WRITING_PROGRAMS)

#: The attention grid's orders a key can name: ``tiles`` (query tiles the fastest axis; the
#: default) or ``heads`` (the heads of one query tile launched together; issue 21's candidate).
PREFILL_GRIDS = ("tiles", "heads")

#: Who makes the attention's per-sequence tile prefix sums: ``torch`` (about eight small torch
#: kernels; the default) or ``kernel`` (one TileLang launch, issue 21's candidate).
PREFILL_TILE_COUNTS = ("torch", "kernel")

#: Who writes the key/value cache: ``launch`` (the cache-write program, its own launch before the
#: attention; the default) or ``attention`` (the overlap program's producer warpgroup, once its loads
#: are issued: one launch fewer and no second pass over the step's keys and values; issue 21's
#: candidate for the short paged rows).
PREFILL_CACHE_WRITES = ("launch", "attention")


@dataclass(frozen=True)
class PrefillBuildKey:
    """The prefill kernels' build identity. ``slot_dtype`` is None for the contiguous layout;
    ``program`` is one of :data:`PREFILL_PROGRAMS` and ``grid`` one of :data:`PREFILL_GRIDS` (the
    attention's; the cache write is the same for all); ``tile_counts`` one of
    :data:`PREFILL_TILE_COUNTS` (the launcher's); ``cache_write`` one of :data:`PREFILL_CACHE_WRITES`
    (``attention`` only with a program of :data:`PREFILL_WRITING_PROGRAMS`, whose producer warpgroup writes
    the rows)."""

    dtype: str
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    paged: bool = False
    cu_dtype: str = "int32"
    slot_dtype: str | None = None
    arch: str = "sm_90"
    # The defaults: the overlap program on the heads grid with the tile counts made by one kernel, 0.97-0.98x
    # of SDPA's best (cuDNN) at 4k and 16k tokens B=1 where the pipelined:tiles:torch setting it replaced is
    # 0.64-0.81x (twelfth session, attnpre_bench.log; NOTES.md "Attention prefill settings").
    program: str = "overlap"
    grid: str = "heads"
    tile_counts: str = "kernel"
    cache_write: str = "launch"
    #: A call whose mean prompt length (``T / B`` tokens, known on the host) is at most this runs the key's
    #: program writing the caches itself (``cache_write="attention"``), a longer one launches the cache write (0:
    #: the key's ``cache_write`` serves every call). Set only with ``cache_write="launch"`` and a program of
    #: :data:`PREFILL_WRITING_PROGRAMS`. The build key holds no B or T, so the choice is the launcher's, as routing
    #: chooses its long program by token count; the op's registered key sets :data:`REGISTERED_ATTENTION_WRITES_UPTO`.
    attention_writes_upto: int = 0

    def __post_init__(self) -> None:
        if self.program not in PREFILL_PROGRAMS:
            raise ValueError(f"PrefillBuildKey.program={self.program!r} is not one of {tuple(PREFILL_PROGRAMS)}")
        if self.grid not in PREFILL_GRIDS:
            raise ValueError(f"PrefillBuildKey.grid={self.grid!r} is not one of {PREFILL_GRIDS}")
        if self.tile_counts not in PREFILL_TILE_COUNTS:
            raise ValueError(f"PrefillBuildKey.tile_counts={self.tile_counts!r} is not one of {PREFILL_TILE_COUNTS}")
        if self.cache_write not in PREFILL_CACHE_WRITES:
            raise ValueError(f"PrefillBuildKey.cache_write={self.cache_write!r} is not one of {PREFILL_CACHE_WRITES}")
        if self.cache_write == "attention" and self.program not in PREFILL_WRITING_PROGRAMS:
            raise ValueError(f"PrefillBuildKey.cache_write='attention' needs a program with a producer warpgroup "
                             f"({_WRITING_CHOICES}: it writes the cache rows), not program={self.program!r}; "
                             f"use cache_write='launch'")
        if self.attention_writes_upto < 0 or (self.attention_writes_upto and (
                self.cache_write != "launch" or self.program not in PREFILL_WRITING_PROGRAMS)):
            raise ValueError(f"PrefillBuildKey.attention_writes_upto={self.attention_writes_upto} is a mean prompt "
                             f"length in tokens (0: none) below which a program with a producer warpgroup "
                             f"({_WRITING_CHOICES}) writes the caches in place of the launched cache write: it needs "
                             f"cache_write='launch' (not {self.cache_write!r}) and such a program (not "
                             f"{self.program!r})")


def _accepted_settings() -> tuple[dict[str, str], ...]:
    import itertools

    accepted = []
    for program, grid, counts, write in itertools.product(PREFILL_PROGRAMS, PREFILL_GRIDS, PREFILL_TILE_COUNTS,
                                                          PREFILL_CACHE_WRITES):
        try:
            PrefillBuildKey("bfloat16", 16, 2, 256, program=program, grid=grid, tile_counts=counts, cache_write=write)
        except ValueError:  # a combination the key refuses (the pipelined program writing the caches)
            continue
        accepted.append({"program": program, "grid": grid, "tile_counts": counts, "cache_write": write})
    return tuple(accepted)


#: Every (program, grid, tile_counts, cache_write) a build key accepts, as keyword dicts in the
#: order of the four choices' tables (the benches' and tests' settings).
PREFILL_SETTINGS = _accepted_settings()

#: The ``attention_writes_upto`` of the key the op registers (``TileLangAttentionPrefill.program_key``): prompts of
#: at most 4096 tokens on average write the caches from the attention, longer ones launch the cache write. Measured
#: on an H100 in two runs (forty-ninth session; fifty-first, s51b ``attnpre_bench.log``, SDPA's best is cuDNN): the
#: writing program took 4-6 us off both 4k-token rows (4k B=1 231.8 -> 225.8 us, paged 4k B=4 94.9 -> 90.6 us:
#: 0.91x -> 0.96x of cuDNN) and lost the 16k B=1 prompt by 3.6-7.8%, which the bound leaves on the launched write.
#: Not yet timed on an H200 (issue 21's card): its attnpre run confirms or moves the bound.
REGISTERED_ATTENTION_WRITES_UPTO = 4096


@dataclass(frozen=True)
class PrefillTiling:
    """``block_m`` query tokens a program (its consumer warpgroups' tensor-core rows, 64 each),
    ``block_n`` key/value tokens a pipeline stage, ``stages`` stages, ``threads`` the consumers'
    threads (the warp-specialised programs add a producer warpgroup)."""

    block_m: int = 128
    block_n: int = 64
    stages: int = 2
    threads: int = 256


def default_tiling(key: PrefillBuildKey) -> PrefillTiling:
    """The tiling of ``key``'s attention program (the launcher sizes the grid and counts the query
    tiles by its ``block_m``): every program's is the default :class:`PrefillTiling`."""
    return PrefillTiling()


def prefill_refusal(key: PrefillBuildKey) -> str | None:
    """Why the prefill kernels cannot serve ``key`` (a sentence naming the fix), or None."""
    return attention_refusal("attention prefill TileLang kernel", key.dtype, key.num_q_heads, key.num_kv_heads,
                             key.head_dim, {"cu_dtype": key.cu_dtype, "slot_dtype": key.slot_dtype}, key.paged,
                             "slot_dtype", default_tiling(key).block_m, key.arch)


class PrefillLauncher:
    """The compiled kernels of one build key by name (``cache`` unless the attention writes the
    caches, ``attention``, ``tiles`` with ``tile_counts="kernel"``, ``attention_short`` with
    ``attention_writes_upto``: the program that writes the caches) and ``run``: the interface's
    arguments, then ``out`` (allocated when None); writes ``out`` and the caches in place on the
    current stream."""

    def __init__(self, key: PrefillBuildKey, kernels: dict[str, Any], run: Callable[..., Any]) -> None:
        self.key = key
        self.kernels = kernels
        self.run = run

    def source(self, name: str = "attention") -> str:
        """The generated CUDA source of the kernel ``name`` (a key of ``kernels``)."""
        return self.kernels[name].get_kernel_source()


def short_prompt_key(key: PrefillBuildKey) -> PrefillBuildKey | None:
    """The key whose launcher serves ``key``'s calls of mean prompt length at most
    ``key.attention_writes_upto`` (its program writing the caches), or None where every call runs ``key``."""
    if not key.attention_writes_upto:
        return None
    return dataclasses.replace(key, cache_write="attention", attention_writes_upto=0)


def _choose_by_prompt_length(upto: int, short_run: Callable[..., Any],
                             long_run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` of a key with ``attention_writes_upto=upto``: ``short_run`` where ``T <= upto · B`` (T and B read
    from the shapes, no device read), else ``long_run`` (a call of no prompt too: its zeroing launch)."""

    def attention_prefill(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cu_seqlens: Any,
                          slot_mapping: Any, scale: Any, out: Any = None) -> Any:
        B = cu_seqlens.shape[0] - 1
        run = short_run if B > 0 and query.shape[0] <= upto * B else long_run
        return run(query, key, value, key_cache, value_cache, cu_seqlens, slot_mapping, scale, out)

    return attention_prefill


def _make_run(key: PrefillBuildKey, attention_fn: Callable[..., Any], cache_fn: Callable[..., Any] | None = None,
              tiles_fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The launcher's ``run``: with ``cache_fn`` the cache write (and the zeros of uncovered
    tokens) is its own launch, else the attention program does both (``cache_write="attention"``)."""
    import torch

    D, NQ, NKV = key.head_dim, key.num_q_heads, key.num_kv_heads
    tiling = default_tiling(key)
    dummies: dict[Any, Any] = {}

    def dummy_slots(device: Any) -> Any:
        t = dummies.get(device)
        if t is None:
            t = dummies[device] = torch.zeros((1,), dtype=torch.int32, device=device)
        return t

    def attention_prefill(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cu_seqlens: Any,
                          slot_mapping: Any, scale: Any, out: Any = None) -> Any:
        if out is None:
            out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        T = query.shape[0]
        B = cu_seqlens.shape[0] - 1
        if T == 0:
            return out  # a zero-sized grid is not launchable
        # The rows are read through tensor maps or in 16-byte vectors: packed and 16-byte aligned (the metadata: any
        # contiguous start).
        q = query if query.is_contiguous() and not query.data_ptr() % 16 else packed(query)
        k = key if key.is_contiguous() and not key.data_ptr() % 16 else packed(key)
        v = value if value.is_contiguous() and not value.data_ptr() % 16 else packed(value)
        kc = FlatCache("attention prefill TileLang kernel", key_cache, NKV, D)
        vc = FlatCache("attention prefill TileLang kernel", value_cache, NKV, D)
        slots = dummy_slots(query.device) if slot_mapping is None else slot_mapping.contiguous()
        # The prompts as the spec reads cu_seqlens: cummax(clip(cu_seqlens, 0, T)) (valid metadata as given;
        # unchecked metadata laid end to end inside [0, T), so no token has two prompts and no row two writers).
        if B == 0:
            cu = cu_seqlens.contiguous()  # no prompt: every token is uncovered whatever the one entry says
        elif tiles_fn is None:
            cu = cu_seqlens.clamp(0, T).cummax(0).values
            lengths = cu[1:] - cu[:-1]
            tile_cu = torch.nn.functional.pad(torch.cumsum(-(-lengths // tiling.block_m), 0), (1, 0)).int()
        else:
            cu = torch.empty((B + 1,), dtype=cu_seqlens.dtype, device=cu_seqlens.device)
            tile_cu = torch.empty((B + 1,), dtype=torch.int32, device=cu.device)
            tiles_fn(cu_seqlens.contiguous(), tile_cu, cu, T)
        if cache_fn is not None:
            cache_fn(k, v, cu, slots, kc.flat, vc.flat, out.view(T, NQ * D), key_cache.shape[1],
                     max(B, 1).bit_length())
        elif B == 0:  # no prompt: every token is uncovered (zeros) and nothing is written
            out.zero_()
        if B > 0:
            scale_log2 = (D ** -0.5 if scale is None else float(scale)) * LOG2E
            if cache_fn is None:
                attention_fn(q, k, v, cu, tile_cu, slots, kc.flat, vc.flat, out, key_cache.shape[1], scale_log2,
                             B.bit_length())
            else:
                attention_fn(q, k, v, cu, tile_cu, out, scale_log2, B.bit_length())
        kc.write_back()
        vc.write_back()
        return out

    return attention_prefill


def build_attention_prefill(key: PrefillBuildKey) -> PrefillLauncher:
    """Compile both kernels (once per process) and return their launcher; ValueError with the
    refusal reason if they were not written for ``key``."""
    reason = prefill_refusal(key)
    if reason is not None:
        raise ValueError(reason)
    short_key = short_prompt_key(key)
    if short_key is not None:  # two launchers, each built (and cached) as its own key
        def choose() -> PrefillLauncher:
            long = build_attention_prefill(dataclasses.replace(key, attention_writes_upto=0))
            short = build_attention_prefill(short_key)
            return PrefillLauncher(key, {**long.kernels, "attention_short": short.kernels["attention"]},
                                   _choose_by_prompt_length(key.attention_writes_upto, short.run, long.run))

        return cached_build(("attention_prefill", key), choose)

    def make() -> PrefillLauncher:
        # Each kernel is built once for the key fields it depends on: the cache write for neither the
        # attention program nor the grid, the attention not for who makes the tile counts.
        arch = compile_arch(key.arch)
        tiling = default_tiling(key)
        kernels: dict[str, Any] = {}
        if key.cache_write == "launch":
            cache_key = dataclasses.replace(key, program=PrefillBuildKey.program, grid=PrefillBuildKey.grid,
                                            tile_counts=PrefillBuildKey.tile_counts)
            kernels["cache"] = cached_build(("attention_prefill_cache", cache_key), lambda: compile_prim_func(
                prefill_cache_program(key, CACHE_TOKENS, CACHE_THREADS), arch))
        kernels["attention"] = cached_build(("attention_prefill_attention", dataclasses.replace(
            key, tile_counts=PrefillBuildKey.tile_counts)), lambda: compile_prim_func(
            PREFILL_PROGRAMS[key.program](key, tiling), arch))
        if key.tile_counts == "kernel":
            kernels["tiles"] = cached_build(("attention_prefill_tiles", key.cu_dtype, tiling.block_m, arch),
                                            lambda: compile_prim_func(prefill_tile_counts_program(
                                                key, tiling.block_m), arch))
        entries = {name: direct_entry(kernel) for name, kernel in kernels.items()}
        return PrefillLauncher(key, kernels, _make_run(key, entries["attention"], entries.get("cache"),
                                                       entries.get("tiles")))

    return cached_build(("attention_prefill", key), make)
