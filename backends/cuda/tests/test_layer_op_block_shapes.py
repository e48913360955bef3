"""The layer-op kernels' block shapes without a GPU: the registered kernels take theirs from one
table by row width, every candidate of the sweep is a shape its kernel serves (so the one GPU
run wastes nothing on refusals), a candidate is absolute (the table does not leak into it),
and the program variants (two passes, persistent grids, the weight read late) lower for
sm_90a reading their rows in 16-byte vectors (where tilelang is installed)."""

from __future__ import annotations

import functools
import shutil
from dataclasses import replace

import pytest

from tileops_core.kernels import CallSpec, registry
from tileops_core.plugins import ensure_plugins_loaded
from tileops_cuda import registered
from tileops_cuda.kernels import block_shapes, gated_rmsnorm, zero_centred_rmsnorm
from tileops_cuda.kernels.conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey, conv_refusal, fitted_to_width
from tileops_cuda.kernels.block_shapes import block_shape_of, with_block_shape
from tileops_cuda.kernels.zero_centred_rmsnorm import ZeroCentredRMSNormBuildKey, zero_centred_rmsnorm_refusal
from bench_scripts import bench_script

ensure_plugins_loaded()
needs_cuda_backend = pytest.mark.skipif("cuda" not in registry.backends(), reason="tileops-cuda is not installed")


@functools.cache
def _sweep():
    """The sweep script as a module (it lives with the benches, not in a package)."""
    return bench_script("layer_ops_sweep")


def _norm_call(hidden: int) -> CallSpec:
    return CallSpec("ZeroCentredRMSNormFwdOp", "zero_centred_rms_norm", "cuda", "sm_90", {"x": "bfloat16"},
                    {"N": hidden}, {})


def test_the_registered_key_takes_the_first_table_entry_whose_row_width_bound_holds(monkeypatch):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangZeroCentredRMSNorm",
                        ((1024, {"threads": 64}), (None, {"passes": 2, "threads": 512})))
    narrow = registered.TileLangZeroCentredRMSNorm.key(_norm_call(512))  # 1024 bytes
    wide = registered.TileLangZeroCentredRMSNorm.key(_norm_call(4096))
    assert (narrow.threads, narrow.passes) == (64, 1)
    assert (wide.threads, wide.passes) == (512, 2)


def test_a_table_row_without_an_entry_for_a_width_names_the_fix(monkeypatch):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangZeroCentredRMSNorm", ((1024, {"threads": 64}),))
    with pytest.raises(LookupError, match="has no entry for rows of 8192 bytes; end its entries with a None bound"):
        registered.TileLangZeroCentredRMSNorm.key(_norm_call(4096))


@pytest.mark.parametrize("arch,dependent", [("sm_90", True), ("sm_90a", True), ("sm_80", False), ("sm_89", False)])
def test_a_table_entrys_dependent_launch_holds_only_where_the_arch_has_it(monkeypatch, arch, dependent):
    from tileops_cuda.kernels.conv1d import ConvUpdateBuildKey

    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangCausalConv1dUpdate",
                        ((None, {"threads": 128, "registers": 0, "unchecked_index": True, "dependent_launch": True}),))
    key = with_block_shape("TileLangCausalConv1dUpdate", ConvUpdateBuildKey("bfloat16", 8192, 4, arch=arch), 16384)
    assert key.dependent_launch == dependent and key.unchecked_index and conv_refusal(key) is None


def test_the_block_shape_of_a_key_is_its_fields_after_the_arch():
    key = with_block_shape("TileLangGatedRMSNorm", gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 128), 256)
    assert block_shape_of(key) == {"threads": 0, "rows": 0, "programs": 0, "early_weight": True, "registers": 64,
                                   "fast_silu": True, "dependent_launch": False}


