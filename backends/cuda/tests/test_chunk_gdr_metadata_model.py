"""The chunked prefill's metadata program, modelled step by step in Python, reads cu_seqlens as the
reference does (``clipped_bounds``), on the CPU (no GPU needed; ``test_chunk_gdr_gpu.py`` checks the
kernels).

The model transcribes ``chunk_gdr_meta_program``: blocks of ``META_THREADS`` entries, each entry
clipped into ``[0, T]`` (Python integers: clipped before any narrowing, as the program clips in the
entry's own dtype), a warp-shuffle max-scan and a warp-shuffle sum-scan per block (``shfl_up``
returns a lane's own value below its offset), the running maximum and total carried between
blocks, then the zeroing loop over the uncovered rows. The programs after it are modelled where
they read that metadata: ``_lookup_macro``'s binary search (the wy and output programs' chunk ->
rows) and the state program's walk and final write. On random garbage (past T, negative,
decreasing, past int32 and int64 ranges) every token is then written exactly once, by a chunk of
the sequence ``clipped_bounds`` gives it or by the zeroing, and no chunk index reaches past the
grids' bound.
"""

from __future__ import annotations

import random
from collections import Counter
from itertools import accumulate

import pytest

from tileops_cpu_ref.rgdr import clipped_bounds
from tileops_cuda.kernels import chunk_gdr
from tileops_cuda.kernels.chunk_gdr_program import CHUNK, META_THREADS

#: The heads of the model: output vectors a row (NV = 2 heads of DV = 64 bf16, 8 to a 16-byte vector).
_KEY = chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 1, 2, 64, 64)
_ROW_VECTORS = 2 * 64 // 8


