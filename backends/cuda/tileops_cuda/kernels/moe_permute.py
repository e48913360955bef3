"""MoE permute as three TileLang kernels: token copies grouped by expert, stable within an
expert (``manifest/moe.yaml``: copy ``f = t * K + k`` goes to row ``permuted_index[t, k]``).

A copy's row is ``expert_offsets[e] + (copies of e in earlier chunks) + (copies of e before it
in its chunk)``, with the flat copies cut into chunks of C:

1. ``rank`` (a program per chunk): the chunk's ids in shared memory; each thread counts the
   equal ids before its own among the chunk's copies (a broadcast read per step: no bank
   conflicts; ``min(C, N - chunk start)`` steps, so a decode step's 8 copies cost 8, not C) and
   the chunk's per-expert counts are written as one row of a ``[chunks, E]`` workspace;
2. ``offsets`` (one program, a thread per expert): each expert's column of counts becomes its
   exclusive prefix over chunks (in place, eight loads in flight), and the experts' totals an
   inclusive scan in shared memory: ``expert_offsets``;
3. ``scatter`` (a program per BR copies): each copy's row, written to ``permuted_index``, then
   the token's row copied there, 16-byte accesses. hidden_states is read as strided rows
   (``_row_views.row_view``): every copy reads its token's row once, every output row is
   written once, which is the spec's bytes floor.

Nothing here synchronises with the host: without the op's contents check
(``TILEOPS_CHECK_CONTENTS=1``, which names an id outside ``[0, E)`` before anything runs), an
out-of-range copy is left unplaced (its ``permuted_index`` is -1 and ``expert_offsets[E]``
counts only the placed rows); an int64 id is tested in its own dtype, so ``2**32 + e`` is out of
range, not expert ``e``. Specialised on the two dtypes, H, K and E; the token count is
dynamic.
"""

# No `from __future__ import annotations`: TileLang evaluates prim_func annotations.

from dataclasses import dataclass
from typing import Any

from ._common import (ELEM_BYTES, arch_refusal, cached_build, compile_prim_func, dependent_launch,
                      dependent_launch_refusal, direct_entry)
from ._index_metadata import narrowed_index
from ._workspace import workspace_allocator

__all__ = ["MoEPermuteBuildKey", "build_moe_permute", "expert_threads", "moe_permute_refusal"]

_DTYPES = ("float16", "bfloat16", "float32")
_ID_DTYPES = ("int32", "int64")
_NAME = "MoEPermute TileLang kernel"
#: Copies per chunk of the ranking kernel (its threads) and the most experts the offsets
#: kernel's one program holds (a thread each).
CHUNK = 512
MAX_EXPERTS = 1024
_LOADS_IN_FLIGHT = 8
#: The registered keys' ``one_launch_copies``: calls of up to this many copies (a decode step's 16
#: tokens at top-8) run the one-launch program. Measured on the H200 (2026-12-04f, ``moe_permute_bench.py``,
#: CUDA graphs, bit-equal outputs): 1.60-1.92x the three kernels at every decode size up to 128 copies
#: (Qwen3.5-35B B=1: 4.95 -> 2.69 µs; Qwen3-Next B=1: 5.79 -> 3.01 µs).
REGISTERED_ONE_LAUNCH_COPIES = 128


@dataclass(frozen=True)
class MoEPermuteBuildKey:
    """Build identity: the rows' dtype, the ids' dtype, H, K (copies per token) and E."""

    dtype: str
    ids_dtype: str
    hidden: int
    top_k: int
    experts: int
    arch: str = "sm_90"
    #: Calls of at most this many copies (N = T·K) run :func:`_one_launch_program` instead of the
    #: three kernels; 0: never. The registered keys set :data:`REGISTERED_ONE_LAUNCH_COPIES`.
    one_launch_copies: int = 0
    #: Launched as a programmatic dependent of the stream's previous kernel (``_common.dependent_launch``:
    #: the same bits); the registered keys set it (``launch_policy``).
    dependent_launch: bool = False


def _vec(dtype: str) -> int:
    return 16 // ELEM_BYTES[dtype]


