"""An input a kernel writes shares memory with no other argument and does not overlap itself.

Issue 24: RGDR with ``value`` a view into the state slot it writes was accepted and gave
results 0.13 off the unaliased run. Views of one arena that do not overlap stay accepted.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from test_rgdr_op import _batch
from tileops_core import CheckError
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

STATE_AT = RecurrentGatedDeltaRuleFwdOp.op_spec().inputs["state"].loc.where()


def _fresh_and_warm(args: dict, bad: dict) -> list[str]:
    """The errors a fresh instance and a warm one (it served ``args``) give for ``bad``."""
    warm = RecurrentGatedDeltaRuleFwdOp()
    warm(**{k: v.clone() for k, v in args.items()})
    messages = []
    for op in (RecurrentGatedDeltaRuleFwdOp(), warm):
        with pytest.raises(CheckError) as info:
            op(**bad)
        messages.append(str(info.value))
    return messages


def test_a_value_that_is_a_view_into_the_state_pool_is_refused_fresh_and_warm():
    args = _batch([2, 1])
    bad = dict(args)
    slot = int(args["ssm_state_indices"][0])  # a slot this call writes, its first elements read as values
    bad["value"] = args["state"][slot].view(-1)[:args["value"].numel()].view(args["value"].shape)
    fresh, warm = _fresh_and_warm(args, bad)
    assert fresh == warm == (
        "RecurrentGatedDeltaRuleFwdOp: input state is mutated (written in place) and shares memory with value: a "
        f"kernel would change value while reading it; pass arguments that do not overlap (e.g. value.clone()) "
        f"({STATE_AT})")


def test_a_state_pool_that_overlaps_itself_is_refused_fresh_and_warm():
    args = _batch([2, 1])
    bad = dict(args)
    bad["state"] = args["state"][:1].expand(args["state"].shape)  # every slot is slot 0
    fresh, warm = _fresh_and_warm(args, bad)
    assert fresh == warm
    assert fresh.startswith("RecurrentGatedDeltaRuleFwdOp: input state is mutated (written in place) and overlaps "
                            "itself (strides [0, ")
    assert fresh.endswith(f"({STATE_AT})")


def test_state_and_inputs_carved_out_of_one_arena_without_overlap_are_accepted():
    args = _batch([2, 1])
    state, value = args["state"], args["value"]
    arena = torch.empty(state.numel() + value.numel())
    args["state"] = arena[:state.numel()].view(state.shape).copy_(state)
    args["value"] = arena[state.numel():].view(value.shape).copy_(value)
    expected_state = state.clone()
    expected = RecurrentGatedDeltaRuleFwdOp()(**{**args, "state": expected_state, "value": value.clone()})
    out = RecurrentGatedDeltaRuleFwdOp()(**args)
    assert torch.equal(out, expected) and torch.equal(args["state"], expected_state)


def test_interleaved_views_whose_byte_ranges_meet_but_share_no_element_are_accepted():
    # The state pool and the values as interleaved parts of one buffer: their byte ranges
    # overlap, their elements do not.
    args = _batch([2, 1])
    state, value = args["state"], args["value"]
    T, pool = value.shape[0], state.shape[0]
    buf = torch.empty(*state.shape[:3], state.shape[3] + 1)
    args["state"] = buf[..., :-1].copy_(state)
    args["value"] = buf[:T, :, :, -1].copy_(value)
    assert pool >= T and not args["state"].is_contiguous()
    expected_state = state.clone()
    expected = RecurrentGatedDeltaRuleFwdOp()(**{**args, "state": expected_state, "value": value.clone()})
    out = RecurrentGatedDeltaRuleFwdOp()(**args)
    assert torch.equal(out, expected) and torch.equal(args["state"], expected_state)


def test_an_input_expanded_far_beyond_its_memory_is_refused_before_any_allocation():
    from tileops_core.ops.gemm import GemmFwdOp

    K = 2**31 + 7
    a = torch.ones(1, 1).expand(1, K)
    b = torch.ones(1, 1).expand(1, K)
    for op in (GemmFwdOp(), GemmFwdOp()):
        with pytest.raises(CheckError, match=r"GemmFwdOp: input a is expanded \(strides \[1, 0\]\): read densely it "
                                             r"is 8\.0 GiB from 4 bytes of memory"):
            op(a, b)


def test_an_expanded_input_is_refused_on_a_warm_call_of_a_plan_made_for_a_contiguous_one():
    """Softmax's plan key has no contiguity in it: an expanded input of a shape already planned reused that
    plan, whose list of non-contiguous arguments was empty (found in review: accepted, a 256 MiB copy)."""
    from tileops_core.ops.reduction import SoftmaxFwdOp

    op = SoftmaxFwdOp(dim=0, N=1)
    n = 2**26 + 16
    op(torch.ones(1, n))
    for _ in range(2):  # and again: a refused call leaves no matcher that would let the next one through
        with pytest.raises(CheckError, match=r"SoftmaxFwdOp: input input is expanded \(strides \[1, 0\]\)"):
            op(torch.ones(1, 1).expand(1, n))


def test_a_mutated_inference_tensor_outside_inference_mode_is_refused_before_anything_is_written():
    """torch writes an inference tensor only in inference mode: the kernel would fail after its first writes
    (found in review: the key cache written, then the value cache's write raised)."""
    from tileops_core.ops.attention import AttentionDecodeFwdOp

    g = torch.Generator().manual_seed(5)
    args = dict(query=torch.randn(2, 4, 8, generator=g), key=torch.randn(2, 2, 8, generator=g),
                value=torch.randn(2, 2, 8, generator=g), key_cache=torch.randn(3, 6, 2, 8, generator=g),
                cache_seqlens=torch.tensor([2, 4]))
    with torch.inference_mode():
        args["value_cache"] = torch.randn(3, 6, 2, 8)
    before = args["key_cache"].clone()
    op = AttentionDecodeFwdOp()
    for _ in range(2):  # cold and warm
        with pytest.raises(CheckError, match=r"input value_cache is mutated \(written in place\) and is an inference "
                                             r"tensor .*call the op under torch.inference_mode\(\)"):
            op(**args)
        assert torch.equal(args["key_cache"], before)
    with torch.inference_mode():
        op(**args)  # where torch writes it, the op does
    assert not torch.equal(args["key_cache"], before)


def _conv_update_and_its_arguments(seed: int) -> tuple[Any, Callable[[], tuple]]:
    """A conv decode op (its state mutated, contents unchecked) and a maker of fresh arguments for it."""
    from tileops_core.ops.conv import CausalConv1dUpdateFwdOp

    g = torch.Generator().manual_seed(seed)

    def args() -> tuple:
        return (torch.randn(2, 8, generator=g), torch.randn(3, 8, 3, generator=g), torch.randn(8, 4, generator=g),
                torch.ones(2, dtype=torch.int32), torch.arange(2, dtype=torch.int32))

    return CausalConv1dUpdateFwdOp(activation="silu", check_contents=False), args


def test_a_call_matched_by_a_check_made_inside_inference_mode_still_refuses_an_inference_tensor_outside_it():
    """Inside inference_mode plain tensors carry the dispatch keys inference tensors carry outside it, so the
    fast check of a plan warmed there matched them (found in review: the state written part-way)."""
    op, args = _conv_update_and_its_arguments(6)
    warm = args()
    with torch.inference_mode():
        op(*warm)
        op(*warm)
        inference = args()
    before = inference[1].clone()
    with pytest.raises(CheckError, match="input conv_state is mutated .* and is an inference tensor"):
        op(*inference)
    assert torch.equal(inference[1], before)


def test_a_call_matched_by_a_check_made_outside_inference_mode_still_refuses_an_inference_tensor_outside_it():
    """A plan warmed outside inference_mode keeps no per-call mode test (its fast check misses on an inference
    tensor, whose dispatch keys differ from the plain tensor's it was made for): the call reaches the full
    check, which refuses it before anything is written, warm after warm."""
    op, args = _conv_update_and_its_arguments(7)
    warm = args()
    op(*warm)
    op(*warm)
    with torch.inference_mode():
        inference = args()
    before = inference[1].clone()
    for mixed in (inference, (warm[0], inference[1], *warm[2:])):  # every argument, or only the mutated one
        for _ in range(2):
            with pytest.raises(CheckError, match="input conv_state is mutated .* and is an inference tensor"):
                op(*mixed)
            assert torch.equal(inference[1], before)
    op(*warm)  # and the warm plan still serves plain tensors


def test_a_plan_warmed_inside_an_autograd_function_still_refuses_an_inference_tensor_outside_inference_mode():
    """An ``autograd.Function``'s forward runs below autograd: the plan warmed there must still tell an inference
    tensor from a plain one (the per-call test is kept only for plans warmed inside inference_mode)."""
    op, args = _conv_update_and_its_arguments(8)

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *values: Any) -> Any:
            return op(*values)

    warm = args()
    warm[0].requires_grad_()
    Step.apply(*warm)
    Step.apply(*warm)
    with torch.inference_mode():
        inference = args()
    before = inference[1].clone()
    with pytest.raises(CheckError, match="input conv_state is mutated .* and is an inference tensor"):
        Step.apply(warm[0], *inference[1:])
    assert torch.equal(inference[1], before)


