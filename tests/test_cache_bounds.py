"""Every cache on the call path is bounded: an op called on ever-new shapes (dynamic sequence
lengths) keeps at most ``MAX_PLANS`` plans per instance and ``MAX_SELECTIONS`` selections,
while the kernels built (keyed by build identity, not by shape) are kept."""

from __future__ import annotations

import torch

from tileops_core.kernels import registry, select
from tileops_core.op import base
from tileops_core.ops.reduction import SumFwdOp


def test_ever_new_shapes_keep_plans_and_selections_within_their_caps(monkeypatch, fresh_registry):
    monkeypatch.setattr(base, "MAX_PLANS", 16)
    monkeypatch.setattr(select, "MAX_SELECTIONS", 24)
    op = SumFwdOp(dim=[-1])
    for i in range(1, 300):
        x = torch.randn(2, i)
        torch.testing.assert_close(op(x), x.sum(-1))
        assert len(op._plans) <= 16
        assert len(registry.active().caches.selections) <= 24
    assert select.build_count() <= 2  # one build identity serves every shape
