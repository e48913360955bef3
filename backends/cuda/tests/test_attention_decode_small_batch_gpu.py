"""The attention decode's small-batch candidates (issue 21) against a float64 reference on the GPU
(skips without one): the light split program (``DecodeSchedule.block_h=16``: one mma row tile,
three programs an SM) and the combine folded into the split launch (``combine="last_program"``),
each alone and together.

As ``test_attention_gpu.py``: a NaN-poisoned ``out``, NaN in every cache slot no sequence reads,
outputs at the conformance suite's tolerances, the caches bit for bit. Beyond it: lengths at the
tile edges and the last slot at split counts up to 256, a padding-only batch (zeros), an empty
batch, the folded combine within one rounding of the parallel combine on the same inputs, and
a CUDA graph of the folded combine replayed twice (its counters must be back at zero after
every call). Compiles only its own kernels, so a device run of it is short.
"""

from __future__ import annotations

import dataclasses

import pytest

from tileops_cuda.kernels.attention_decode import DecodeBuildKey, DecodeSchedule, build_attention_decode, decode_refusal

from attention_cases import build_key_of, compare_with_reference, workload_instance, workload_rows
from decode_cases import decode_batch, decode_reference, poison_unread

DECODE = "AttentionDecodeFwdOp"
_MAX_TOKENS = 1 << 18  # as test_attention_gpu.py: larger rows are the bench's
_NAMES = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")

#: The candidates by the sweep's names.
CANDIDATES = {"par-bh16": DecodeSchedule(combine="parallel", block_h=16),
              "fold": DecodeSchedule(combine="last_program"),
              "bh16-fold": DecodeSchedule(combine="last_program", block_h=16),
              "par-pdl": DecodeSchedule(combine="parallel", dependent_launch=True)}
_PARALLEL = DecodeSchedule(combine="parallel")


def _pinned_key(inputs, arch: str, schedule: DecodeSchedule) -> DecodeBuildKey:
    return dataclasses.replace(build_key_of(DecodeBuildKey, inputs, "cache_seqlens", "block_table", arch),
                               schedule=schedule)


def _check(inputs, scale, arch: str, schedule: DecodeSchedule) -> None:
    key = _pinned_key(inputs, arch, schedule)
    if decode_refusal(key) is None:
        poison_unread(inputs)
    compare_with_reference(lambda: build_attention_decode(key), decode_refusal(key), decode_reference, _NAMES,
                           inputs, scale)


def _run(inputs, arch: str, schedule: DecodeSchedule):
    """``out`` of one call (NaN-poisoned before it) on copies of the caches."""
    import torch

    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    out = torch.full_like(inputs["query"], float("nan"))
    build_attention_decode(_pinned_key(inputs, arch, schedule)).run(
        *[caches.get(n, inputs.get(n)) for n in _NAMES], None, out)
    torch.cuda.synchronize()
    return out


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


def _keys_used(arch: str) -> list[DecodeBuildKey]:
    """Every build key this module runs: the candidates on Qwen3-Next's key (beside the parallel
    combine they are compared with) and on each contiguous spec row's key that does not refuse them."""
    from tileops_core import load_manifest

    qwen = DecodeBuildKey("bfloat16", 16, 2, 256, arch=arch)
    keys = [dataclasses.replace(qwen, schedule=_PARALLEL)]
    for row in load_manifest()[DECODE].workloads:
        v, gen = row.values, row.values["generator"]
        if "block_size" in gen or int(gen["B"]) * int(gen["context"]) > _MAX_TOKENS:
            continue
        for dtype in v["dtypes"]:
            base = DecodeBuildKey(dtype, int(v["NQ"]), int(v["NKV"]), int(v["D"]),
                                  seqlens_dtype=v.get("cache_seqlens_dtype", "int32"), arch=arch)
            keys += [dataclasses.replace(base, schedule=s) for s in CANDIDATES.values()]
    return [key for key in dict.fromkeys(keys) if decode_refusal(key) is None]


@pytest.fixture(scope="module", autouse=True)
def prebuilt(arch):
    """Compile every kernel the module needs concurrently (nvcc runs in parallel; a failure is
    left for the test that needs the kernel to report)."""
    from tileops_cuda.kernels._common import compile_many

    compile_many([lambda key=key: build_attention_decode(key) for key in _keys_used(arch)])


