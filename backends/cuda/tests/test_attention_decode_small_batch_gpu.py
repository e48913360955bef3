"""The attention decode's light split program (issue 21; ``DecodeSchedule.block_h=16``: one mma
row tile, registers for three programs an SM; the rule's schedule at contiguous B=1; over paged
blocks a candidate) against a float64 reference on the GPU (skips without one).

As ``test_attention_gpu.py``: a NaN-poisoned ``out``, NaN in every cache slot no sequence reads,
outputs at the conformance suite's tolerances, the caches bit for bit. Beyond it: lengths at the
tile edges and the last slot at split counts up to 256, a padding-only batch (zeros), an empty
batch, and the
default schedule (no pin) at B=1 chaining decode steps in a CUDA graph; and unchecked metadata (lengths
at or past the capacity, block-table entries outside the pool) on every program it reaches, the 64-row
ones included. Compiles only its own kernels, so a device run of it is short.
"""

from __future__ import annotations

import dataclasses

import pytest

from tileops_cuda.kernels.attention_decode import DecodeBuildKey, DecodeSchedule, build_attention_decode, decode_refusal

from attention_cases import build_key_of, compare_with_reference, workload_instance, workload_rows
from catalogue_references import TOLERANCE, relative_error
from decode_cases import decode_batch, decode_reference, places, poison_unread
from graph_replays import assert_replays_like_eager

DECODE = "AttentionDecodeFwdOp"
_MAX_TOKENS = 1 << 18  # as test_attention_gpu.py: larger rows are the bench's
_NAMES = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")

#: The candidates by the sweep's names: the light program (16-token paged blocks: loaded row by row), and its tiles
#: gathered row by row with asynchronous copies (``tiles="gather"``: over paged blocks ``light_page_layout``, on
#: contiguous keys from their rows, fifty-first session); each beside the sliced combine (partials loaded with the
#: log-sum-exps, a program a 64-channel slice).
CANDIDATES = {"par-bh16": DecodeSchedule(combine="parallel", block_h=16),
              "gather-bh16": DecodeSchedule(tiles="gather", combine="parallel", block_h=16),
              "par-bh16-sliced": DecodeSchedule(combine="sliced", block_h=16),
              "gather-bh16-sliced": DecodeSchedule(tiles="gather", combine="sliced", block_h=16)}
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
    paged = DecodeBuildKey("bfloat16", 16, 2, 256, True, "int32", "int32", arch=arch)
    keys = [dataclasses.replace(qwen, schedule=_PARALLEL)]
    keys += [dataclasses.replace(paged if block else qwen, schedule=s) for block, s in UNCHECKED_RUNS.values()]
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
def prebuilt(arch, prebuild_all):
    """Compile every kernel the module needs concurrently (nvcc runs in parallel; a failure is
    left for the test that needs the kernel to report). Not under xdist (``prebuild_all``)."""
    if not prebuild_all:
        return
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


@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize("name", CANDIDATES)
def test_paged_ragged_lengths_match_the_float64_reference(name, block, arch, cuda_device, gen):
    """16-token blocks (vLLM's), which the light program gathers (``par-bh16``: loads row by row),
    and 64-token blocks, whole 32-position tiles of one block, with the tile edges, padding and an
    empty cache. (Three programs, compiled here: a paged program compiles per block size.)"""
    schedule = dataclasses.replace(CANDIDATES[name], splits=4)
    _check(decode_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch, schedule)


@pytest.mark.parametrize("length", [20000, 32767])
@pytest.mark.parametrize("splits", [None, 64, 128, 256])
@pytest.mark.parametrize("name", CANDIDATES)
def test_one_long_sequence_split_up_to_256_ways_matches_the_float64_reference(name, splits, length, arch,
                                                                              cuda_device, gen):
    schedule = dataclasses.replace(CANDIDATES[name], splits=splits)
    _check(decode_batch(cuda_device[0], gen, [length], capacity=32768), None, arch, schedule)


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


