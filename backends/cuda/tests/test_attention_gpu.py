"""The attention decode TileLang kernels against a float64 reference on the GPU (skips without
one; the prefill's are ``test_attention_prefill_gpu.py``).

Every AttentionDecodeFwdOp workload row the kernel serves (up to 2^18 cached tokens a
row; the larger rows are the bench's) and targeted batches run through the launcher with a
NaN-poisoned ``out`` and NaN in every cache slot a sequence does not read (a slot the step
writes included, so a read before the write shows). Outputs are compared at the conformance
suite's tolerances (float16 2e-3, bfloat16 1.6e-2, relative); the caches bit for bit (the written
slots hold copies of the inputs, every other slot keeps its bits). The reference is float64
on the device: each live sequence's positions ``0 .. n`` gathered, the new key/value at ``n``.
"""

from __future__ import annotations

import dataclasses

import pytest

from tileops_cuda.kernels.attention_decode import (
    COMBINES, TILE_READS, DecodeBuildKey, DecodeSchedule, build_attention_decode, decode_refusal,
)

from attention_cases import build_key_of, compare_with_reference, workload_instance, workload_rows
from decode_cases import decode_batch, decode_reference, poison_unread

DECODE = "AttentionDecodeFwdOp"
_MAX_TOKENS = 1 << 18  # B · context above this: the bench's rows (float64 copies of the cache)


def _key(inputs, arch: str) -> DecodeBuildKey:
    return build_key_of(DecodeBuildKey, inputs, "cache_seqlens", "block_table", arch)


_DECODE_ARGS = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")


def _check(inputs, scale, arch: str, schedule: DecodeSchedule | None = None) -> None:
    key = dataclasses.replace(_key(inputs, arch), schedule=schedule)
    if decode_refusal(key) is None:
        poison_unread(inputs)
    compare_with_reference(lambda: build_attention_decode(key), decode_refusal(key), decode_reference, _DECODE_ARGS, inputs, scale)


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


def _keys_used(arch: str) -> dict:
    """Every (build key, block sizes) this module runs, so they compile in parallel up front."""
    from tileops_core import load_manifest

    qwen = dict(num_q_heads=16, num_kv_heads=2, head_dim=256, arch=arch)
    used: dict = {DecodeBuildKey("bfloat16", **qwen): set(),
                  DecodeBuildKey("bfloat16", **qwen, paged=True, table_dtype="int32"): {16, 1, 128}}
    for NQ, NKV, dtype in _GROUPS:
        used[DecodeBuildKey(dtype, NQ, NKV, 128, arch=arch)] = set()
    for block, schedule in _SCHEDULE_CASES:
        key = DecodeBuildKey("bfloat16", **qwen, paged=block is not None,
                             table_dtype=None if block is None else "int32",
                             schedule=schedule)
        used.setdefault(key, set()).update({block} if block else set())
    for row in load_manifest()[DECODE].workloads:
        gen, v = row.values["generator"], row.values
        if int(gen["B"]) * int(gen["context"]) > _MAX_TOKENS:
            continue
        for dtype in v["dtypes"]:
            paged = "block_size" in gen
            key = DecodeBuildKey(dtype, int(v["NQ"]), int(v["NKV"]), int(v["D"]), paged,
                                 v.get("cache_seqlens_dtype", "int32"), v.get("block_table_dtype", "int32") if paged
                                 else None, arch)
            if decode_refusal(key) is None:
                used.setdefault(key, set()).update({int(gen["block_size"])} if paged else set())
    return used


@pytest.fixture(scope="module", autouse=True)
def prebuilt(arch, prebuild_all):
    """Compile every kernel the module needs concurrently (nvcc runs in parallel; a failure is
    left for the test that needs the kernel to report). Not under xdist (``prebuild_all``)."""
    if not prebuild_all:
        return
    from tileops_cuda.kernels._common import compile_many

    def thunk(key, blocks):
        def build():
            launcher = build_attention_decode(key)
            compile_many([lambda b=b: launcher.prepare(b) for b in blocks])
        return build

    compile_many([thunk(key, blocks) for key, blocks in _keys_used(arch).items()])


