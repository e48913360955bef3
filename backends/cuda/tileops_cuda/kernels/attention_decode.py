"""GQA attention decode over a KV cache (AttentionDecodeFwdOp) on NVIDIA GPUs: the host side.

What gets compiled (the build key: dtype, head counts, head size, the layout, metadata
dtypes, optionally a pinned schedule; never B, the context or the pool size; a paged key's
split programs once per block size, the first time a call uses it or on ``prepare``), what
the kernels were not written for (:func:`decode_refusal`), which schedule a call runs
(:func:`schedule_for`: candidate programs and split counts, chosen by a rule on host-side
shapes), how a call's context is split across programs (:func:`split_plan`, from host-side
shapes only: the capacity stands for the context, so nothing synchronises and launches
capture into CUDA graphs), and how a call is launched. The programs are
:mod:`tileops_cuda.kernels.attention_decode_program`.

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

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from ._attention_common import FlatCache, attention_refusal, compile_arch
from ._common import cached_build, compile_prim_func, dependent_launch_refusal, direct_entry
from ._row_views import packed
from .attention_decode_program import (
    COMBINE_THREADS, LOG2E, decode_combine_program, decode_parallel_combine_program, decode_sliced_combine_program,
    decode_split_program,
)

__all__ = ["COMBINES", "DecodeBuildKey", "DecodeLauncher", "DecodeSchedule", "DecodeTiling", "GATHERED_LIGHT_TILING",
           "GATHERED_TILING", "LIGHT_TILING", "TILE_READS",
           "SCHEDULE_RULES", "SCORE_ROWS", "ScheduleRule", "build_attention_decode", "decode_refusal", "default_tiling",
           "call_plan", "page_layout", "planned_splits", "schedule_for", "schedule_refusal", "split_plan",
           "split_tiling"]

#: The most splits one sequence's context is cut into (bounds the partials and the combine loop).
MAX_SPLITS = 256
assert MAX_SPLITS <= COMBINE_THREADS  # the parallel combine gives each split one thread

#: How the splits' partials are merged, in a second launch: ``serial`` (the first kernel: one
#: program per query head walks the splits three times, a global round trip per split),
#: ``parallel`` (splits read at once, see
#: :func:`~.attention_decode_program.decode_parallel_combine_program`) or ``sliced`` (the partials
#: loaded beside the log-sum-exps, a program per 64-channel slice of a head:
#: :func:`~.attention_decode_program.decode_sliced_combine_program`; beside the light program it won
#: only the 32k B=1 rows, by 3-7%, and lost the others by up to 15%, on the H200 and on an H100, so
#: :data:`SCHEDULE_RULES` gives it one sequence past 16k positions). (A combine folded into the split launch, its
#: last program of a head merging, was measured 50-100x slower on the H200 and deleted: NOTES.md
#: "Attention decode at small batch".)
COMBINES = ("serial", "parallel", "sliced")

#: Score rows of a split program: 64 (one wgmma tile, the group's query heads zero-padded) or 16
#: (the light program, one mma tile: for groups of at most 16 query heads).
SCORE_ROWS = (64, 16)

#: The light program's head sizes are multiples of this: its 4 warps split the value product's
#: columns into 8-column mma tiles (TileLang finds no warp partition otherwise).
LIGHT_HEAD_DIM_STEP = 32

#: How a split program reads its tiles: ``block`` (one bulk copy a tile: a contiguous key's tiles, or paged
#: tiles inside one block, 16-position tiles for 16-token blocks; row by row, synchronous, for block sizes no
#: tile divides) or ``gather`` (tiles gathered row by row with asynchronous copies, one stage: a paged key's
#: from any blocks where the block size is not a multiple of the tile, a contiguous key's from its rows; the
#: slot the step writes is read back). At B=1 4k the paged gathered light program ran 8-14% faster than the
#: contiguous bulk one on both cards (s05c, s51c; s51h: its split launch alone 6.64 against 8.34 us), so since
#: the fifty-first session a contiguous key gathers too (the light program and the 64-row one, each as over
#: paged blocks: :data:`GATHERED_LIGHT_TILING`, :data:`GATHERED_TILING`).
TILE_READS = ("block", "gather")

#: Call shapes whose plans one launcher keeps (a plan is a few small Python objects).
MAX_PLANS = 4096


@dataclass(frozen=True)
class DecodeSchedule:
    """How a call is run; :func:`schedule_for` picks one from host shapes.

    ``stages``: the contiguous pipeline's depth (64-position tiles: 2 = 128 KiB of K and V in
    flight, 3 = 192 KiB, the most that fits beside the query tile). ``tiles``: one of
    :data:`TILE_READS`. ``combine``: one of :data:`COMBINES`. ``min_split_tiles``: the fewest
    tiles :func:`split_plan` gives a split (fewer, longer splits: less setup and combine work).
    ``splits``: a pinned split count (a sweep's candidate), else the plan's. ``block_h``: one of
    :data:`SCORE_ROWS`; 16 is the light split program (2 stages; paged: :func:`light_page_layout`).
    """

    stages: int = 2
    tiles: str = "block"
    combine: str = "serial"
    min_split_tiles: int = 1
    splits: int | None = None
    block_h: int = 64

    def __post_init__(self) -> None:
        if self.stages not in (2, 3):
            raise ValueError(f"DecodeSchedule.stages={self.stages}: 2 or 3 (shared memory holds no more)")
        if self.tiles not in TILE_READS:
            raise ValueError(f"DecodeSchedule.tiles={self.tiles!r} is not one of {TILE_READS}")
        if self.combine not in COMBINES:
            raise ValueError(f"DecodeSchedule.combine={self.combine!r} is not one of {COMBINES}")
        if self.min_split_tiles < 1:
            raise ValueError(f"DecodeSchedule.min_split_tiles={self.min_split_tiles} must be >= 1")
        if self.splits is not None and not 1 <= self.splits <= MAX_SPLITS:
            raise ValueError(f"DecodeSchedule.splits={self.splits} must lie in [1, {MAX_SPLITS}]")
        if self.block_h not in SCORE_ROWS:
            raise ValueError(f"DecodeSchedule.block_h={self.block_h} is not one of {SCORE_ROWS}")
        if self.block_h != 64 and self.stages != LIGHT_TILING.stages:
            raise ValueError(f"DecodeSchedule(block_h={self.block_h}, stages={self.stages}): the light program "
                             f"runs {LIGHT_TILING.stages} stages (3 programs an SM leave no shared memory "
                             f"for more); drop stages")


@dataclass(frozen=True)
class ScheduleRule:
    """The calls a schedule is chosen for: a layout (None: both) and inclusive upper bounds on
    the batch and the capacity in positions (None: any)."""

    schedule: DecodeSchedule
    paged: bool | None = None
    max_batch: int | None = None
    max_capacity: int | None = None

    def matches(self, paged: bool, batch: int, capacity: int) -> bool:
        return ((self.paged is None or self.paged == paged) and (self.max_batch is None or batch <= self.max_batch)
                and (self.max_capacity is None or capacity <= self.max_capacity))


@dataclass(frozen=True)
class DecodeBuildKey:
    """The decode kernels' build identity. ``table_dtype`` is None for the contiguous layout;
    ``schedule`` pins every call's schedule (a sweep's candidate), None leaves it to the rule."""

    dtype: str
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    paged: bool = False
    seqlens_dtype: str = "int32"
    table_dtype: str | None = None
    arch: str = "sm_90"
    schedule: DecodeSchedule | None = None
    #: Split and combine programs launched as programmatic dependents of the stream's previous kernel
    #: (``_common.dependent_launch``: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


@dataclass(frozen=True)
class DecodeTiling:
    """How a split program is laid out: ``block_h`` score rows (the group's query heads,
    zero-padded to a tensor-core tile: 64 for wgmma, 16 for the light program's mma, see
    :data:`LIGHT_TILING`), ``block_n`` cache positions a pipeline stage,
    ``stages`` stages; ``gather``: tiles gathered row by row (see :data:`TILE_READS`);
    ``resident``: programs a multiprocessor runs at once, which :func:`split_plan` fills (the
    gathered program's single stage leaves shared memory for two); ``launch_bound``: the programs
    an SM whose registers the compiler must fit (``__launch_bounds__``; the light program's);
    ``long_resident``: programs an SM the plan fills instead where every split still owns at least
    ``long_split_tiles`` tiles (0: never; :func:`planned_splits`)."""

    block_h: int = 64
    block_n: int = 64
    stages: int = 2
    threads: int = 128
    combine_threads: int = 128
    gather: bool = False
    resident: int = 1
    launch_bound: int = 1
    long_resident: int = 0
    long_split_tiles: int = 0


#: The light program's tiling: 16 score rows, 32-position tiles in 2 stages (74 KiB of shared
#: memory) and launch bounds of 3 programs an SM (ptxas: 80 registers, no spills). Its split plan
#: fills one program an SM where splits would be short, two where each keeps 8 tiles (256
#: positions) or more. On the H200: at B=1, 64 splits at 4k and 8k (one an SM) ran 1.04-1.06x
#: faster than the 128-171 that filling 3 gave (``session-2026-12-03h/decsmall_sweep.log``); at
#: 32k, and at B=4/8 and paged B=8, splits of 8 or more tiles two an SM ran 1.05-1.27x faster than
#: one an SM's (``session-2026-12-04b/decsmall_sweep.log``: B=1 32k 29.60 -> 28.04 us contiguous,
#: 31.99 -> 27.80 paged; B=8 4k 29.31 -> 27.12; paged B=8 32k 172.67 -> 135.60).
LIGHT_TILING = DecodeTiling(block_h=16, block_n=32, stages=2, resident=1, launch_bound=3, long_resident=2,
                            long_split_tiles=8)
#: The light program reading its tiles row by row with asynchronous copies (``tiles="gather"``), one stage.
GATHERED_LIGHT_TILING = dataclasses.replace(LIGHT_TILING, stages=1, gather=True)
#: The 64-row program gathering its tiles: one stage (the deepest software pipeline TileLang 0.1.15 generates
#: for them) leaves shared memory for two programs an SM.
GATHERED_TILING = DecodeTiling(stages=1, gather=True, resident=2)


#: The rule: the first matching entry whose schedule the key does not refuse (the light program
#: serves groups of at most 16 query heads and head sizes its warps split; other keys fall
#: through), else ``DecodeSchedule()`` (what the first H200 measurements ran). Set from
#: ``bench/attention_decode_sweep.py``'s output on the H200 (2026-12-02,
#: ``backends/cuda/bench/results/session-2026-12-02e/attndec_sweep.log``): the parallel combine is
#: never slower and 1.5-2.0x faster where a sequence is split 64 ways (B=1), three stages gain
#: nothing over two, and on the paged layout (16-token blocks) the gathered tiles, two programs to
#: a multiprocessor, are 1.35-1.57x faster on every row. The light program at B=1 (2026-12-03,
#: ``session-2026-12-03h/decsmall_sweep.log``): 1.11x at 4k, 1.14x at 8k, even at 32k. Up to 8
#: sequences on both layouts, with :data:`LIGHT_TILING`'s two programs an SM on long splits
#: (``session-2026-12-04b/decsmall_sweep_plan2.log``, graph replays against ``par`` / ``gather`` at
#: their plans, one run): B=1 4k / 8k / 32k 1.14x / 1.13x / 1.04x, B=2 8k 1.07x, B=4 8k 1.05x, B=8
#: 4k 1.12x; paged (16-token blocks, the light program gathering 32-position tiles) B=1 4k 1.23x,
#: B=1 32k 1.11x, B=8 32k 1.04x. The GPU tests (49 passed) chain the rule's B=1, B=8 and paged
#: B=8 decode steps in a CUDA graph. One sequence past 16k positions takes the sliced combine
#: (:data:`COMBINES`), the only rows it won, on both cards and both layouts, at the rule's splits (graph
#: time): H200 32k 26.92 against 28.81 us contiguous, 26.54 against 27.71 paged
#: (``session-2026-12-05c/decsmall_sweep.log``); H100 32.35 against 33.59, 31.81 against 32.80
#: (``session-2026-12-07d/s51c_decsmall_sweep.log``). It lost the 4k and 8k rows on both (by 0.2-0.6 us); 16k
#: was not timed, so the bound keeps it on the parallel combine. Beside the gathered light program (below) it
#: won the contiguous 32k row too (s51i: 30.79 against 31.70 us).
#: On the contiguous layout the light program gathers its rows (``tiles="gather"``) but at B=2, where the bulk
#: copies stay: an H100 sweep (``session-2026-12-07d/s51i_ga_sweep.log``, graph time at the rule's splits, both
#: checked against float64 in its GPU tests) read B=1 4k 10.51 against 12.74 us, 8k 13.28 against 15.25, 32k
#: (sliced) 30.79 against 32.19, B=4 8k 30.05 against 31.48, B=8 4k 30.67 against 31.65, and B=2 8k 19.26 against
#: 18.61. On the H200 the paged gathered program led the contiguous bulk one at B=1 4k by 8% (s05c).
SCHEDULE_RULES: tuple[ScheduleRule, ...] = (
    ScheduleRule(DecodeSchedule(tiles="gather", combine="parallel", block_h=16), paged=False, max_batch=1,
                 max_capacity=16384),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="sliced", block_h=16), paged=False, max_batch=1),
    ScheduleRule(DecodeSchedule(combine="parallel", block_h=16), paged=False, max_batch=2),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="parallel", block_h=16), paged=False, max_batch=8),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="parallel", block_h=16), paged=True, max_batch=1,
                 max_capacity=16384),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="sliced", block_h=16), paged=True, max_batch=1),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="parallel", block_h=16), paged=True, max_batch=8),
    ScheduleRule(DecodeSchedule(combine="parallel"), paged=False),
    ScheduleRule(DecodeSchedule(tiles="gather", combine="parallel"), paged=True),
)


def default_tiling(key: DecodeBuildKey) -> DecodeTiling:
    """The contiguous layout's tiling (and the paged layout's for blocks of a multiple of 64)."""
    return DecodeTiling()


def page_layout(block_size: int, tiles: str = "block") -> tuple[int, DecodeTiling]:
    """``(page, tiling)`` of the paged programs for blocks of ``block_size`` tokens.

    ``block``: tiles of the largest of 64, 32, 16 positions that divides the block (a tile inside
    one block is one bulk copy), the pipeline deepened so ~128 KiB of the cache is in flight;
    other block sizes get the row-by-row program (``page`` 0). ``gather``: 64-position tiles
    gathered from as many blocks as they span with asynchronous copies, one tile ahead (the
    deepest software pipeline TileLang 0.1.15 generates for them), for block sizes that are not
    a multiple of 64 (those are one bulk copy a tile either way).
    """
    if tiles == "gather" and block_size % 64:
        return block_size, GATHERED_TILING
    for block_n in (64, 32, 16):
        if block_size % block_n == 0:
            return block_size, DecodeTiling(block_n=block_n, stages=2 * 64 // block_n)
    return 0, DecodeTiling()


def light_page_layout(block_size: int, tiles: str = "block") -> tuple[int, DecodeTiling]:
    """``(page, tiling)`` of the light program (:data:`LIGHT_TILING`) for blocks of ``block_size``
    tokens, as :func:`page_layout` lays out the 64-row one: 32-position tiles inside one block (one
    bulk copy) where 32 divides the block; for other block sizes (vLLM's 16) the tiles gathered
    row by row with asynchronous copies (``gather``, one stage, as the 64-row gathered program) or
    loaded row by row (``block``: page 0, the mma's 32 columns leave no smaller tile)."""
    if block_size % LIGHT_TILING.block_n == 0:
        return block_size, LIGHT_TILING
    if tiles == "gather":
        return block_size, GATHERED_LIGHT_TILING
    return 0, LIGHT_TILING


def split_tiling(key: DecodeBuildKey, schedule: DecodeSchedule, block_size: int | None) -> tuple[int | None, DecodeTiling]:
    """``(page, tiling)`` of the split program a call with ``schedule`` runs: contiguous
    (``block_size`` None) or paged."""
    light = schedule.block_h != default_tiling(key).block_h
    if block_size is None:
        if schedule.tiles == "gather":
            return None, GATHERED_LIGHT_TILING if light else GATHERED_TILING
        return None, LIGHT_TILING if light else dataclasses.replace(default_tiling(key), stages=schedule.stages)
    if light:
        return light_page_layout(block_size, schedule.tiles)
    return page_layout(block_size, schedule.tiles)


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
    if reason is None and key.schedule is not None:
        return schedule_refusal(key, key.schedule)
    if reason is None:
        return dependent_launch_refusal(key.dependent_launch, name, key.arch, "drop dependent_launch")
    return reason


def schedule_refusal(key: DecodeBuildKey, schedule: DecodeSchedule) -> str | None:
    """Why ``schedule`` cannot serve ``key`` (a key the kernels serve), or None: the light program
    (``block_h`` 16) is written for groups of at most 16 query heads and head sizes its warps
    split. A pinned schedule's refusal is the key's; a rule's lets the call fall through to the
    next rule (:func:`schedule_for`)."""
    name = "attention decode TileLang kernel"
    light = schedule.block_h != default_tiling(key).block_h
    if light and key.num_q_heads // key.num_kv_heads > schedule.block_h:
        return (f"{name}: {key.num_q_heads // key.num_kv_heads} query heads a key/value head exceed "
                f"DecodeSchedule.block_h={schedule.block_h}; pin block_h=64")
    if light and key.head_dim % LIGHT_HEAD_DIM_STEP:
        return (f"{name}: DecodeSchedule.block_h={schedule.block_h} spreads the value product's {key.head_dim} "
                f"columns over 4 warps of 8-column mma tiles (a multiple of {LIGHT_HEAD_DIM_STEP}); pin block_h=64")
    return None


def schedule_for(key: DecodeBuildKey, batch: int, capacity: int,
                 rules: tuple[ScheduleRule, ...] | None = None) -> DecodeSchedule:
    """The schedule a call of ``batch`` sequences over ``capacity`` positions runs: the key's
    pinned one, else the first of ``rules`` (default :data:`SCHEDULE_RULES`) that matches and
    whose schedule the key does not refuse, else ``DecodeSchedule()``. Host shapes only, so
    nothing synchronises."""
    if key.schedule is not None:
        return key.schedule
    for rule in SCHEDULE_RULES if rules is None else rules:
        if rule.matches(key.paged, batch, capacity) and schedule_refusal(key, rule.schedule) is None:
            return rule.schedule
    return DecodeSchedule()


def reachable_schedules(key: DecodeBuildKey) -> tuple[DecodeSchedule, ...]:
    """Every schedule a call with ``key`` can run (what the build and ``prepare`` compile): the
    layout's rules the key does not refuse, up to the first without bounds, which every call
    reaching it matches; the default only where no such rule stands before it (else its programs
    would compile unused)."""
    if key.schedule is not None:
        return (key.schedule,)
    found = []
    for rule in SCHEDULE_RULES:
        if rule.paged in (None, key.paged) and schedule_refusal(key, rule.schedule) is None:
            found.append(rule.schedule)
            if rule.max_batch is None and rule.max_capacity is None:
                return tuple(dict.fromkeys(found))
    return tuple(dict.fromkeys([*found, DecodeSchedule()]))


def split_plan(batch: int, kv_heads: int, capacity: int, block_n: int, sms: int,
               min_split_tiles: int = 1) -> tuple[int, int]:
    """``(num_splits, chunk)``: how many programs share one sequence's context, and how many
    positions (a multiple of ``block_n``) each owns; ``num_splits · chunk >= capacity``.

    Chooses the fewest splits (of whole tiles, at least ``min_split_tiles`` each where the
    context has that many) whose grid of ``batch · kv_heads · splits`` programs fills the
    ``sms`` program slots to within 90% of the best wave efficiency reachable (the caller
    passes multiprocessors times :attr:`DecodeTiling.resident`: a two-stage program holds
    ~160 KiB of shared memory, one to a multiprocessor). The capacity stands
    for the context: a sequence shorter than it leaves its later splits idle (they return at
    once), and nothing on the device is read to decide.
    """
    tiles = max(1, -(-capacity // block_n))
    units = max(1, batch * kv_heads)
    most = max(1, min(tiles // min_split_tiles, MAX_SPLITS))
    # Splits reachable in whole tiles: s splits of ceil(tiles / s) tiles each leave
    # ceil(tiles / ceil(tiles / s)) splits that own positions.
    reachable = sorted({-(-tiles // -(-tiles // s)) for s in range(1, most + 1)})

    def efficiency(s: int) -> float:
        waves = units * s / sms
        return waves / math.ceil(waves)

    best = max(efficiency(s) for s in reachable)
    splits = next(s for s in reachable if efficiency(s) >= 0.9 * best)
    return splits, -(-tiles // splits) * block_n


def planned_splits(batch: int, kv_heads: int, capacity: int, tiling: DecodeTiling, sms: int,
                   min_split_tiles: int = 1) -> tuple[int, int]:
    """:func:`split_plan` for ``tiling`` on ``sms`` multiprocessors: filling
    :attr:`DecodeTiling.long_resident` programs an SM where that plan leaves every split at least
    :attr:`DecodeTiling.long_split_tiles` tiles (a long split hides its start behind enough
    loads, and a second program an SM keeps loads in flight through the other's tail), else
    :attr:`DecodeTiling.resident` (short splits: a second program an SM only adds partial rows
    for the combine to read)."""
    if tiling.long_resident:
        splits, chunk = split_plan(batch, kv_heads, capacity, tiling.block_n, sms * tiling.long_resident,
                                   min_split_tiles)
        if chunk >= tiling.long_split_tiles * tiling.block_n:
            return splits, chunk
    return split_plan(batch, kv_heads, capacity, tiling.block_n, sms * tiling.resident, min_split_tiles)


def call_plan(key: DecodeBuildKey, batch: int, block_size: int | None, capacity: int,
              sms: Callable[[], int]) -> tuple[DecodeSchedule, DecodeTiling, int, int]:
    """``(schedule, split tiling, splits, chunk)`` of a call of ``batch`` sequences over ``capacity``
    positions (paged with ``block_size``-token blocks, or contiguous for None): what the launcher
    runs, from host shapes only. ``sms()`` gives the multiprocessor count, asked only where the
    plan fills them (a pinned split count does not)."""
    schedule = schedule_for(key, batch, capacity)
    tiling = split_tiling(key, schedule, block_size)[1]
    if schedule.splits is not None:
        splits, chunk = pinned_split(capacity, tiling.block_n, schedule.splits)
    else:
        splits, chunk = planned_splits(batch, key.num_kv_heads, capacity, tiling, sms(), schedule.min_split_tiles)
    return schedule, tiling, splits, chunk


def pinned_split(capacity: int, block_n: int, splits: int) -> tuple[int, int]:
    """``(num_splits, chunk)`` for a pinned split count: whole tiles, every split owning some
    position (so fewer splits than asked where the context has fewer tiles)."""
    tiles = max(1, -(-capacity // block_n))
    chunk_tiles = -(-tiles // min(splits, tiles))
    return -(-tiles // chunk_tiles), chunk_tiles * block_n


class DecodeLauncher:
    """The compiled kernels of one build key and ``run``: the interface's arguments, then ``out``
    (allocated when None); writes ``out`` and the caches in place on the current stream.
    ``programs(block_size, schedule)``: the compiled split function of a layout and schedule (compiled on
    first use; a bench that times the split launch alone builds its own run from it)."""

    def __init__(self, key: DecodeBuildKey, kernels: list[Any], run: Callable[..., Any],
                 programs: Callable[[int | None, DecodeSchedule], Any]) -> None:
        self.key = key
        self.kernels = kernels
        self.run = run
        self.programs = programs

    def prepare(self, block_size: int) -> None:
        """Compile the paged split programs for ``block_size`` now (every schedule the rule can
        pick: before a CUDA graph capture, or to compile several in parallel) instead of on the
        first call with it."""
        if not self.key.paged:
            raise ValueError(f"attention decode TileLang kernel: {self.key} is contiguous; it has no block size")
        for schedule in reachable_schedules(self.key):
            self.programs(block_size, schedule)

    def source(self, index: int = 0) -> str:
        """The generated CUDA source of a kernel, in the order they were compiled (the combine
        kernels first)."""
        return self.kernels[index].get_kernel_source()


#: What one call shape runs: the split function, the combine function, splits, chunk, and the
#: allocators of its two partial workspaces (``[splits, B, NQ, D]``, ``[splits, B, NQ]`` float32).
_Plan = tuple[Callable[..., Any], Callable[..., Any], int, int, Callable[[], Any], Callable[[], Any]]


def _make_run(key: DecodeBuildKey, programs: Callable[[int | None, DecodeSchedule], Callable[..., Any]],
              combines: Callable[[str], Callable[..., Any]]) -> Callable[..., Any]:
    """The launch function. ``programs(block_size, schedule)`` returns the compiled split
    function for a layout (None: contiguous) and schedule, ``combines(kind)`` a combine function;
    both compile on first use. A call shape's plan (schedule, programs, splits) is made once and
    looked up after."""
    import torch
    from tileops_core.op.alloc import fresh_allocator

    f32 = torch.float32
    D, NQ, NKV = key.head_dim, key.num_q_heads, key.num_kv_heads
    sms: dict[Any, int] = {}
    dummies: dict[Any, Any] = {}
    plans: dict[tuple[Any, ...], _Plan] = {}

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

    def plan(B: int, block_size: int | None, capacity: int, device: Any) -> _Plan:
        if capacity > 2**31 - 1:  # the programs take it, and positions, as int32
            raise ValueError(f"attention decode TileLang kernel: a block table of {capacity} positions exceeds int32 "
                             "positions; pass at most 2**31 - 1 positions a sequence")
        schedule, _, splits, chunk = call_plan(key, B, block_size, capacity, lambda: multiprocessors(device))
        # The workspaces' shapes follow from the plan: their allocators are made with it, once a shape.
        return (programs(block_size, schedule), combines(schedule.combine), splits, chunk,
                fresh_allocator((splits, B, NQ, D), f32, device), fresh_allocator((splits, B, NQ), f32, device))

    def attention_decode(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cache_seqlens: Any,
                         block_table: Any, scale: Any, out: Any = None) -> Any:
        if out is None:
            out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        B = query.shape[0]
        if B == 0:
            return out  # a zero-sized grid is not launchable
        dev = query.device
        L = key_cache.shape[1]
        block_size = None if block_table is None else L
        capacity = L if block_table is None else block_table.shape[1] * L
        shape = (B, block_size, capacity, dev)
        hit = plans.get(shape)
        if hit is None:
            if len(plans) >= MAX_PLANS:  # serving varies B and the table's width step to step (found in review)
                plans.clear()
            hit = plans[shape] = plan(B, block_size, capacity, dev)
        split_fn, combine_fn, splits, chunk, o_alloc, lse_alloc = hit
        kc = FlatCache("attention decode TileLang kernel", key_cache, NKV, D)
        vc = FlatCache("attention decode TileLang kernel", value_cache, NKV, D)
        o_part = o_alloc()
        lse_part = lse_alloc()
        table = dummy_table(dev) if block_table is None else block_table.contiguous()
        scale_log2 = (D ** -0.5 if scale is None else float(scale)) * LOG2E
        seqlens = cache_seqlens.contiguous()
        # The new rows are read in 16-byte vectors: packed and 16-byte aligned (the metadata: any contiguous start).
        query, key, value = [t if t.is_contiguous() and t.data_ptr() % 16 == 0 else packed(t)
                             for t in (query, key, value)]
        # The capacity bounds the lengths in the programs (unchecked metadata: one at or past it is padding).
        split_fn(query, key, value, kc.flat, vc.flat, seqlens, table, o_part,
                 lse_part, out, L, capacity, chunk, scale_log2)
        if splits > 1:
            combine_fn(o_part, lse_part, seqlens, out, capacity, chunk)
        kc.write_back()
        vc.write_back()
        return out

    return attention_decode


def build_attention_decode(key: DecodeBuildKey) -> DecodeLauncher:
    """Compile the combine kernels and, for the contiguous layout, the split kernels of every
    schedule the key can run (once per process) and return their launcher; ValueError with the
    refusal reason if they were not written for ``key``. A paged key's split kernels are
    compiled per block size, on the first call with it or on ``prepare`` (a block size is a
    deployment's constant, so this happens once). Programs are shared between keys that differ
    only in their pinned schedule."""
    reason = decode_refusal(key)
    if reason is not None:
        raise ValueError(reason)
    base = dataclasses.replace(key, schedule=None)  # what the programs depend on
    arch = compile_arch(key.arch)

    def make() -> DecodeLauncher:
        kernels: list[Any] = []

        def compiled(identity: tuple[Any, ...], program: Callable[[], Any]) -> Callable[..., Any]:
            def make_one() -> tuple[Any, Callable[..., Any]]:
                kernel = compile_prim_func(program(), arch)
                return kernel, direct_entry(kernel)

            kernel, fn = cached_build(identity, make_one)
            if kernel not in kernels:
                kernels.append(kernel)
            return fn

        def combines(kind: str) -> Callable[..., Any]:
            identity = ("attention_decode_combine", base, kind)
            if kind == "parallel":
                return compiled(identity, lambda: decode_parallel_combine_program(base))
            if kind == "sliced":
                return compiled(identity, lambda: decode_sliced_combine_program(base))
            return compiled(identity, lambda: decode_combine_program(base, default_tiling(base)))

        def programs(block_size: int | None, schedule: DecodeSchedule) -> Callable[..., Any]:
            page, tiling = split_tiling(base, schedule, block_size)
            return compiled(("attention_decode_split", base, page, tiling),
                            lambda: decode_split_program(base, tiling, page))

        for schedule in reachable_schedules(key):
            combines(schedule.combine)
            if not key.paged:
                programs(None, schedule)
        return DecodeLauncher(key, kernels, _make_run(key, programs, combines), programs)

    return cached_build(("attention_decode", key), make)
