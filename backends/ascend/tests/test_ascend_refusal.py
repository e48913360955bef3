"""Each refusal of the 310P kernel, with its exact reason."""

from __future__ import annotations

import sys

import pytest
import torch

from rgdr_cases import make_case
from tileops_ascend.launch import describe_call, prepare_kernel_inputs, recurrent_gated_delta_rule_npu
from tileops_ascend.refusal import RgdrCall, contents_refusal_reason, refusal_reason

SHAPES = dict(t=4, nk=2, dk=64, nv=4, dv=64, state_slots=8, seq_lens_len=2)
FP16 = dict(
    query_dtype="float16", key_dtype="float16", value_dtype="float16", beta_dtype="float16", state_dtype="float16",
    seq_lens_dtype="int32", ssm_state_indices_dtype="int32", g_dtype="float32",
)


def _call(**overrides):
    return RgdrCall(**{**FP16, **SHAPES, **overrides})


def test_valid_fp16_call_is_accepted():
    assert refusal_reason(_call()) is None


def test_call_built_from_tensors_is_accepted():
    inputs = prepare_kernel_inputs(**make_case([3, 1, 8, 2], gk="vector", accepted=True, seed=1))
    assert refusal_reason(describe_call(inputs)) is None


@pytest.mark.parametrize("name", ["query", "key", "value", "beta"])
def test_non_fp16_input_is_refused(name):
    assert refusal_reason(_call(**{f"{name}_dtype": torch.bfloat16})) == (
        f"{name} is bfloat16, not float16: the 310P kernel is built only as RGDR<half, half>"
    )


def test_non_fp16_state_is_refused():
    assert refusal_reason(_call(state_dtype=torch.float32)) == (
        "state is float32, not float16: the 310P kernel reads and writes the state pool as fp16"
    )


def test_fp16_g_is_refused():
    assert refusal_reason(_call(g_dtype="float16")) == "g is float16, not float32: the 310P kernel reads g as float"


def test_int16_slots_are_refused_once():
    assert refusal_reason(_call(ssm_state_indices_dtype="int16")) == "ssm_state_indices is int16, not int32 or int64"


def test_more_tokens_than_b_times_mtp_are_refused():
    assert refusal_reason(_call(t=17, seq_lens_len=2)) == (
        "T=17 tokens exceed B*MAX_MTP=16 (B=2, MAX_MTP=8): some sequence is longer than the 8 tokens the 310P "
        "kernel takes"
    )


def test_token_limit_counts_sequences_not_prefix_sums():
    """[B + 1] prefix sums describe B sequences: T=17 over 3 entries is 2 sequences."""
    assert refusal_reason(_call(t=17, seq_lens_len=3, seq_lens_style="cu_seqlens")).startswith("T=17 tokens exceed B*MAX_MTP=16")
    assert refusal_reason(_call(t=16, seq_lens_len=3, seq_lens_style="cu_seqlens")) is None


def test_head_dims_the_ub_cannot_tile_are_refused():
    assert refusal_reason(_call(dk=1024, dv=1024)) == (
        "no UB buffer profile tiles DK=1024, DV=1024: 262144 UB bytes less the 148864-byte working set leave no "
        "vStep >= 16 (1x1: vStep below 16; 1x2: vStep below 16; 2x2: needs 9 TQue buffers > 8)"
    )


def test_tiling_whose_scratch_would_overflow_is_refused():
    call = _call(nk=16, dk=80, nv=32, dv=256, gk_dtype="float32", gk_shape=(4, 32))
    assert refusal_reason(call) == (
        "the kernel's fp32 scratch needs 181248 bytes but profile 1x2 with vStep 256 leaves 170880 (DK=80, DV=256, "
        "UB 262144 bytes): the vStep budget omits stateInQueue_'s 2*aDk bytes per row, and the scalar gk buffer is "
        "billed with the queues but carved from the scratch"
    )


def test_nv_not_a_multiple_of_nk_is_refused():
    assert refusal_reason(_call(nk=3, nv=4)) == (
        "NV=4 is not a multiple of NK=3: value head h reads key head h // (NV // NK)"
    )