@pytest.mark.parametrize("fields,reason", [
    ({"passes": 3}, "passes=3 must be 1 or 2"),
    ({"programs": -1}, "programs=-1 and registers=56 at least 0"),
    ({"passes": 2, "threads": 96}, "does not fit in the registers of one program"),
], ids=["passes", "negative-grid", "two-pass-threads"])
def test_the_zero_centred_norm_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in zero_centred_rmsnorm_refusal(ZeroCentredRMSNormBuildKey("bfloat16", 4096, **fields))


@pytest.mark.parametrize("fields,reason", [
    ({"chunk": 0}, "chunk=0 a positive multiple of tokens"),
    ({"chunk": 66}, "chunk=66 a positive multiple of tokens"),
    ({"tokens": 2}, "tokens=2 must be at least W - 1"),
    ({"threads": 96}, "threads=96 must be a power of two"),
    ({"one_sequence_threads": 48}, "one_sequence_threads=48 must be a power of two"),
    ({"few_sequences": 0}, "few_sequences=0 must be at least 1"),
], ids=["no-chunk", "partial-group", "narrow-group", "threads", "one-sequence-threads", "few-sequences"])
def test_the_varlen_conv_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in conv_refusal(ConvVarlenBuildKey("bfloat16", 1024, 4, **fields))


@pytest.mark.parametrize("key_class", [ConvUpdateBuildKey, ConvVarlenBuildKey])
def test_the_tanh_silu_is_refused_for_float32_outputs_and_without_silu(key_class):
    # tanh.approx's 2**-11 suits 16-bit outputs (bf16 tolerance 1.6e-2, fp16 2e-3), not float32's 2e-5
    assert conv_refusal(key_class("bfloat16", 1024, 4, tanh_silu=True)) is None
    assert conv_refusal(key_class("float16", 1024, 4, tanh_silu=True)) is None
    for fields in ({"dtype": "float32"}, {"silu": False}):
        reason = conv_refusal(replace(key_class("bfloat16", 1024, 4, tanh_silu=True), **fields))
        assert reason is not None and "tanh_silu approximates SiLU to 2**-11" in reason


def test_a_varlen_call_of_one_sequence_runs_its_own_program_and_a_batch_the_keys():
    """``one_sequence_threads`` compiles a second program (the key's shape at those threads) that
    the launcher runs exactly where the batch holds one sequence, whatever the metadata style."""
    import torch

    from tileops_cuda.kernels.conv1d import _make_varlen_run, one_sequence_key

    key = ConvVarlenBuildKey("bfloat16", 64, 4, meta_lengths=True, arch="sm_90", one_sequence_threads=64)
    assert one_sequence_key(key) == ConvVarlenBuildKey("bfloat16", 64, 4, meta_lengths=True, arch="sm_90", threads=64)
    assert one_sequence_key(ConvVarlenBuildKey("bfloat16", 64, 4)) is None
    assert one_sequence_key(ConvVarlenBuildKey("bfloat16", 64, 4, one_sequence_threads=128)) is None
    ordered = ConvVarlenBuildKey("bfloat16", 64, 4, one_sequence_threads=64, end_rows_first=True, unrolled_starts=True)
    assert one_sequence_key(ordered) == ConvVarlenBuildKey("bfloat16", 64, 4, threads=64)  # no initial states
    ran: list = []
    run = _make_varlen_run(key, lambda *a: ran.append(("batch", a[4].shape[0])), lambda *a: ran.append(("one", 1)))
    pool, w = torch.zeros(4, 64, 3, dtype=torch.bfloat16), torch.zeros(64, 4, dtype=torch.bfloat16)
    for lengths, style in (([7], "lengths"), ([3, 4], "lengths"), ([0, 7], "cu_seqlens"), ([0, 3, 7], "cu_seqlens")):
        meta = torch.tensor(lengths, dtype=torch.int32)
        x = torch.zeros(7, 64, dtype=torch.bfloat16)
        run(x, pool, w, meta, torch.arange(len(lengths), dtype=torch.int32), None, None, "silu", style, None)
    assert [r[0] for r in ran] == ["one", "batch", "one", "batch"]


