"""The same-call matcher (``tileops_core.op.same_call``) on calls that pass one tensor in two places.

torch's ``TensorGuards`` answers False for any call that repeats a tensor object, so before the
matcher took each object once, ``op(x, w, w)`` rebuilt its plan key and its matcher on every call
(the hot path's slowest branch: 120 -> 152 µs a QKNormRope call on the CPU with one weight for q and k).

The same module makes step 7's check of one fresh output's metadata (``make_output_matcher``): a
guard of the planned shape, dtype and device, which must accept nothing step 7 would refuse.
"""

from __future__ import annotations

import pytest
import torch

import tileops_core.op.plan as plan_module
from tileops_core.op.same_call import make_matcher, make_output_matcher
from tileops_core.ops.attention import QKNormRopeFwdOp


def test_a_matcher_made_from_a_repeated_tensor_asks_for_the_same_repetition_and_metadata():
    a, w = torch.randn(4, 8), torch.randn(8)
    matches = make_matcher((a, w, w, None))
    if matches is None:
        pytest.skip("this torch has no TensorGuards: every call builds its key")
    b, v = torch.randn(4, 8), torch.randn(8)
    assert matches((a, w, w, None)) and matches((b, v, v, None))  # another call repeating one tensor there
    assert not matches((b, v, v.clone(), None))  # distinct tensors there: the key decides (another matcher)
    assert not matches((b, v, v, v))  # an absent argument given
    assert not matches((b, torch.randn(9), None, None))
    w16 = torch.randn(8, dtype=torch.float16)
    assert not matches((b, w16, w16, None))  # same repetition, other dtype
    assert not matches((b, b, b, None))  # other shapes


def test_an_op_called_with_one_weight_for_query_and_key_keeps_its_matcher(monkeypatch):
    made = []
    real = plan_module.make_matcher
    monkeypatch.setattr(plan_module, "make_matcher", lambda values: made.append(1) or real(values))
    op = QKNormRopeFwdOp(rotary_dim=4, theta=1e4, eps=1e-6)
    q, k, w = torch.randn(3, 4, 16), torch.randn(3, 2, 16), torch.randn(16)
    positions = torch.arange(3)
    first = op(q, k, w, w, positions)
    if op._last_plan.matches is None:
        pytest.skip("this torch has no TensorGuards: every call builds its key")
    for _ in range(3):
        again = op(q, k, w, w, positions)
    assert len(made) == 1  # the first call's matcher served the three after it
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    op(q, k, w, w.clone(), positions)  # two weights now: planned once more, then matched
    op(q, k, w, w.clone(), positions)
    assert len(made) == 2


class _Tagged(torch.Tensor):
    pass


def test_an_output_matcher_accepts_a_plain_strided_tensor_of_the_planned_metadata_only():
    """Step 7's one C++ check of a fresh output: True says shape, dtype, device, strided layout
    (and, where asked, contiguity); anything else is False, and the caller reads the fields."""
    matches = make_output_matcher((4, 8), torch.float32, torch.device("cpu"), contiguous=False)
    if matches is None:
        pytest.skip("this torch has no usable TensorGuards: step 7 reads the fields")
    x = torch.randn(4, 8)
    assert matches(x) and matches(torch.randn(8, 4).t()) and matches(torch.randn(4, 16)[:, ::2])  # any strides
    for other in (torch.randn(4, 9), torch.randn(4, 8, 1), torch.randn(32), x.double(), x.half(),
                  torch.empty(4, 8, device="meta"), x.to_sparse(), x.clone().requires_grad_(), x.as_subclass(_Tagged),
                  None, 3.0, (x,)):
        assert not matches(other), other


def test_an_output_matcher_for_a_contiguous_output_asks_for_the_contiguous_strides():
    matches = make_output_matcher((4, 8), torch.float32, torch.device("cpu"), contiguous=True)
    if matches is None:
        pytest.skip("this torch has no usable TensorGuards: step 7 reads the fields")
    assert matches(torch.randn(4, 8))
    assert not matches(torch.randn(8, 4).t()) and not matches(torch.randn(4, 16)[:, ::2])
    assert not matches(torch.randn(1, 8).expand(4, 8))


def test_an_output_matcher_made_outside_inference_mode_says_nothing_of_an_inference_tensor():
    """It compares dispatch keys: False here means only that the fields are read one by one."""
    matches = make_output_matcher((4, 8), torch.float32, torch.device("cpu"), contiguous=False)
    if matches is None:
        pytest.skip("this torch has no usable TensorGuards: step 7 reads the fields")
    with torch.inference_mode():
        assert not matches(torch.randn(4, 8))