def _scatter_plan(key: MoEPermuteBuildKey) -> tuple[int, int, int]:
    """``(threads, copies per program, padded H)``: about eight 16-byte vectors per thread."""
    vec = _vec(key.dtype)
    threads = 128
    while threads > 32 and threads * vec > key.hidden:
        threads //= 2
    unit = threads * vec
    padded = -(-key.hidden // unit) * unit
    rows = max(1, min(8, 8 * unit // padded))
    return threads, rows, padded


def expert_threads(experts: int) -> int:
    """A thread per expert, a power of two from 32 to 1024 (what TileLang's block scan takes)."""
    threads = 32
    while threads < experts:
        threads *= 2
    return threads


def moe_permute_refusal(key: MoEPermuteBuildKey) -> str | None:
    """Why this kernel cannot serve ``key`` (with the fix), or None."""
    reason = dependent_launch_refusal(key.dependent_launch, _NAME, key.arch, "drop dependent_launch")
    if reason is not None:
        return reason
    if key.dtype not in _DTYPES:
        return f"{_NAME}: dtype {key.dtype} is not one of {_DTYPES}; use the reference"
    if key.ids_dtype not in _ID_DTYPES:
        return f"{_NAME}: ids dtype {key.ids_dtype} is not one of {_ID_DTYPES}; use the reference"
    if key.hidden % _vec(key.dtype):
        return f"{_NAME}: H={key.hidden} must be a multiple of {_vec(key.dtype)} (16-byte vectors); use the reference"
    if not 1 <= key.experts <= MAX_EXPERTS:
        return f"{_NAME}: num_experts={key.experts} must lie in [1, {MAX_EXPERTS}] (a thread each); use the reference"
    if key.top_k < 1:
        return f"{_NAME}: K={key.top_k} must be at least 1; use the reference"
    if not 0 <= key.one_launch_copies <= CHUNK:
        return (f"{_NAME}: one_launch_copies={key.one_launch_copies} must lie in [0, {CHUNK}] (the copies one "
                "program holds); use 0")
    return arch_refusal(_NAME, key.arch)


def _rank_program(key: MoEPermuteBuildKey):
    import tilelang.language as T

    E, C, i32 = key.experts, CHUNK, "int32"
    N, NB = T.dynamic("N"), T.dynamic("NB")

    @T.prim_func
    def moe_permute_rank(ids: T.Tensor((N,), key.ids_dtype), ranks: T.Tensor((N,), i32),
                         counts: T.Tensor((NB, E), i32)):
        with T.Kernel(NB, threads=C) as bx:
            dependent_launch(key.dependent_launch)
            tx = T.get_thread_binding()
            chunk = T.alloc_shared((C,), i32)
            per_expert = T.alloc_shared((E,), i32)
            before = T.alloc_var(i32, init=0)
            after = T.alloc_var(i32, init=0)
            f = bx * C + tx
            chunk[tx] = T.if_then_else(f < N, narrowed_index(ids[T.min(f, N - 1)], E), -1)
            for e in T.Parallel(E):
                per_expert[e] = 0
            T.sync_threads()
            mine = chunk[tx]
            # Only the chunk's copies (a decode step's chunk holds B·K of its C slots; the rest are
            # -1, equal to no placed id): the loop is the kernel's time at small N.
            for j in T.serial(T.min(C, N - bx * C)):
                if chunk[j] == mine:
                    if j < tx:
                        before = before + 1
                    if j > tx:
                        after = after + 1
            if f < N:
                ranks[f] = before
                # The chunk's last copy of an expert knows the chunk's count of it.
                if after == 0 and mine >= 0 and mine < E:
                    per_expert[mine] = before + 1
            T.sync_threads()
            for e in T.Parallel(E):
                counts[bx, e] = per_expert[e]

    return moe_permute_rank


def _offsets_program(key: MoEPermuteBuildKey):
    import tilelang.language as T

    E, i32, U = key.experts, "int32", _LOADS_IN_FLIGHT
    TE = expert_threads(E)
    NB = T.dynamic("NB")

    @T.prim_func
    def moe_permute_offsets(counts: T.Tensor((NB, E), i32), expert_offsets: T.Tensor((E + 1,), i32)):
        with T.Kernel(1, threads=TE):
            dependent_launch(key.dependent_launch)
            e = T.get_thread_binding()
            totals = T.alloc_shared((TE,), i32)
            loaded = T.alloc_local((U,), i32)
            running = T.alloc_var(i32, init=0)
            for b0 in T.serial(T.ceildiv(NB, U)):
                for u in T.unroll(U):
                    loaded[u] = T.if_then_else(e < E and b0 * U + u < NB, counts[b0 * U + u, T.min(e, E - 1)], 0)
                for u in T.unroll(U):
                    if e < E and b0 * U + u < NB:
                        counts[b0 * U + u, e] = running  # in place: the prefix of earlier chunks
                    running = running + loaded[u]
            totals[e] = running
            T.sync_threads()
            T.cumsum(src=totals, dim=0)
            T.sync_threads()
            if e < E:
                expert_offsets[e + 1] = totals[e]
            if e == 0:
                expert_offsets[0] = 0

    return moe_permute_offsets


def _scatter_program(key: MoEPermuteBuildKey):
    import tilelang.language as T

    H, K, E, C, dt, i32, vec = key.hidden, key.top_k, key.experts, CHUNK, key.dtype, "int32", _vec(key.dtype)
    threads, BR, HP = _scatter_plan(key)
    Tn, N, NB, SX = T.dynamic("T"), T.dynamic("N"), T.dynamic("NB"), T.dynamic("SX")

    @T.prim_func
    def moe_permute_scatter(hidden_states: T.StridedTensor((Tn, H), (SX, 1), dt), ids: T.Tensor((N,), key.ids_dtype),
                            ranks: T.Tensor((N,), i32), prefix: T.Tensor((NB, E), i32),
                            expert_offsets: T.Tensor((E + 1,), i32), permuted: T.Tensor((N, H), dt),
                            permuted_index: T.Tensor((N,), i32)):
        # The launcher passes only row strides that are whole vectors (_row_views.readable).
        T.assume(SX % vec == 0)
        with T.Kernel(T.ceildiv(N, BR), threads=threads) as bx:
            dependent_launch(key.dependent_launch)
            dest = T.alloc_shared((BR,), i32)
            for r in T.Parallel(BR):
                f = bx * BR + r
                e = narrowed_index(ids[T.min(f, N - 1)], E)
                placed = f < N and e >= 0 and e < E
                row = T.if_then_else(placed, expert_offsets[T.max(T.min(e, E - 1), 0)]
                                     + prefix[f // C, T.max(T.min(e, E - 1), 0)] + ranks[T.min(f, N - 1)], -1)
                dest[r] = row
                if f < N:
                    permuted_index[f] = row
            for r, j in T.Parallel(BR, HP):
                if dest[r] >= 0 and j < H:
                    permuted[dest[r], j] = hidden_states[(bx * BR + r) // K, j]

    return moe_permute_scatter


def _one_launch_program(key: MoEPermuteBuildKey):
    """A decode step's permute in one launch, for N at most ``key.one_launch_copies`` (MC) copies.

    Why: at a decode step N is a few dozen copies, and the three kernels' launches and their gaps
    are the op's time (about 3.75 µs a layer in the Qwen3.5-MoE step). Every program (``BR`` copies
    each, as the scatter's) holds all N ids in shared memory and computes from them what the first
    two kernels make: each expert's count (a thread an expert, a loop over the ids), the experts'
    offsets (the block scan of the offsets kernel), and each of its copies' rank (the equal ids
    before it). So the rows, ``permuted_index`` and ``expert_offsets`` (written by program 0) are the
    three kernels' exactly; then its copies' rows are copied as the scatter copies them. The loops
    run over N, so the program is for small N only."""
    import tilelang.language as T

    H, K, E, dt, i32, vec = key.hidden, key.top_k, key.experts, key.dtype, "int32", _vec(key.dtype)
    MC, TE = key.one_launch_copies, expert_threads(key.experts)
    _, BR, HP = _scatter_plan(key)
    Tn, N, SX = T.dynamic("T"), T.dynamic("N"), T.dynamic("SX")

    @T.prim_func
    def moe_permute_one_launch(hidden_states: T.StridedTensor((Tn, H), (SX, 1), dt), ids: T.Tensor((N,), key.ids_dtype),
                               permuted: T.Tensor((N, H), dt), expert_offsets: T.Tensor((E + 1,), i32),
                               permuted_index: T.Tensor((N,), i32)):
        T.assume(SX % vec == 0)  # whole-vector row strides only (_row_views.readable)
        with T.Kernel(T.ceildiv(N, BR), threads=TE) as bx:
            dependent_launch(key.dependent_launch)
            tx = T.get_thread_binding()
            ids_s = T.alloc_shared((MC,), i32)
            totals = T.alloc_shared((TE,), i32)
            counts = T.alloc_shared((TE,), i32)
            dest = T.alloc_shared((BR,), i32)
            count = T.alloc_var(i32, init=0)
            rank = T.alloc_var(i32, init=0)
            row = T.alloc_var(i32, init=-1)
            for i in T.serial(T.ceildiv(MC, TE)):
                if i * TE + tx < MC:
                    f = i * TE + tx
                    ids_s[f] = T.if_then_else(f < N, narrowed_index(ids[T.min(f, N - 1)], E), -1)
            T.sync_threads()
            for j in T.serial(N):  # a thread an expert: its count (an id outside [0, E) counts nowhere)
                if ids_s[j] == tx:
                    count = count + 1
            totals[tx] = count
            counts[tx] = count
            T.sync_threads()
            T.cumsum(src=totals, dim=0)  # inclusive: totals[e] = copies of experts <= e
            T.sync_threads()
            if bx == 0:
                if tx < E:
                    expert_offsets[tx + 1] = totals[tx]
                if tx == 0:
                    expert_offsets[0] = 0
            f = bx * BR + tx
            if tx < BR and f < N:
                e = ids_s[f]
                for j in T.serial(f - bx * BR + bx * BR):
                    if ids_s[j] == e:
                        rank = rank + 1
                c = T.max(T.min(e, E - 1), 0)
                if e >= 0 and e < E:  # e's first row (its inclusive total less its count), then the rank
                    row = totals[c] - counts[c] + rank
                permuted_index[f] = row
            if tx < BR:
                dest[tx] = row
            T.sync_threads()
            for r, j in T.Parallel(BR, HP):
                if dest[r] >= 0 and j < H:
                    permuted[dest[r], j] = hidden_states[(bx * BR + r) // K, j]

    return moe_permute_one_launch


class MoEPermuteLauncher:
    """The compiled kernels (``rank``, ``offsets``, ``scatter`` and, where the key asks, the
    one-launch program: ``JITKernel`` objects and their direct entries) and ``run``, the
    interface-shaped launch function."""

    def __init__(self, key: MoEPermuteBuildKey, rank: Any, offsets: Any, scatter: Any, one: Any = None) -> None:
        self.key = key
        self.kernels = (rank, offsets, scatter) + ((one,) if one is not None else ())
        self.run = _make_run(key, direct_entry(rank), direct_entry(offsets), direct_entry(scatter),
                             None if one is None else direct_entry(one))


def _make_run(key: MoEPermuteBuildKey, rank: Any, offsets: Any, scatter: Any, one: Any = None) -> Any:
    """The launch function: calls of at most ``key.one_launch_copies`` copies run ``one`` (the
    one-launch program); the others one int32 workspace (ranks, then the ``[chunks, E]`` counts
    that become prefixes), then the three kernels on the current stream."""
    import torch

    from ._row_views import row_view

    H, K, E = key.hidden, key.top_k, key.experts
    one_launch = key.one_launch_copies if one is not None else 0
    empty = workspace_allocator()

    def moe_permute(hidden_states: Any, topk_ids: Any, num_experts: int, permuted: Any = None,
                    expert_offsets: Any = None, permuted_index: Any = None) -> Any:
        T = topk_ids.shape[0]
        dev = hidden_states.device
        if permuted is None:
            permuted = torch.empty((T * K, H), dtype=hidden_states.dtype, device=dev)
        if expert_offsets is None:
            expert_offsets = torch.empty(E + 1, dtype=torch.int32, device=dev)
        if permuted_index is None:
            permuted_index = torch.empty((T, K), dtype=torch.int32, device=dev)
        N = T * K
        if N == 0:
            expert_offsets.zero_()
            return permuted, expert_offsets, permuted_index
        if N <= one_launch:
            one(row_view(hidden_states, H)[0], topk_ids.contiguous().view(-1), permuted, expert_offsets,
                permuted_index.view(-1))
            return permuted, expert_offsets, permuted_index
        chunks = -(-N // CHUNK)
        work = empty((N + chunks * E,), torch.int32, dev)
        ranks, counts = work[:N], work[N:].view(chunks, E)
        ids = topk_ids.contiguous().view(-1)
        rank(ids, ranks, counts)
        offsets(counts, expert_offsets)
        scatter(row_view(hidden_states, H)[0], ids, ranks, counts, expert_offsets, permuted,
                permuted_index.view(-1))
        return permuted, expert_offsets, permuted_index

    return moe_permute


def build_moe_permute(key: MoEPermuteBuildKey) -> MoEPermuteLauncher:
    """Compile the three kernels (and the one-launch program where the key asks) once per process;
    ValueError with the refusal reason."""
    reason = moe_permute_refusal(key)
    if reason is not None:
        raise ValueError(reason)

    programs: tuple[Any, ...] = (_rank_program, _offsets_program, _scatter_program)
    programs += (_one_launch_program,) if key.one_launch_copies else ()

    def build() -> MoEPermuteLauncher:
        return MoEPermuteLauncher(key, *(compile_prim_func(program(key), key.arch) for program in programs))

    return cached_build(("moe_permute", key), build)