def test_a_varlen_call_of_few_sequences_runs_the_batch_program_at_the_one_sequence_threads():
    """``few_sequences`` sends calls of 2 to that many sequences to a third program: the batch program
    (its start order, initial states read) at ``one_sequence_threads``; more go to the batch program.
    With initial states it is the one-sequence program, compiled once."""
    import torch

    from tileops_cuda.kernels.conv1d import _make_varlen_run, batch_key, few_sequences_key, one_sequence_key

    ordered = ConvVarlenBuildKey("bfloat16", 64, 4, one_sequence_threads=64, few_sequences=3, end_rows_first=True,
                                 unrolled_starts=True)
    few = few_sequences_key(ordered)
    assert few == ConvVarlenBuildKey("bfloat16", 64, 4, has_init=True, threads=64, end_rows_first=True,
                                     unrolled_starts=True)
    assert few == replace(batch_key(ordered), threads=64, one_sequence_threads=0, few_sequences=1)
    assert one_sequence_key(ordered) != few  # without initial states one sequence runs its start plainly
    assert one_sequence_key(replace(ordered, has_init=True)) == few_sequences_key(replace(ordered, has_init=True))
    assert few_sequences_key(replace(ordered, few_sequences=1)) is None
    assert few_sequences_key(replace(ordered, one_sequence_threads=0)) is None
    ran: list = []
    run = _make_varlen_run(ordered, lambda *a: ran.append("batch"), lambda *a: ran.append("one"),
                           lambda *a: ran.append("few"))
    pool, w = torch.zeros(5, 64, 3, dtype=torch.bfloat16), torch.zeros(64, 4, dtype=torch.bfloat16)
    for B in (1, 2, 3, 4):
        x = torch.zeros(B, 64, dtype=torch.bfloat16)
        run(x, pool, w, torch.ones(B, dtype=torch.int32), torch.arange(B, dtype=torch.int32), None, None, "silu",
            "lengths", None)
    assert ran == ["one", "few", "few", "batch"]


def test_the_conv_launchers_give_their_programs_packed_metadata_and_bias():
    """The programs read the metadata vectors and the bias as packed arrays (their host code asserts a unit
    stride): a column of a slot table or a strided lengths vector is legal (found in review: refused at
    launch), so the launchers pass packed copies where a view is strided."""
    import torch

    from tileops_cuda.kernels.conv1d import ConvUpdateBuildKey, _make_update_run, _make_varlen_run

    seen: list = []

    def record(*args):
        seen.append([a for a in args if isinstance(a, torch.Tensor)])

    D, W = 64, 4
    x, pool = torch.zeros(6, D, dtype=torch.bfloat16), torch.zeros(8, D, W - 1, dtype=torch.bfloat16)
    weight, bias = torch.zeros(D, W, dtype=torch.bfloat16), torch.zeros(D, 2, dtype=torch.bfloat16)[:, 0]
    column = torch.zeros(6, 2, dtype=torch.int32)[:, 0]
    every_other = torch.tensor([2, 0, 2, 0, 2, 0], dtype=torch.int32)[::2]
    update = ConvUpdateBuildKey("bfloat16", D, W, True, True, "lengths", "int32", "int32", "int32", "sm_90")
    _make_update_run(update, record)(x, pool, weight, every_other, column, bias, every_other, "silu", "lengths")
    varlen = ConvVarlenBuildKey("bfloat16", D, W, True, True, True, "int32", "int32", False, "sm_90")
    has_initial = torch.tensor([True, False, True, False, False, False])[::2]
    _make_varlen_run(varlen, record)(x, pool, weight, every_other, column[:3], has_initial, bias, "silu", "lengths")
    assert len(seen) == 2 and all(t.is_contiguous() for args in seen for t in args)


