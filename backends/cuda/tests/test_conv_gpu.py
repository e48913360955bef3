"""Causal conv1d TileLang kernels against the float64 references on the GPU (skips without one).

Every workload row of both ops runs through the launcher with a NaN-poisoned ``out``; outputs
are compared at the conformance suite's tolerances (float32 2e-5, float16 2e-3, bfloat16
1.6e-2, relative) and the pool bit for bit (windows are copies of inputs, so written slots
equal the reference exactly and untouched slots keep their bits). Every case also runs the
key's ``unchecked_index`` program (no TileLang bounds checks), and the varlen key's
``end_rows_first`` and ``unrolled_starts`` programs (and, without initial states, the
initial-state program), on the same inputs, which must write the same bits as the checked one:
garbage metadata included.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest

from tileops_cuda.kernels.conv1d import (ConvUpdateBuildKey, ConvVarlenBuildKey, build_conv_update, build_conv_varlen,
                                        fitted_to_width)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402
from graph_replays import assert_replays_like_eager  # noqa: E402

UPDATE, VARLEN = "CausalConv1dUpdateFwdOp", "CausalConv1dVarlenFwdOp"


def _rows(op: str) -> list:
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    spec = load_manifest()[op]
    return [pytest.param(op, row.index, case, id=f"{row.label}[{case}]") for row in spec.workloads
            for case in dtype_cases(row)]


def _instance(op: str, row_index: int, case, device, seed: int):
    import importlib

    import torch

    from tileops_core import load_manifest
    from tileops_core.bench.workloads import instantiate

    spec = load_manifest()[op]
    importlib.import_module(spec.source["op"])  # registers the workload generators
    inst = instantiate(spec, spec.workloads[row_index], case, device=device, rng=torch.Generator().manual_seed(seed))
    params = {"activation": None, "seq_lens_style": "lengths", **inst.op_kwargs}
    return inst.inputs, params


def _launcher(op: str, inputs, params, arch: str, **tile):
    """The kernel's launcher for these inputs; ``tile`` replaces block-shape fields of the key (a
    varlen key is then fitted to its width, as the registered kernel's is)."""
    d = lambda n: None if inputs.get(n) is None else str(inputs[n].dtype).replace("torch.", "")  # noqa: E731
    D, W = inputs["weight"].shape
    silu, bias = params["activation"] == "silu", inputs.get("bias") is not None
    if op == UPDATE:
        key = ConvUpdateBuildKey(d("x"), D, W, silu, bias, params["seq_lens_style"], d("actual_seq_lengths"),
                                 d("conv_state_indices"), d("num_accepted_tokens"), arch, **tile)
        return build_conv_update(key).run
    key = ConvVarlenBuildKey(d("x"), D, W, silu, bias, inputs.get("has_initial_state") is not None,
                             d("actual_seq_lengths"), d("conv_state_indices"), params["seq_lens_style"] != "cu_seqlens",
                             arch)
    return build_conv_varlen(fitted_to_width(dataclasses.replace(key, **tile))).run


def _call(op: str, run, inputs, params, out):
    i = inputs
    if op == UPDATE:
        return run(i["x"], i["conv_state"], i["weight"], i["actual_seq_lengths"], i["conv_state_indices"],
                   i.get("bias"), i.get("num_accepted_tokens"), params["activation"], params["seq_lens_style"], out)
    return run(i["x"], i["conv_state"], i["weight"], i["actual_seq_lengths"], i["conv_state_indices"],
               i.get("has_initial_state"), i.get("bias"), params["activation"], params["seq_lens_style"], out)


def _check(op: str, inputs, params, arch: str, **tile) -> None:
    """The kernel against the float64 reference (``out`` within tolerance, the pool bit for bit),
    its unchecked-index program bit for bit against it, and where it runs SiLU into 16-bit outputs its
    ``tanh_silu`` program (SiLU through one ``tanh.approx``) against the reference too."""
    import torch

    originals = {n: t.cpu().clone() for n, t in inputs.items()}
    before = dict(inputs, conv_state=inputs["conv_state"].clone())
    out = torch.full_like(inputs["x"], float("nan"), memory_format=torch.contiguous_format)
    _call(op, _launcher(op, inputs, params, arch, **tile), inputs, params, out)
    torch.cuda.synchronize()
    expected = REFERENCES[op](None, originals, params)
    _assert_matches_reference("the kernel", out, inputs["conv_state"], expected)
    _compare_unchecked(op, before, inputs["conv_state"], out, params, arch, **tile)
    if params["activation"] == "silu" and out.dtype != torch.float32:
        # (the windows never pass through SiLU: its pool too is the reference's, bit for bit)
        got, pool = _run_on_copy(op, before, params, arch, out, **{**tile, "tanh_silu": True})
        _assert_matches_reference("the tanh_silu program", got, pool, expected)


def _assert_matches_reference(what: str, out, pool, expected) -> None:
    """``out`` within the conformance tolerance of the float64 reference, ``pool`` its pool bit for bit."""
    import torch

    err = relative_error(out.cpu(), expected["out"])
    assert err <= TOLERANCE[out.dtype], f"{what}'s out relative error {err:.3g}"
    got = pool.cpu()
    assert torch.equal(got.view(torch.uint8), expected["conv_state"].to(got.dtype).view(torch.uint8))