# The rule's light-program calls: one sequence (splits one program an SM), eight (8-tile splits, two an SM), and
# eight over 16-token blocks (tiles gathered, two an SM); paged lengths stay inside their last block for six steps.
DEFAULT_SCHEDULE_STEPS = {
    "b1": ([3000], None),
    "b8-long-splits": ([4000, 3500, 100, 1601, 2048, 17, 4080, 3199], None),
    "paged-b8-long-splits": ([4000, 3504, 96, 1600, 2048, 16, 4064, 3200], 16),
}


@pytest.mark.parametrize("case", list(DEFAULT_SCHEDULE_STEPS))
def test_the_default_schedule_at_small_batch_chains_decode_steps_on_one_cache_in_a_cuda_graph(case, arch, cuda_device,
                                                                                              gen):
    """The rule's schedule for up to 8 sequences (the light program, no pin) over six decode
    steps back to back, step i + 1 reading the key/value step i wrote, then the six in a CUDA
    graph replayed twice: every step within the float64 reference's tolerance eagerly, and the
    replays bit for bit the eager steps, caches included."""
    import torch

    from tileops_cuda.kernels.attention_decode import call_plan

    lengths, block = DEFAULT_SCHEDULE_STEPS[case]
    first = decode_batch(cuda_device[0], gen, lengths, block=block, capacity=4096)
    poison_unread(first)
    key = build_key_of(DecodeBuildKey, first, "cache_seqlens", "block_table", arch)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    schedule, tiling, _, chunk = call_plan(key, len(lengths), block, 4096, lambda: sms)
    assert schedule.block_h == 16 and (chunk >= 8 * tiling.block_n) == (len(lengths) == 8)
    steps = []
    for i in range(6):
        step = dict(first) if i == 0 else {**first, **{n: torch.randn_like(first[n]) for n in ("query", "key", "value")}}
        step["cache_seqlens"] = first["cache_seqlens"] + i
        steps.append(step)
    run = build_attention_decode(key).run

    def chain(caches, outs):
        for step, out in zip(steps, outs):
            run(*[caches.get(n, step.get(n)) for n in _NAMES], None, out)

    def fresh():
        return ({n: first[n].clone() for n in ("key_cache", "value_cache")},
                [torch.full_like(first["query"], float("nan")) for _ in steps])

    want_caches, want = fresh()
    reference_caches = {n: c.clone() for n, c in want_caches.items()}
    chain(want_caches, want)
    torch.cuda.synchronize()
    for step, out in zip(steps, want):
        expected, kc, vc = decode_reference({**step, **reference_caches}, None)
        reference_caches = {"key_cache": kc, "value_cache": vc}
        err = float((out.double() - expected).norm() / expected.norm())
        assert err <= 1.6e-2, f"out relative error {err:.3g}"
    assert all(torch.equal(want_caches[n].view(torch.int16), reference_caches[n].view(torch.int16))
               for n in want_caches)  # bits: the unread slots hold NaN
    caches, outs = fresh()
    start = {n: c.clone() for n, c in caches.items()}

    def reset() -> None:
        for n in caches:
            caches[n].copy_(start[n])
        for o in outs:
            o.fill_(float("nan"))

    def check() -> None:
        assert all(torch.equal(o, w) for o, w in zip(outs, want))
        assert all(torch.equal(caches[n].view(torch.int16), want_caches[n].view(torch.int16)) for n in caches)

    assert_replays_like_eager(lambda: chain(caches, outs), reset, check)


# -- Unchecked metadata (the launcher is called directly, as with contents checks off) ---------------
# A length at or past the capacity is padding: nothing written, zeros out; through a block-table entry
# outside [0, N) nothing is read or written (that sequence's output is unspecified). Either way every other
# sequence's output and every cache slot are what they are without that sequence: the reference, which
# fails such a call on the host, is run on the batch with that sequence made padding.