def test_the_registered_varlen_conv_runs_one_sequence_at_64_threads_and_batches_at_128():
    key = registered.TileLangCausalConv1dVarlen.key(CallSpec(
        "CausalConv1dVarlenFwdOp", "causal_conv1d_varlen", "cuda", "sm_90",
        {"x": "bfloat16", "actual_seq_lengths": "int32", "conv_state_indices": "int32"}, {"D": 8192, "W": 4},
        {"activation": "silu", "has_bias": False, "has_has_initial_state": True, "seq_lens_style": "lengths"}))
    assert (key.threads, key.one_sequence_threads) == (128, 64) and conv_refusal(key) is None


@pytest.mark.parametrize("dtype,activation,tanh", [("bfloat16", "silu", True), ("float16", "silu", True),
                                                    ("float32", "silu", False), ("bfloat16", None, False)])
def test_the_registered_varlen_conv_runs_silu_through_tanh_into_16_bit_outputs_only(dtype, activation, tanh):
    """``with_tanh_silu``: 2-3 points of the copy on both 4k rows (H100); its 2**-11 error is refused for float32,
    and a key without SiLU has nothing to approximate. Every program the launcher picks keeps the field."""
    from tileops_cuda.kernels.conv1d import batch_key, one_sequence_key

    key = registered.TileLangCausalConv1dVarlen.key(CallSpec(
        "CausalConv1dVarlenFwdOp", "causal_conv1d_varlen", "cuda", "sm_90",
        {"x": dtype, "actual_seq_lengths": "int32", "conv_state_indices": "int32"}, {"D": 8192, "W": 4},
        {"activation": activation, "has_bias": False, "has_has_initial_state": False, "seq_lens_style": "lengths"}))
    assert conv_refusal(key) is None
    one = one_sequence_key(key)
    assert one is not None and {key.tanh_silu, batch_key(key).tanh_silu, one.tanh_silu} == {tanh}


@pytest.mark.parametrize("has_init", [False, True], ids=["no-init", "init"])
def test_the_registered_varlen_conv_orders_and_unrolls_its_starts_except_one_sequence_without_initial_states(has_init):
    """Measured on the H200 (``with_start_order``, ``one_sequence_key``): the end rows first and the
    unrolled start groups won on every batch and with initial states, and cost the one-sequence
    program without them 8 us."""
    from tileops_cuda.kernels.conv1d import one_sequence_key

    key = registered.TileLangCausalConv1dVarlen.key(CallSpec(
        "CausalConv1dVarlenFwdOp", "causal_conv1d_varlen", "cuda", "sm_90",
        {"x": "bfloat16", "actual_seq_lengths": "int32", "conv_state_indices": "int32"}, {"D": 8192, "W": 4},
        {"activation": "silu", "has_bias": False, "has_has_initial_state": has_init, "seq_lens_style": "cu_seqlens"}))
    assert key.end_rows_first and key.unrolled_starts and conv_refusal(key) is None
    one = one_sequence_key(key)
    assert one is not None and (one.end_rows_first, one.unrolled_starts) == (has_init, has_init)
    assert conv_refusal(one) is None


def test_a_varlen_batch_without_initial_states_runs_the_initial_state_program_and_one_sequence_its_own():
    """Measured on the H200 (``batch_key``): fresh prompts in a batch ran 6 us faster through the
    initial-state program, its flags the launcher's zero; one fresh prompt keeps the plain program. A key
    without bounds checks would read past that zero, and keeps its own program."""
    from tileops_cuda.kernels.conv1d import batch_key, one_sequence_key

    key = registered.TileLangCausalConv1dVarlen.key(CallSpec(
        "CausalConv1dVarlenFwdOp", "causal_conv1d_varlen", "cuda", "sm_90",
        {"x": "bfloat16", "actual_seq_lengths": "int32", "conv_state_indices": "int32"}, {"D": 8192, "W": 4},
        {"activation": "silu", "has_bias": False, "has_has_initial_state": False, "seq_lens_style": "cu_seqlens"}))
    assert not key.has_init and batch_key(key) == replace(key, has_init=True)
    one = one_sequence_key(key)
    assert one is not None and not one.has_init
    with_flags = replace(key, has_init=True)
    assert batch_key(with_flags) == with_flags
    unchecked = replace(key, unchecked_index=True)
    assert batch_key(unchecked) == unchecked


