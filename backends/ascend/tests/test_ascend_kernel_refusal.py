"""AscendRGDR310P.refusal: each reason read from a call spec alone, and agreement with the launch-time tiling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulated_calls import meta_instance, simulated_call
from tileops_ascend.kernel import AscendRGDR310P, signature_of
from tileops_ascend.tiling import TilingError, compute_tiling
from tileops_core.kernels import CallSpec

FP16_ONLY = "the 310P kernel is built only as RGDR<half, half>"


def _call(*, dtype="float16", state="float16", nk=2, nv=4, dk=64, dv=64, g=True, gk=None, accepted=False,
          l2norm=False, index="int32"):
    """A call spec as the op builds it for RGDRKernel (``gk``: None, or G = () or (DK,))."""
    dtypes = {"query": dtype, "key": dtype, "value": dtype, "beta": dtype, "state": state,
              "actual_seq_lengths": index, "ssm_state_indices": index, "out": dtype}
    if g:
        dtypes["g"] = "float32"
    if gk is not None:
        dtypes["gk"] = "float32"
    if accepted:
        dtypes["num_accepted_tokens"] = index
    dims = {"NK": nk, "NV": nv, "DK": dk, "DV": dv, "G": gk}
    flags = {"has_g": g, "has_gk": gk is not None, "has_num_accepted_tokens": accepted, "has_scale": False,
             "seq_lens_style": "lengths", "use_qk_l2norm_in_kernel": l2norm}
    return CallSpec("RecurrentGatedDeltaRuleFwdOp", "RGDRKernel", "npu", "ascend310p", dtypes, dims, flags)


def test_the_hand_built_call_spec_is_the_one_the_op_builds():
    planned = simulated_call(meta_instance("tiny-fp16-scalar-gk", fp16=True))
    assert planned == _call(nk=2, nv=4, dk=16, dv=16, gk=())


@pytest.mark.parametrize("options", [
    dict(), dict(gk=()), dict(gk=(64,)), dict(g=False, accepted=True, index="int64"),
    dict(nk=16, nv=32, dk=128, dv=128, gk=(128,)), dict(nk=16, nv=32, dk=256, dv=256),
], ids=["g", "g-scalar-gk", "g-vector-gk", "no-gates-accepted-int64", "qwen-vector-gk", "dk-dv-256"])
def test_fp16_calls_the_ub_can_tile_are_accepted(options):
    assert AscendRGDR310P.refusal(_call(**options)) is None


@pytest.mark.parametrize("name", ["query", "key", "value", "beta"])
def test_a_non_fp16_input_is_refused(name):
    call = _call()
    call = CallSpec(call.op, call.interface, call.device_type, call.arch, {**call.dtypes, name: "bfloat16"},
                    call.dims, call.flags)
    assert AscendRGDR310P.refusal(call) == f"{name} is bfloat16, not float16: {FP16_ONLY}"


@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_a_non_fp16_state_is_refused(state):
    assert AscendRGDR310P.refusal(_call(state=state)) == (
        f"state is {state}, not float16: the 310P kernel reads and writes the state pool as fp16"
    )


def test_in_kernel_l2_normalisation_is_refused():
    assert AscendRGDR310P.refusal(_call(l2norm=True)) == (
        "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)"
    )


def test_nv_not_a_multiple_of_nk_is_refused():
    assert AscendRGDR310P.refusal(_call(nk=3, nv=4)) == (
        "NV=4 is not a multiple of NK=3: value head h reads key head h // (NV // NK)"
    )


def test_head_dims_no_ub_profile_can_tile_are_refused():
    assert AscendRGDR310P.refusal(_call(dk=1024, dv=1024)) == (
        "no UB buffer profile tiles DK=1024, DV=1024: 262144 UB bytes less the 148864-byte working set leave no "
        "vStep >= 16 (1x1: vStep below 16; 1x2: vStep below 16; 2x2: needs 9 TQue buffers > 8)"
    )


def test_a_vector_gk_costs_a_queue_and_so_a_profile():
    """With vector gk only 1x1 fits the 8 queues; the reason lists the other two profiles' fates."""
    assert AscendRGDR310P.refusal(_call(dk=1024, dv=1024, gk=(1024,))) == (
        "no UB buffer profile tiles DK=1024, DV=1024: 262144 UB bytes less the 181632-byte working set leave no "
        "vStep >= 16 (1x1: vStep below 16; 1x2: needs 9 TQue buffers > 8; 2x2: needs 10 TQue buffers > 8)"
    )


