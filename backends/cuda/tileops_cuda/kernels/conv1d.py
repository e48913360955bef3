"""Causal conv1d (CausalConv1dUpdateFwdOp, CausalConv1dVarlenFwdOp) on NVIDIA GPUs: the host side.

What gets compiled (the build keys: dtype, channels, width, activation, optional-input
presence, metadata dtypes; never B, T or the pool size), what the kernels were not written for
(:func:`conv_refusal`), and how a call is launched. The programs are
:mod:`tileops_cuda.kernels.conv1d_program`.

A launch passes ``x`` as it is where its rows have unit stride, a 16-byte aligned start and a
row stride of whole 16-byte vectors (a slice of a projection output usually has all three),
else a contiguous copy. The pool is passed flat (``[S, D * (W - 1)]``); a strided or misaligned
pool goes through a contiguous copy that is copied back (correct, not fast). Absent optional
inputs are one-element dummies the compiled program never reads, so one program serves every
presence pattern's signature. Nothing here synchronises: launches capture into CUDA graphs.
"""

# No `from __future__ import annotations`: dataclass field types stay plain classes here.

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

from ._common import (ELEM_BYTES, GRID_YZ_MAX, arch_refusal, cached_build, compile_many, compile_prim_func,
                      dependent_launch_refusal, direct_entry)
from ._row_views import packed
from .conv1d_program import conv_update_program, conv_varlen_program

__all__ = ["ConvUpdateBuildKey", "ConvVarlenBuildKey", "batch_key", "build_conv_update", "build_conv_varlen",
           "conv_refusal", "few_sequences_key", "fitted_to_width", "one_sequence_key", "with_start_order",
           "with_tanh_silu"]

_DTYPES = ("float16", "bfloat16", "float32")
_INDEX_DTYPES = ("int32", "int64")
_MAX_WIDTH = 8
_INT32_LIMIT = 2**31 - 1
#: The varlen program keeps two ints a token of its chunk in shared memory.
_MAX_CHUNK = 4096
#: The most tokens a sequence the update's speculative window guesses (``ConvUpdateBuildKey.speculate``): its slot
#: candidates are loaded at once, one register each.
_MAX_SPECULATE = 8


@dataclass(frozen=True)
class ConvUpdateBuildKey:
    """The decode kernel's build identity. ``accepted_dtype`` is None without ``num_accepted_tokens``."""

    dtype: str
    dim: int
    width: int
    silu: bool = True
    has_bias: bool = False
    seq_lens_style: str = "lengths"
    seq_lens_dtype: str = "int32"
    slot_dtype: str = "int32"
    accepted_dtype: str | None = None
    arch: str = "sm_90"
    #: Threads per program (each owns one 16-byte vector of channels) and a cap on registers
    #: per thread (64: no spill; 8 programs of 128 threads an SM, so B = 256 fits in two waves,
    #: each paying the metadata -> slot -> window latency once); sweep parameters
    #: (``bench/layer_ops_sweep.py``; 0 = no cap).
    threads: int = 128
    registers: int = 64
    #: Compiled without TileLang's bounds checks (pass config ``tl.disable_safe_memory_legalize``):
    #: every access is in bounds by construction (conv1d_program's docstring says why). The
    #: registered update program has it (block_shapes.py: 1.04x on the H200); the varlen one
    #: lost 6-11% with it and keeps the checks.
    unchecked_index: bool = False
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the wait, then the release, before the first memory access), so its launch and block scheduling
    #: overlap that kernel's tail; the same bits. Hopper only; in no block shape. Alone it tied on the
    #: update and lost 4.2 us on the varlen 8-prompt row (eighteenth session, session-2026-12-04b
    #: conv_sweep.log). The launch policy turns it on for the update, a decode-step kernel, and the varlen
    #: class opts out (``launches_as_dependent``, registered.py).
    dependent_launch: bool = False
    #: As ``ConvVarlenBuildKey.tanh_silu``.
    tanh_silu: bool = False
    #: Speculative first window (0: none; k: up to k tokens a sequence). A program's chain is the metadata (a
    #: sequence's start sums the earlier lengths), then its first token's slot, then the window there, then the
    #: convolution: three dependent round trips before any state moves. With ``speculate`` the program guesses
    #: that every sequence holds ``T // B`` tokens (decode, MTP), loads the slot candidates of its guessed tokens
    #: (at most k), its guessed first x row and the window at the guessed slot beside the metadata, and keeps them
    #: where the metadata agrees (the same start, length and accepted token), else loads them as before: the
    #: same bits either way, one round trip fewer where the guess holds. On an H100, whose update rows are not
    #: latency-bound, it lost by 1.5-2.6% (fifty-third session, s53h); not yet timed on the H200.
    speculate: int = 0