def test_in_kernel_l2_normalisation_is_refused():
    assert refusal_reason(_call(use_qk_l2norm_in_kernel=True)) == (
        "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)"
    )


def test_every_reason_is_reported():
    reason = refusal_reason(_call(query_dtype="bfloat16", state_dtype="bfloat16"))
    assert reason.split("; ") == [
        "query is bfloat16, not float16: the 310P kernel is built only as RGDR<half, half>",
        "state is bfloat16, not float16: the 310P kernel reads and writes the state pool as fp16",
    ]


def test_a_sequence_longer_than_mtp_passes_shapes_but_not_contents():
    lengths = torch.tensor([1, 9], dtype=torch.int32)
    assert refusal_reason(_call(t=10, seq_lens_len=2)) is None
    assert contents_refusal_reason(lengths, torch.arange(10)) == (
        "sequence 1 has 9 tokens, more than MAX_MTP=8: the 310P kernel would stop at it silently, leaving it and "
        "the rest of its core's work uncomputed"
    )


def test_long_sequence_is_found_in_prefix_sums():
    prefix = torch.tensor([0, 2, 12], dtype=torch.int64)
    assert contents_refusal_reason(prefix, torch.arange(12), seq_lens_style="cu_seqlens").startswith(
        "sequence 1 has 10 tokens, more than MAX_MTP=8"
    )


def test_sequences_of_exactly_mtp_tokens_pass_contents():
    assert contents_refusal_reason(torch.tensor([8, 8]), torch.arange(16)) is None


@pytest.mark.parametrize("meta, style, tokens", [([9], "lengths", 5), ([8, 8], "lengths", 9), ([2, 2], "lengths", 5),
                                                 ([0, 3, 2], "cu_seqlens", 3), ([1, 3], "cu_seqlens", 3)])
def test_metadata_that_does_not_tile_the_tokens_is_refused_whatever_t(meta, style, tokens):
    """The kernel follows the lengths as given (found in review: [9] over 5 tokens and [8, 8] over 9 reached
    it with the core's contents checks off, their default; it stopped silently or ran past T)."""
    reason = contents_refusal_reason(torch.tensor(meta), torch.arange(len(meta) - (style == "cu_seqlens")),
                                     seq_lens_style=style, tokens=tokens)
    assert reason is not None and ("do not tile" in reason or "more than MAX_MTP" in reason)


def test_a_slot_past_the_pool_is_refused_as_a_padding_slot_is():
    assert contents_refusal_reason([1, 1], [0, 9], pool_slots=9, tokens=2) == (
        "ssm_state_indices[1] = 9 is past the pool of 9 slots: the 310P kernel would write outside the state pool")
    assert contents_refusal_reason([1, 1], [0, 8], pool_slots=9, tokens=2) is None


def test_padding_slot_is_refused():
    slots = torch.tensor([3, 0, -1, 2])
    assert contents_refusal_reason(torch.tensor([2, 2]), slots) == (
        "ssm_state_indices[2] = -1 is a padding slot: the 310P kernel has no padding path and would write outside "
        "the state pool"
    )


def test_entry_point_refuses_before_loading_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # any import attempt would raise ImportError
    case = make_case([2, 2], seed=2)
    case["query"] = case["query"].bfloat16()
    with pytest.raises(ValueError) as err:
        recurrent_gated_delta_rule_npu(**case)
    assert str(err.value) == (
        "RGDR on ascend310p refuses this call: query is bfloat16, not float16: the 310P kernel is built only as "
        "RGDR<half, half>"
    )


def test_entry_point_guards_contents_by_default(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    case = make_case([1, 9], seed=3)
    with pytest.raises(ValueError) as err:
        recurrent_gated_delta_rule_npu(**case)
    assert str(err.value).startswith("RGDR on ascend310p refuses this call: sequence 1 has 9 tokens")


def test_entry_point_reaches_the_launch_only_for_an_accepted_call(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(ImportError):
        recurrent_gated_delta_rule_npu(**make_case([2, 3], seed=4))