def _run_on_copy(op: str, before, params, arch: str, like, **tile):
    """``(out, pool)`` of ``tile``'s program run on a copy of ``before`` (the inputs as they were before the
    checked program ran), its output written over NaNs in ``like``'s layout."""
    import torch

    inputs = dict(before, conv_state=before["conv_state"].clone())
    got = _call(op, _launcher(op, inputs, params, arch, **tile), inputs, params, torch.full_like(like, float("nan")))
    torch.cuda.synchronize()
    return got, inputs["conv_state"]


def _compare_unchecked(op: str, before, pool_after, out, params, arch: str, **tile) -> None:
    """The ``unchecked_index`` program (no TileLang bounds checks), and for the varlen op the
    ``end_rows_first`` one (a start's final-window rows loaded before its slot) and the
    ``unrolled_starts`` one (a start's group unrolled from its rows in registers), both together (the
    registered batch program, ``with_start_order``), the ``flat_grid`` one (every program along grid x), and for
    a call without initial states the initial-state program (its flags the launcher's one-element zero
    dummy), each on a copy of ``before``, write the bits the checked one wrote: ``out`` and the whole pool
    (``pool_after``)."""
    import torch

    start_orders = [{"end_rows_first": True}, {"unrolled_starts": True},
                    {"end_rows_first": True, "unrolled_starts": True}, {"flat_grid": True}]
    # a call without initial states through the initial-state program (the launcher's zero dummy as the flags)
    fresh = [{"has_init": True}] if before.get("has_initial_state") is None else []
    twins = [{"unchecked_index": True}] + (start_orders + fresh if op == VARLEN else [])
    for twin in twins:
        got, pool = _run_on_copy(op, before, params, arch, out, **{**tile, **twin})
        assert torch.equal(got.view(torch.uint8), out.view(torch.uint8)), f"the {twin} program's out differs"
        assert torch.equal(pool.view(torch.uint8), pool_after.view(torch.uint8)), \
            f"the {twin} program's pool differs"


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


@pytest.mark.parametrize("op,row_index,case", _rows(UPDATE) + _rows(VARLEN))
def test_every_workload_row_matches_the_float64_reference(op, row_index, case, arch, cuda_device, gen):
    seed = int(__import__("torch").randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))
    inputs, params = _instance(op, row_index, case, cuda_device[0], seed)
    _check(op, inputs, params, arch)


#: A varlen block shape unlike the registered one: short chunks of wide groups, no register bound.
OTHER = {"threads": 64, "tokens": 8, "chunk": 16, "registers": 0}


@pytest.mark.parametrize("tile", [{}, OTHER], ids=["registered", "short-chunks"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_varlen_ragged_batch_with_short_sequences_padding_and_tile_crossings(style, dtype, tile, arch, cuda_device,
                                                                             gen):
    import torch

    dev = cuda_device[0]
    lengths = [1, 0, 2, 17, 3, 33, 16, 5]  # shorter than W - 1, empty, across token tiles
    B, T, D, W = len(lengths), sum(lengths), 1024 + 64, 4
    meta = torch.tensor(lengths, device=dev)
    if style == "cu_seqlens":
        meta = torch.nn.functional.pad(meta.cumsum(0), (1, 0))
    slots = torch.randperm(B + 3, device=dev, generator=gen)[:B]
    slots[4] = -1
    tdt = getattr(torch, dtype)
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).to(tdt),
                  conv_state=torch.randn(B + 3, D, W - 1, device=dev, generator=gen).to(tdt),
                  weight=torch.randn(D, W, device=dev, generator=gen).to(tdt), actual_seq_lengths=meta.int(),
                  conv_state_indices=slots.int(), has_initial_state=torch.rand(B, device=dev, generator=gen) < 0.6,
                  bias=torch.randn(D, device=dev, generator=gen).to(tdt))
    _check(VARLEN, inputs, {"activation": "silu", "seq_lens_style": style}, arch, **tile)


@pytest.mark.parametrize("W,tile", [(4, {"threads": 32, "tokens": 3, "chunk": 3}),
                                    (4, {"threads": 32, "tokens": 3, "chunk": 6}),
                                    (5, {"threads": 32, "tokens": 4, "chunk": 8}),
                                    (2, {"threads": 64, "tokens": 1, "chunk": 4}), (4, {}),
                                    (8, {}), (6, {"threads": 32, "tokens": 4, "chunk": 8})])
def test_varlen_tile_shapes_agree_where_head_tokens_run_past_a_tile(W, tile, arch, cuda_device, gen):
    """A sequence's first W - 1 tokens are computed by the program holding its first token, past
    its chunk's end; short, empty and padding sequences placed across many chunk boundaries; W
    up to 8 with the registered shape (its groups widened to W - 1 tokens)."""
    import torch

    dev = cuda_device[0]
    lengths = [1, 2, 0, 3, 7, 1, 4, 16, 2, 9, 1, 1, 5]
    B, T, D = len(lengths), sum(lengths), 256 + 16
    slots = torch.randperm(B + 2, device=dev, generator=gen)[:B]
    slots[5] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(),
                  conv_state=torch.randn(B + 2, D, W - 1, device=dev, generator=gen).bfloat16(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(),
                  actual_seq_lengths=torch.tensor(lengths, device=dev, dtype=torch.int32),
                  conv_state_indices=slots.int(), has_initial_state=torch.rand(B, device=dev, generator=gen) < 0.6)
    _check(VARLEN, inputs, {"activation": "silu", "seq_lens_style": "lengths"}, arch, **tile)