@pytest.fixture
def seed(cuda_device, gen):
    import torch

    return int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))


@pytest.mark.parametrize("name", CANDIDATES)
@pytest.mark.parametrize("row_index,case", workload_rows(DECODE, _MAX_TOKENS))
def test_every_decode_workload_row_matches_the_float64_reference(row_index, case, name, arch, cuda_device, seed):
    inputs, scale = workload_instance(DECODE, row_index, case, cuda_device[0], seed)
    _check(inputs, scale, arch, CANDIDATES[name])  # paged rows: refused, skipped


#: One position, the tile edges (32 and 64 positions), the last slot of the capacity, an empty
#: cache and padding sequences.
_CAPACITY = 300
_RAGGED = [1, 63, 64, 65, _CAPACITY - 1, 0, -1, 128, -1]


@pytest.mark.parametrize("splits", [None, 4, 128, 256])
@pytest.mark.parametrize("name", CANDIDATES)
def test_ragged_lengths_at_any_split_count_match_the_float64_reference(name, splits, arch, cuda_device, gen):
    schedule = dataclasses.replace(CANDIDATES[name], splits=splits)
    _check(decode_batch(cuda_device[0], gen, _RAGGED, capacity=_CAPACITY), None, arch, schedule)


@pytest.mark.parametrize("length", [20000, 32767])
@pytest.mark.parametrize("splits", [None, 64, 128, 256])
@pytest.mark.parametrize("name", CANDIDATES)
def test_one_long_sequence_split_up_to_256_ways_matches_the_float64_reference(name, splits, length, arch,
                                                                              cuda_device, gen):
    schedule = dataclasses.replace(CANDIDATES[name], splits=splits)
    _check(decode_batch(cuda_device[0], gen, [length], capacity=32768), None, arch, schedule)


