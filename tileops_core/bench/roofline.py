"""The roofline of a workload row: the spec's formula on the row, instantiated without allocating.

The formula is evaluated by :mod:`tileops_core.roofline`, exactly as for a call; this module
supplies the row's environment: its indices, its inputs as
:class:`~tileops_core.lang.tensor_meta.TensorMeta` (``meta_only``), and its outputs from their
declared shapes. The op's module is imported first, for its generators and roofline functions.
"""

from __future__ import annotations

from typing import Any

from ..lang.tensor_meta import TensorMeta
from ..roofline import Roofline, evaluate_roofline, roofline_of_call
from ..spec.nodes import OpSpec, WorkloadRow
from .catalog import import_op_module
from .workloads import instantiate

# roofline_of_call is re-exported for tileops_core.op.base until it imports it from tileops_core.roofline.
__all__ = ["roofline_of_call", "roofline_of_row", "row_env"]


def row_env(spec: OpSpec, row: WorkloadRow, case: Any = None) -> dict[str, Any]:
    """The environment of a workload row, instantiated without allocating a tensor."""
    import_op_module(spec)  # its generators and roofline functions
    inst = instantiate(spec, row, case, meta_only=True)
    env: dict[str, Any] = dict(inst.indices)
    for t in spec.inputs.values():
        value = inst.inputs.get(t.name, inst.op_kwargs.get(t.name) if t.construction else None)
        env[t.name] = value
    for name, shape in inst.outputs.items():
        env[name] = TensorMeta(shape, inst.dtypes[name])
    return env


def roofline_of_row(spec: OpSpec, row: WorkloadRow, case: Any = None) -> Roofline:
    """The roofline of one ``dtypes`` entry of a workload row (no tensor is allocated)."""
    return evaluate_roofline(spec, row_env(spec, row, case))