@dataclass(frozen=True)
class ConvVarlenBuildKey:
    """The varlen kernels' build identity. ``cu_dtype`` is the dtype of the metadata the kernel
    reads. With ``meta_lengths`` that is the op's per-sequence lengths: the kernel turns fewer
    than ``threads`` of them into prefix sums itself (no extra launch), and the launcher gives a
    longer (or empty) batch device-side prefix sums of the same dtype. Without it the kernel reads
    cu_seqlens; lengths-style calls of such a key get int64 prefix sums from the launcher."""

    dtype: str
    dim: int
    width: int
    silu: bool = True
    has_bias: bool = False
    has_init: bool = False
    cu_dtype: str = "int32"
    slot_dtype: str = "int32"
    meta_lengths: bool = False
    arch: str = "sm_90"
    #: Threads per program (each owns one 16-byte vector of channels), ``chunk`` tokens a program
    #: loaded ``tokens`` rows at a time while the previous rows are computed, and a cap on
    #: registers per thread (0 = none): sweep parameters (``bench/layer_ops_sweep.py``); these
    #: defaults are the registered shape (kernels/block_shapes.py). Short chunks make a 4k call several
    #: waves of programs rather than one wave streaming all of ``x`` at once (forty-first session).
    threads: int = 128
    tokens: int = 4
    registers: int = 128
    chunk: int = 16
    #: As ``ConvUpdateBuildKey.unchecked_index`` and ``ConvUpdateBuildKey.dependent_launch``.
    unchecked_index: bool = False
    dependent_launch: bool = False
    #: Threads a program for a call of one sequence (0: ``threads``): the build compiles that
    #: program too and the launcher runs it where the batch holds one sequence (a host shape: no
    #: sync). A single long prompt and a batch of prompts want different shapes (block_shapes.py).
    one_sequence_threads: int = 0
    #: The most sequences a call may hold for the ``one_sequence_threads`` shape to serve it too (1:
    #: one-sequence calls only): a batch of 2 to ``few_sequences`` runs ``few_sequences_key``'s
    #: program, the batch program at those threads. With the start order of the thirty-eighth session
    #: the 64-thread shape lost 16 and 64 prompts and was 0.25-0.4 us faster on the 2-8 prompt rows on
    #: average over three H200 runs (19 of 24 row comparisons), but not on the 8-prompt row in every run
    #: (sessions 2026-12-06e s39c2, 2026-12-06f s40b/s40c): not registered. A host shape, no sync.
    few_sequences: int = 1
    #: A start's final-window rows of ``x`` (its sequence's last ``W - 1``) loaded before its slot,
    #: so that they travel beside the slot read and the pool read that depends on it instead of
    #: after them: the start's dependent chain one DRAM round trip shorter. On a 4k call, which is one
    #: wave, a program holding a start finishes last (NOTES.md, thirty-sixth session). The same bits;
    #: where it is faster depends on the card (``with_start_order``, thirty-eighth session).
    end_rows_first: bool = False
    #: A group holding a start unrolled like the others, from the rows already in registers, its
    #: start logic under each token's own test, where the plain program runs it one token at a time
    #: with each row re-read: without pool traffic a start still costs up to 2.5 us of a one-wave 4k
    #: call on an H100 (padding slots, NOTES.md, thirty-seventh session). The same bits; registered
    #: with ``end_rows_first`` (``with_start_order``, thirty-eighth session).
    unrolled_starts: bool = False
    #: Every program along grid x (channel blocks still varying fastest: the same order of programs),
    #: where the plain grid puts the chunks along y, which holds 65535 of them: 1,048,560 tokens a call
    #: at 16-token chunks. The launcher runs a longer call through the same key with this set (the same bits
    #: on every conv GPU test; 1-4 us slower at 4k tokens on an H100, forty-second session).
    flat_grid: bool = False
    #: SiLU as ``h + h · tanh(h)`` with ``h = x / 2`` and one ``tanh.approx.f32`` (one MUFU operation an
    #: element where ``x · rcp(1 + exp(-x))`` takes two: the H100 conv read 2-2.5 µs faster without SiLU at 4k
    #: tokens, forty-second session). Its relative error (2**-11) suits 16-bit outputs only: refused for
    #: float32. Registered for 16-bit outputs (``with_tanh_silu``).
    tanh_silu: bool = False


