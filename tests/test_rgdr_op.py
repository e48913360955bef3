"""RecurrentGatedDeltaRuleFwdOp through its public API: the cases RGDR.md singles out."""

from __future__ import annotations

import itertools
import os
import re

import pytest
import torch

from tileops_core import CheckError
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

NK, NV, DK, DV = 2, 4, 16, 16
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _batch(lengths, *, dtype=torch.float32, state_dtype=torch.float32, g=False, gk=None, accepted=False,
           style="lengths", meta_dtype=torch.int32, spare=5, rng=None):
    rng = rng or _rng()
    T = sum(lengths)
    pool = T + spare
    q = torch.nn.functional.normalize(torch.randn(T, NK, DK, generator=rng), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(T, NK, DK, generator=rng), dim=-1).to(dtype)
    v = torch.randn(T, NV, DV, generator=rng).to(dtype)
    beta = torch.sigmoid(torch.randn(T, NV, generator=rng)).to(dtype)
    state = torch.randn(pool, NV, DV, DK, generator=rng).to(state_dtype)
    lens = torch.tensor(lengths, dtype=torch.int64)
    meta = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]) if style == "cu_seqlens" else lens
    args = dict(query=q, key=k, value=v, beta=beta, state=state, actual_seq_lengths=meta.to(meta_dtype),
                ssm_state_indices=torch.randperm(pool, generator=rng)[:T].to(meta_dtype))
    if g:
        args["g"] = -(0.05 + 0.5 * torch.rand(T, NV, generator=rng))
    if gk == "scalar":
        args["gk"] = -(0.05 + 0.5 * torch.rand(T, NV, generator=rng))
    elif gk == "vector":
        args["gk"] = -(0.05 + 0.5 * torch.rand(T, NV, DK, generator=rng))
    if accepted:
        args["num_accepted_tokens"] = torch.tensor([1 + int(torch.randint(max(n, 1), (1,), generator=rng))
                                                    for n in lengths]).to(meta_dtype)
    return args


def _check_against_reference(args, **params):
    op = RecurrentGatedDeltaRuleFwdOp(**params)
    state_ref = args["state"].clone()
    before = args["state"].clone()
    expected = torch.empty(args["value"].shape, dtype=torch.float64)
    recurrent_gated_delta_rule(**{**args, "state": state_ref}, **params, compute_dtype=torch.float64, out=expected)
    out = op(**args)
    assert out.dtype == args["value"].dtype and out.shape == args["value"].shape
    tol = max(TOL[out.dtype], TOL[args["state"].dtype])
    err = (out.double() - expected).norm() / expected.norm()
    assert err <= tol, f"out relative error {float(err):.3g}"
    state_err = (args["state"].double() - state_ref.double()).norm() / state_ref.double().norm()
    assert state_err <= TOL[args["state"].dtype], f"state relative error {float(state_err):.3g}"
    written = args["ssm_state_indices"].long()
    untouched = torch.ones(args["state"].shape[0], dtype=torch.bool)
    untouched[written[written >= 0]] = False
    assert torch.equal(args["state"][untouched], before[untouched]), "slots no token writes must stay bit-identical"
    return out


def test_sequences_of_different_lengths_one_to_eight_share_one_call():
    _check_against_reference(_batch([1, 8, 3, 5, 2, 7, 4, 6], g=True))


@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
@pytest.mark.parametrize("meta_dtype", [torch.int32, torch.int64])
def test_both_sequence_length_styles_with_int32_and_int64_metadata(style, meta_dtype):
    _check_against_reference(_batch([3, 1, 4], style=style, meta_dtype=meta_dtype, g=True), seq_lens_style=style)


@pytest.mark.parametrize("g,gk", list(itertools.product([False, True], [None, "scalar", "vector"])))
def test_gates_absent_and_present_in_both_gk_forms(g, gk):
    _check_against_reference(_batch([2, 3], g=g, gk=gk))


def test_num_accepted_tokens_picks_the_slot_each_sequence_starts_from():
    _check_against_reference(_batch([4, 2, 5], g=True, accepted=True))


@pytest.mark.parametrize("dtype,state_dtype", [(torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16),
                                               (torch.float16, torch.float16)])
def test_low_precision_inputs_and_state(dtype, state_dtype):
    _check_against_reference(_batch([2, 3, 1], dtype=dtype, state_dtype=state_dtype, g=True),
                             use_qk_l2norm_in_kernel=True)


def test_each_token_writes_its_own_slot():
    args = _batch([3], g=True)
    op = RecurrentGatedDeltaRuleFwdOp()
    before = args["state"].clone()
    op(**args)
    for slot in args["ssm_state_indices"].tolist():
        assert not torch.equal(args["state"][slot], before[slot])


@pytest.mark.parametrize("bad,message", [
    ("lengths", "actual_seq_lengths sums to 5 tokens, but T=6"),
    ("slot", "ssm_state_indices [99] lie outside [-1, 11)"),
    ("shared", "sequences 0 and 1 both write state slot"),
    ("accepted", "num_accepted_tokens[0]=4 is outside [1, 3]"),
])
def test_bad_metadata_contents_fail_before_anything_is_written(bad, message):
    args = _batch([3, 3], accepted=True)
    if bad == "lengths":
        args["actual_seq_lengths"] = torch.tensor([3, 2], dtype=torch.int32)
    elif bad == "slot":
        args["ssm_state_indices"][2] = 99
    elif bad == "shared":
        args["ssm_state_indices"][4] = args["ssm_state_indices"][0]
    else:
        args["num_accepted_tokens"][0] = 4
    before = args["state"].clone()
    with pytest.raises(CheckError, match=re.escape(message)):
        RecurrentGatedDeltaRuleFwdOp(check_contents=True)(**args)
    assert torch.equal(args["state"], before)


def test_gk_of_another_length_breaks_the_declared_rule():
    args = _batch([2], g=True)
    args["gk"] = -torch.rand(2, NV, 3)
    with pytest.raises(CheckError, match=r"not present\(gk\) or G == \(\) or G == \(DK,\) does not hold"):
        RecurrentGatedDeltaRuleFwdOp()(**args)


def test_prefix_sums_read_as_lengths_are_rejected_by_shape():
    args = _batch([2, 2], style="cu_seqlens")
    with pytest.raises(CheckError, match="num_accepted_tokens|actual_seq_lengths"):
        RecurrentGatedDeltaRuleFwdOp(seq_lens_style="lengths", check_contents=True)(**args)


def test_a_mutated_state_that_requires_grad_is_a_check_error_on_fresh_and_warm_calls():
    op = RecurrentGatedDeltaRuleFwdOp()
    args = _batch([2, 1])
    op(**args)  # warm: a plan exists for exactly these shapes
    args["state"] = args["state"].clone().requires_grad_(True)
    where = RecurrentGatedDeltaRuleFwdOp.op_spec().inputs["state"].loc.where()
    expected = (f"RecurrentGatedDeltaRuleFwdOp: input state is mutated (written in place) and requires grad: no kernel "
                f"records that write for autograd; pass a tensor with requires_grad=False (e.g. .detach()) ({where})")
    for instance in (op, RecurrentGatedDeltaRuleFwdOp()):
        with pytest.raises(CheckError) as info:
            instance(**args)
        assert str(info.value) == expected


def test_a_call_on_meta_tensors_returns_the_inferred_output_on_meta():
    args = {k: v.to("meta") for k, v in _batch([2, 1, 3], g=True).items()}
    out = RecurrentGatedDeltaRuleFwdOp(check_contents=False)(**args)
    assert out.device.type == "meta" and out.shape == args["value"].shape and out.dtype == args["value"].dtype