@pytest.mark.parametrize("tile", [{}, {"chunk": 32}, {"tokens": 8, "chunk": 128}, {"threads": 256, "registers": 96}],
                         ids=["registered", "chunk32", "wide-groups", "256-threads"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_varlen_over_long_sequences_matches_the_reference(tile, style, arch, cuda_device, gen):
    """The streaming steady state: many groups a chunk, sequences starting inside chunks and at
    their first token; a channel block only partly inside D."""
    import torch

    dev = cuda_device[0]
    lengths = [700, 1, 333, 64, 129, 0, 2]
    B, T, D, W = len(lengths), sum(lengths), 1024 + 64, 4
    meta = torch.tensor(lengths, device=dev, dtype=torch.int32)
    if style == "cu_seqlens":
        meta = torch.nn.functional.pad(meta.cumsum(0), (1, 0)).int()
    slots = torch.randperm(B + 2, device=dev, generator=gen)[:B]
    slots[3] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(),
                  conv_state=torch.randn(B + 2, D, W - 1, device=dev, generator=gen).bfloat16(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(), actual_seq_lengths=meta,
                  conv_state_indices=slots.int(), has_initial_state=torch.rand(B, device=dev, generator=gen) < 0.6)
    _check(VARLEN, inputs, {"activation": "silu", "seq_lens_style": style}, arch, **tile)


@pytest.mark.parametrize("lengths", [[777], [1], [300, 5, 129]], ids=["one", "one-token", "three"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_a_varlen_key_with_a_one_sequence_program_runs_it_on_one_sequence_only(lengths, style, arch, cuda_device,
                                                                               gen):
    """The registered varlen shape (``one_sequence_threads``: a second program at 64 threads for
    one-sequence calls) against float64, its unchecked twin bit for bit, and the bits of the
    plain key it runs: the 64-thread program for one sequence, the 128-thread one for a batch; and
    with ``few_sequences`` the batch of three through the few-sequence program (the batch program's
    start order at 64 threads), the same bits."""
    import torch

    dev = cuda_device[0]
    B, T, D, W = len(lengths), sum(lengths), 1024 + 64, 4
    meta = torch.tensor(lengths, device=dev, dtype=torch.int32)
    if style == "cu_seqlens":
        meta = torch.nn.functional.pad(meta.cumsum(0), (1, 0)).int()
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(),
                  conv_state=torch.randn(B + 2, D, W - 1, device=dev, generator=gen).bfloat16(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(), actual_seq_lengths=meta,
                  conv_state_indices=torch.randperm(B + 2, device=dev, generator=gen)[:B].int(),
                  has_initial_state=torch.ones(B, device=dev, dtype=torch.bool))
    params = {"activation": "silu", "seq_lens_style": style}
    start = inputs["conv_state"].clone()
    _check(VARLEN, inputs, params, arch, one_sequence_threads=64)
    plain = {"threads": 64} if B == 1 else {}
    outs, pools = [], []
    ordered = {"end_rows_first": True, "unrolled_starts": True}
    tiles = ({"one_sequence_threads": 64}, plain, {"one_sequence_threads": 64, "few_sequences": 8, **ordered})
    for tile in tiles:
        pool = start.clone()
        outs.append(_call(VARLEN, _launcher(VARLEN, inputs, params, arch, **tile), dict(inputs, conv_state=pool),
                          params, torch.full_like(inputs["x"], float("nan"))))
        pools.append(pool)
    torch.cuda.synchronize()
    for tile, got, pool in zip(tiles[1:], outs[1:], pools[1:]):
        assert torch.equal(outs[0].view(torch.uint8), got.view(torch.uint8)), f"{tile}: out differs"
        assert torch.equal(pools[0].view(torch.uint8), pool.view(torch.uint8)), f"{tile}: pool differs"


@pytest.mark.parametrize("B", [31, 32, 70])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_varlen_lengths_are_summed_in_the_kernel_below_threads_sequences_and_by_the_launcher_above(
        B, dtype, arch, cuda_device, gen):
    """A lengths-style batch of fewer than ``threads`` sequences reaches the kernel as lengths (its
    block-wide scan), a larger one as prefix sums of the same dtype: both must equal the reference,
    empty sequences and one padding slot included."""
    import torch

    dev = cuda_device[0]
    D, W = 256, 4
    lengths = torch.randint(0, 6, (B,), device=dev, generator=gen).to(getattr(torch, dtype))
    lengths[0] = 9
    T = int(lengths.sum())
    slots = torch.randperm(B + 1, device=dev, generator=gen)[:B]
    slots[B // 2] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(),
                  conv_state=torch.randn(B + 1, D, W - 1, device=dev, generator=gen).bfloat16(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(), actual_seq_lengths=lengths,
                  conv_state_indices=slots.int(), has_initial_state=torch.rand(B, device=dev, generator=gen) < 0.6)
    _check(VARLEN, inputs, {"activation": "silu", "seq_lens_style": "lengths"}, arch, threads=32, tokens=4, chunk=8)


def test_update_sums_lengths_of_more_sequences_than_two_blocks_of_threads(arch, cuda_device, gen):
    """Lengths-style metadata past 2 x threads sequences reaches the prefix sum's serial tail."""
    import torch

    dev = cuda_device[0]
    B, D, W = 100, 64, 4
    lengths = torch.randint(0, 3, (B,), device=dev, generator=gen, dtype=torch.int32)
    T = int(lengths.sum())
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen), conv_state=torch.randn(T + 1, D, W - 1, device=dev,
                                                                                          generator=gen),
                  weight=torch.randn(D, W, device=dev, generator=gen), actual_seq_lengths=lengths,
                  conv_state_indices=torch.randperm(T + 1, device=dev, generator=gen)[:T].int())
    _check(UPDATE, inputs, {"activation": "silu", "seq_lens_style": "lengths"}, arch, threads=32)


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_update_partial_blocks_padding_and_a_shared_slot_match_the_reference(style, dtype, arch, cuda_device, gen):
    """A channel block only partly inside D, empty sequences, a padding slot, one to three tokens
    a sequence with accepted counts, and a slot two tokens of a sequence share (its window stored
    once, after the later token)."""
    import torch

    dev = cuda_device[0]
    lengths = [1, 0, 2, 3, 1, 1, 2, 0, 3, 1, 2, 1, 1]
    accepted = [1, 1, 2, 2, 1, 1, 1, 1, 3, 1, 2, 1, 1]
    T, D, W = sum(lengths), 1024 + 64, 4
    meta = torch.tensor(lengths, device=dev, dtype=torch.int32)
    if style == "cu_seqlens":
        meta = torch.nn.functional.pad(meta.cumsum(0), (1, 0)).int()
    slots = torch.randperm(T + 3, device=dev, generator=gen)[:T].int()
    slots[3] = -1
    slots[5] = slots[4]  # the second and third tokens of the fourth sequence
    tdt = getattr(torch, dtype)
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).to(tdt),
                  conv_state=torch.randn(T + 3, D, W - 1, device=dev, generator=gen).to(tdt),
                  weight=torch.randn(D, W, device=dev, generator=gen).to(tdt), actual_seq_lengths=meta,
                  conv_state_indices=slots, bias=torch.randn(D, device=dev, generator=gen).to(tdt),
                  num_accepted_tokens=torch.tensor(accepted, device=dev, dtype=torch.int32))
    _check(UPDATE, inputs, {"activation": "silu", "seq_lens_style": style}, arch)


@pytest.mark.parametrize("ragged", [False, True], ids=["uniform", "ragged"])
@pytest.mark.parametrize("tokens,speculate", [(1, 1), (2, 2), (3, 2), (2, 4)], ids=["t1", "t2", "t3-past-k", "t2-k4"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_a_speculating_update_matches_the_reference_and_the_plain_programs_bits(style, tokens, speculate, ragged, arch,
                                                                                cuda_device, gen):
    """``speculate`` (the window guessed at a sequence's T // B-th token): 48 sequences of ``tokens`` tokens with
    accepted counts in [1, tokens] and padding slots, where the guess holds for every sequence (more tokens than
    ``speculate``: it never does), and ragged (an empty sequence and a longer one early: every sequence after them
    misses it): against the float64 reference (pool bit for bit), and bit for bit the plain program's."""
    import torch

    dev = cuda_device[0]
    B, D, W = 48, 1024 + 64, 4
    lengths = [tokens] * B
    if ragged:
        lengths[3], lengths[7] = 0, tokens + 1
    T = sum(lengths)
    meta = torch.tensor(lengths, device=dev, dtype=torch.int32)
    if style == "cu_seqlens":
        meta = torch.nn.functional.pad(meta.cumsum(0), (1, 0)).int()
    slots = torch.randperm(T + 5, device=dev, generator=gen)[:T].int()
    slots[::11] = -1
    accepted = torch.randint(1, tokens + 1, (B,), device=dev, generator=gen, dtype=torch.int32)
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(),
                  conv_state=torch.randn(T + 5, D, W - 1, device=dev, generator=gen).bfloat16(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(), actual_seq_lengths=meta,
                  conv_state_indices=slots, bias=torch.randn(D, device=dev, generator=gen).bfloat16())
    if tokens > 1:
        inputs["num_accepted_tokens"] = accepted
    params = {"activation": "silu", "seq_lens_style": style}
    before = dict(inputs, conv_state=inputs["conv_state"].clone())
    _check(UPDATE, inputs, params, arch, speculate=speculate)
    spec_out, spec_pool = _run_on_copy(UPDATE, before, params, arch, inputs["x"], speculate=speculate)
    plain_out, plain_pool = _run_on_copy(UPDATE, before, params, arch, inputs["x"])
    assert torch.equal(spec_out.view(torch.int16), plain_out.view(torch.int16))
    assert torch.equal(spec_pool.view(torch.int16), plain_pool.view(torch.int16))


@pytest.mark.parametrize("op", [UPDATE, VARLEN])
def test_a_strided_slice_of_a_projection_is_read_in_place_and_gives_the_same_result(op, arch, cuda_device, gen):
    import torch

    dev = cuda_device[0]
    T, D, W = 9, 256, 4
    projection = torch.randn(T, 3 * D, device=dev, generator=gen).to(torch.bfloat16)
    n = T if op == UPDATE else 2
    base = dict(x=projection[:, D : 2 * D], conv_state=torch.randn(n + 2, D, W - 1, device=dev, generator=gen)
                .to(torch.bfloat16), weight=torch.randn(D, W, device=dev, generator=gen).to(torch.bfloat16),
                actual_seq_lengths=torch.tensor([4, 5], device=dev, dtype=torch.int32),
                conv_state_indices=torch.randperm(n + 2, device=dev, generator=gen)[:n].int())
    params = {"activation": "silu", "seq_lens_style": "lengths"}
    _check(op, dict(base, conv_state=base["conv_state"].clone()), params, arch)
    contiguous = dict(base, x=base["x"].contiguous(), conv_state=base["conv_state"].clone())
    strided = dict(base, conv_state=base["conv_state"].clone())
    run = _launcher(op, base, params, arch)
    out_c = _call(op, run, contiguous, params, torch.full_like(contiguous["x"], float("nan")))
    out_s = _call(op, run, strided, params, torch.full_like(contiguous["x"], float("nan")))
    assert torch.equal(out_c, out_s) and torch.equal(contiguous["conv_state"], strided["conv_state"])


@pytest.mark.parametrize("op,tile", [(UPDATE, {}), (VARLEN, {}), (VARLEN, {"tokens": 4, "chunk": 8})],
                         ids=["update", "varlen", "varlen-short-chunks"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_garbage_metadata_never_leaves_an_output_element_unwritten(op, tile, style, arch, cuda_device, gen):
    """Lengths short of T, empty and padding sequences, accepted counts out of range."""
    import torch

    dev = cuda_device[0]
    T, D, W = 12, 128, 4
    lengths = torch.tensor([2, 0, 3, 1], device=dev)  # covers 6 of 12 tokens
    meta = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)) if style == "cu_seqlens" else lengths
    n = T if op == UPDATE else 4
    pool = torch.randn(n + 2, D, W - 1, device=dev, generator=gen)
    slots = torch.randperm(n + 2, device=dev, generator=gen)[:n].int()
    slots[2] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen), conv_state=pool.clone(),
                  weight=torch.randn(D, W, device=dev, generator=gen), actual_seq_lengths=meta.int(),
                  conv_state_indices=slots)
    if op == UPDATE:
        inputs["num_accepted_tokens"] = torch.tensor([0, 7, 9, -3], device=dev, dtype=torch.int32)
    params = {"activation": "silu", "seq_lens_style": style}
    before = dict(inputs, conv_state=pool.clone())
    out = _call(op, _launcher(op, inputs, params, arch, **tile), inputs, params,
                torch.full((T, D), float("nan"), device=dev))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    assert torch.equal(out[6:], torch.zeros_like(out[6:]))
    _compare_unchecked(op, before, inputs["conv_state"], out, params, arch, **tile)


@pytest.mark.parametrize("accepted", [False, True], ids=["plain", "mtp"])
def test_update_without_sequences_writes_zeros_and_leaves_the_pool(accepted, arch, cuda_device, gen):
    """No sequences (empty lengths and accepted counts) but tokens: every output row is zero, no
    slot is written, and the unchecked program (which reads no metadata then) agrees bit for bit."""
    import torch

    dev = cuda_device[0]
    T, D, W = 5, 128, 4
    pool = torch.randn(T + 1, D, W - 1, device=dev, generator=gen).bfloat16()
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).bfloat16(), conv_state=pool.clone(),
                  weight=torch.randn(D, W, device=dev, generator=gen).bfloat16(),
                  actual_seq_lengths=torch.zeros(0, device=dev, dtype=torch.int32),
                  conv_state_indices=torch.randperm(T + 1, device=dev, generator=gen)[:T].int())
    if accepted:
        inputs["num_accepted_tokens"] = torch.zeros(0, device=dev, dtype=torch.int32)
    params = {"activation": "silu", "seq_lens_style": "lengths"}
    before = dict(inputs, conv_state=pool.clone())
    out = _call(UPDATE, _launcher(UPDATE, inputs, params, arch), inputs, params,
                torch.full((T, D), float("nan"), device=dev).bfloat16())
    torch.cuda.synchronize()
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(inputs["conv_state"], pool)
    _compare_unchecked(UPDATE, before, inputs["conv_state"], out, params, arch)