@pytest.mark.parametrize("width,tokens,chunk", [(4, 4, 16), (5, 4, 16), (6, 5, 20), (8, 7, 21)])
def test_a_wider_varlen_conv_widens_the_tables_groups_instead_of_being_refused(width, tokens, chunk):
    key = fitted_to_width(ConvVarlenBuildKey("bfloat16", 1024, width))
    assert (key.tokens, key.chunk) == (tokens, chunk) and conv_refusal(key) is None


@needs_cuda_backend
def test_every_sweep_candidate_is_a_block_shape_its_kernel_serves():
    rows = _sweep().plan_sweep("sm_90")
    assert {r.op for r in rows} >= {"ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp",
                                    "GDNGatingFwdOp", "CausalConv1dUpdateFwdOp", "CausalConv1dVarlenFwdOp"}
    for r in rows:
        assert r.candidates[0].name == "registered"
        assert len({c.key for c in r.candidates}) == len(r.candidates), f"{r.op}: a candidate listed twice"
        for c in r.candidates:
            assert r.impl.reason(None, c.key) is None, f"{r.op} {c.name}"


@needs_cuda_backend
def test_a_sweep_candidate_sets_its_fields_over_the_build_keys_defaults_not_the_tables(monkeypatch):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangZeroCentredRMSNorm", ((None, {"passes": 2}),))
    row = _sweep().plan_sweep("sm_90", "ZeroCentredRMSNormFwdOp")[0]
    by_name = {c.name: c.key for c in row.candidates}
    assert by_name["registered"].passes == 2
    assert by_name['{"threads": 256, "rows": 1}'].passes == 1


@needs_cuda_backend
def test_a_sweep_row_is_checked_on_every_workload_row_that_builds_the_same_kernel():
    row = _sweep().plan_sweep("sm_90", "FusedAddZeroCentredRMSNormFwdOp")[0]
    labels = [r.label for r, _ in row.cases]
    assert labels[0] == "qwen3.5-h4096-prefill-4k"
    assert {"qwen3.5-h4096-decode-m1", "qwen3.5-h4096-decode-m32"} <= set(labels)
    assert "qwen3-next-80b-decode-m1" not in labels  # hidden 2048: another kernel



@needs_cuda_backend
def test_a_sweep_at_other_token_counts_times_the_rows_entries_there_each_checked_on_itself():
    rows = _sweep().plan_sweep("sm_90", "MoETopKRoutingFwdOp/qwen3", 0, (512, 8192))
    assert [r.label for r in rows] == [f"{label}@T={t}" for label in ("qwen3-next-80b-prefill-4k",
                                                                      "qwen3.5-35b-prefill-4k",
                                                                      "qwen3-next-80b-decode-b64",
                                                                      "qwen3.5-35b-decode-b64") for t in (512, 8192)]
    for r in rows:
        (row, _), = r.cases  # no other workload row: the derived one alone
        assert row.label == r.label and row.values["T"] == int(r.label.rsplit("=", 1)[1])
        assert {k: v for k, v in row.values.items() if k not in ("T", "label")} == {
            k: v for k, v in next(w for w in r.spec.workloads if w.label == r.label.split("@")[0]).values.items()
            if k not in ("T", "label")}
        assert [c.name for c in r.candidates][0] == "registered"
    # An entry whose row has no token count is left out, not timed at its own size.
    assert _sweep().plan_sweep("sm_90", "GDNGatingFwdOp", 0, (1024,)) == []


