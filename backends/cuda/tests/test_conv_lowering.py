"""The causal conv1d programs lower to CUDA for sm_90 without a GPU (skips without tilelang): the
decode step and the varlen program in both metadata styles, so a TileLang script error shows
before a GPU run."""

from __future__ import annotations

import dataclasses
import re

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey  # noqa: E402
from tileops_cuda.kernels.conv1d_program import conv_update_program, conv_varlen_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


def _source(program) -> str:
    with tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(program, target=_TARGET).kernel_source


@pytest.mark.parametrize("twin", ["plain", "end_rows_first", "unrolled_starts"])
@pytest.mark.parametrize("meta_lengths", [False, True], ids=["cu", "lengths"])
def test_the_varlen_program_lowers_for_sm_90(meta_lengths, twin):
    key = ConvVarlenBuildKey("bfloat16", 1088, 4, True, True, True, "int64", "int32", meta_lengths, "sm_90",
                             **({} if twin == "plain" else {twin: True}))
    source = _source(conv_varlen_program(key))
    assert ("int up = __shfl_up_sync" in source) == meta_lengths  # the lengths' sum-scan
    # end_rows_first: a start's final-window rows go into their own registers (xe) before its slot is read
    if twin == "end_rows_first":
        assert "bfloat16_t xe[24];" in source and source.index("xe + (k_") < source.index("slots[")
    else:
        assert "xe[" not in source
    # the plain slow path re-reads each row into xt; unrolled_starts reads the group's rows from xs
    assert ("xt[" in source) == (twin != "unrolled_starts")


@pytest.mark.parametrize("program", ["update", "varlen"])
def test_the_tanh_silu_takes_one_tanh_approx_an_element_where_silu_takes_an_exp_and_a_reciprocal(program):
    if program == "update":
        key, build = ConvUpdateBuildKey("bfloat16", 8200, 4, True, True, "lengths", "int32", "int32", None,
                                        "sm_90"), conv_update_program
    else:
        key, build = ConvVarlenBuildKey("bfloat16", 1088, 4, True, True, True, "int64", "int32", False,
                                        "sm_90"), conv_varlen_program
    plain = _source(build(key))
    tanh = _source(build(dataclasses.replace(key, tanh_silu=True)))
    assert "__expf(" in plain and "tl_tanh_approx" not in plain
    assert "__expf(" not in tanh and 'asm("tanh.approx.f32 %0, %1;"' in tanh
    assert tanh.count("tl_tanh_approx(") == plain.count("__expf(") + 1  # each SiLU's exp, and the definition


def test_flat_grid_lays_every_varlen_program_along_x_in_the_same_order():
    """``flat_grid``: one grid axis, the program's channel block its index modulo the blocks, its chunk the
    quotient (channel blocks still varying fastest); the plain grid puts the chunks along y."""
    key = ConvVarlenBuildKey("bfloat16", 1088, 4, True, True, True, "int64", "int32", False, "sm_90")
    plain = _source(conv_varlen_program(key))
    flat = _source(conv_varlen_program(ConvVarlenBuildKey(**{**key.__dict__, "flat_grid": True})))
    assert "blockIdx.y" in plain and "blockIdx.y" not in flat
    blocks = -(-1088 // (key.threads * 8))
    assert f"((int)blockIdx.x) % {blocks})" in flat and f"((int)blockIdx.x) / {blocks})" in flat


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_the_update_program_lowers_for_sm_90(style):
    key = ConvUpdateBuildKey("bfloat16", 8200, 4, True, True, style, "int32", "int32", "int32", "sm_90")
    assert "conv_update" in _source(conv_update_program(key))


# ``unchecked_index`` (no TileLang bounds checks, pass config ``tl.disable_safe_memory_legalize``) on
# the registered Qwen3.5 keys (D = 8192, W = 4, bf16, SiLU); lowered as a build lowers them.
_UPDATE_MTP = ConvUpdateBuildKey("bfloat16", 8192, 4, True, False, "lengths", "int32", "int32", "int32", "sm_90",
                                 threads=128, registers=0)
_VARLEN_CU = ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, True, "int32", "int32", False, "sm_90")


