"""The attention programs lower to CUDA for sm_90 without a GPU (skips without tilelang), and the
layouts meant to stream the cache with bulk copies do (a TMA pipeline), gathered paged tiles
stream with asynchronous copies (cp.async), and the row-by-row paged fallback does neither.
The overlap prefill program keeps one product in flight through its softmax, also once ptxas
has compiled it (nvcc for sm_90a, when present: no serialised wgmma, no spills), and with
``cache_write="attention"`` writes the caches from its producer warpgroup."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shutil
import subprocess

import pytest

tilelang = pytest.importorskip("tilelang")

from tileops_cuda.kernels.attention_decode import (  # noqa: E402
    DecodeBuildKey, DecodeSchedule, default_tiling, page_layout, split_tiling,
)
from tileops_cuda.kernels.attention_decode_program import (  # noqa: E402
    decode_combine_program, decode_parallel_combine_program, decode_sliced_combine_program, decode_split_program,
)
from tileops_cuda.kernels.attention_prefill import (  # noqa: E402
    CACHE_THREADS, CACHE_TOKENS, PREFILL_CACHE_WRITES, PREFILL_GRIDS, PREFILL_PROGRAMS, PREFILL_SETTINGS,
    PrefillBuildKey,
)
from tileops_cuda.kernels.attention_prefill import default_tiling as prefill_tiling  # noqa: E402
from tileops_cuda.kernels.attention_prefill_program import (  # noqa: E402
    prefill_attention_program, prefill_cache_program, prefill_tile_counts_program,
)
from tileops_cuda.kernels.attention_prefill_warpspec import prefill_attention_overlap_program  # noqa: E402

_TARGET = {"kind": "cuda", "arch": "sm_90"}


def _source(func) -> str:
    with tilelang.tvm.target.Target(_TARGET):
        return tilelang.lower(func, target=_TARGET).kernel_source


@pytest.mark.parametrize("block,bulk", [(None, True), (16, True), (128, True), (3, False)],
                         ids=["contiguous", "paged16", "paged128", "paged3-rows"])
def test_the_decode_split_program_lowers_with_bulk_copies_where_tiles_fit_a_block(block, bulk):
    key = DecodeBuildKey("bfloat16", 16, 2, 256, block is not None, "int32", None if block is None else "int32")
    page, tiling = (None, default_tiling(key)) if block is None else page_layout(block)
    assert ("tma_load" in _source(decode_split_program(key, tiling, page))) == bulk


@pytest.mark.parametrize("block", [16, 48, 1])
def test_gathered_paged_tiles_stream_with_asynchronous_copies(block):
    key = DecodeBuildKey("bfloat16", 16, 2, 256, True, "int32", "int64")
    page, tiling = page_layout(block, "gather")
    source = _source(decode_split_program(key, tiling, page))
    assert "cp_async" in source and "tma_load" not in source


def test_the_three_stage_contiguous_pipeline_streams_with_bulk_copies():
    key = DecodeBuildKey("bfloat16", 16, 2, 256)
    page, tiling = split_tiling(key, DecodeSchedule(stages=3), None)
    assert tiling.stages == 3 and "tma_load" in _source(decode_split_program(key, tiling, page))


@pytest.mark.parametrize("D,seqlens", [(256, "int32"), (16, "int64"), (48, "int32")])
def test_the_parallel_combine_lowers_with_warp_shuffles_for_any_head_size(D, seqlens):
    source = _source(decode_parallel_combine_program(DecodeBuildKey("float16", 6, 2, D, seqlens_dtype=seqlens)))
    assert "__shfl_xor_sync" in source


@pytest.mark.parametrize("D,seqlens,slices", [(256, "int32", True), (128, "int64", True), (16, "int64", False),
                                              (48, "int32", False)])
def test_the_sliced_combine_loads_the_partials_before_it_waits_for_the_weights(D, seqlens, slices):
    """The prefetched partials' loads (one unrolled loop) come before the first barrier (the weights'
    reduction), beside the log-sum-exps'; head sizes
    that are a multiple of 64 channels are cut into a program a slice (the grid's third index)."""
    source = _source(decode_sliced_combine_program(DecodeBuildKey("bfloat16", 16, 2, D, seqlens_dtype=seqlens)))
    body = source[source.index("__launch_bounds__"):]
    before_barrier = body[: body.index("__syncthreads")]
    assert "*(float4*)(o_part + " in before_barrier and "lse_part[" in before_barrier
    assert ("blockIdx.z" in body) == slices


def test_the_decode_combine_program_lowers_for_small_heads_and_int64_lengths():
    key = DecodeBuildKey("float16", 6, 2, 16, seqlens_dtype="int64")
    assert "decode_combine" in _source(decode_combine_program(key, default_tiling(key)))


# The small-batch candidates (issue 21) on the Qwen3-Next key (16 query heads, 2 key/value heads, D = 256, bf16,
# contiguous): the light split program (16 score rows).
_QWEN_DECODE = DecodeBuildKey("bfloat16", 16, 2, 256)
_LIGHT = DecodeSchedule(combine="parallel", block_h=16)


def _decode_split_source(schedule: DecodeSchedule) -> str:
    from lowered_source import lowered_source

    page, tiling = split_tiling(_QWEN_DECODE, schedule, None)
    return lowered_source(lambda key: decode_split_program(key, tiling, page), _QWEN_DECODE)


def test_the_light_split_program_multiplies_on_mma_and_asks_for_three_programs_an_sm():
    source = _decode_split_source(_LIGHT)
    assert "tl::mma_sync<" in source and "wgmma" not in source
    assert "__launch_bounds__(256, 3)" in source and "warpgroup_reg_alloc" not in source
    assert source.count("tma_load(") == _decode_split_source(DecodeSchedule(combine="parallel")).count("tma_load(")


def test_ptxas_fits_three_light_split_programs_an_sm_without_spills(tmp_path):
    report = _ptxas_report(_decode_split_source(_LIGHT), tmp_path)
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    assert registers * 256 * 3 <= 65536, report
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report


_QWEN_PAGED = DecodeBuildKey("bfloat16", 16, 2, 256, True, "int32", "int32")


def _light_paged_source(block: int, tiles: str) -> str:
    from lowered_source import lowered_source

    schedule = DecodeSchedule(tiles=tiles, combine="parallel", block_h=16)
    page, tiling = split_tiling(_QWEN_PAGED, schedule, block)
    return lowered_source(lambda key: decode_split_program(key, tiling, page), _QWEN_PAGED)


@pytest.mark.parametrize("rows", [16, 64], ids=["light", "64-row"])
def test_a_contiguous_split_program_gathers_its_rows_with_asynchronous_copies(rows):
    """``tiles="gather"`` on a contiguous key: no bulk copy of the caches, cp.async rows, no block table read, the
    program's own products (the light one's mma and launch bounds, the 64-row one's wgmma); the bulk program beside
    it streams its tiles with TMA."""
    from lowered_source import lowered_source

    key = DecodeBuildKey("bfloat16", 16, 2, 256)
    sources = {}
    for tiles in ("gather", "block"):
        _, tiling = split_tiling(key, DecodeSchedule(tiles=tiles, combine="parallel", block_h=rows), None)
        sources[tiles] = lowered_source(lambda key: decode_split_program(key, tiling, None), key)
    gathered, bulk = sources["gather"], sources["block"]
    assert "tma_load(" not in gathered and "cp_async" in gathered and "block_table[" not in gathered
    if rows == 16:
        assert "tl::mma_sync<" in gathered and re.search(r"__launch_bounds__\(\d+, 3\)", gathered)
    else:
        assert "wgmma" in gathered
    assert "tma_load(" in bulk


@pytest.mark.parametrize("block,tiles,bulk", [(16, "gather", False), (64, "gather", True), (16, "block", False)],
                         ids=["gathered", "inside-a-block", "row-by-row"])
def test_the_light_paged_split_program_multiplies_on_mma_and_reads_the_block_table(block, tiles, bulk):
    source = _light_paged_source(block, tiles)
    assert "tl::mma_sync<" in source and "wgmma" not in source and "block_table[" in source
    assert ("tma_load(" in source) == bulk
    assert re.search(r"__launch_bounds__\(\d+, 3\)", source)


def test_ptxas_fits_three_gathered_light_split_programs_an_sm_without_spills(tmp_path):
    report = _ptxas_report(_light_paged_source(16, "gather"), tmp_path)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report


def test_the_contiguous_split_program_reads_no_block_table():
    assert "block_table[" not in _decode_split_source(DecodeSchedule(combine="parallel"))


#: Unchecked metadata (issue 21): the decode programs a length reaches (contiguous and paged splits, the three
#: combines), int32 and int64 lengths, and the paged splits by how they read a block: gathered, row by row, in bulk.
_LENGTH_READERS = {
    "split-contiguous": lambda sd: decode_split_program(DecodeBuildKey("bfloat16", 16, 2, 256, seqlens_dtype=sd),
                                                        default_tiling(_QWEN_DECODE), None),
    "split-paged-gathered": lambda sd: decode_split_program(
        DecodeBuildKey("bfloat16", 16, 2, 256, True, sd, "int32"), *page_layout(16, "gather")[::-1]),
    "combine-serial": lambda sd: decode_combine_program(DecodeBuildKey("bfloat16", 16, 2, 256, seqlens_dtype=sd),
                                                        default_tiling(_QWEN_DECODE)),
    "combine-parallel": lambda sd: decode_parallel_combine_program(
        DecodeBuildKey("bfloat16", 16, 2, 256, seqlens_dtype=sd)),
    "combine-sliced": lambda sd: decode_sliced_combine_program(DecodeBuildKey("bfloat16", 16, 2, 256,
                                                                              seqlens_dtype=sd)),
}


@pytest.mark.parametrize("seqlens", ["int32", "int64"])
@pytest.mark.parametrize("program", list(_LENGTH_READERS))
def test_a_decode_program_tests_a_length_against_the_capacity_in_its_own_dtype_before_using_it(program, seqlens):
    """The first read of ``cache_seqlens`` is ``0 <= n < capacity`` (a length at or past the capacity is
    padding, as a negative one; an int64 one compared before it is narrowed), in every program."""
    source = _source(_LENGTH_READERS[program](seqlens))
    body = source[source.index("{", source.index("__launch_bounds__")):]
    test = re.search(r"(?:\(int64_t\))?0 <= cache_seqlens\[([^\]]+)\]\) && \(cache_seqlens\[\1\] < "
                     + (r"\(\(int64_t\)capacity\)" if seqlens == "int64" else "capacity"), body)
    assert test is not None and test.start() <= body.index("cache_seqlens[") < test.end()


@pytest.mark.parametrize("block,tiles,rows,table,pool", [
    (16, "gather", 64, "int32", "(NL >> 4)"), (16, "gather", 16, "int64", "(NL >> 4)"),
    (16, "block", 16, "int32", "blocks"), (3, "block", 64, "int64", "blocks"), (64, "block", 64, "int32", "(NL >> 6)")],
    ids=["gathered", "light-gathered-int64", "light-row-by-row", "row-by-row-int64", "bulk"])
def test_a_paged_split_program_reaches_the_caches_only_through_a_clamped_block_entry(block, tiles, rows, table, pool):
    """Every cache address (loads, bulk copies, the step's write) takes its table entry through an unsigned
    clamp (an entry outside [0, N) lands past the pool, where the bounds-checked loads read zeros and no
    row wraps int32), and the write is under a test of that entry against the pool's N blocks."""
    from lowered_source import lowered_source

    key = DecodeBuildKey("bfloat16", 16, 2, 256, True, "int32", table)
    page, tiling = split_tiling(key, DecodeSchedule(tiles=tiles, block_h=rows), block)
    source = lowered_source(lambda key: decode_split_program(key, tiling, page), key)
    uint = "uint64_t" if table == "int64" else "uint"
    addressing = [line for line in source.splitlines()
                  if re.search(r"\b(key|value)_cache(\[| \+ )|tma_load\((key|value)_cache_desc", line)]
    assert addressing and all(f"min((({uint})" in line for line in addressing), addressing
    assert re.search(rf"min\(\(\({uint}\)\w+\), [^;]*\)\) < {re.escape(pool)}\)\) {{", source)


@pytest.mark.parametrize("paged", [False, True])
def test_the_prefill_programs_lower_and_the_attention_streams_with_bulk_copies(paged):
    key = PrefillBuildKey("bfloat16", 16, 2, 256, paged, "int64", "int32" if paged else None)
    assert "tma_load" in _source(prefill_attention_program(key, prefill_tiling(key)))
    assert "prefill_cache" in _source(prefill_cache_program(key, CACHE_TOKENS, CACHE_THREADS))


#: The overlap program's keys: Qwen3-Next's (both layouts, int64 offsets) and the GPU tests' others.
_OVERLAP_KEYS = [PrefillBuildKey("bfloat16", 16, 2, 256, False, "int32", None, program="overlap"),
                 PrefillBuildKey("bfloat16", 16, 2, 256, True, "int64", "int32", program="overlap"),
                 PrefillBuildKey("float16", 8, 1, 128, program="overlap"),
                 PrefillBuildKey("bfloat16", 4, 4, 48, program="overlap")]
_IDS = ["qwen-contiguous", "qwen-paged-int64", "gqa8-fp16-d128", "mha-d48"]
#: The overlap program writing the caches itself (issue 21's candidate), on either layout.
_WRITING_KEYS = [dataclasses.replace(key, grid="heads", cache_write="attention") for key in _OVERLAP_KEYS[:2]]


def _overlap_source(key: PrefillBuildKey) -> str:
    return _source(prefill_attention_overlap_program(key, prefill_tiling(key)))


@pytest.mark.parametrize("key", _OVERLAP_KEYS, ids=_IDS)
def test_the_overlap_prefill_program_waits_for_the_scores_with_the_value_product_in_flight(key):
    source = _overlap_source(key)
    assert "tma_load" in source and "warpgroup_reg_alloc<240>" in source
    steady = source[source.index("wait_wgmma<1>") - 3000 : source.index("wait_wgmma<1>")]
    assert "wgmma_rs" in steady and "wgmma_ss" in steady  # both products issued before the wait for one


def test_the_build_key_defaults_to_the_overlap_program_on_the_heads_grid_with_the_tile_count_kernel():
    key = PrefillBuildKey("bfloat16", 16, 2, 256)
    assert (key.program, key.grid, key.tile_counts, key.cache_write) == ("overlap", "heads", "kernel", "launch")
    assert PREFILL_PROGRAMS[key.program] is prefill_attention_overlap_program
    assert PREFILL_PROGRAMS[dataclasses.replace(key, program="pipelined").program] is prefill_attention_program


def test_an_unknown_prefill_program_is_refused_with_the_choices():
    with pytest.raises(ValueError) as info:
        PrefillBuildKey("bfloat16", 16, 2, 256, program="pingpong")
    assert str(info.value) == "PrefillBuildKey.program='pingpong' is not one of ('pipelined', 'overlap')"


def test_an_unknown_maker_of_tile_counts_is_refused_with_the_choices():
    with pytest.raises(ValueError) as info:
        PrefillBuildKey("bfloat16", 16, 2, 256, tile_counts="host")
    assert str(info.value) == "PrefillBuildKey.tile_counts='host' is not one of ('torch', 'kernel')"


@pytest.mark.parametrize("cu_dtype", ["int32", "int64"])
def test_the_tile_counts_are_one_block_scanning_the_clipped_prompts_a_chunk_at_a_time(cu_dtype):
    source = _source(prefill_tile_counts_program(PrefillBuildKey("bfloat16", 16, 2, 256, cu_dtype=cu_dtype), 128))
    assert "__launch_bounds__(1024, 1) prefill_tile_counts_kernel" in source
    assert "(((end + 127) - begin) >> 7)" in source  # ceil(length / 128) of the clipped prompt
    assert "max(((int*)ends)[((int)threadIdx.x)], below[0])" in source  # the max-scan that clips the prefix sums
    assert "tma_load" not in source


def test_an_unknown_cache_writer_is_refused_with_the_choices():
    with pytest.raises(ValueError) as info:
        PrefillBuildKey("bfloat16", 16, 2, 256, cache_write="host")
    assert str(info.value) == "PrefillBuildKey.cache_write='host' is not one of ('launch', 'attention')"
    assert PrefillBuildKey("bfloat16", 16, 2, 256).cache_write == PREFILL_CACHE_WRITES[0] == "launch"


def test_only_the_programs_with_a_producer_warpgroup_write_the_caches_themselves():
    with pytest.raises(ValueError) as info:
        PrefillBuildKey("bfloat16", 16, 2, 256, program="pipelined", cache_write="attention")
    assert str(info.value) == ("PrefillBuildKey.cache_write='attention' needs a program with a producer warpgroup "
                               "(program='overlap': it writes the cache rows), not program='pipelined'; "
                               "use cache_write='launch'")
    assert PrefillBuildKey("bfloat16", 16, 2, 256, program="overlap", cache_write="attention").program == "overlap"


def test_the_settings_are_every_combination_of_the_four_choices_but_the_pipelined_program_writing_caches():
    assert len(PREFILL_SETTINGS) == 2 * 2 * 2 * 2 - 2 * 2
    assert {s["cache_write"] for s in PREFILL_SETTINGS if s["program"] == "pipelined"} == {"launch"}
    assert PREFILL_SETTINGS[0] == {"program": "pipelined", "grid": "tiles", "tile_counts": "torch", "cache_write": "launch"}


@pytest.mark.parametrize("key", _WRITING_KEYS, ids=_IDS[:2])
def test_the_producer_warpgroup_writes_the_caches_after_issuing_its_loads(key):
    source = _overlap_source(key)
    producer = source[source.index("warpgroup_reg_dealloc<24>") : source.index("warpgroup_reg_alloc<240>")]
    loads, stores = producer.rindex("tma_load(value_new_desc"), producer.index("*(uint4*)(key_cache + ")
    assert loads < stores < producer.index("*(uint4*)(value_cache + ") < producer.index("*(uint4*)(out + ")
    assert ("slot_mapping[" in producer) == key.paged
    assert source.count("*(uint4*)(key_cache + ") == 1  # nowhere else (the consumers never touch the caches)
    assert "key_cache" not in _overlap_source(dataclasses.replace(key, cache_write="launch"))


# A 64-bit slot_mapping entry is tested against the cache's rows in its own dtype before it becomes the int32 row (made
# int32 first, 2**32 + k wraps onto row k: another token's cache row written); int32 slots keep the row's one compare.
# test_attention_prefill_gpu.py::test_prefill_unchecked_64_bit_slots_past_int32_are_padding_not_the_rows_they_wrap_to
# checks the values.
_WIDE_ROW_TEST = re.compile(r"if \(\(\(\(int64_t\)0 <= condval_\d+\) && \(condval_\d+ < \(\(int64_t\)NL\)\)\)\)")


@pytest.mark.parametrize("writer", ["cache-program", "producer-warpgroup"])
def test_a_64_bit_slot_is_tested_against_the_cache_rows_in_its_own_dtype_before_it_becomes_the_row(writer):
    def source(slot_dtype: str) -> str:
        key = PrefillBuildKey("bfloat16", 16, 2, 256, True, "int32", slot_dtype)
        if writer == "cache-program":
            return _source(prefill_cache_program(key, CACHE_TOKENS, CACHE_THREADS))
        return _overlap_source(dataclasses.replace(key, cache_write="attention"))

    wide, narrow = source("int64"), source("int32")
    assert len(_WIDE_ROW_TEST.findall(wide)) == 1 and "row = ((int)" not in wide
    assert "< ((int64_t)NL)" not in narrow and "row = ((int)" not in narrow
    assert "if ((0 <= row) && (row < NL)) {" in wide and "if ((0 <= row) && (row < NL)) {" in narrow


def test_an_unknown_prefill_grid_order_is_refused_with_the_choices():
    with pytest.raises(ValueError) as info:
        PrefillBuildKey("bfloat16", 16, 2, 256, grid="sequences")
    assert str(info.value) == "PrefillBuildKey.grid='sequences' is not one of ('tiles', 'heads')"


@pytest.mark.parametrize("program", list(PREFILL_PROGRAMS))
@pytest.mark.parametrize("grid,head_axis", [("tiles", "blockIdx.y"), ("heads", "blockIdx.x")])
def test_the_grid_order_decides_which_block_index_names_the_kv_head_a_tile_streams(program, grid, head_axis):
    key = PrefillBuildKey("bfloat16", 16, 2, 256, program=program, grid=grid)
    source = _source(PREFILL_PROGRAMS[program](key, prefill_tiling(key)))
    kv_heads = set(re.findall(r"\(\(\(int\)(blockIdx\.[xy])\) >> 3\)", source))  # hq // G with G = 8
    assert kv_heads == {head_axis} and grid in PREFILL_GRIDS


def _nvcc() -> str:
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc")
                                         if pathlib.Path(p).exists()), None)
    if nvcc is None:
        pytest.skip("nvcc not found")
    return nvcc


