"""The same-call matcher (``tileops_core.op.same_call``) on calls that pass one tensor in two places.

torch's ``TensorGuards`` answers False for any call that repeats a tensor object, so before the
matcher took each object once, ``op(x, w, w)`` rebuilt its plan key and its matcher on every call
(the hot path's slowest branch: 120 -> 152 µs a QKNormRope call on the CPU with one weight for q and k).
"""

from __future__ import annotations

import pytest
import torch

import tileops_core.op.plan as plan_module
from tileops_core.op.same_call import make_matcher
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