def test_decode_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    inputs, params = _instance(UPDATE, 1, "bfloat16", cuda_device[0], 7)
    run = _launcher(UPDATE, inputs, params, arch)
    eager_state = inputs["conv_state"].clone()
    eager_out = _call(UPDATE, run, dict(inputs, conv_state=eager_state), params,
                      torch.full_like(inputs["x"], float("nan")))
    out = torch.full_like(inputs["x"], float("nan"))
    _call(UPDATE, run, dict(inputs, conv_state=inputs["conv_state"].clone()), params, out)  # warm up
    state = inputs["conv_state"].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _call(UPDATE, run, dict(inputs, conv_state=state), params, out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out) and torch.equal(state, eager_state)


def _row_of(op: str, label: str) -> tuple[int, str]:
    """A spec row's index and its first dtype case, by label."""
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    row = next(r for r in load_manifest()[op].workloads if r.label == label)
    return row.index, next(iter(dtype_cases(row)))


@pytest.mark.parametrize("op,label", [(UPDATE, "qwen3.5-b256-t1"), (UPDATE, "qwen3.5-b256-t2-mtp"),
                                      (VARLEN, "qwen3.5-prefill-4k-8seq")])
def test_a_dependent_launch_program_chains_steps_on_one_pool_like_the_plain_program(op, label, arch, cuda_device,
                                                                                   gen):
    """``dependent_launch`` (a sweep candidate): four steps back to back with no synchronisation, each
    reading the pool the step before wrote, then the four in a CUDA graph replayed twice. A program
    that touched memory before the previous kernel ended would read a stale window: every step's
    ``out`` and the pool must be the plain program's bits."""
    import torch

    from tileops_cuda.kernels._common import DEPENDENT_LAUNCH_ARCHS

    if arch not in DEPENDENT_LAUNCH_ARCHS:
        pytest.skip(f"{arch} has no programmatic dependent launch")
    row_index, case = _row_of(op, label)
    inputs, params = _instance(op, row_index, case, cuda_device[0], 11)
    runs = {d: _launcher(op, inputs, params, arch, dependent_launch=d) for d in (False, True)}
    start = inputs["conv_state"].clone()

    def chain(run, pool, outs):
        for out in outs:
            _call(op, run, dict(inputs, conv_state=pool), params, out)

    def fresh():
        return start.clone(), [torch.full_like(inputs["x"], float("nan")) for _ in range(4)]

    want_pool, want = fresh()
    chain(runs[False], want_pool, want)
    pool, outs = fresh()
    chain(runs[True], pool, outs)
    torch.cuda.synchronize()
    bits = lambda t: t.view(torch.uint8)  # noqa: E731
    assert all(torch.equal(bits(o), bits(w)) for o, w in zip(outs, want)) and torch.equal(bits(pool), bits(want_pool))
    pool, outs = fresh()

    def reset() -> None:
        pool.copy_(start)
        for o in outs:
            o.fill_(float("nan"))

    def check() -> None:
        assert all(torch.equal(bits(o), bits(w)) for o, w in zip(outs, want))
        assert torch.equal(bits(pool), bits(want_pool))

    assert_replays_like_eager(lambda: chain(runs[True], pool, outs), reset, check)


