"""The calling device (seed 000 section 4): voting, ``device: cpu`` tensors, the fallback to the
process accelerator, construction-time tensors, ``contiguous: true``.

This machine has only a CPU, so the ``meta`` device plays the second device type: tensors
on it have shapes and dtypes but no data, which is all the checks read.
"""

from __future__ import annotations

import functools

import pytest
import torch

from example_ops import REFERENCE_KERNELS, BmmFwdOp, BmmKernel, RMSNormFwdOp, RMSNormKernel, failure, probe_specs
from tileops_core.errors import CheckError
from tileops_core.kernels import KernelInterface
from tileops_core.op import Op, current_call


PROBES = probe_specs(
    ProbeGatherFwdOp="""
    inputs:
      ids: {dtype: int64, shape: "[K]", device: cpu}
      x: {dtype: "float32 | float16", shape: "[V, D]"}
    outputs:
      y: {dtype: "same_as(x)", shape: "[K, D]"}
""",
    ProbeLengthsFwdOp="""
    inputs:
      lengths: {dtype: int64, shape: "[B]", device: cpu}
    outputs:
      y: {dtype: float32, shape: "[B]"}
    params:
      device: {type: "device | None", default: null}
""",
    ProbeTableFwdOp="""
    inputs:
      table: {dtype: "same_as(x)", shape: "[V, D]", construction: true}
      pinned: {dtype: int64, shape: "[V]", construction: true, device: cpu}
      x: {dtype: "float32 | float16", shape: "[K, D]"}
    outputs:
      y: {dtype: "same_as(x)", shape: "[K, D]"}
""",
    ProbeContiguousFwdOp="""
    inputs:
      x: {dtype: float32, shape: "[M, N]", contiguous: true}
    outputs:
      y: {dtype: float32, shape: "[M, N]"}
""")


class ProbeGatherKernel(KernelInterface):
    op = "ProbeGatherFwdOp"


class ProbeGatherFwdOp(Op):
    interfaces = (ProbeGatherKernel,)

    def forward(self, ids, x):
        return self.launch(ProbeGatherKernel, ids, x)


class ProbeLengthsKernel(KernelInterface):
    op = "ProbeLengthsFwdOp"


class ProbeLengthsFwdOp(Op):
    interfaces = (ProbeLengthsKernel,)

    def __init__(self, device=None, **options):
        super().__init__(device=device, **options)

    def forward(self, lengths):
        return self.launch(ProbeLengthsKernel, lengths)


class ProbeTableKernel(KernelInterface):
    op = "ProbeTableFwdOp"


class ProbeTableFwdOp(Op):
    interfaces = (ProbeTableKernel,)

    def __init__(self, table, pinned):
        super().__init__(table=table, pinned=pinned)

    def forward(self, x):
        return self.launch(ProbeTableKernel, self.construction_tensor("table"), self.construction_tensor("pinned"), x)


class ProbeContiguousKernel(KernelInterface):
    op = "ProbeContiguousFwdOp"


class ProbeContiguousFwdOp(Op):
    interfaces = (ProbeContiguousKernel,)

    def forward(self, x):
        return self.launch(ProbeContiguousKernel, x)


SEEN: list[tuple[str, torch.device, torch.dtype]] = []


def _table_kernel(table, pinned, x):
    SEEN.append(("table", table.device, table.dtype))
    SEEN.append(("pinned", pinned.device, pinned.dtype))
    return x * 2


def _lengths_kernel(lengths):
    return torch.empty(lengths.shape, device=current_call()[1].device)


@pytest.fixture(autouse=True)
def kernels(fake_backend, extra_manifest):
    extra_manifest(PROBES)
    SEEN.clear()
    kernel = functools.partial(fake_backend.kernel, general=False)  # specialised: no fallback warning on meta
    kernel(BmmKernel, REFERENCE_KERNELS[BmmKernel])
    kernel(RMSNormKernel, REFERENCE_KERNELS[RMSNormKernel])
    kernel(ProbeGatherKernel, lambda ids, x: torch.empty(ids.shape[0], x.shape[1], dtype=x.dtype,
                                                                       device=x.device))
    kernel(ProbeLengthsKernel, _lengths_kernel)
    kernel(ProbeTableKernel, _table_kernel)
    kernel(ProbeContiguousKernel, lambda x: x + 1)


