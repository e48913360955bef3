"""The attention decode programs without TileLang's bounds checks (``DecodeSchedule.unchecked_index``)
on the GPU (skips without one): every contiguous schedule the rule or a sweep can pick, run
beside the same schedule with the checks, must write the same bits (the output and every slot
of both caches), and the output must stay within the conformance tolerance of float64. The
batches are those of ``test_attention_gpu.py``: lengths either side of the tiles with padding
rows, a batch wide enough for one split (the split program writes the output), one long
sequence split many ways, and lengths below -1; NaN in every cache slot no sequence reads.
Compiles only its own kernels, so a device run of the unchecked cases is short. (That a paged key
pinning it is refused: test_attention_decode_plan.py.)"""

from __future__ import annotations

import dataclasses

import pytest

from tileops_cuda.kernels.attention_decode import (
    COMBINES, DecodeBuildKey, DecodeSchedule, build_attention_decode, decode_refusal,
)

from attention_cases import build_key_of, compare_with_reference
from decode_cases import decode_batch, decode_reference, poison_unread

_ARGS = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")
#: The contiguous schedules of test_attention_gpu.py's rule cases (pipeline depth, combine, split count).
_SCHEDULES = [DecodeSchedule(stages=st, combine=c, splits=sp) for st in (2, 3) for c in COMBINES for sp in (None, 4)]
#: (cache_seqlens, capacity or None for the longest + 1).
_BATCHES = {"ragged": ([0, 63, -1, 64, 65, 127, 1, 300, -1, 128], None), "one-split": ([150, -1, 7, 0] * 20, 256),
            "long": ([20000], 32768), "negative": ([-5, 12, -1, 64, -100], None)}


def _key(inputs, arch: str, schedule: DecodeSchedule) -> DecodeBuildKey:
    return dataclasses.replace(build_key_of(DecodeBuildKey, inputs, "cache_seqlens", "block_table", arch),
                               schedule=schedule)


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


@pytest.fixture(scope="module", autouse=True)
def prebuilt(arch):
    """This module's kernels (each schedule with and without the checks), compiled concurrently."""
    from tileops_cuda.kernels._common import compile_many

    keys = [DecodeBuildKey("bfloat16", 16, 2, 256, arch=arch, schedule=dataclasses.replace(s, unchecked_index=u))
            for s in _SCHEDULES for u in (False, True)]
    compile_many([lambda k=k: build_attention_decode(k) for k in keys])


def _run(inputs, key: DecodeBuildKey):
    """``(out, key_cache, value_cache)`` of one call on copies of the caches, as 16-bit integers."""
    import torch

    copy = dict(inputs, key_cache=inputs["key_cache"].clone(), value_cache=inputs["value_cache"].clone())
    out = torch.full_like(copy["query"], float("nan"))
    build_attention_decode(key).run(*[copy.get(n) for n in _ARGS], None, out)
    torch.cuda.synchronize()
    return tuple(t.view(torch.int16) for t in (out, copy["key_cache"], copy["value_cache"]))


@pytest.mark.parametrize("batch", list(_BATCHES))
@pytest.mark.parametrize("schedule", _SCHEDULES, ids=[f"{s.stages}st-{s.combine}-{s.splits}sp" for s in _SCHEDULES])
def test_an_unchecked_schedule_writes_the_checked_ones_bits(schedule, batch, arch, cuda_device, gen):
    import torch

    lengths, capacity = _BATCHES[batch]
    inputs = decode_batch(cuda_device[0], gen, lengths, capacity=capacity)
    poison_unread(inputs)
    checked = _run(inputs, _key(inputs, arch, schedule))
    unchecked_key = _key(inputs, arch, dataclasses.replace(schedule, unchecked_index=True))
    unchecked = _run(inputs, unchecked_key)
    for name, want, got in zip(("out", "key_cache", "value_cache"), checked, unchecked):
        assert torch.equal(want, got), f"the unchecked program's {name} differs"
    compare_with_reference(lambda: build_attention_decode(unchecked_key), decode_refusal(unchecked_key),
                           decode_reference, _ARGS, inputs, None)