def _checked_and_unchecked(program, key) -> tuple[str, str]:
    from dataclasses import replace

    from lowered_source import lowered_source

    return tuple(lowered_source(program, replace(key, unchecked_index=u)) for u in (False, True))


def test_unchecked_index_drops_the_update_tokens_bounds_checks():
    checked, unchecked = _checked_and_unchecked(conv_update_program, _UPDATE_MTP)
    # each token's x load, out store and slot reads; the lengths' reads past B
    for guard in ("if ((t < T) && (0 <= t))", "if (((t < T) && (0 <= t)))", "< BM)) {\n        condval"):
        assert guard in checked and guard not in unchecked, guard
    # with no sequences (B = 0) the unchecked program still reads no metadata: its own check
    for guard, entry in (("BM", "condval = min(max(seq_meta[((int64_t)((int)blockIdx.y))], 0), T);"),
                         ("NA", "condval_1 = min(max(nacc[((int64_t)((int)blockIdx.y))], 1), T);")):
        assert f"if ((((int)blockIdx.y) < {guard})) {{\n    {entry}" in unchecked


def test_unchecked_index_drops_the_varlen_metadata_and_row_bounds_checks():
    checked, unchecked = _checked_and_unchecked(conv_varlen_program, _VARLEN_CU)
    # the slot and initial-state reads of a sequence's first token, the output rows, the search's reads
    for guard in ("if ((c_1 <= NI))", "if ((c_1 <= NH))", "if ((0 < S))", "+ r) < T) {",
                  "((0 <= (found[0] + found[3])) && ((found[0] + found[3]) < BM))"):
        assert guard in checked and guard not in unchecked, guard


# Unchecked metadata (contents checks off) follows the specs' rule (tileops_cpu_ref.rgdr.clipped_bounds): every
# entry clipped into [0, T] in its own dtype before it becomes int32, lengths summed saturating at T, prefix sums
# through their running maximum (a start is clip(max(cu[0..b])), not clip(cu[b])). The GPU test
# test_conv_gpu.py::test_unchecked_metadata_matches_the_clipping_reference checks the values.
def _clipped(entry: str, lo: int = 0) -> str:
    """The CUDA of a 64-bit metadata ``entry`` clipped into ``[lo, T]``, then made int32."""
    return f"((int)min(max({entry}, (int64_t){lo}), ((int64_t)T)))"


@pytest.mark.parametrize("style,reduced", [
    ("lengths", ["part = min((part + {}), T);", "part = min((part + __shfl_xor_sync", "start = 0;",
                 "start = min((start + red[w]), T);"]),
    ("cu_seqlens", ["part = max(part, {});", "part = max(part, __shfl_xor_sync", "start = own;",
                    "start = max(start, red[w]);"]),
], ids=["lengths", "cu_seqlens"])
def test_a_decode_sequence_starts_at_the_clipped_earlier_entries_reduced(style, reduced):
    """Lengths: their saturating sum; prefix sums: their maximum with the sequence's own entry."""
    from lowered_source import lowered_source

    key = ConvUpdateBuildKey("bfloat16", 8192, 4, True, False, style, "int64", "int32", "int64", "sm_90",
                             unchecked_index=True)
    source = lowered_source(conv_update_program, key)
    for line in reduced:
        assert line.format(_clipped("seq_meta[((h * 128) + ((int)threadIdx.x))]")) in source, line
    assert _clipped("nacc[((int64_t)((int)blockIdx.y))]", lo=1) in source  # the accepted count, into [1, T]


def test_the_varlen_search_runs_over_the_running_maximum_of_the_clipped_prefix_sums():
    from lowered_source import lowered_source

    key = ConvVarlenBuildKey("bfloat16", 8192, 4, True, False, True, "int64", "int32", False, "sm_90",
                             unchecked_index=True)
    source = lowered_source(conv_varlen_program, key)
    # the first `threads` entries, scanned into shared memory by every program
    assert f"part[0] = {_clipped('cu[min(((int)threadIdx.x), nb)]')};" in source
    assert "part[0] = max(part[0], __shfl_up_sync(" in source and "part[0] = max(part[0], condval);" in source
    # the entries past them (non-decreasing from the launcher): clipped as the search reads them
    assert _clipped("cu[(found[(int64_t)0] + found[(int64_t)3])]") in source