#: Unchecked metadata (contents checks off, as in serving) over T = 12 tokens: ``(style, metadata)``.
#: The spec reads it as RGDR's ``clipped_bounds`` does; the decreasing cases start a sequence below
#: the running maximum, where clipping the start alone (``clip(cu[b])``) and the rule's
#: ``clip(max(cu[0..b]))`` disagree, and a negative length lowers a raw sum's later starts (both
#: programs read them so until 2026-12-05; the varlen one also left a negative first start's tokens
#: uncovered).
_UNCHECKED_T = 12
_UNCHECKED_META = {
    "lengths-past-T": ("lengths", [3, 6, 7]),
    "lengths-negative": ("lengths", [2, -3, 4, 9]),
    "lengths-first-past-T": ("lengths", [15, 2]),
    "cu-past-T": ("cu_seqlens", [0, 4, 20]),
    "cu-decreasing": ("cu_seqlens", [0, 7, 3, 10]),
    "cu-decreasing-below-a-start": ("cu_seqlens", [2, 2, 9, 1, 11]),
    "cu-negative-first": ("cu_seqlens", [-4, 5, 12]),
}


def _clipped_metadata(meta: list, style: str, T: int, accepted: list | None):
    """The metadata the spec reads ``meta`` as, written as valid metadata of the same style (what
    the float64 loop reads literally), and the accepted counts clipped to ``[1, L_b]``."""
    from tileops_cpu_ref.rgdr import clipped_accepted, clipped_bounds

    starts, lengths = clipped_bounds(meta, style, T)
    valid = lengths if style == "lengths" else [starts[0] if starts else 0, *(s + n for s, n in zip(starts, lengths))]
    return valid, None if accepted is None else clipped_accepted(accepted, lengths), starts, lengths