def test_tensors_on_one_device_make_it_the_calling_device():
    d = BmmFwdOp()(torch.empty(2, 3, 4, device="meta"), torch.empty(2, 4, 5, device="meta"))
    assert d.device.type == "meta" and d.shape == (2, 3, 5)


def test_tensors_on_two_devices_are_an_error_listing_each():
    op = BmmFwdOp()
    assert failure(lambda: op(torch.empty(2, 3, 4, device="meta"), torch.randn(2, 4, 5))) == (
        f"BmmFwdOp: inputs are on different devices: a on meta, b on cpu ({op.op_spec().location.where()})")


def test_optional_input_on_another_device_is_an_error_too():
    op = RMSNormFwdOp([8])
    assert failure(lambda: op(torch.empty(2, 8, device="meta"), torch.randn(8))) == (
        f"RMSNormFwdOp: inputs are on different devices: x on meta, weight on cpu ({op.op_spec().location.where()})")


def test_output_on_the_calling_device_shares_no_storage_even_without_data():
    # meta tensors all have data pointer 0: storage identity, not the pointer, decides sharing
    y = RMSNormFwdOp([8])(torch.empty(4, 8, device="meta"), torch.empty(8, device="meta"))
    assert y.device.type == "meta"


def test_device_cpu_tensor_does_not_vote():
    y = ProbeGatherFwdOp()(torch.randint(0, 4, (3,)), torch.empty(4, 5, device="meta"))
    assert y.device.type == "meta" and y.shape == (3, 5)


def test_device_cpu_tensor_must_be_on_the_cpu():
    op = ProbeGatherFwdOp()
    assert failure(lambda: op(torch.empty(3, dtype=torch.int64, device="meta"), torch.empty(4, 5, device="meta"))) == (
        f"ProbeGatherFwdOp: input ids is declared device: cpu but is on meta ({op.op_spec().inputs['ids'].loc.where()})")


def test_nothing_to_vote_gives_the_cpu_on_a_machine_without_an_accelerator():
    assert torch.accelerator.current_accelerator() is None
    y = ProbeLengthsFwdOp()(torch.randint(1, 5, (4,)))
    assert y.device == torch.device("cpu")


def test_nothing_to_vote_gives_the_current_device_of_the_process_accelerator(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 1)
    op = ProbeLengthsFwdOp()
    assert op.definition().checks._calling_device({"lengths": torch.ones(3, dtype=torch.int64)}, {}, op.params_env()) == \
        (torch.device("cuda", 1), True)


def test_nothing_to_vote_gives_the_device_of_the_targets_class():
    op = ProbeLengthsFwdOp(target="meta")
    assert op.definition().checks._calling_device({"lengths": torch.ones(3, dtype=torch.int64)}, {}, op.params_env(), op.target) == \
        (torch.device("meta", 0), True)


def test_device_param_decides_when_no_tensor_votes():
    y = ProbeLengthsFwdOp(device="meta")(torch.randint(1, 5, (4,)))
    assert y.device.type == "meta"


def test_construction_tensor_is_given_to_the_kernel_on_the_calling_device_cast_to_its_declared_dtype():
    table = torch.empty(6, 3, dtype=torch.float64, device="meta")
    op = ProbeTableFwdOp(table, torch.arange(6, dtype=torch.int32))
    y = op(torch.empty(2, 3, dtype=torch.float16, device="meta"))
    assert y.device.type == "meta"
    assert SEEN == [("table", torch.device("meta"), torch.float16), ("pinned", torch.device("cpu"), torch.int64)]
    assert table.dtype == torch.float64  # the op's own tensor is not changed


def test_construction_tensor_votes_like_a_call_time_tensor():
    op = ProbeTableFwdOp(torch.randn(6, 3), torch.arange(6))
    assert failure(lambda: op(torch.empty(2, 3, device="meta"))) == (
        f"ProbeTableFwdOp: inputs are on different devices: table on cpu, x on meta ({op.op_spec().location.where()})")


def test_contiguous_input_is_checked():
    op = ProbeContiguousFwdOp()
    x = torch.randn(4, 3).T
    assert failure(lambda: op(x)) == (
        "ProbeContiguousFwdOp: input x is declared contiguous: true but is not contiguous (strides [1, 3]) "
        f"({op.op_spec().inputs['x'].loc.where()})")


def test_contiguity_is_checked_again_for_known_shapes():
    op = ProbeContiguousFwdOp()
    op(torch.randn(3, 4))
    with pytest.raises(CheckError):
        op(torch.randn(4, 3).T)