@pytest.mark.parametrize("block_h", [64, 16])
@pytest.mark.parametrize("splits", [4, 64, 256])
def test_the_folded_combine_is_the_parallel_combine_within_one_rounding(block_h, splits, arch, cuda_device, gen):
    """Both merge the same float32 partials in float32 (the folded one online, the parallel one in
    two passes), so they differ by float32 rounding, which the final rounding to bf16 turns into at
    most one bf16 step: ``|folded - parallel| <= 2^-7 |parallel|``."""
    import torch

    inputs = decode_batch(cuda_device[0], gen, [4000, 70, -1, 2047], capacity=4096)
    folded = _run(inputs, arch, DecodeSchedule(combine="last_program", block_h=block_h, splits=splits))
    parallel = _run(inputs, arch, DecodeSchedule(combine="parallel", block_h=block_h, splits=splits))
    torch.testing.assert_close(folded.float(), parallel.float(), rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("name", CANDIDATES)
def test_a_batch_of_padding_sequences_gets_zeros(name, arch, cuda_device, gen):
    import torch

    inputs = decode_batch(cuda_device[0], gen, [-1, -1, -1], capacity=256)
    out = _run(inputs, arch, dataclasses.replace(CANDIDATES[name], splits=4))
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("name", CANDIDATES)
def test_an_empty_batch_launches_nothing_and_returns_out(name, arch, cuda_device, gen):
    import torch

    inputs = decode_batch(cuda_device[0], gen, [5], capacity=64)
    empty = {n: (t[:0] if n in ("query", "key", "value", "cache_seqlens") else t) for n, t in inputs.items()}
    out = torch.empty_like(empty["query"])
    got = build_attention_decode(_pinned_key(empty, arch, CANDIDATES[name])).run(
        *[empty.get(n) for n in _NAMES], None, out)
    assert got is out and got.shape == (0, 16, 256)


@pytest.mark.parametrize("name", ["fold", "bh16-fold"])
def test_the_folded_combine_replays_in_a_cuda_graph_twice_as_it_ran_eagerly(name, arch, cuda_device, gen):
    """Every call must leave the counters at zero: a replay after one that left a count would
    merge early (or never) and differ from the eager call."""
    import torch

    inputs = decode_batch(cuda_device[0], gen, [4000, 70, -1], capacity=4096)
    poison_unread(inputs)
    run = build_attention_decode(_pinned_key(inputs, arch, dataclasses.replace(CANDIDATES[name], splits=64))).run
    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    out = torch.full_like(inputs["query"], float("nan"))

    def call() -> None:
        run(*[caches.get(n, inputs.get(n)) for n in _NAMES], None, out)

    call()
    torch.cuda.synchronize()
    eager = out.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
    expected, _, _ = decode_reference(inputs, None)
    err = float((eager.double() - expected).norm() / expected.norm())
    assert err <= 1.6e-2, f"out relative error {err:.3g}"


@pytest.mark.parametrize("name", ["fold", "bh16-fold"])
def test_two_streams_running_one_call_shape_at_once_count_in_their_own_slots(name, arch, cuda_device, gen):
    """The folded combine's counters are per stream: two streams that each run the same call shape
    eight times with no synchronisation between them, on their own inputs, must each get what
    their calls give alone. Shared slots would let one stream's programs merge the other's
    partials, or never merge."""
    import torch

    batches = [decode_batch(cuda_device[0], gen, [4000, 70, 2047], capacity=4096) for _ in range(2)]
    run = build_attention_decode(_pinned_key(batches[0], arch, dataclasses.replace(CANDIDATES[name], splits=64))).run
    alone = [_run(b, arch, dataclasses.replace(CANDIDATES[name], splits=64)) for b in batches]
    streams = [torch.cuda.Stream() for _ in batches]
    outs = [[torch.full_like(b["query"], float("nan")) for _ in range(8)] for b in batches]
    caches = [{n: b[n].clone() for n in ("key_cache", "value_cache")} for b in batches]
    torch.cuda.synchronize()
    for step in range(8):
        for stream, batch, cache, out in zip(streams, batches, caches, outs):
            with torch.cuda.stream(stream):
                run(*[cache.get(n, batch.get(n)) for n in _NAMES], None, out[step])
    torch.cuda.synchronize()
    for out, expected in zip(outs, alone):
        assert all(torch.equal(o, expected) for o in out)


def test_dependent_launches_chain_decode_steps_on_one_cache_like_the_registered_program(arch, cuda_device, gen):
    """Six decode steps back to back (no synchronisation between them), step i + 1 reading the
    key/value step i wrote into the caches, then the six in a CUDA graph replayed twice: a split or
    combine launched as a dependent that touched memory before the previous kernel ended would read
    a stale slot or partial. Every step's output and the caches must be the parallel combine's bits."""
    import torch

    first = decode_batch(cuda_device[0], gen, [3000, 64, -1, 700], capacity=4096)
    steps = []
    for i in range(6):
        step = dict(first) if i == 0 else {**first, **{n: torch.randn_like(first[n]) for n in ("query", "key", "value")}}
        lengths = first["cache_seqlens"]
        step["cache_seqlens"] = torch.where(lengths >= 0, lengths + i, lengths)
        steps.append(step)
    runs = {name: build_attention_decode(_pinned_key(first, arch, dataclasses.replace(s, splits=64))).run
            for name, s in (("par", _PARALLEL), ("par-pdl", CANDIDATES["par-pdl"]))}

    def chain(run, caches, outs):
        for step, out in zip(steps, outs):
            run(*[caches.get(n, step.get(n)) for n in _NAMES], None, out)

    def fresh():
        return ({n: first[n].clone() for n in ("key_cache", "value_cache")},
                [torch.full_like(first["query"], float("nan")) for _ in steps])

    want_caches, want = fresh()
    chain(runs["par"], want_caches, want)
    caches, outs = fresh()
    chain(runs["par-pdl"], caches, outs)
    torch.cuda.synchronize()
    assert all(torch.equal(o, w) for o, w in zip(outs, want))
    assert all(torch.equal(caches[n], want_caches[n]) for n in caches)
    caches, outs = fresh()
    start = {n: c.clone() for n, c in caches.items()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(runs["par-pdl"], caches, outs)
    for _ in range(2):
        for n in caches:
            caches[n].copy_(start[n])
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(o, w) for o, w in zip(outs, want))
        assert all(torch.equal(caches[n], want_caches[n]) for n in caches)
