"""What holds without a GPU: light imports, build-key validation, refusal reasons."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from tileops_cuda.kernels import conv1d, gemm, group_norm, reduce_sum, rgdr, rmsnorm, silu_and_mul, softmax


def _key(**kw):
    base = dict(input_dtype="bfloat16", state_dtype="float32", num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128)
    base.update(kw)
    return rgdr.RGDRBuildKey(**base)


def test_package_imports_without_tilelang_or_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["tilelang"] = None
        sys.modules["torch"] = None
        import tileops_cuda
        from tileops_cuda.kernels import rgdr, rmsnorm, softmax, silu_and_mul, gemm, reduce_sum, group_norm
        from tileops_cuda.kernels import gated_rmsnorm, gdn_gating, zero_centred_rmsnorm, _row_views
        print("ok")
        """
    )
    import tileops_cuda

    root = str(__import__("pathlib").Path(tileops_cuda.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_rgdr_key_rejects_value_heads_not_a_multiple_of_key_heads():
    with pytest.raises(ValueError, match="num_v_heads=12 must be a multiple of num_k_heads=8"):
        _key(num_k_heads=8, num_v_heads=12)


def test_rgdr_key_rejects_unknown_state_dtype():
    with pytest.raises(ValueError, match="state_dtype='float64' is not one of"):
        _key(state_dtype="float64")


def test_rgdr_key_is_hashable_and_frozen():
    k = _key()
    assert {k: 1}[_key()] == 1
    with pytest.raises(AttributeError):
        setattr(k, "head_k_dim", 64)


def test_rgdr_serves_the_qwen_shapes():
    assert rgdr.rgdr_refusal(_key()) is None
    assert rgdr.rgdr_refusal(_key(num_k_heads=8, num_v_heads=16, state_dtype="bfloat16")) is None


def test_rgdr_refuses_head_k_dim_that_is_not_sixteen_times_a_power_of_two():
    assert "head_k_dim=96 must be 16 times a power of two" in rgdr.rgdr_refusal(_key(head_k_dim=96))


def test_rgdr_refuses_head_v_dim_off_the_value_tile():
    assert "head_v_dim=40 must be a multiple of the value tile (16)" in rgdr.rgdr_refusal(_key(head_v_dim=40))


def test_rgdr_refuses_unknown_arch():
    assert "arch sm_75 is not supported" in rgdr.rgdr_refusal(_key(arch="sm_75"))


def test_rgdr_tiling_rejects_an_unknown_row_reduction():
    with pytest.raises(ValueError, match="reduce_rows='tree' is not one of"):
        rgdr.RGDRTiling(128, 16, 4, 6, True, reduce_rows="tree")


@pytest.mark.parametrize("field", ["pingpong", "flat_rows"])
def test_rgdr_refuses_a_streaming_field_on_a_tiled_layout(field):
    reason = rgdr.rgdr_refusal(_key(), rgdr.RGDRTiling(128, 16, 4, 4, **{field: True}))
    assert reason == f"RGDR TileLang kernel: {field} is a streaming-layout field; set stream=True or drop it"


def test_rgdr_refuses_a_transposed_reduction_over_more_rows_than_lanes():
    reason = rgdr.rgdr_refusal(_key(), rgdr.RGDRTiling(32, 4, 8, 4, reduce_rows="transpose"))
    assert "rows_per_thread=8 must be a power of two at most threads_per_row=4; use 'butterfly'" in reason


def test_rgdr_candidate_fields_default_off_so_registered_tilings_keep_their_identity():
    t = rgdr.RGDRTiling(128, 16, 4, 6, True)
    assert (t.exact_tokens, t.unchecked_index, t.pingpong, t.flat_rows, t.reduce_rows) == (
        False, False, False, False, "butterfly")
    assert rgdr.rgdr_refusal(_key(state_dtype="bfloat16"), replace(t, exact_tokens=True, unchecked_index=True,
                             pingpong=True, flat_rows=True, reduce_rows="transpose")) is None


def test_rgdr_build_raises_the_refusal_reason():
    with pytest.raises(ValueError, match="head_k_dim=96"):
        rgdr.build_rgdr(_key(head_k_dim=96))


def test_rmsnorm_refuses_misaligned_hidden_size():
    assert "hidden=4090 must be a multiple of 8" in rmsnorm.rmsnorm_refusal(rmsnorm.RMSNormBuildKey("bfloat16", 4090))


def test_rmsnorm_refuses_rows_too_long_for_registers():
    assert "does not fit in the registers of one program" in rmsnorm.rmsnorm_refusal(rmsnorm.RMSNormBuildKey("float32", 65536))


def test_softmax_refuses_a_dim_other_than_the_last():
    key = softmax.SoftmaxBuildKey("float16", 1024)
    assert "dim=0 is not the last dim" in softmax.softmax_refusal(key, dim=0, ndim=2)


def test_silu_and_mul_refuses_float64():
    assert "dtype float64 is not one of" in silu_and_mul.silu_and_mul_refusal(silu_and_mul.SiluAndMulBuildKey("float64", 128))


def test_gemm_refuses_float32_and_pre_hopper():
    assert "dtype float32 is not one of" in gemm.gemm_refusal(gemm.GemmBuildKey("float32", 128, 128))
    assert "arch sm_80 is not supported" in gemm.gemm_refusal(gemm.GemmBuildKey("bfloat16", 128, 128, arch="sm_80"))


def test_sum_refuses_non_adjacent_dims():
    assert "dims (0, 2) are not adjacent" in reduce_sum.sum_refusal("float32", (0, 2), 3, True)


def test_sum_plans_adjacent_dims_as_a_k_b():
    assert reduce_sum.plan_sum((2, 3, 4, 5), (1, 2)) == (2, 12, 5)
    assert reduce_sum.plan_sum((2, 3, 4, 5), None) == (1, 120, 1)
    assert reduce_sum.plan_sum((2, 3, 4, 5), (-1,)) == (24, 5, 1)


def test_group_norm_refuses_channels_not_divisible_by_groups():
    key = group_norm.GroupNormBuildKey("bfloat16", 3, 32, 16)
    assert "channels=32 is not a multiple of num_groups=3" in group_norm.group_norm_refusal(key)


def test_rgdr_schedule_uses_the_large_tile_only_where_it_divides_head_v_dim():
    sched = rgdr.default_schedule(_key(head_v_dim=48))
    assert sched.large == sched.small
    sched = rgdr.default_schedule(_key())
    assert sched.large.block_v > sched.small.block_v
    assert sched.pick(1) == sched.small and sched.pick(10_000) == sched.large


def test_rgdr_schedule_streams_large_batches_of_short_bf16_sequences():
    sched = rgdr.default_schedule(_key(state_dtype="bfloat16"))
    assert sched.pick(256, 256).stream  # decode: one token per sequence
    assert not sched.pick(256, 8 * 256).stream  # eight tokens per sequence: tiled
    assert sched.pick(1, 2) == sched.small  # two tokens of one sequence: the plain small tiling
    assert sched.pick(2, 2) == replace(sched.small, speculate=True)  # a decode step: its speculative twin


@pytest.mark.parametrize("state,steps", [("bfloat16", {1: (1, 8), 16: (4, 6), 31: (4, 6), 32: (4, 6), 63: (4, 6)}),
                                         ("float32", {})])
def test_rgdr_decode_steps_of_their_own_counts_run_their_own_tiling(state, steps):
    # bf16 (H200, round 5): one sequence's decode step on one row a lane, 16..63 sequences' streamed four rows a
    # lane, both speculative; every other call, and every call with more tokens than sequences, the size rule.
    sched = rgdr.default_schedule(_key(state_dtype=state))
    for n_seq in (1, 2, 15, 16, 31, 32, 63, 64):
        tiling = sched.pick(n_seq, n_seq)
        if n_seq in steps:
            assert (tiling.rows_per_thread, tiling.min_blocks) == steps[n_seq] and tiling.speculate
            assert tiling in sched.tilings()
        assert sched.pick(n_seq, 2 * n_seq) == sched.select(n_seq, 2 * n_seq, sched.small, sched.large, sched.short)
    if state == "bfloat16":  # either side of the ranges: the size rule's roles
        assert sched.pick(2, 2).rows_per_thread == 2 and sched.pick(64, 64) == replace(sched.short, speculate=True)


def test_rgdr_schedule_drops_the_streaming_layout_when_too_many_value_rows_per_key_head():
    sched = rgdr.default_schedule(_key(state_dtype="bfloat16", num_k_heads=1, num_v_heads=64))
    assert sched.short is None


@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_rgdr_schedule_launches_as_a_dependent_only_where_the_arch_has_it(state):
    # Hopper: the small and short roles (the decode steps' small batches) launch as programmatic dependents,
    # the large role plainly (it measured no gain); elsewhere no role asks for what the arch cannot build.
    hopper = rgdr.default_schedule(_key(state_dtype=state, arch="sm_90"))
    assert hopper.small.dependent_launch and hopper.short.dependent_launch and not hopper.large.dependent_launch
    for arch in ("sm_80", "sm_89"):
        ampere = rgdr.default_schedule(_key(state_dtype=state, arch=arch))
        assert not any(t.dependent_launch for t in ampere.tilings())
        assert ampere == replace(hopper, small=replace(hopper.small, dependent_launch=False),
                                 short=replace(hopper.short, dependent_launch=False),
                                 decode_steps=tuple((lo, hi, replace(t, dependent_launch=False))
                                                    for lo, hi, t in hopper.decode_steps))
        assert all(rgdr.rgdr_refusal(_key(state_dtype=state, arch=arch), t) is None for t in ampere.tilings())


@pytest.mark.parametrize("key", [conv1d.ConvUpdateBuildKey("bfloat16", 256, 4, dependent_launch=True),
                                 conv1d.ConvVarlenBuildKey("bfloat16", 256, 4, dependent_launch=True)],
                         ids=["update", "varlen"])
def test_a_conv_dependent_launch_is_refused_where_the_arch_has_none(key):
    assert conv1d.conv_refusal(key) is None
    assert conv1d.conv_refusal(replace(key, arch="sm_80")).endswith("not sm_80; build without dependent_launch")
