"""RGDR decode step (RecurrentGatedDeltaRuleFwdOp) on NVIDIA GPUs: the host side.

Semantics are those of ``tileops_cpu_ref.rgdr.recurrent_gated_delta_rule`` (see RGDR.md):
packed variable-length sequences, GQA, per-token slot writes into a state pool
``[S, NV, DV, DK]``, optional ``g`` / ``gk`` (scalar or per-channel) decays, optional
in-kernel q/k l2 normalisation, padding slots, ``num_accepted_tokens``, and the running
state re-quantised to the state dtype after every token.

This module decides what gets compiled and how a call is launched; the TileLang program
itself is :mod:`tileops_cuda.kernels.rgdr_program`. The build identity is
:class:`RGDRBuildKey` (never B, T or the pool size); :class:`RGDRTiling` lays a key onto
threads; :class:`RGDRSchedule` picks a compiled tiling per call from the number of
sequences and tokens (host-side shapes, so the choice is free); :func:`rgdr_refusal`
names what a kernel was not written for; :func:`build_rgdr` compiles (tilelang is imported
there, never at module import) and returns an :class:`RGDRLauncher`, whose ``run`` calls
the compiled functions directly.
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

import functools
import operator
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ._common import ELEM_BYTES as _ELEM_BYTES
from ._common import SUPPORTED_ARCHS as _SUPPORTED_ARCHS
from ._common import (
    cached_build, compile_many, compile_prim_func, dependent_launch_refusal, direct_entry, launchable_on,
)
from ._row_views import packed
from .rgdr_program import L2NORM_EPS, rgdr_program

__all__ = [
    "L2NORM_EPS",
    "MAX_TOKENS",
    "RGDRBuildKey",
    "RGDRLauncher",
    "RGDRSchedule",
    "RGDRTiling",
    "build_rgdr",
    "default_schedule",
    "default_tiling",
    "rgdr_refusal",
    "stream_splits",
]

_FLOAT_DTYPES = ("float16", "bfloat16", "float32")
#: Tokens per call the kernel serves: its metadata sums saturate at T in int32, so 2T must fit.
MAX_TOKENS = 1 << 30
_INDEX_DTYPES = ("int32", "int64")
_ROW_REDUCTIONS = ("butterfly", "transpose")


@dataclass(frozen=True)
class RGDRBuildKey:
    """Everything the compiled RGDR kernel is specialised on (never B, T or the pool size).

    ``accepted_dtype`` is None when ``num_accepted_tokens`` is absent; ``gk_form`` is None
    (absent), ``"scalar"`` (``gk`` is ``[T, NV]``) or ``"vector"`` (``[T, NV, DK]``).
    """

    input_dtype: str
    state_dtype: str
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    seq_lens_style: str = "lengths"
    seq_lens_dtype: str = "int32"
    slot_dtype: str = "int32"
    accepted_dtype: str | None = None
    has_g: bool = True
    gk_form: str | None = None
    use_qk_l2norm: bool = False
    arch: str = "sm_90"

    def __post_init__(self) -> None:
        def bad(field: str, value: Any, allowed: Any) -> ValueError:
            return ValueError(f"RGDRBuildKey.{field}={value!r} is not one of {allowed}")

        if self.input_dtype not in _FLOAT_DTYPES:
            raise bad("input_dtype", self.input_dtype, _FLOAT_DTYPES)
        if self.state_dtype not in _FLOAT_DTYPES:
            raise bad("state_dtype", self.state_dtype, _FLOAT_DTYPES)
        if self.seq_lens_style not in ("lengths", "cu_seqlens"):
            raise bad("seq_lens_style", self.seq_lens_style, ("lengths", "cu_seqlens"))
        for field in ("seq_lens_dtype", "slot_dtype"):
            if getattr(self, field) not in _INDEX_DTYPES:
                raise bad(field, getattr(self, field), _INDEX_DTYPES)
        if self.accepted_dtype is not None and self.accepted_dtype not in _INDEX_DTYPES:
            raise bad("accepted_dtype", self.accepted_dtype, (*_INDEX_DTYPES, None))
        if self.gk_form not in (None, "scalar", "vector"):
            raise bad("gk_form", self.gk_form, (None, "scalar", "vector"))
        for field in ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"):
            if int(getattr(self, field)) <= 0:
                raise ValueError(f"RGDRBuildKey.{field} must be positive, got {getattr(self, field)}")
        if self.num_v_heads % self.num_k_heads:
            raise ValueError(
                f"RGDRBuildKey: num_v_heads={self.num_v_heads} must be a multiple of "
                f"num_k_heads={self.num_k_heads} (GQA)"
            )


@dataclass(frozen=True)
class RGDRTiling:
    """How one build key is laid onto threads; chosen by :func:`default_tiling`.

    ``threads_per_row`` lanes share one state row; each thread holds ``rows_per_thread``
    rows, so a program covers ``BV = rows_per_thread * threads / threads_per_row`` rows.
    ``min_blocks`` is the ``__launch_bounds__`` occupancy hint (caps registers).

    ``stream``: a program owns a (sequence, key head) pair, or a runtime-chosen share of
    its ``GRP * DV`` rows, and streams them through registers ``BV`` rows at a time, the next
    chunk's state loading while the current one runs all tokens (rows of the state evolve
    independently). The metadata chain and the q/k staging are then paid once per program
    instead of once per tile. Otherwise one program per (sequence, value head, tile).

    ``speculate``: the program first guesses the decode layout (sequence b is token b alone)
    and issues token b's slot, inputs and state loads before the metadata resolves, then
    checks the guess against the span the metadata gives and, on a miss, discards it and
    runs the general path (same results on any metadata; a miss costs the loads). It cuts
    the dependent chain before the state load from three round trips to memory (length,
    then slot, then state) to two. The launcher runs it only for calls with as many tokens
    as sequences, in the roles :class:`RGDRSchedule`'s ``speculating`` lists.

    Fewer instructions a state element (issue 16; off by default, and then the program's CUDA is
    unchanged; why each pays is counted from the SASS in NOTES.md, "RGDR: instructions a state
    element"). None changes the arithmetic: every one computes the same bits as without it.

    ``exact_tokens``: a staged chunk's token loop runs the chunk's live tokens only (a decode step
    runs one trip, not ``chunk`` guarded ones).
    ``unchecked_index``: compiled without TileLang's bounds checks on memory accesses (pass config
    ``tl.disable_safe_memory_legalize``): every access is in bounds by construction (spans clipped
    into ``[0, T)``, slots checked against the pool, rows inside the tile), so the checks only
    cost instructions, and the per-row branches they put around each state store go.
    ``pingpong``: streaming layout only: the row-chunk loop runs two chunks a trip on two register
    buffers that swap roles, so no register copy of the prefetched chunk is made.
    ``flat_rows``: streaming layout only: the state is read through a ``[S, NV * DV, DK]`` view of the
    pool, where a key-head group's rows are contiguous, so a chunk's address is linear in the chunk
    (the head and row divisions of the 4-D index, with their sign fix-ups, go).
    ``reduce_rows``: ``"butterfly"`` sums each row's lane partials with a full xor butterfly per
    row; ``"transpose"`` halves the rows a lane carries at each of the first ``log2(rows)`` rounds
    (a lane keeps the half of rows its lane bit names and sends the other half), so the rows'
    sums take ``rows - 1 + log2(threads_per_row / rows)`` shuffles instead of
    ``rows * log2(threads_per_row)``, each row's total ends on the lanes that then write its
    output, and the k-dot's totals come back to every lane with ``rows`` indexed shuffles. The same
    additions on the same operands: the same bits.

    Round 2 (NOTES.md, "RGDR: instructions a state element, round 2"; off by default, the program's CUDA
    then unchanged):

    ``unpack_bits``: bf16 state only: a token reads its state's fp32 values from the bits of each 32-bit
    pair (the low element shifted up 16 bits, the high one with the low half cleared: one integer
    instruction each, where the bf16 cast takes two for the high one) and writes each pair whole.
    ``row_deltas``: with ``reduce_rows="transpose"``: the lanes that end a row's k-dot total compute the
    row's delta ``beta * (v - S k)`` and the deltas come back to every lane, not the totals (one delta a
    lane instead of ``rows``: the value loads, subtractions and products of the other rows go). The same
    operands: the same bits.
    ``stage_live_warps``: a staged chunk's q and k (loads, l2 norm, scaling) run only in the warps whose
    row groups hold a live token (a decode step: the first warp, the others skip to the state), a
    warp-uniform branch; the skipped rows of the staging buffer are never read.

    ``dependent_launch``: the program is launched as a programmatic dependent of the stream's
    previous kernel (``cudaGridDependencySynchronize`` before its first memory access, then
    ``cudaTriggerProgrammaticLaunchCompletion``), so its launch and block scheduling overlap that
    kernel's tail instead of following its end: at B=1 the launch gap is a large share of a step
    (issue 16's 3.0 / 3.5 µs rows). Every access still follows the previous kernel's completion,
    so the bits are the plain program's.
    """

    threads: int = 128
    threads_per_row: int = 8
    rows_per_thread: int = 1
    min_blocks: int = 4
    stream: bool = False
    speculate: bool = False
    exact_tokens: bool = False
    unchecked_index: bool = False
    pingpong: bool = False
    flat_rows: bool = False
    reduce_rows: str = "butterfly"
    unpack_bits: bool = False
    row_deltas: bool = False
    stage_live_warps: bool = False
    dependent_launch: bool = False

    def __post_init__(self) -> None:
        if self.reduce_rows not in _ROW_REDUCTIONS:
            raise ValueError(f"RGDRTiling.reduce_rows={self.reduce_rows!r} is not one of {_ROW_REDUCTIONS}")

    @property
    def block_v(self) -> int:
        return self.rows_per_thread * self.threads // self.threads_per_row

    @property
    def chunk(self) -> int:
        """Tokens staged per burst: one token per row group of the block."""
        return self.threads // self.threads_per_row


@dataclass(frozen=True)
class RGDRSchedule:
    """Tilings of one build key, chosen per call from the number of sequences and tokens.

    Both counts are tensor shapes on the host, so the choice is free, and the compile never
    specialises on B or T: every variant accepts any B and T. Small batches want many small
    programs (latency); large ones want big tiles (bytes in flight per register); large
    batches of short sequences (decode) can use ``short``, typically the streaming layout.
    """

    small: RGDRTiling
    large: RGDRTiling
    large_from_seqs: int
    short: RGDRTiling | None = None
    short_from_seqs: int = 1 << 62
    short_max_tokens: int = 0  # average tokens per sequence at or below which ``short`` runs
    #: The roles (``"small"``, ``"large"``, ``"short"``) whose plain decode calls (as many
    #: tokens as sequences) run the speculative twin (``speculate=True``) of their tiling: a
    #: role speculates where the H200 measured the twin faster, and only there.
    speculating: frozenset[str] = frozenset()
    #: Plain decode steps (as many tokens as sequences) of ``lo..hi`` sequences (inclusive) that run
    #: a tiling of their own, ahead of the size rule: ``((lo, hi, tiling), ...)``, the first range
    #: that holds the count. For a program that wins only there (one row a lane at B=1, four at
    #: B=32: it runs no other call, so it may be a speculative one).
    decode_steps: tuple[tuple[int, int, RGDRTiling], ...] = ()

    def pick(self, n_seq: int, n_tokens: int | None = None) -> RGDRTiling:
        """The tiling a call with ``n_seq`` sequences and ``n_tokens`` tokens runs."""
        if n_tokens == n_seq:
            for lo, hi, own in self.decode_steps:
                if lo <= n_seq <= hi:
                    return own
        role = self.select(n_seq, n_tokens, "small", "large", None if self.short is None else "short")
        tiling: RGDRTiling = getattr(self, role)
        return replace(tiling, speculate=True) if role in self.speculating and n_tokens == n_seq else tiling

    def select(self, n_seq: int, n_tokens: int | None, small: Any, large: Any, short: Any) -> Any:
        """The size rule of :meth:`pick` (speculation aside) over any values standing for
        the three tilings (the schedule search passes indices)."""
        if (
            short is not None
            and n_seq >= self.short_from_seqs
            and n_tokens is not None
            and n_tokens <= self.short_max_tokens * n_seq
        ):
            return short
        return large if n_seq >= self.large_from_seqs else small

    def tilings(self) -> tuple[RGDRTiling, ...]:
        """Every tiling a call can run (what a build compiles)."""
        roles = {"small": self.small, "large": self.large, "short": self.short}
        base = [t for t in roles.values() if t is not None]
        twins = [replace(t, speculate=True) for r, t in roles.items() if t is not None and r in self.speculating]
        return tuple(dict.fromkeys(base + twins + [t for _, _, t in self.decode_steps]))


_STREAM_SMEM_LIMIT = 48 * 1024

# The schedule rule, as data (chosen by bench_cuda.py's sweep on the H200, see NOTES.md):
# state bytes -> (small, large, sequences from which large runs, short, sequences from which
# short runs, average tokens per sequence up to which short runs, roles that speculate on
# decode steps). Speculation on the H200 (bench/rgdr_speculate.py, NOTES.md): fp32 small 1.36x at
# B=1, short 1.05x at B=32 and 1.005-1.008x at 128/256; bf16 small 1.35x at B=1 and 1.18x at B=8,
# the bf16 short before the instruction cuts (128, 16, 4, 6, True) 0.98-1.00x at B=32..256 (its twin
# spilled under the 80-register cap), so it stayed plain (bf16's large serves only T_b > 2, never a
# decode step). fp32 large (B=8..31) timed 1.13x at B=8; its twin passed the float64 check and equals
# its plain tiling bit for bit on the H200 (test_rgdr_gpu.py's SPECULATIVE, 2026-12-03), so it
# speculates too.
#
# The instruction cuts of RGDRTiling's docstring on the registered roles (bench/rgdr_lean.py on the H200, 2026-12-03,
# session-2026-12-03f; each candidate float64-checked and bit-equal to its plain tiling, x = against the schedule
# before it). bf16 short: the streamed program with 8 rows a lane and all five, 1.04-1.12x the former
# (128, 16, 4, 6, True) at B=128/256 T_b=1/2/4 (77.5% -> 87.1% of the same-size copy at B=128 T_b=1); its
# speculative twin then 1.046x at B=32 and 0.994-0.996x at 128/256 T_b=1. The tiled small program with the
# three a tiled program takes: 1.025x (bf16) / 1.039x (fp32) at B=1, and for fp32 it also beats the streamed
# short at T_b=1 (1.085x at B=32, 1.048x / 1.036x at B=128 / 256), so it is fp32's short role too. fp32 large
# with the three: 1.004-1.020x at B=128/256 T_b=2/4.
#
# Round 3 (rgdr_lean.py, session-2026-12-03g, against the schedule above before it): bf16's tiled large
# program with the three cuts and 8 rows a lane beats the streamed short at T_b=4 (1.084x / 1.062x at
# B=128 / 256; 80.6% -> 87.4% of the same-size copy) and loses at T_b=2 (0.93x), so bf16's short runs up
# to 2 tokens a sequence and that program is bf16's large (bench_cuda.py: B=128 / 256 T_b=4 from 77.8% / 73.6%
# to 83.3% / 77.0% of the copy ceiling; T_b=8 unchanged). Measured and left out: bf16's small with one row a
# lane (8-row programs, speculating) is 1.061x at B=1 T=1 (3.7 -> 3.5 us) but 1.3-1.6x slower at B=8 and at
# B=1 T_b >= 2, which the small role serves too; fp32's small with 32 lanes a row (1.032x at B=1, and it
# refuses head_k_dim < 32, which the small role must serve); inside 1.6% of the schedule: the round-2 fields
# (unpack_bits, row_deltas, stage_live_warps) on bf16's short and fp32's large as 4x4 / 8x3 / 8x5 tiles.
#
# Round 4 (rgdr_lean.py, session-2026-12-03h, each role launched as a programmatic dependent, x against the
# schedule above before it, in graphs of back-to-back steps): the small role 1.202x bf16 / 1.180x fp32 at B=1
# T=1 (3.66 -> 3.05 us, 3.90 -> 3.30 us), and 1.006x as fp32's short at B=32; bf16's short 1.023x at B=32 and
# 1.000-1.002x at B=128/256. Those roles launch as dependents (on DEPENDENT_LAUNCH_ARCHS only). The large roles
# measured 0.999-1.003x at T_b=2/4 and stay plain: no gain to pay for the extra field.
#
# Round 5 (rgdr_lean.py, session-2026-12-04a, bf16 decode steps, against the schedule above before it; every
# candidate speculating and launched as a dependent): the tiled program with one row a lane is 1.077x at B=1
# (3.05 -> 2.83 us) and 0.70-0.89x at B=2..8 (fp32: 1.000x at B=1); the streamed program with four rows a lane
# is 1.091x at B=32 (23.29 -> 21.35 us), 1.005x at B=64, 0.97-0.99x at B=128/256, 0.965x at B=32 T_b=2. So bf16's
# decode steps of one sequence and of 32..63 run those (RGDRSchedule.decode_steps); the small role's tiling and
# the tiled large one at B=32 were 0.87x and 0.96x. The same bench again (session-2026-12-04b,
# rgdr_lean_bf16.log): the four-row streamed program 1.182x the small role at B=16 (15.01 -> 12.70 us) and 0.927x
# at B=8, so its range starts at 16 sequences.


#: The instruction cuts (RGDRTiling's fields) any program takes, and all five, two more a streamed one takes:
#: what the registered roles use and what the benchmarks and GPU tests build their candidates from.
TILED_CUTS: Mapping[str, Any] = MappingProxyType({"exact_tokens": True, "unchecked_index": True,
                                                  "reduce_rows": "transpose"})
STREAM_CUTS: Mapping[str, Any] = MappingProxyType({**TILED_CUTS, "pingpong": True, "flat_rows": True})

_SMALL = RGDRTiling(128, 16, 2, 8, **TILED_CUTS, dependent_launch=True)
_SCHEDULES = {
    4: (_SMALL, RGDRTiling(128, 16, 8, 4, **TILED_CUTS), 8, _SMALL, 32, 1, frozenset({"small", "large", "short"}), ()),
    2: (_SMALL, RGDRTiling(128, 16, 8, 4, **TILED_CUTS), 32,
        RGDRTiling(128, 16, 8, 4, True, **STREAM_CUTS, dependent_launch=True), 32, 2, frozenset({"small", "short"}),
        ((1, 1, RGDRTiling(128, 16, 1, 8, False, True, **TILED_CUTS, dependent_launch=True)),
         (16, 63, RGDRTiling(128, 16, 4, 6, True, True, **STREAM_CUTS, dependent_launch=True)))),
}


def default_tiling(key: RGDRBuildKey) -> RGDRTiling:
    """The small-batch tiling (16-row tiles; the most permissive about head_v_dim)."""
    return default_schedule(key).small


def default_schedule(key: RGDRBuildKey) -> RGDRSchedule:
    """The schedule rule: the table above; a variant the key cannot use (its tile does not
    divide head_v_dim, or the streaming layout would stage too many value rows) falls back
    to the small tiling (a decode-step tiling to the size rule), and on an arch without
    programmatic dependent launch every role is launched plainly (same bits)."""
    small, large, n, short_or_none, short_n, short_tokens, speculating, steps = (
        _SCHEDULES[_ELEM_BYTES[key.state_dtype]])
    short: RGDRTiling | None = short_or_none
    small, large = launchable_on(key.arch, small), launchable_on(key.arch, large)  # the table's are Hopper's
    short = None if short is None else launchable_on(key.arch, short)
    steps = tuple((lo, hi, launchable_on(key.arch, t)) for lo, hi, t in steps)
    if rgdr_refusal(key, large) is not None:
        large = small
    if short is not None and rgdr_refusal(key, short) is not None:
        short = None
    steps = tuple(step for step in steps if rgdr_refusal(key, step[2]) is None)
    return RGDRSchedule(small, large, n, short, short_n, short_tokens, speculating, steps)


def rgdr_refusal(key: RGDRBuildKey, tiling: RGDRTiling | None = None) -> str | None:
    """Why this kernel cannot serve ``key`` (a sentence naming the fix), or None if it can."""
    tiling = tiling or default_tiling(key)
    if key.arch not in _SUPPORTED_ARCHS:
        return (
            f"RGDR TileLang kernel: arch {key.arch} is not supported (written for "
            f"{', '.join(_SUPPORTED_ARCHS)}; measured on sm_90); use the reference"
        )
    tpr = tiling.threads_per_row
    if key.head_k_dim % tpr or (key.head_k_dim // tpr) & (key.head_k_dim // tpr - 1):
        return (
            f"RGDR TileLang kernel: head_k_dim={key.head_k_dim} must be {tpr} times a power of two "
            "(each lane owns a power-of-two run of columns); use the reference"
        )
    if key.head_k_dim // tpr > 32:
        return (
            f"RGDR TileLang kernel: head_k_dim={key.head_k_dim} > {32 * tpr} would keep more than 32 state "
            "columns per lane in registers; use the reference"
        )
    if key.head_v_dim % tiling.block_v:
        return (
            f"RGDR TileLang kernel: head_v_dim={key.head_v_dim} must be a multiple of the "
            f"value tile ({tiling.block_v}); use the reference"
        )
    reason = dependent_launch_refusal(tiling.dependent_launch, "RGDR TileLang kernel", key.arch,
                                      "drop dependent_launch")
    if reason is not None:
        return reason
    for field in ("pingpong", "flat_rows"):
        if getattr(tiling, field) and not tiling.stream:
            return f"RGDR TileLang kernel: {field} is a streaming-layout field; set stream=True or drop it"
    if tiling.unpack_bits and key.state_dtype != "bfloat16":
        return (
            f"RGDR TileLang kernel: unpack_bits reads a bfloat16 state's fp32 values from its bits; a "
            f"{key.state_dtype} state's are not its bits shifted; drop unpack_bits"
        )
    if tiling.unpack_bits and key.head_k_dim // tpr < 2:
        return (
            f"RGDR TileLang kernel: unpack_bits reads a lane's state columns in pairs, but head_k_dim="
            f"{key.head_k_dim} gives one a lane at threads_per_row={tpr}; halve threads_per_row or drop unpack_bits"
        )
    if tiling.row_deltas and tiling.reduce_rows != "transpose":
        return (
            "RGDR TileLang kernel: row_deltas computes each row's delta on the lanes where a transposed reduction "
            "ends its total; set reduce_rows='transpose' or drop row_deltas"
        )
    rows = tiling.rows_per_thread
    if tiling.reduce_rows == "transpose" and (rows & (rows - 1) or rows > tpr):
        return (
            f"RGDR TileLang kernel: reduce_rows='transpose' halves the rows a lane carries each shuffle round, "
            f"so rows_per_thread={rows} must be a power of two at most threads_per_row={tpr}; use 'butterfly'"
        )
    group_rows = key.num_v_heads // key.num_k_heads * key.head_v_dim
    if tiling.stream and tiling.chunk * group_rows * 4 > _STREAM_SMEM_LIMIT:
        return (
            f"RGDR TileLang kernel (stream layout): {group_rows} value rows per key head need "
            f"{tiling.chunk * group_rows * 4} bytes of staged values (> {_STREAM_SMEM_LIMIT}); use a tiled layout"
        )
    return None


class RGDRLauncher:
    """The compiled RGDR kernels of one :class:`RGDRBuildKey`, one per tiling of its schedule.

    ``run(query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk,
    num_accepted_tokens, scale, seq_lens_style, use_qk_l2norm_in_kernel, out=None)`` is the
    launch path: the ``RGDRKernel`` interface's arguments followed by ``out`` (the core's
    ``writes_outputs`` call). What depends only on the build (which optional inputs the
    compiled signature takes, the default scale, the tiling thresholds, the SM count) was
    decided when it was made, so a call reads two shapes, picks a tiling and calls the
    compiled function. It writes ``out`` (allocated when None) and ``state`` in place on
    the current CUDA stream (so it captures into CUDA graphs), never synchronises, and
    returns ``out``. Tensors must be contiguous and match the key; B and T may change from
    call to call. The rows, a vector ``gk`` and the pool are read (the pool written) in
    vectors: one at a start off a 16-byte boundary is packed (the pool written back after).

    Calling the launcher itself, ``launcher(query, key, value, beta, state,
    actual_seq_lengths, ssm_state_indices, g, gk, num_accepted_tokens, out, scale)``, first
    checks that the optional inputs are present exactly when the key says so and that
    ``out`` is given: the entry for direct users (tests, benchmarks).
    """

    def __init__(self, key: RGDRBuildKey, schedule: RGDRSchedule, kernels: dict[RGDRTiling, Any],
                 sm_count: int = 132) -> None:
        self.key = key
        self.schedule = schedule
        self.kernels = kernels
        #: The compiled function of each tiling, as ``run`` calls it (see :func:`direct_entry`).
        self.entries = {t: direct_entry(k) for t, k in kernels.items()}
        self.run = _make_run(key, schedule, self.entries, sm_count)

    def source(self, tiling: RGDRTiling | None = None) -> str:
        """The generated CUDA source of one variant (the small-batch one by default)."""
        return self.kernels[tiling or self.schedule.small].get_kernel_source()

    def __call__(
        self,
        query: Any,
        key: Any,
        value: Any,
        beta: Any,
        state: Any,
        actual_seq_lengths: Any,
        ssm_state_indices: Any,
        g: Any = None,
        gk: Any = None,
        num_accepted_tokens: Any = None,
        out: Any = None,
        scale: float | None = None,
    ) -> Any:
        k = self.key
        if (g is not None) != k.has_g:
            raise ValueError(f"RGDR kernel built with has_g={k.has_g} but g is {'absent' if g is None else 'given'}")
        if (gk is None) != (k.gk_form is None):
            raise ValueError(f"RGDR kernel built with gk_form={k.gk_form!r} but gk is {'absent' if gk is None else 'given'}")
        if (num_accepted_tokens is None) != (k.accepted_dtype is None):
            raise ValueError(
                f"RGDR kernel built with accepted_dtype={k.accepted_dtype!r} but num_accepted_tokens is "
                f"{'absent' if num_accepted_tokens is None else 'given'}"
            )
        if out is None:
            raise ValueError("RGDR launcher needs an `out` buffer of shape [T, NV, DV] and value's dtype")
        return self.run(query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk,
                        num_accepted_tokens, scale, None, None, out)  # fmt: skip


def stream_splits(key: RGDRBuildKey, tiling: RGDRTiling, n_seq: int, sm_count: int = 132) -> int:
    """The runtime ``splits`` a call of ``n_seq`` sequences runs ``tiling`` with: the streaming
    layout shares a key-head group's row chunks among enough programs to fill the GPU at small
    B (8 an SM); the tiled layouts have a fixed grid (1)."""
    chunks = key.num_v_heads // key.num_k_heads * key.head_v_dim // tiling.block_v if tiling.stream else 0
    return max(1, min(chunks, -(-8 * sm_count // (n_seq * key.num_k_heads)))) if chunks else 1


def _make_run(key: RGDRBuildKey, schedule: RGDRSchedule, entries: dict[RGDRTiling, Callable[..., Any]],
              sm_count: int) -> Callable[..., Any]:
    """The per-call launch path of :class:`RGDRLauncher` (see there), built once per build."""
    import torch

    empty_like = torch.empty_like
    default_scale = float(key.head_k_dim) ** -0.5
    cu = 1 if key.seq_lens_style == "cu_seqlens" else 0
    # The compiled signature carries only the optional inputs this key has.
    keep = [0, 1, 2, 3, 4, 5, 6]
    keep += [7] if key.has_g else []
    keep += [8] if key.gk_form is not None else []
    keep += [9] if key.accepted_dtype is not None else []
    compiled_inputs = operator.itemgetter(*keep)
    pick = schedule.pick
    # (sequences, tokens) -> (compiled function, splits): a decode loop repeats its counts, so
    # the schedule rule runs once per pair, not once per call (bounded: serving batches vary).
    launches: dict[tuple[int, int], tuple[Callable[..., Any], int]] = {}

    def launch_for(n_seq: int, n_tokens: int) -> tuple[Callable[..., Any], int]:
        t = pick(n_seq, n_tokens)
        fn, splits = entries[t], stream_splits(key, t, n_seq, sm_count)
        if len(launches) >= 4096:
            launches.clear()
        launches[n_seq, n_tokens] = fn, splits
        return fn, splits

    def run(query: Any, key: Any, value: Any, beta: Any, state: Any, actual_seq_lengths: Any, ssm_state_indices: Any,
            g: Any = None, gk: Any = None, num_accepted_tokens: Any = None, scale: float | None = None,
            seq_lens_style: Any = None, use_qk_l2norm_in_kernel: Any = None, out: Any = None) -> Any:
        if out is None:
            out = empty_like(value)
        n_tokens = query.shape[0]
        n_seq = actual_seq_lengths.shape[0] - cu
        launch = launches.get((n_seq, n_tokens))
        if launch is None:
            if n_seq <= 0 or n_tokens == 0:  # a zero-sized grid is not launchable
                if n_tokens:
                    out.zero_()  # no sequence covers any token: zeros, as the kernel gives uncovered tokens
                return out
            if n_tokens >= MAX_TOKENS:
                raise ValueError(f"RGDR TileLang kernel: T={n_tokens} tokens; its int32 token arithmetic "
                                 f"(sums saturating at T) holds below {MAX_TOKENS}")
            launch = launch_for(n_seq, n_tokens)
        fn, splits = launch
        pool = state
        # One test for the common call, every start aligned (a list over the rows cost 0.5 us a call):
        if (query.data_ptr() | key.data_ptr() | value.data_ptr() | state.data_ptr()
                | (0 if gk is None else gk.data_ptr())) % 16:
            query, key, value = [t if t.data_ptr() % 16 == 0 else packed(t) for t in (query, key, value)]
            if gk is not None and gk.data_ptr() % 16:
                gk = packed(gk)
            pool = packed(state) if state.data_ptr() % 16 else state
        fn(*compiled_inputs((query, key, value, beta, pool, actual_seq_lengths, ssm_state_indices, g, gk,
                             num_accepted_tokens)),
           out, default_scale if scale is None else float(scale), splits)  # fmt: skip
        if pool is not state:
            state.copy_(pool)
        return out

    return run


def build_rgdr(key: RGDRBuildKey, tiling: RGDRTiling | RGDRSchedule | None = None) -> RGDRLauncher:
    """Compile (once per process; tilelang's disk cache across processes) and return the launcher.

    ``tiling`` pins one tiling or a schedule (benchmarks); by default :func:`default_schedule`.
    Raises ValueError with the refusal reason if the kernel was not written for ``key``.
    """
    if tiling is None:
        schedule = default_schedule(key)
    elif isinstance(tiling, RGDRTiling):
        schedule = RGDRSchedule(tiling, tiling, 1 << 62)
    else:
        schedule = tiling
    for t in schedule.tilings():
        reason = rgdr_refusal(key, t)
        if reason is not None:
            raise ValueError(reason)

    def compile_one(t: RGDRTiling) -> Any:
        return cached_build(("rgdr-kernel", key, t), lambda: compile_prim_func(rgdr_program(key, t), key.arch))

    def make() -> RGDRLauncher:
        import torch

        tilings = schedule.tilings()
        # A schedule's tilings (up to three, the speculative twins of the roles that speculate
        # and the decode steps' own: up to eight) compile concurrently: where cores allow, a first call waits
        # for the slowest compile, not for their sum.
        built = compile_many([functools.partial(compile_one, t) for t in tilings])
        failed = next((b for b in built if isinstance(b, BaseException)), None)
        if failed is not None:
            raise failed
        kernels = dict(zip(tilings, built))
        sm_count = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        return RGDRLauncher(key, schedule, kernels, sm_count)

    return cached_build(("rgdr", key, schedule), make)