def _cpu_reference(op: str, i, params):
    """The CPU kernel (``tileops_cpu_ref.conv``) on ``i``; returns ``out``, writes ``i["conv_state"]``."""
    from tileops_cpu_ref.conv import causal_conv1d_update, causal_conv1d_varlen

    if op == UPDATE:
        return causal_conv1d_update(i["x"], i["conv_state"], i["weight"], i["actual_seq_lengths"],
                                    i["conv_state_indices"], i.get("bias"), i.get("num_accepted_tokens"), **params)
    return causal_conv1d_varlen(i["x"], i["conv_state"], i["weight"], i["actual_seq_lengths"], i["conv_state_indices"],
                                i.get("has_initial_state"), i.get("bias"), **params)


def _check_unchecked(op: str, style: str, meta, accepted: list | None, dtype: str, T: int, arch: str, dev, gen,
                     **tile) -> None:
    """``meta`` (a ``[B]`` or ``[B + 1]`` int tensor on ``dev``, checks off) through the kernel of
    ``tile``: ``out`` (poisoned with NaN first) is the float64 loop over the spec's clipped spans,
    uncovered tokens zeros, the pool its pool bit for bit (slots no token addresses keep theirs);
    the CPU reference on the same unchecked metadata agrees; the unchecked-index program writes
    the same bits. ``accepted`` (decode) may lie outside ``[1, L_b]``."""
    import torch

    D, W = 128, 4
    B = meta.shape[0] - (style == "cu_seqlens")
    tdt = getattr(torch, dtype)
    n_slots = T if op == UPDATE else B
    pool = torch.randn(n_slots + 3, D, W - 1, device=dev, generator=gen).to(tdt)
    slots = torch.randperm(n_slots + 3, device=dev, generator=gen)[:n_slots].int()
    slots[1] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).to(tdt), conv_state=pool.clone(),
                  weight=torch.randn(D, W, device=dev, generator=gen).to(tdt), actual_seq_lengths=meta,
                  conv_state_indices=slots, bias=torch.randn(D, device=dev, generator=gen).to(tdt))
    if op == UPDATE:
        inputs["num_accepted_tokens"] = torch.tensor(accepted, dtype=torch.int32, device=dev)
    else:
        inputs["has_initial_state"] = torch.rand(B, device=dev, generator=gen) < 0.7
    params = {"activation": "silu", "seq_lens_style": style}
    valid, clipped_acc, starts, lengths = _clipped_metadata(meta.tolist(), style, T,
                                                            accepted if op == UPDATE else None)
    originals = {n: t.cpu().clone() for n, t in inputs.items()}
    before = dict(inputs, conv_state=pool.clone())

    out = torch.full_like(inputs["x"], float("nan"))
    _call(op, _launcher(op, inputs, params, arch, **tile), inputs, params, out)
    torch.cuda.synchronize()

    loop_inputs = dict(originals, actual_seq_lengths=torch.tensor(valid))
    if clipped_acc is not None:
        loop_inputs["num_accepted_tokens"] = torch.tensor(clipped_acc)
    expected = REFERENCES[op](None, loop_inputs, params)
    err = relative_error(out.cpu(), expected["out"])
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g} against the loop over the clipped spans"
    covered = [t for s, n in zip(starts, lengths) for t in range(s, s + n)]
    uncovered = [t for t in range(T) if t not in covered]
    assert torch.equal(out[uncovered].cpu(), torch.zeros(len(uncovered), D, dtype=tdt))
    got = inputs["conv_state"].cpu()
    assert torch.equal(got.view(torch.uint8), expected["conv_state"].to(got.dtype).view(torch.uint8))

    ref_pool = originals["conv_state"].clone()
    ref_out = _cpu_reference(op, dict(originals, conv_state=ref_pool), params)
    assert relative_error(out.cpu(), ref_out.to(torch.float64)) <= TOLERANCE[out.dtype]
    assert torch.equal(got.view(torch.uint8), ref_pool.view(torch.uint8))
    _compare_unchecked(op, before, inputs["conv_state"], out, params, arch, **tile)


