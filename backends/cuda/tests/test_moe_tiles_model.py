"""The routed experts' tile-map program, modelled step by step in Python, reads ``expert_offsets`` as the
spec does with contents checks off, on the CPU (no GPU needed; ``test_model_ops_gpu.py`` checks the kernels).

The model transcribes ``moe_grouped_experts._tiles_program``: each expert's entry clipped into ``[0, N]``
(Python integers: clipped before any narrowing, as the program clips in the entry's own dtype), the
max-scan giving its start ``b_e``, its end ``max(clip(expert_offsets[e + 1]), b_e)``, the sum-scan of the
tile counts giving its first slot, ``b_E`` from the block's maximum and the last entry, then the zeroing
of ``[0, clip(expert_offsets[0]))`` and ``[b_E, N)``. (The scans themselves are ``block_scan_macro``'s,
modelled lane by lane in ``test_chunk_gdr_metadata_model.py``.) On random garbage (past N, negative,
decreasing, past int32) the map fits ``tile_slots`` and every row is written exactly once: by a tile of
the expert whose spec range ``[clip(max(expert_offsets[0..e])), clip(max(expert_offsets[0..e + 1])))``
holds it, or by the zeroing.
"""

from __future__ import annotations

import random
from itertools import accumulate

import pytest

from tileops_cuda.kernels.moe_grouped_experts import DECODE_TILING, PREFILL_TILING, tile_slots
from tileops_cuda.kernels.moe_skinny import SKINNY_ROWS


def tiles_model(offsets: list[int], N: int, BM: int) -> tuple[list[tuple[int, int, int]], list[int]]:
    """``(the map's used slots as (expert, first row, row bound), the rows zeroed)`` as the program
    writes them."""
    E = len(offsets) - 1

    def clip(x: int) -> int:
        return min(max(x, 0), N)

    starts = list(accumulate((clip(offsets[e]) for e in range(E)), max))  # the max-scan
    ends = [max(clip(offsets[e + 1]), starts[e]) for e in range(E)]
    counts = [-(-(end - start) // BM) for start, end in zip(starts, ends)]
    slots = list(accumulate(counts))  # the sum-scan, inclusive
    used = slots[-1]
    tail = max(max(starts), clip(offsets[E]))
    tile_map: list[tuple[int, int, int] | None] = [None] * used
    for e in range(E):
        first = slots[e] - counts[e]
        for q in range(counts[e]):
            assert tile_map[first + q] is None, "two tiles in one slot"
            tile_map[first + q] = (e, starts[e] + q * BM, ends[e])
    head = clip(offsets[0])
    zeroed = [row if row < head else row - head + tail for row in range(head + N - tail)]
    return [t for t in tile_map if t is not None], zeroed


def _garbage(E: int, N: int, rng: random.Random) -> list[int]:
    """``E + 1`` entries mixing valid-looking rising ones with negative ones, ones past N and past int32,
    and drops below earlier entries."""
    picks = (lambda: rng.randint(0, N), lambda: rng.randint(-N - 5, -1), lambda: rng.randint(N + 1, 3 * N + 5),
             lambda: 2**32 + rng.randint(-3, N), lambda: -(2**32) + rng.randint(0, N))
    return [rng.choice(picks)() for _ in range(E + 1)]


@pytest.mark.parametrize("block_m", [SKINNY_ROWS, DECODE_TILING.block_m, PREFILL_TILING.block_m])
def test_unchecked_offsets_give_every_row_once_to_its_clipped_expert_or_to_the_zeroing(block_m):
    rng = random.Random()
    for _ in range(300):
        E, N = rng.choice([1, 3, 8, 40]), rng.randint(1, 5 * block_m)
        offsets = _garbage(E, N, rng)
        tile_map, zeroed = tiles_model(offsets, N, block_m)
        assert len(tile_map) <= tile_slots(N, E, block_m), (offsets, N)
        bounds = [min(max(b, 0), N) for b in accumulate(offsets, max)]  # the spec's b_0 .. b_E
        written = list(zeroed)
        for e, first, end in tile_map:
            rows = range(first, min(first + block_m, end))
            assert rows and bounds[e] <= first and end == bounds[e + 1], (offsets, N, e)
            written += rows
        assert sorted(written) == list(range(N)), (offsets, N)
        assert set(zeroed) == set(range(bounds[0])) | set(range(bounds[E], N))


def test_valid_offsets_map_as_written_and_zero_nothing():
    tile_map, zeroed = tiles_model([0, 5, 5, 70, 200], 200, 64)
    assert tile_map == [(0, 0, 5), (2, 5, 70), (2, 69, 70), (3, 70, 200), (3, 134, 200), (3, 198, 200)]
    assert zeroed == []