@pytest.fixture
def seed(cuda_device, gen):
    import torch

    return int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))


@pytest.mark.parametrize("row_index,case", workload_rows(DECODE, _MAX_TOKENS))
def test_every_decode_workload_row_matches_the_float64_reference(row_index, case, arch, cuda_device, seed):
    inputs, scale = workload_instance(DECODE, row_index, case, cuda_device[0], seed)
    _check(inputs, scale, arch)


#: Empty caches, lengths either side of the 64-position tiles, padding sequences.
_RAGGED = [0, 63, -1, 64, 65, 127, 1, 300, -1, 128]


@pytest.mark.parametrize("block", [None, 16, 1, 128], ids=["contiguous", "paged16", "paged1", "paged128"])
def test_ragged_lengths_tile_edges_and_padding_rows_across_splits(block, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch)



#: Every schedule the rule can pick, on the layouts it changes: the contiguous pipeline's depths and its
#: tiles gathered, paged tiles by block or gathered (16-token blocks, and 48, which no 64-position tile divides),
#: each with either combine; a pinned split count runs the combine on this short batch too.
_SCHEDULE_CASES = ([(None, DecodeSchedule(stages=st, combine=c, splits=sp)) for st in (2, 3) for c in COMBINES
                    for sp in (None, 4)]
                   + [(None, DecodeSchedule(tiles="gather", combine=c, splits=sp)) for c in COMBINES
                      for sp in (None, 4)]
                   + [(block, DecodeSchedule(tiles=t, combine=c, splits=4)) for block in (16, 48)
                      for t in TILE_READS for c in COMBINES])


@pytest.mark.parametrize("block,schedule", _SCHEDULE_CASES,
                         ids=[f"{block or 'contiguous'}-{s.stages}st-{s.tiles}-{s.combine}-{s.splits}sp"
                              for block, s in _SCHEDULE_CASES])
def test_every_schedule_matches_the_reference_on_ragged_lengths(block, schedule, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch, schedule)


@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_a_batch_wide_enough_for_one_split_writes_the_output_directly(block, arch, cuda_device, gen):
    import torch

    lengths = torch.randint(0, 200, (80,), generator=gen, device=cuda_device[0]).tolist()
    lengths[3] = lengths[40] = -1
    _check(decode_batch(cuda_device[0], gen, lengths, block=block, capacity=256), None, arch)


_GROUPS = [(4, 4, "bfloat16"), (8, 1, "float16"), (64, 1, "bfloat16")]


@pytest.mark.parametrize("NQ,NKV,dtype", _GROUPS, ids=["mha-bf16", "gqa8-fp16", "gqa64-bf16"])
@pytest.mark.parametrize("scale", [0.07, -0.05])
def test_head_groups_and_dtypes_with_an_explicit_scale_of_either_sign(NQ, NKV, dtype, scale, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, [5, 77, -1, 200], NQ=NQ, NKV=NKV, D=128, dtype=dtype), scale, arch)


def test_one_long_sequence_is_split_across_the_multiprocessors(arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, [20000], block=16, capacity=32768), None, arch)


def test_decode_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    inputs = decode_batch(cuda_device[0], gen, [10, 500, -1], block=16)
    key = _key(inputs, arch)
    run = build_attention_decode(key).run
    names = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")

    def call(caches, out):
        run(*[caches.get(n, inputs[n]) for n in names], None, out)

    eager = {"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}
    eager_out = torch.full_like(inputs["query"], float("nan"))
    call(eager, eager_out)
    out = torch.full_like(inputs["query"], float("nan"))
    call({"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}, out)  # warm up
    graphed = {"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(graphed, out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out)
    assert torch.equal(graphed["key_cache"], eager["key_cache"]) and torch.equal(graphed["value_cache"],
                                                                               eager["value_cache"])