@pytest.mark.parametrize("case", list(_UNCHECKED_META))
def test_unchecked_metadata_through_a_speculating_update_matches_the_clipping_reference(case, arch, cuda_device, gen):
    """The unchecked metadata cases through the update guessing its windows (``speculate``): a guess on clipped
    spans holds or misses, and either way the result is the spec's rule."""
    import torch

    style, meta = _UNCHECKED_META[case]
    B = len(meta) - (style == "cu_seqlens")
    _check_unchecked(UPDATE, style, torch.tensor(meta, dtype=torch.int32, device=cuda_device[0]),
                     [0, 99, -3, 2, 1][:B], "bfloat16", _UNCHECKED_T, arch, cuda_device[0], gen, speculate=2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(_UNCHECKED_META))
@pytest.mark.parametrize("op", [UPDATE, VARLEN])
def test_unchecked_metadata_matches_the_clipping_reference(op, case, dtype, arch, cuda_device, gen):
    """Lengths past T, negative lengths, cu_seqlens past T, negative or decreasing, accepted counts
    outside ``[1, L_b]`` (the launcher checks no contents, as the ops with checks off), through the
    registered block shape: the kernel follows the spec's rule (:func:`_check_unchecked`)."""
    import torch

    style, meta = _UNCHECKED_META[case]
    B = len(meta) - (style == "cu_seqlens")
    _check_unchecked(op, style, torch.tensor(meta, dtype=torch.int32, device=cuda_device[0]),
                     [0, 99, -3, 2, 1][:B], dtype, _UNCHECKED_T, arch, cuda_device[0], gen)


