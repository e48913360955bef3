"""RGDR calls as the op plans them, moved onto a simulated NPU: no hardware, no torch_npu.

A workload row of the RGDR spec is instantiated with fresh random tensors on the CPU, the
op plans the call (its own steps 1-5, the code ``__call__`` runs), and the call spec it
gives is re-addressed to ``npu``/``ascend310p``: dtypes, dims and flags are exactly what a
call on a 310P would carry, because none of them depends on the device.
"""

from __future__ import annotations

import os

import torch

from tileops_core.bench.workloads import Instance, instantiate
from tileops_core.kernels import CallSpec
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp, RGDRKernel
from tileops_core.spec.manifest import get_spec
from tileops_core.spec.nodes import WorkloadRow
from tileops_core.workloads import dtype_cases

__all__ = ["FP16_INPUTS", "SPEC", "fresh_seed", "instance", "meta_instance", "simulated", "simulated_call"]

SPEC = get_spec("RecurrentGatedDeltaRuleFwdOp")
#: The tensors the 310P kernel needs in fp16 (g and gk stay fp32, the index tensors as they are).
FP16_INPUTS = ("query", "key", "value", "beta", "state")


def fresh_seed() -> int:
    """A new seed per run; tests print it in their failure messages."""
    return int.from_bytes(os.urandom(4), "little")


def _row(label: str) -> WorkloadRow:
    return next(r for r in SPEC.workloads if r.label == label)


def instance(label: str, *, seed: int, fp16: bool = False) -> Instance:
    """Row ``label`` with fresh random tensors on the CPU; ``fp16`` casts the five fp16 inputs of the 310P kernel."""
    row = _row(label)
    inst = instantiate(SPEC, row, dtype_cases(row)[0], rng=torch.Generator().manual_seed(seed))
    if fp16:
        for name in FP16_INPUTS:
            inst.inputs[name] = inst.inputs[name].half()
    return inst


def meta_instance(label: str, *, fp16: bool = False) -> Instance:
    """Row ``label`` on ``meta`` tensors (nothing allocated): enough to plan the call and select."""
    inst = instantiate(SPEC, _row(label), dtype_cases(_row(label))[0], meta_only=True)
    for name, meta in list(inst.inputs.items()):
        dtype = torch.float16 if fp16 and name in FP16_INPUTS else meta.dtype
        inst.inputs[name] = torch.empty(meta.shape, dtype=dtype, device="meta")
    return inst


def simulated(call: CallSpec, device_type: str = "npu", arch: str = "ascend310p") -> CallSpec:
    """``call`` as the same call on a ``device_type`` device of ``arch``."""
    return CallSpec(call.op, call.interface, device_type, arch, call.dtypes, call.dims, call.flags)


def simulated_call(inst: Instance, device_type: str = "npu", arch: str = "ascend310p") -> CallSpec:
    """The call spec the op builds for ``inst``, on a simulated device."""
    op = RecurrentGatedDeltaRuleFwdOp(**inst.op_kwargs)
    plan = op.plan_for(*inst.call_args(SPEC))
    return simulated(plan.call_specs[RGDRKernel], device_type, arch)