# ``dependent_launch`` (``_common.dependent_launch``): both programs wait for the stream's previous kernel before
# their first memory access, and the plain programs have no such wait.
@pytest.mark.parametrize("program,key,buffers", [
    (conv_update_program, _UPDATE_MTP, "x|pool|weight|bias|seq_meta|slots|nacc|out"),
    (conv_varlen_program, _VARLEN_CU, "x|pool|weight|bias|cu|slots|has_init|out"),
], ids=["update", "varlen"])
def test_a_dependent_launch_program_waits_before_its_first_memory_access(program, key, buffers):
    from dataclasses import replace

    from lowered_source import lowered_source, waits_before_its_first_memory_access

    assert waits_before_its_first_memory_access(lowered_source(program, replace(key, dependent_launch=True)), buffers)
    assert "cudaGridDependencySynchronize" not in lowered_source(program, key)


# A 64-bit slot is tested against the pool in its own dtype before it becomes int32 (made int32 first, 2**32 + k
# wraps onto slot k: another sequence's window read or written); int32 slots keep their one compare, the same code.
# test_conv_gpu.py::test_unchecked_64_bit_slots_past_int32_are_padding_not_the_slots_they_wrap_to checks the values.
@pytest.mark.parametrize("program,key,casts", [
    (conv_update_program, _UPDATE_MTP, 3),  # the initial window's slot, each token's and the next token's
    (conv_varlen_program, _VARLEN_CU, 6),  # a sequence's slot, at each use on its first token
], ids=["update", "varlen"])  # fmt: skip
def test_a_64_bit_slot_is_tested_against_the_pool_in_its_own_dtype_before_it_becomes_int32(program, key, casts):
    from dataclasses import replace

    from lowered_source import index_casts, lowered_source

    wide = lowered_source(program, replace(key, slot_dtype="int64", unchecked_index=True))
    assert index_casts(wide, "slots", "((int64_t)S)") == (casts, [])
    narrow = lowered_source(program, replace(key, unchecked_index=True))
    assert "< ((int64_t)S)" not in narrow and "(int)slots[" not in narrow
    assert ("int sl = slots[((int64_t)t)];" in narrow) == (program is conv_update_program)


@pytest.mark.parametrize("speculate,accepted", [(1, None), (2, "int32"), (4, "int64")], ids=["t1", "t2-mtp", "t4-mtp"])
def test_a_speculating_update_loads_its_guessed_window_before_the_metadatas_barrier(speculate, accepted):
    """``speculate``: the guessed tokens' slots (one load each), the guessed first x row and the window at the
    guessed slot go out before the barrier of the earlier entries' reduction; after it the guess is kept only where
    the start and the length agree, else the slot and the window are loaded as before. Without it neither."""
    key = dataclasses.replace(_UPDATE_MTP, accepted_dtype=accepted, unchecked_index=True, speculate=speculate)
    source = _source(conv_update_program(key))
    barrier = source.index("__syncthreads();")
    candidates = re.search(r"cand\[(j|0)\] = ", source)
    assert candidates and candidates.start() < barrier and "slots[" in source[candidates.start():barrier]
    assert source.index("*(uint4*)(svg + ") < barrier and source.index("*(uint4*)(xg + ") < barrier
    hit = source.index("hit = ", barrier)
    assert hit < source.index("(pool + ", hit)  # the window loaded as before only past the guess
    plain = _source(conv_update_program(dataclasses.replace(key, speculate=0)))
    assert "cand[" not in plain and "svg" not in plain


def test_a_speculation_outside_its_range_is_refused_by_name():
    from tileops_cuda.kernels.conv1d import conv_refusal

    assert conv_refusal(dataclasses.replace(_UPDATE_MTP, speculate=9)).endswith(
        "speculate=9 is the tokens a sequence the update guesses, 0 to 8; use the defaults")
    assert conv_refusal(dataclasses.replace(_UPDATE_MTP, speculate=8)) is None