@needs_cuda_backend
def test_a_sweep_with_a_field_adds_the_candidates_past_the_first_that_set_it():
    sweep = _sweep()
    (first,) = sweep.plan_sweep("sm_90", "MoETopKRoutingFwdOp/qwen3-next-80b-prefill", 1)
    (row,) = sweep.plan_sweep("sm_90", "MoETopKRoutingFwdOp/qwen3-next-80b-prefill", 1, (), "long_plain")
    assert row.candidates[:len(first.candidates)] == first.candidates
    added = row.candidates[len(first.candidates):]
    plain = [c for c in sweep._ROUTING_CANDIDATES[1:] if "long_plain" in c]
    assert len(added) == len(plain) >= 2
    assert all(c.key.long_plain for c in added)
    # Without a count, every candidate, as before.
    entry = "MoETopKRoutingFwdOp/qwen3-next-80b-prefill"
    (every,) = sweep.plan_sweep("sm_90", entry, None, (), "long_plain")
    assert len(every.candidates) == len(sweep.plan_sweep("sm_90", entry)[0].candidates)


_VARIANTS = [
    (zero_centred_rmsnorm, ZeroCentredRMSNormBuildKey("bfloat16", 4096, True, "sm_90a", passes=2, rows=2), "x"),
    (zero_centred_rmsnorm, ZeroCentredRMSNormBuildKey("float32", 2048, False, "sm_90a", passes=2, programs=264), "x"),
    (zero_centred_rmsnorm, ZeroCentredRMSNormBuildKey("bfloat16", 4096, True, "sm_90a", threads=256, rows=2,
                                                      programs=528), "residual"),
    (zero_centred_rmsnorm, ZeroCentredRMSNormBuildKey("float16", 4096, False, "sm_90a", early_weight=False), "x"),
    (gated_rmsnorm, gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 128, "sm_90a", programs=1056), "gate"),
    (gated_rmsnorm, gated_rmsnorm.GatedRMSNormBuildKey("float32", 64, "sm_90a", early_weight=False), "x"),
]


@pytest.mark.parametrize("module,key,row_input", _VARIANTS,
                         ids=["two-pass-fused", "two-pass-persistent-fp32", "persistent-fused", "late-weight-fp16",
                              "gated-persistent", "gated-late-weight-fp32"])
def test_the_program_variants_lower_for_sm_90a_with_16_byte_row_loads(module, key, row_input):
    tilelang = pytest.importorskip("tilelang")
    target = {"kind": "cuda", "arch": "sm_90a"}
    with tilelang.tvm.target.Target(target):
        source = tilelang.lower(module._program(key), target=target).kernel_source
    vector = "uint4" if key.dtype != "float32" else "float4"
    assert f"*({vector}*)({row_input} + " in source
    # A persistent grid's programs loop over their row groups; the others hold one each.
    assert ("for (int it = 0;" in source) == bool(key.programs)


def test_the_sweeps_48_register_pairs_qk_norm_rope_candidate_spills_at_most_8_bytes_for_sm_90a():
    # Pairs table, reduced sincos, vector partners, 16-bit rotation at 48 registers (5 programs of 256
    # threads an SM): the float32 rotation spilled 116 bytes there, the 16-bit one 4. (Picked by its fields:
    # the sweep's list has since put 40-register candidates first, which spill more by design.)
    pytest.importorskip("tilelang")
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc: registers and spills are read from ptxas")
    from tileops_cuda.kernels.qk_norm_rope import QKNormRopeBuildKey

    sweep = _sweep()
    shape = next(c for c in sweep._QK_CANDIDATES if c == {"registers": 48, "table": "pairs", **sweep._QK_FAST})
    key = QKNormRopeBuildKey("bfloat16", "int64", 16, 2, 256, "sm_90a", **shape)
    report = sweep.ptxas_report(sweep._source_of(key), "sm_90a")
    assert report["registers"] <= 48 and report["spill_bytes"] <= 8, report