def test_a_tiling_whose_scratch_would_overflow_is_refused_from_g_alone():
    """G = () is a per-head scalar gk: the call spec shows it without T (seed-003 test numel(gk) < T*NV*DK)."""
    assert AscendRGDR310P.refusal(_call(nk=16, nv=32, dk=80, dv=256, gk=())) == (
        "the kernel's fp32 scratch needs 181248 bytes but profile 1x2 with vStep 256 leaves 170880 (DK=80, DV=256, "
        "UB 262144 bytes): the vStep budget omits stateInQueue_'s 2*aDk bytes per row, and the scalar gk buffer is "
        "billed with the queues but carved from the scratch"
    )


def test_every_reason_is_reported_in_order():
    reason = AscendRGDR310P.refusal(_call(dtype="float32", state="float32", l2norm=True, dk=1024, dv=1024))
    assert reason == "; ".join(
        [f"{n} is float32, not float16: {FP16_ONLY}" for n in ("query", "key", "value", "beta")]
        + ["state is float32, not float16: the 310P kernel reads and writes the state pool as fp16",
           "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)",
           "no UB buffer profile tiles DK=1024, DV=1024: 262144 UB bytes less the 148864-byte working set leave no "
           "vStep >= 16 (1x1: vStep below 16; 1x2: vStep below 16; 2x2: needs 9 TQue buffers > 8)"]
    )


def test_the_token_limit_is_not_a_call_spec_refusal():
    """T and B are not in the call spec: the same spec serves T=1 and T=2048 (refused at launch if T > B*8)."""
    assert {"T", "B"}.isdisjoint(_call().dims)
    assert AscendRGDR310P.refusal(_call()) is None


@settings(max_examples=400, deadline=None)
@given(
    nk=st.integers(1, 8), group=st.integers(1, 8), dk=st.integers(1, 600), dv=st.integers(1, 600),
    g=st.booleans(), gk=st.sampled_from(["none", "scalar", "vector"]), accepted=st.booleans(),
    batch=st.integers(1, 64), per_seq=st.integers(1, 8),
)
def test_selection_accepts_exactly_the_calls_the_launch_time_tiling_can_plan(
    nk, group, dk, dv, g, gk, accepted, batch, per_seq
):
    """If selection keeps the kernel, the tiling at launch succeeds for any T <= B*8, with the same gk kind."""
    nv = nk * group
    tail = {"none": None, "scalar": (), "vector": (dk,)}[gk]
    call = _call(nk=nk, nv=nv, dk=dk, dv=dv, g=g, gk=tail, accepted=accepted)
    t = batch * per_seq
    try:
        tiling = compute_tiling(t=t, nk=nk, dk=dk, nv=nv, dv=dv, state_slots=t, seq_lens_len=batch, has_g=g,
                                gk_shape=None if tail is None else (t, nv, *tail), has_num_accepted_tokens=accepted)
    except TilingError as exc:
        assert AscendRGDR310P.refusal(call) == str(exc)
        return
    assert AscendRGDR310P.refusal(call) is None
    flags = signature_of(call).optional_inputs()
    assert (flags.has_gama, flags.has_gama_k, flags.gama_k_scalar, flags.has_accepted_tokens) == (
        bool(tiling.data.has_gama), bool(tiling.data.has_gama_k), bool(tiling.data.gama_k_scalar),
        bool(tiling.data.has_accepted_tokens))