def test_a_modestly_expanded_input_is_served():
    from tileops_core.ops.gemm import GemmFwdOp

    a = torch.randn(1, 64).expand(8, 64)
    b = torch.randn(16, 64)
    assert torch.allclose(GemmFwdOp()(a, b), a @ b.T, atol=1e-5)


def test_inputs_that_require_grad_are_read_without_recording_a_backward_on_fresh_and_warm_calls():
    args = _batch([2, 1], g=True)
    expected_state = args["state"].clone()
    expected = RecurrentGatedDeltaRuleFwdOp()(**{**args, "state": expected_state})
    for name in ("query", "key", "value", "beta", "g"):
        args[name] = args[name].clone().requires_grad_(True)
    warm = RecurrentGatedDeltaRuleFwdOp()
    for op in (RecurrentGatedDeltaRuleFwdOp(), warm, warm):
        state = args["state"].clone()
        out = op(**{**args, "state": state})
        assert not out.requires_grad
        assert torch.equal(out, expected) and torch.equal(state, expected_state)


def test_a_state_pool_that_overlaps_itself_is_refused_on_every_call_with_its_layout():
    # The second call has the first's sizes and strides: the plan's same-call matcher accepts it,
    # and the overlap rule must still refuse it.
    args = _batch([2, 1])
    args["state"] = args["state"][:1].expand(args["state"].shape)
    op = RecurrentGatedDeltaRuleFwdOp()
    messages = []
    for _ in range(2):
        with pytest.raises(CheckError) as info:
            op(**args)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "overlaps itself" in messages[0]


def test_interleaved_views_are_accepted_on_every_call_with_their_layout():
    args = _batch([2, 1])
    state, value = args["state"], args["value"]
    T = value.shape[0]
    expected_state = state.clone()
    expected = RecurrentGatedDeltaRuleFwdOp()(**{**args, "state": expected_state, "value": value.clone()})
    op = RecurrentGatedDeltaRuleFwdOp()
    for _ in range(2):  # the second call takes the matched path: ranges meet, elements do not
        buf = torch.empty(*state.shape[:3], state.shape[3] + 1)
        args["state"] = buf[..., :-1].copy_(state)
        args["value"] = buf[:T, :, :, -1].copy_(value)
        out = op(**args)
        assert torch.equal(out, expected) and torch.equal(args["state"], expected_state)
