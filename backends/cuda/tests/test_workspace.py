"""A launcher's workspaces: what torch.empty gives (shape, contiguous strides, dtype, device, no grad),
through allocators the launcher keeps per shape, with a bounded cache."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tileops_cuda.kernels import _workspace  # noqa: E402


@pytest.mark.parametrize("shape,dtype", [((3, 5), torch.float32), ((2, 1, 4), torch.bfloat16), ((0, 7), torch.int32),
                                         ((6,), torch.int64)])
def test_a_workspace_is_the_tensor_torch_empty_would_give(shape, dtype):
    empty = _workspace.workspace_allocator()
    for _ in range(2):  # made, then from the launcher's allocator
        t = empty(shape, dtype, torch.device("cpu"))
        want = torch.empty(shape, dtype=dtype)
        assert t.shape == want.shape and t.stride() == want.stride() and t.dtype is dtype
        assert t.device.type == "cpu" and not t.requires_grad


def test_the_allocators_a_launcher_keeps_are_bounded(monkeypatch):
    monkeypatch.setattr(_workspace, "_MAX_SHAPES", 4)
    made: list = []
    real = __import__("tileops_core.op.alloc", fromlist=["fresh_allocator"]).fresh_allocator

    def counting(shape, dtype, device):
        made.append(shape)
        return real(shape, dtype, device)

    monkeypatch.setattr("tileops_core.op.alloc.fresh_allocator", counting)
    empty = _workspace.workspace_allocator()
    for n in (1, 2, 3, 4, 1, 2, 5, 1):
        assert empty((n, 8), torch.float32, torch.device("cpu")).shape == (n, 8)
    # 1-4 made once each and reused; 5 starts the cache again, so 1 is made anew
    assert made == [(1, 8), (2, 8), (3, 8), (4, 8), (5, 8), (1, 8)]