def _block_scan(values: list[int], combine) -> tuple[list[int], list[int]]:
    """``block_scan_macro`` (and its max twin) over one block: ``(inclusive scan, each warp's total)``."""
    v = list(values)
    for off in range(5):  # within each warp, every lane at once
        step = 1 << off
        up = [v[t - step] if t % 32 >= step else v[t] for t in range(len(v))]
        v = [combine(v[t], up[t]) if t % 32 >= step else v[t] for t in range(len(v))]
    totals = [v[w * 32 + 31] for w in range(len(v) // 32)]
    return [_fold(v[t], totals[: t // 32], combine) for t in range(len(v))], totals


def _fold(value: int, more: list[int], combine) -> int:
    for m in more:
        value = combine(value, m)
    return value


def meta_model(cu_seqlens: list[int], T: int, threads: int = META_THREADS) -> tuple[list[int], list[int], Counter]:
    """``(cu, cc, zero vector writes by (token, vector))`` as the metadata program writes them."""
    BM = len(cu_seqlens)

    def clip(x: int) -> int:
        return min(max(x, 0), T)

    cu, cc = [None] * BM, [None] * BM
    cc[0] = 0
    carry = high = 0
    for r in range(-(-BM // threads)):
        b0 = r * threads
        ends = [clip(cu_seqlens[b0 + t]) if b0 + t < BM else 0 for t in range(threads)]
        scanned, wmax = _block_scan(ends, max)
        start = [max(s, high) for s in scanned]
        part = [0] * threads
        for t in range(threads):
            b = b0 + t
            if b < BM:
                cu[b] = start[t]
            if b + 1 < BM:
                part[t] = (max(clip(cu_seqlens[b + 1]), start[t]) - start[t] + CHUNK - 1) // CHUNK
        summed, wsum = _block_scan(part, lambda a, c: a + c)
        for t in range(threads):
            if b0 + t + 1 < BM:
                cc[b0 + t + 1] = carry + summed[t]
        high = max(high, *wmax)
        carry += sum(wsum)
    zeros: Counter = Counter()
    head = clip(cu_seqlens[0])
    total = (head + T - high) * _ROW_VECTORS
    for e in range(-(-total // threads)):
        for tid in range(threads):
            idx = e * threads + tid
            if idx < total:
                row = idx // _ROW_VECTORS
                token = row if row < head else row - head + high
                assert 0 <= token < T, token
                zeros[token, idx % _ROW_VECTORS] += 1
    return cu, cc, zeros


def lookup(cu: list[int], cc: list[int], bc: int) -> tuple[int, int, int]:
    """``_lookup_macro``: chunk ``bc`` -> ``(sequence, first token, valid rows)``, with the launcher's ``top``."""
    NB = len(cu) - 1
    top = 1 << (NB.bit_length() - 1)
    b, step = 0, top
    for _ in range(top.bit_length()):
        if b + step < NB and cc[b + step] <= bc:
            b += step
        step //= 2
    t0 = cu[b] + (bc - cc[b]) * CHUNK
    n = max(min(cu[b + 1] - t0, CHUNK), 0) if bc < cc[NB] else 0
    return b, (t0 if n > 0 else 0), n


def _garbage(B: int, T: int, rng: random.Random) -> list[int]:
    """B + 1 entries as unchecked metadata may hold them: valid runs, past T, negative, decreasing,
    past int32 (and int64's range, which an int64 clip handles the same), mixed."""
    valid = sorted(rng.randrange(T + 1) for _ in range(B + 1))
    valid[0], valid[-1] = 0, T
    out = []
    for b in range(B + 1):
        kind = rng.randrange(6)
        out.append(valid[b] if kind < 2 else rng.randrange(-T, 2 * T + 1) if kind < 4 else
                   rng.choice([2**32 + rng.randrange(T), -(2**32) + rng.randrange(T), 2**62, -(2**62), T]))
    return out


_SIZES = [(1, 50), (3, 500), (31, 900), (255, 3000), (256, 3000), (257, 4000), (700, 9000)]


@pytest.mark.parametrize("B,T", _SIZES)
def test_the_program_reads_unchecked_cu_seqlens_as_clipped_bounds_does(B, T):
    """``cu[b]`` is sequence b's start and ``cu[b + 1] - cu[b]`` its length under the reference's rule;
    the chunk table counts each clipped length's chunks and stays inside the grids' bound."""
    rng = random.Random(B * 7919 + T)
    for _ in range(3):
        meta = _garbage(B, T, rng)
        cu, cc, _ = meta_model(meta, T)
        starts, lengths = clipped_bounds(meta, "cu_seqlens", T)
        assert cu[:-1] == starts and [e - s for s, e in zip(cu, cu[1:])] == lengths
        assert cu == list(accumulate((min(max(x, 0), T) for x in meta), max))
        assert cc == [0, *accumulate(-(-n // CHUNK) for n in lengths)]
        assert cc[-1] <= chunk_gdr._check_int32(T, B, 1, _KEY)  # the grids' chunk bound


@pytest.mark.parametrize("B,T", _SIZES)
def test_every_token_is_written_once_by_a_chunk_of_its_clipped_sequence_or_zeroed(B, T):
    """The output program stores rows ``[t0, t0 + n)`` of each chunk the lookup gives; with the metadata
    program's zeros every token is written exactly once, each inside the span of the sequence whose
    chunk wrote it. The state walk reads chunks ``cc[b] .. cc[b + 1]``, all inside the grid's bound."""
    rng = random.Random(B * 104729 + T)
    NC = chunk_gdr._check_int32(T, B, 1, _KEY)
    for _ in range(2):
        meta = _garbage(B, T, rng)
        cu, cc, zeros = meta_model(meta, T)
        starts, lengths = clipped_bounds(meta, "cu_seqlens", T)
        written = Counter()
        for bc in range(NC):
            b, t0, n = lookup(cu, cc, bc)
            assert starts[b] <= t0 and t0 + n <= starts[b] + lengths[b] or n == 0, (bc, b, t0, n)
            written.update(range(t0, t0 + n))
        for t in range(T):
            vectors = [zeros[t, v] for v in range(_ROW_VECTORS)]
            assert (written[t], vectors) in ((1, [0] * _ROW_VECTORS), (0, [1] * _ROW_VECTORS)), (t, written[t], vectors)
        assert sum(zeros.values()) == (T - sum(lengths)) * _ROW_VECTORS
        for b in range(B):
            assert 0 <= cc[b] <= cc[b + 1] <= NC


def test_valid_cu_seqlens_are_read_as_written_and_nothing_is_zeroed():
    rng = random.Random(5)
    for B in (1, 2, 255, 256, 600):
        lengths = [rng.choice([0, 1, 63, 64, 65, rng.randrange(400)]) for _ in range(B)]
        meta = [0, *accumulate(lengths)]
        cu, cc, zeros = meta_model(meta, meta[-1])
        assert cu == meta and not zeros
        assert cc == [0, *accumulate(-(-n // CHUNK) for n in lengths)]


def test_a_sequence_writes_its_slot_exactly_where_the_reference_does():
    """The state program writes slot ``s_b`` where ``0 <= s_b < S`` and ``cu[b + 1] > cu[b]``; the CPU
    reference, run on the same unchecked cu_seqlens, changes exactly those slots: an empty sequence
    (under the clipped rule) with a valid slot and an initial state reads nothing back into the pool."""
    torch = pytest.importorskip("torch")
    from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule

    rng = random.Random(11)
    gen = torch.Generator().manual_seed(11)
    for _ in range(6):
        B, T = rng.randrange(1, 9), rng.randrange(1, 200)
        meta = _garbage(B, T, rng)
        cu, _, _ = meta_model(meta, T)
        slots = rng.sample(range(B + 3), B)
        slots[rng.randrange(B)] = -1
        state = torch.randn(B + 3, 2, 4, 4, generator=gen, dtype=torch.float64)
        pool = state.clone()
        chunk_gated_delta_rule(torch.randn(T, 1, 4, generator=gen, dtype=torch.float64),
                               torch.randn(T, 1, 4, generator=gen, dtype=torch.float64),
                               torch.randn(T, 2, 4, generator=gen, dtype=torch.float64),
                               -torch.rand(T, 2, generator=gen, dtype=torch.float64),
                               torch.rand(T, 2, generator=gen, dtype=torch.float64), pool,
                               torch.tensor(meta, dtype=torch.int64), torch.tensor(slots),
                               torch.ones(B, dtype=torch.bool), compute_dtype=torch.float64)
        changed = {s for s in range(B + 3) if not torch.equal(pool[s], state[s])}
        assert changed == {slots[b] for b in range(B) if 0 <= slots[b] and cu[b + 1] > cu[b]}, (meta, slots)