def conv_refusal(key: "ConvUpdateBuildKey | ConvVarlenBuildKey") -> str | None:
    """Why the conv kernels cannot serve ``key`` (a sentence naming the fix), or None."""
    name = "causal conv1d TileLang kernel"
    if key.dtype not in _DTYPES:
        return f"{name}: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    for field in ("seq_lens_dtype", "cu_dtype", "slot_dtype", "accepted_dtype"):
        value = getattr(key, field, None)
        if value is not None and value not in _INDEX_DTYPES:
            return f"{name}: {field} {value} is not one of {_INDEX_DTYPES}; use the reference"
    vec = 16 // ELEM_BYTES[key.dtype]
    if key.dim % vec:
        return f"{name}: D={key.dim} must be a multiple of {vec} (16-byte vectors of channels); use the reference"
    if not 2 <= key.width <= _MAX_WIDTH:
        return f"{name}: width W={key.width} is outside [2, {_MAX_WIDTH}] (taps are unrolled); use the reference"
    for field in ("threads", "one_sequence_threads"):
        value = getattr(key, field, 0)
        if value not in (32, 64, 128, 256, 512, 1024) and (field == "threads" or value):
            return f"{name}: {field}={value} must be a power of two in [32, 1024]; use the defaults"
    if isinstance(key, ConvVarlenBuildKey) and key.few_sequences < 1:
        return f"{name}: few_sequences={key.few_sequences} must be at least 1 (one-sequence calls); use the defaults"
    if isinstance(key, ConvVarlenBuildKey) and not (
            key.tokens >= key.width - 1 and 0 < key.chunk <= _MAX_CHUNK and key.chunk % key.tokens == 0):
        return (f"{name}: tokens={key.tokens} must be at least W - 1 and chunk={key.chunk} a positive multiple "
                f"of tokens up to {_MAX_CHUNK}; use the defaults")
    if isinstance(key, ConvUpdateBuildKey) and not 0 <= key.speculate <= _MAX_SPECULATE:
        return (f"{name}: speculate={key.speculate} is the tokens a sequence the update guesses, 0 to "
                f"{_MAX_SPECULATE}; use the defaults")
    if key.tanh_silu and (key.dtype == "float32" or not key.silu):
        return (f"{name}: tanh_silu approximates SiLU to 2**-11, for 16-bit outputs with SiLU only "
                f"(dtype={key.dtype}, silu={key.silu}); build without it")
    return (dependent_launch_refusal(key.dependent_launch, name, key.arch, "build without dependent_launch")
            or arch_refusal(name, key.arch))


