"""A plan's fresh outputs are the tensors ``torch.empty`` would give, allocated in torch's cheapest form."""

from __future__ import annotations

import pytest
import torch

from tileops_core.op import alloc


@pytest.mark.parametrize("shape", [(), (0, 4), (3, 1, 5), (1, 4096), (2, 0, 1)])
def test_a_fresh_output_has_the_shape_dtype_and_strides_torch_empty_gives(shape):
    want = torch.empty(shape, dtype=torch.bfloat16)
    got = alloc.fresh_allocator(shape, torch.bfloat16, torch.device("cpu"))()
    assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)
    assert got.is_contiguous() and not got.requires_grad


def test_two_fresh_outputs_never_share_storage():
    make = alloc.fresh_allocator((4, 8), torch.float32, torch.device("cpu"))
    a, b = make(), make()
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()


def test_under_deterministic_algorithms_the_output_is_filled_as_torch_empty_fills_it():
    make = alloc.fresh_allocator((64,), torch.float32, torch.device("cpu"))
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.isnan(make()).all()
    finally:
        torch.use_deterministic_algorithms(previous)


def test_a_cuda_output_goes_through_torch_empty_when_the_current_device_is_not_the_plans(monkeypatch):
    made: list = []
    monkeypatch.setattr(alloc, "_strided_cuda", [(lambda *a: made.append(("strided", *a)), lambda: 0)])
    monkeypatch.setattr(alloc, "_empty", lambda *a, **k: made.append(("empty", a, k["device"])))
    alloc.fresh_allocator((2, 3), torch.float32, torch.device("cuda", 1))()
    alloc.fresh_allocator((2, 3), torch.float32, torch.device("cuda", 0))()
    assert made == [("empty", (2, 3), torch.device("cuda", 1)), ("strided", (2, 3), (3, 1), torch.float32)]