#: Every program unchecked metadata reaches: the light split program and the 64-row one with each combine,
#: one split (the split pass writes the output), and on 16-token blocks gathered, row by row (the light
#: program's ``block`` tiles) and inside 64-token blocks (bulk copies).
UNCHECKED_RUNS = {
    "contiguous-light": (None, DecodeSchedule(combine="parallel", block_h=16, splits=4)),
    "contiguous-light-sliced": (None, DecodeSchedule(combine="sliced", block_h=16, splits=4)),
    "contiguous-light-gathered": (None, DecodeSchedule(tiles="gather", combine="parallel", block_h=16, splits=4)),
    "contiguous-serial": (None, DecodeSchedule(splits=4)),
    "contiguous-one-split": (None, DecodeSchedule(splits=1)),
    "paged16-light-gathered": (16, DecodeSchedule(tiles="gather", combine="parallel", block_h=16, splits=4)),
    "paged16-light-rows": (16, DecodeSchedule(combine="parallel", block_h=16, splits=4)),
    "paged16-gathered": (16, DecodeSchedule(tiles="gather", combine="parallel", splits=4)),
    "paged64-bulk": (64, DecodeSchedule(combine="parallel", splits=4)),
}
_PAGED_RUNS = [name for name, (block, _) in UNCHECKED_RUNS.items() if block is not None]
_UNCHECKED_CAPACITY = 192  # positions a sequence: 12 blocks of 16, 3 of 64


def _unchecked_call(inputs, arch: str, schedule: DecodeSchedule):
    """``out`` (NaN-poisoned before the call) and the caches after one call on copies of them."""
    import torch

    caches = {n: inputs[n].clone() for n in ("key_cache", "value_cache")}
    out = torch.full_like(inputs["query"], float("nan"))
    build_attention_decode(_pinned_key(inputs, arch, schedule)).run(
        *[caches.get(n, inputs.get(n)) for n in _NAMES], None, out)
    torch.cuda.synchronize()  # an access outside the caches or the table fails here
    return out, caches


def _assert_others_as_the_reference(out, caches, expected, want_caches, others) -> None:
    """Sequences ``others`` within the float64 reference's tolerance; every cache slot bit for bit."""
    import torch

    err = relative_error(out[others], expected[others])
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g} over the other sequences"
    for name, want in want_caches.items():
        assert torch.equal(caches[name].view(torch.int16), want.view(torch.int16)), f"a {name} slot differs"


@pytest.mark.parametrize("past", [0, 5], ids=["at-capacity", "capacity+5"])
@pytest.mark.parametrize("run", list(UNCHECKED_RUNS))
def test_an_unchecked_length_at_or_past_the_capacity_is_padding(run, past, arch, cuda_device, gen):
    """Sequences 1 and 4 (the last: its table row is the table's last) at the capacity or past it,
    sequence 1 before one that reads its first positions (the contiguous program wrote the next row's
    slot ``n - L``; the paged ones read past the table row): zeros, no slot written, the others as
    the reference."""
    import torch

    block, schedule = UNCHECKED_RUNS[run]
    bad = _UNCHECKED_CAPACITY + past
    inputs = decode_batch(cuda_device[0], gen, [40, bad, 150, 0, bad], block=block, capacity=_UNCHECKED_CAPACITY)
    lengths = inputs["cache_seqlens"]
    padding = {**inputs, "cache_seqlens": torch.where(lengths >= _UNCHECKED_CAPACITY, -1, lengths)}
    poison_unread(padding)  # (the caches are shared: the padding sequences' slots are NaN)
    expected, kc, vc = decode_reference(padding, None)
    out, caches = _unchecked_call(inputs, arch, schedule)
    assert torch.equal(out[[1, 4]], torch.zeros_like(out[[1, 4]]))
    rows, at = places(inputs, 2, past)  # sequence 2's slots that sequence 1's position n would run on to
    assert torch.equal(caches["key_cache"][rows, at].view(torch.int16), kc[rows, at].view(torch.int16)), \
        "the next sequence's slots were written"
    _assert_others_as_the_reference(out, caches, expected, {"key_cache": kc, "value_cache": vc}, [0, 2, 3])