def fitted_to_width(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey:
    """``key`` with a group of at least ``W - 1`` tokens (the rolling window is refilled a group at
    a time) and its chunk rounded up to whole groups: the measured block shape is for W = 4, and
    a wider conv keeps its kernel rather than being refused for the table's ``tokens``."""
    if key.tokens >= key.width - 1:
        return key
    tokens = key.width - 1
    return replace(key, tokens=tokens, chunk=-(-key.chunk // tokens) * tokens)


class _Launch:
    """Per-call plumbing shared by both launchers (everything here is host-side shapes and pointers)."""

    def __init__(self, dtype: str, dim: int, width: int) -> None:
        import torch

        self.torch = torch
        self.vec = 16 // ELEM_BYTES[dtype]
        self.dim, self.width = dim, width
        self.dtype = getattr(torch, dtype)
        self._dummies: dict[Any, Any] = {}

    def x_rows(self, x: Any) -> Any:
        """``x`` (``[rows, D]``) checked for int32 indexing, as the programs read it: itself where its rows are
        readable in place as 16-byte vectors (unit channel stride, aligned start and row stride), else a packed
        copy. Both from one read of the shape and the strides (a call's most frequent host work here)."""
        rows, cols = x.shape
        row_stride, col_stride = x.stride()
        if rows * max(row_stride, cols) > _INT32_LIMIT:
            raise ValueError(f"causal conv1d TileLang kernel: x of {rows} rows exceeds int32 indexing")
        if (cols <= 1 or col_stride == 1) and row_stride % self.vec == 0 and x.data_ptr() % 16 == 0:
            return x
        return packed(x)

    def pool_view(self, pool: Any) -> tuple[Any, bool]:
        """``(flat pool, whether it is a copy to write back)``."""
        S = pool.shape[0]
        if S * self.dim * (self.width - 1) > _INT32_LIMIT:
            raise ValueError(f"causal conv1d TileLang kernel: a pool of {S} slots x {self.dim} channels x "
                             f"{self.width - 1} exceeds int32 indexing; use fewer slots per pool")
        flat = self.dim * (self.width - 1)  # (not -1: a pool of no slots has no size to infer; found in review)
        if pool.is_contiguous() and pool.data_ptr() % 16 == 0:
            return pool.view(S, flat), False
        return packed(pool).view(S, flat), True

    def dummy(self, device: Any, dtype: Any) -> Any:
        """A one-element zero standing for an absent input: a flags vector read through it reads
        False (``batch_key``); no other is read."""
        d = self._dummies.get((device, dtype))
        if d is None:
            d = self._dummies[(device, dtype)] = self.torch.zeros(1, dtype=dtype, device=device)
        return d

    def weight_flat(self, weight: Any) -> Any:
        """The taps as one packed vector at a 16-byte aligned start (the programs read them in 16-byte vectors)."""
        if not weight.is_contiguous() or weight.data_ptr() % 16:
            weight = packed(weight)
        return weight.view(-1)

    def out_of(self, x: Any, out: Any) -> Any:
        return self.torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out


def _make_update_run(key: ConvUpdateBuildKey, fn: Callable[..., Any]) -> Callable[..., Any]:
    launch = _Launch(key.dtype, key.dim, key.width)
    torch = launch.torch
    acc_dtype = getattr(torch, key.accepted_dtype or "int32")

    def run(x: Any, conv_state: Any, weight: Any, actual_seq_lengths: Any, conv_state_indices: Any, bias: Any = None,
            num_accepted_tokens: Any = None, activation: Any = None, seq_lens_style: Any = None, out: Any = None) -> Any:
        out = launch.out_of(x, out)
        if x.shape[0] == 0:
            return out  # nothing to write; a zero-sized grid is not launchable
        xv = launch.x_rows(x)
        pool, copied = launch.pool_view(conv_state)
        dev = x.device
        # (The vectors the programs read as packed arrays are made so: a column of a slot table is legal.)
        fn(xv, pool, launch.weight_flat(weight),
           bias.contiguous() if bias is not None else launch.dummy(dev, launch.dtype), actual_seq_lengths.contiguous(),
           conv_state_indices.contiguous(),
           num_accepted_tokens.contiguous() if num_accepted_tokens is not None else launch.dummy(dev, acc_dtype), out)
        if copied:
            conv_state.copy_(pool.view(conv_state.shape))
        return out

    return run


def with_start_order(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey:
    """``key`` with ``end_rows_first`` and ``unrolled_starts``, which together measured fastest on the
    H200 wherever a start has a slot read to hide behind (bench/results/session-2026-12-06d, s38e-h):
    with initial states the 4k rows of 1-64 prompts went from 78-84% of the same-size copy (plain) to
    79-87% (the 8-prompt row 44.6 -> 42.4 us), and batches without them gained 0.5-1.8 us. A
    one-sequence program without initial states keeps the plain order (``one_sequence_key``). On an
    H100 the order is reversed (both won only without initial states, s38a-c); the two cards share
    ``sm_90`` and the targets are the H200's. ``CONV_TWIN=end_rows_first run.sh convtwin`` times it
    again."""
    return replace(key, end_rows_first=True, unrolled_starts=True)


def with_tanh_silu(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey:
    """``key`` with ``tanh_silu`` where it runs SiLU into 16-bit outputs (float32 keeps ``exp``). On an H100
    (bench/results/session-2026-12-06i, s43a) it won both 4k rows in three timings of one run: the 1-prompt row
    53.7-53.8 -> 52.2-52.3 us (87.6 -> 90.2% of the same-size copy) and 53.60 -> 52.25 in the sweep (86.7 -> 89.0%),
    the 8-prompt row 55.6-56.0 -> 54.0 us (84.2-84.7 -> 87.2-87.3%) and 55.82 -> 54.21 (83.7 -> 86.1%): within
    0.4-0.9 us of no SiLU at all. Every conv GPU test ran it against float64 (108 passed). The update, which waits
    on its pool reads rather than on its arithmetic, tied with it (15.04 / 15.10 us, 22.69 / 22.70): not there."""
    return replace(key, tanh_silu=key.silu and key.dtype != "float32")


def _has_narrow_program(key: ConvVarlenBuildKey) -> bool:
    """Whether ``one_sequence_threads`` names a program apart from the batch program's."""
    return bool(key.one_sequence_threads) and key.one_sequence_threads != key.threads


def one_sequence_key(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey | None:
    """The key of the program a one-sequence call of ``key`` runs, or None where it runs ``key``'s.
    Without initial states its one start is token 0 with no slot read before it, and either start
    field cost the 4k prompt 40.1-40.6 -> 47.8-48.4 us on the H200 (88% -> 73% of the copy): that
    program runs its start plainly."""
    if not _has_narrow_program(key):
        return None
    return replace(key, threads=key.one_sequence_threads, one_sequence_threads=0, few_sequences=1,
                   end_rows_first=key.end_rows_first and key.has_init,
                   unrolled_starts=key.unrolled_starts and key.has_init)


def batch_key(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey:
    """The key of the program a batch call of ``key`` runs: the initial-state program, also where the
    call passes no flags. An HF prefill of fresh prompts passes none, and on the H200 its 8 x 512 rows
    took 48.4-48.5 us (72-74% of the same-size copy) through the program without initial states and
    42.4-42.6 us (82-84%) through this one, in two runs, with every batch with initial states a tie
    (bench/results/session-2026-12-06e, s39c1 and s39d3). The launcher's flags stand-in is a zero, and the
    bounds checks read every flag past it as 0, so a key without them (``unchecked_index``) keeps its
    own program."""
    if key.has_init or key.unchecked_index:
        return key
    return replace(key, has_init=True)


def few_sequences_key(key: ConvVarlenBuildKey) -> ConvVarlenBuildKey | None:
    """The key of the program a call of 2 to ``few_sequences`` sequences runs, or None where the batch
    program serves it: ``batch_key``'s program (its start order, initial states read) at
    ``one_sequence_threads``."""
    if key.few_sequences < 2 or not _has_narrow_program(key):
        return None
    return replace(batch_key(key), threads=key.one_sequence_threads, one_sequence_threads=0, few_sequences=1)


def _prefix_sums(lengths: Any, T: int, same_dtype: bool) -> Any:
    """The running sums of ``lengths``, each already clipped into ``[0, T]``: int64 (a cu_seqlens program's
    input), or with ``same_dtype`` the lengths' own dtype (a lengths program's). Where int32 sums could pass
    int32 (only garbage lengths reach that) they are made in int64 and clipped to ``T``, which the program
    reads them as, never wrapped."""
    import torch

    if not same_dtype or lengths.dtype == torch.int64:
        return torch.cumsum(lengths, 0, dtype=torch.int64)
    if lengths.shape[0] * T <= _INT32_LIMIT:
        return torch.cumsum(lengths, 0, dtype=lengths.dtype)
    return torch.cumsum(lengths, 0, dtype=torch.int64).clamp_(max=T).to(lengths.dtype)


def _make_varlen_run(key: ConvVarlenBuildKey, fn: Callable[..., Any], one_fn: Callable[..., Any] | None = None,
                     few_fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The launch path of ``key``'s program ``fn``; ``one_fn``, where given, serves calls of one sequence, and
    ``few_fn`` calls of 2 to ``key.few_sequences``."""
    launch = _Launch(key.dtype, key.dim, key.width)
    one_fn = one_fn or fn
    few_fn = few_fn or fn
    few = key.few_sequences
    # The plain grid's chunks run along y, which holds GRID_YZ_MAX of them; a flat grid has no such bound.
    most = None if key.flat_grid else GRID_YZ_MAX * key.chunk
    torch = launch.torch

    def run(x: Any, conv_state: Any, weight: Any, actual_seq_lengths: Any, conv_state_indices: Any,
            has_initial_state: Any = None, bias: Any = None, activation: Any = None, seq_lens_style: Any = None,
            out: Any = None) -> Any:
        if most is not None and x.shape[0] > most:
            # More chunks than grid y holds: the same programs with every program along x (``flat_grid``, the
            # same bits; 1-4 us slower than these at 4k tokens on an H100, forty-second session), built on the
            # first such call.
            return build_conv_varlen(replace(key, flat_grid=True)).run(
                x, conv_state, weight, actual_seq_lengths, conv_state_indices, has_initial_state, bias, activation,
                seq_lens_style, out)
        out = launch.out_of(x, out)
        if x.shape[0] == 0:
            return out
        xv = launch.x_rows(x)
        dev = x.device
        scan = 0
        actual_seq_lengths = actual_seq_lengths.contiguous()  # (read as a packed array, as the vectors below)
        # The search runs over the prefix sums as the spec reads them, cummax(clip(cu)): the program clips every
        # entry it reads and takes the running maximum of its first `threads` (conv1d_program); entries past
        # those, and all of a lengths program's, must come non-decreasing (one cummax launch, or clamped lengths).
        T, n = x.shape[0], actual_seq_lengths.shape[0]
        if seq_lens_style == "cu_seqlens":
            own_max = n <= key.threads and not key.meta_lengths
            cu = actual_seq_lengths if own_max else actual_seq_lengths.cummax(0).values
        elif key.meta_lengths and 0 < n < key.threads and n * T <= _INT32_LIMIT:
            cu, scan = actual_seq_lengths, 1  # the kernel sums them, each clipped to [0, T] (ConvVarlenBuildKey)
        else:  # prefix sums on the device, no sync; a negative length counts as 0
            cu = torch.nn.functional.pad(_prefix_sums(actual_seq_lengths.clamp(0, T), T, key.meta_lengths), (1, 0))
        B = cu.shape[0] - 1 + scan
        pool, copied = launch.pool_view(conv_state)
        init = (has_initial_state.contiguous().view(torch.uint8) if has_initial_state is not None
                else launch.dummy(dev, torch.uint8))
        top = 1 << (B.bit_length() - 1) if B > 0 else 0
        program = one_fn if B == 1 else few_fn if B <= few else fn
        program(xv, pool, launch.weight_flat(weight),
                bias.contiguous() if bias is not None else launch.dummy(dev, launch.dtype), cu,
                conv_state_indices.contiguous(), init, out, top, top.bit_length(), scan)
        if copied:
            conv_state.copy_(pool.view(conv_state.shape))
        return out

    return run


class ConvLauncher:
    """The compiled kernels of one build key and ``run``, the launch path: the op interface's
    arguments followed by ``out`` (allocated when None); writes ``out`` and the pool in place on
    the current CUDA stream and returns ``out``."""

    def __init__(self, key: Any, kernels: tuple[Any, ...], run: Callable[..., Any]) -> None:
        self.key = key
        self.kernels = kernels
        self.run = run

    def source(self, index: int = 0) -> str:
        """The generated CUDA source of one kernel."""
        return self.kernels[index].get_kernel_source()


def build_conv_update(key: ConvUpdateBuildKey) -> ConvLauncher:
    """Compile the decode kernel (once per process) and return its launcher; ValueError with the
    refusal reason if it was not written for ``key``."""
    reason = conv_refusal(key)
    if reason is not None:
        raise ValueError(reason)

    def make() -> ConvLauncher:
        kernel = compile_prim_func(conv_update_program(key), key.arch)
        return ConvLauncher(key, (kernel,), _make_update_run(key, direct_entry(kernel)))

    return cached_build(("conv_update", key), make)


def _compile_varlen(key: ConvVarlenBuildKey) -> Any:
    return compile_prim_func(conv_varlen_program(key), key.arch)


def build_conv_varlen(key: ConvVarlenBuildKey) -> ConvLauncher:
    """Compile the varlen kernel (once per process; with the key's one- and few-sequence programs beside
    it, concurrently) and return its launcher; ValueError with the refusal reason."""
    reason = conv_refusal(key)
    if reason is not None:
        raise ValueError(reason)

    batch, one, few = batch_key(key), one_sequence_key(key), few_sequences_key(key)
    keys = list(dict.fromkeys(k for k in (batch, one, few) if k is not None))  # each program compiled once

    def make() -> ConvLauncher:
        kernels = compile_many([functools.partial(_compile_varlen, k) for k in keys])
        failed = next((k for k in kernels if isinstance(k, BaseException)), None)
        if failed is not None:
            raise failed
        entry = {k: direct_entry(kernel) for k, kernel in zip(keys, kernels)}
        return ConvLauncher(key, tuple(kernels), _make_varlen_run(
            key, entry[batch], None if one is None else entry[one], None if few is None else entry[few]))

    return cached_build(("conv_varlen", key), make)