def _nvcc_sm90a(source: str, tmp_path: pathlib.Path, *mode: str, output: str) -> str:
    """nvcc's messages for ``source`` compiled for sm_90a with TileLang's headers, ``mode`` (``-c``, ``-ptx``, ...)
    writing ``tmp_path / output``."""
    import os

    root = pathlib.Path(os.path.dirname(tilelang.__file__))
    cu = tmp_path / "kernel.cu"
    cu.write_text(source)
    done = subprocess.run([_nvcc(), "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17", *mode,
                           f"-I{root / 'src'}", f"-I{root / '3rdparty' / 'cutlass' / 'include'}", "-DENABLE_BF16",
                           str(cu), "-o", str(tmp_path / output)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr + done.stdout


def _ptxas_report(source: str, tmp_path: pathlib.Path) -> str:
    """ptxas's verbose report of ``source`` compiled for sm_90a (TileLang's headers)."""
    return _nvcc_sm90a(source, tmp_path, "-c", "-Xptxas", "-v", output="kernel.o")


@pytest.mark.parametrize("key", [*_OVERLAP_KEYS[:2], _WRITING_KEYS[1]], ids=[*_IDS[:2], "qwen-paged-writes-caches"])
def test_ptxas_keeps_the_overlap_programs_products_asynchronous_and_spills_nothing(key, tmp_path):
    report = _ptxas_report(_overlap_source(key), tmp_path)
    # C7514/C7517: ptxas serialised the wgmma or injected a wait (an accumulator read in flight).
    assert "C7514" not in report and "C7517" not in report, report
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report


def _ptx(source: str, tmp_path: pathlib.Path) -> str:
    """The PTX nvcc makes of ``source`` for sm_90a (TileLang's headers)."""
    _nvcc_sm90a(source, tmp_path, "-ptx", output="kernel.ptx")
    return (tmp_path / "kernel.ptx").read_text()


_PIPELINED_KEY = dataclasses.replace(_OVERLAP_KEYS[0], program="pipelined")

#: Each attention program's source and the reciprocals its epilogue takes: one a row a thread holds, per
#: warpgroup of 64 rows (two row fragments a thread in a wgmma or mma accumulator).
_EPILOGUES = {
    "overlap-paged": (lambda: _overlap_source(_OVERLAP_KEYS[1]), 4),
    "pipelined": (lambda: _source(prefill_attention_program(_PIPELINED_KEY, prefill_tiling(_PIPELINED_KEY))), 2),
    "decode-light": (lambda: _decode_split_source(_LIGHT), 2),
    "decode-64": (lambda: _decode_split_source(DecodeSchedule(combine="parallel")), 2),
}


@pytest.mark.parametrize("program", list(_EPILOGUES))
def test_the_attention_epilogues_divide_once_a_row_not_once_an_element(program, tmp_path):
    """An element-wise ``acc_o / l_sum`` compiles to IEEE division chains (``div.rn.f32``: ``MUFU.RCP``, ``FCHK``,
    a branch to a slow path), 128 a thread in a 64 x 256 accumulator: a quarter of the paged prefill's warp-stall
    samples on the H200 (``attention_decode_program.row_reciprocals``). The epilogues take a reciprocal a row."""
    source, reciprocals = _EPILOGUES[program]
    ptx = _ptx(source(), tmp_path)
    assert "div.rn.f32" not in ptx
    assert ptx.count("rcp.rn.f32") == reciprocals