def test_an_unchecked_int64_length_past_int32_is_padding_not_its_low_bits(arch, cuda_device, gen):
    """``2**32 + 5`` is compared in its own dtype: padding, not a sequence of 5 (its low 32 bits)."""
    import torch

    inputs = decode_batch(cuda_device[0], gen, [40, 5, 150], capacity=_UNCHECKED_CAPACITY)
    padding = {**inputs, "cache_seqlens": torch.tensor([40, -1, 150], dtype=torch.int64, device=cuda_device[0])}
    poison_unread(padding)
    expected, kc, vc = decode_reference(padding, None)
    inputs["cache_seqlens"] = torch.tensor([40, 2**32 + 5, 150], dtype=torch.int64, device=cuda_device[0])
    out, caches = _unchecked_call(inputs, arch, UNCHECKED_RUNS["contiguous-light"][1])
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    _assert_others_as_the_reference(out, caches, expected, {"key_cache": kc, "value_cache": vc}, [0, 2])


#: Block-table entries outside the pool's N blocks: negative, N itself, and 2**31 - 1 (its first row,
#: ``entry · L``, wraps int32: the bounds checks the programs had were made in int32, their addresses
#: in int64).
_OUTSIDE = {"negative": lambda N: -7, "N": lambda N: N, "int32-max": lambda N: 2**31 - 1}


@pytest.mark.parametrize("where", ["read", "written"])
@pytest.mark.parametrize("entry", list(_OUTSIDE))
@pytest.mark.parametrize("run", _PAGED_RUNS)
def test_an_unchecked_block_entry_outside_the_pool_is_never_read_or_written_through(run, entry, where, arch,
                                                                                    cuda_device, gen):
    """Sequence 1 (70 tokens) with one entry outside ``[0, N)``: its first block (only read) or the
    block its new key/value goes to. Its output is unspecified; the others' outputs are the
    reference's and every slot is as without it (a read block's step still writes its new row)."""
    import torch

    block, schedule = UNCHECKED_RUNS[run]
    inputs = decode_batch(cuda_device[0], gen, [40, 70, 33, 150], block=block, capacity=_UNCHECKED_CAPACITY)
    poison_unread(inputs)
    table, N = inputs["block_table"], inputs["key_cache"].shape[0]
    padding = {**inputs, "cache_seqlens": torch.tensor([40, -1, 33, 150], dtype=torch.int32, device=cuda_device[0])}
    expected, kc, vc = decode_reference(padding, None)
    j = 0 if where == "read" else 70 // block
    if where == "read":  # its step's own slot, in a valid block
        kc[table[1, 70 // block], 70 % block] = inputs["key"][1]
        vc[table[1, 70 // block], 70 % block] = inputs["value"][1]
    table[1, j] = _OUTSIDE[entry](N)
    out, caches = _unchecked_call(inputs, arch, schedule)
    _assert_others_as_the_reference(out, caches, expected, {"key_cache": kc, "value_cache": vc}, [0, 2, 3])


def test_an_unchecked_int64_block_entry_past_int32_is_outside_the_pool_not_its_low_bits(arch, cuda_device, gen):
    """``2**32 + k`` (k another sequence's block) for the block sequence 1 writes: compared in its own
    dtype, so nothing is written, where its low 32 bits would name block k."""
    import torch

    inputs = decode_batch(cuda_device[0], gen, [40, 70, 33, 150], block=16, capacity=_UNCHECKED_CAPACITY)
    poison_unread(inputs)
    inputs["block_table"] = table = inputs["block_table"].long()
    padding = {**inputs, "cache_seqlens": torch.tensor([40, -1, 33, 150], dtype=torch.int32, device=cuda_device[0])}
    expected, kc, vc = decode_reference(padding, None)
    table[1, 70 // 16] = 2**32 + int(table[0, 0])
    out, caches = _unchecked_call(inputs, arch, UNCHECKED_RUNS["paged16-light-gathered"][1])
    _assert_others_as_the_reference(out, caches, expected, {"key_cache": kc, "value_cache": vc}, [0, 2, 3])