@pytest.mark.parametrize("tile", [{}, {"threads": 32}], ids=["in-kernel", "past-threads"])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("op", [UPDATE, VARLEN])
def test_unchecked_metadata_of_many_sequences_and_64_bit_entries_matches_the_clipping_reference(
        op, style, tile, arch, cuda_device, gen):
    """70 sequences over 50 tokens, int64 metadata with entries past int32 (clipped, never wrapped),
    negative, and decreasing both among the first 32 entries and after them. Registered shape: the
    varlen program scans all of them itself (a sum of clipped lengths, a running maximum of clipped
    prefix sums); 32 threads: the varlen launcher gives it non-decreasing prefix sums past its
    threads, and the decode program reaches its serial tail (more than two blocks of threads)."""
    import torch

    dev, T, B = cuda_device[0], 50, 70
    if style == "lengths":
        meta = torch.randint(-1, 3, (B,), device=dev, generator=gen)
        meta[3], meta[B - 5] = -2**33, 2**33 + 5  # (2**33 + 5 wraps to 5 in int32)
    else:
        meta = torch.randint(0, T + 1, (B + 1,), device=dev, generator=gen).sort().values
        meta[5], meta[20] = -2**33, meta[20] - 9  # negative; decreasing inside the first 32
        meta[40], meta[B - 2], meta[B] = meta[40] - 12, 2**33 + 5, T - 3  # decreasing past them; past int32
    accepted = torch.randint(-3, 5, (B,), device=dev, generator=gen).tolist()
    _check_unchecked(op, style, meta.to(torch.int64), accepted, "bfloat16", T, arch, dev, gen, **tile)


@pytest.mark.parametrize("unchecked_index", [False, True], ids=["checked", "unchecked-index"])
@pytest.mark.parametrize("op", [UPDATE, VARLEN])
def test_unchecked_64_bit_slots_past_int32_are_padding_not_the_slots_they_wrap_to(op, unchecked_index, arch,
                                                                                  cuda_device, gen):
    """int64 conv_state_indices, checks off, with entries ``2**32 + k`` (``k`` in int32: a real slot): one names
    a slot no other entry does, its sequence reading its initial window there; the other the slot the entry
    before it names (decode: the previous token's, which the wrapped entry would have made it skip; varlen:
    another sequence's). Outside ``[0, S)``, both are padding, as a GPU kernel reads such a slot (the CPU
    reference refuses it): a zero initial window, nothing written. ``out`` (NaN-poisoned first) is the float64
    loop's with those entries -1 and the pool its pool bit for bit, so both real slots hold what the valid
    entries wrote or their own bits."""
    import torch

    dev, D, W, lengths = cuda_device[0], 128, 4, [3, 1, 4, 2]
    B, T = len(lengths), sum(lengths)
    n_slots = T if op == UPDATE else B
    tdt = torch.bfloat16
    pool = torch.randn(n_slots + 3, D, W - 1, device=dev, generator=gen).to(tdt)
    slots = torch.randperm(n_slots + 3, device=dev, generator=gen)[:n_slots]
    spare = next(s for s in range(n_slots + 3) if s not in slots.tolist())
    # decode: token 0 (sequence 0's first: its initial window and a write), token 5 (sequence 2's second,
    # wrapping onto token 4's slot); varlen: sequence 0, and sequence 2 wrapping onto sequence 1's slot
    wide, onto = (0, 5) if op == UPDATE else (0, 2)
    slots[wide], slots[onto] = 2**32 + spare, 2**32 + slots[onto - 1]
    padded = slots.clone()
    padded[[wide, onto]] = -1
    inputs = dict(x=torch.randn(T, D, device=dev, generator=gen).to(tdt), conv_state=pool.clone(),
                  weight=torch.randn(D, W, device=dev, generator=gen).to(tdt),
                  actual_seq_lengths=torch.tensor(lengths, dtype=torch.int64, device=dev),
                  conv_state_indices=slots, bias=torch.randn(D, device=dev, generator=gen).to(tdt))
    if op == VARLEN:
        inputs["has_initial_state"] = torch.ones(B, dtype=torch.bool, device=dev)
    params = {"activation": "silu", "seq_lens_style": "lengths"}
    want = REFERENCES[op](None, {n: t.cpu() for n, t in dict(inputs, conv_state_indices=padded).items()}, params)
    with pytest.raises(IndexError, match="lie past the conv state pool"):
        _cpu_reference(op, {n: t.cpu().clone() for n, t in inputs.items()}, params)

    out = torch.full_like(inputs["x"], float("nan"))
    _call(op, _launcher(op, inputs, params, arch, unchecked_index=unchecked_index), inputs, params, out)
    torch.cuda.synchronize()
    err = relative_error(out.cpu(), want["out"])
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g} against the loop with the entries -1"
    got = inputs["conv_state"].cpu()
    assert torch.equal(got.view(torch.uint8), want["conv_state"].to(got.dtype).view(torch.uint8))
    assert torch.equal(got[spare].view(torch.uint8), pool[spare].cpu().view(torch.uint8))
