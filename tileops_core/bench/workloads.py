"""Fresh tensors for a workload row: what the benchmarks, the conformance tests and ``tileops
explain`` run.

The row is instantiated by the one instantiator (:func:`tileops_core.workloads.instantiate_case`,
leniently: a dtype the spec does not accept is passed on so the op can refuse it); this module
only runs the row's generator (whose tensors carry contents random data cannot stand for) and
draws random data of the instantiated shapes and dtypes. ``meta_only`` gives
:class:`~tileops_core.lang.tensor_meta.TensorMeta` instead of tensors, allocating nothing.
Random data is drawn fresh from the given generator and is never all zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..lang.tensor_meta import TensorMeta
from ..spec.nodes import OpSpec, WorkloadRow
from ..workloads import dtype_cases, instantiate_case
from ..workloads.generators import run_generator

# TensorMeta and dtype_cases are re-exported for tileops_core.cli.cmd_explain until it imports
# them from tileops_core.lang.tensor_meta and tileops_core.workloads.
__all__ = ["TensorMeta", "Instance", "dtype_cases", "instantiate", "on_meta", "plan_row", "random_tensor"]


@dataclass
class Instance:
    """One runnable instantiation of a workload row."""

    op: str
    label: str
    case: str
    op_kwargs: dict[str, Any]
    inputs: dict[str, Any]  # call-time inputs that are passed (tensors or TensorMeta)
    indices: dict[str, Any]
    dtypes: dict[str, torch.dtype]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    outputs: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def call_args(self, spec: OpSpec) -> list[Any]:
        """Positional forward arguments in declaration order (None for absent inputs)."""
        args = [self.inputs.get(t.name) for t in spec.call_inputs]
        while args and args[-1] is None:
            args.pop()
        return args

    @property
    def name(self) -> str:
        return f"{self.label}[{self.case}]"


def instantiate(spec: OpSpec, row: WorkloadRow, case: Any = None, *, device: str | torch.device = "cpu",
                rng: torch.Generator | None = None, meta_only: bool = False) -> Instance:
    """Build the op arguments and inputs of ``row`` for one ``dtypes`` entry ``case``."""
    rng = rng if rng is not None else torch.Generator().manual_seed(0)
    generated = run_generator(row, rng)
    row_instance, dtype_case = instantiate_case(spec, row, case, generated.meta())
    # What __init__ receives is what the row writes, as written: the op normalises and checks it.
    op_kwargs = {k: v for k, v in row.values.items() if k in spec.params or k in spec.static_dims}
    dtypes = {n: getattr(torch, d) for n, d in dtype_case.dtypes.items()}
    shapes = row_instance.shapes
    device = torch.device(device)
    inputs: dict[str, Any] = {}
    for t in spec.inputs.values():
        if t.name not in row_instance.present or t.construction:
            continue
        shape, dtype = shapes[t.name], dtypes[t.name]
        if meta_only:
            inputs[t.name] = TensorMeta(shape, dtype)
        elif t.name in generated.tensors:
            inputs[t.name] = generated.tensors[t.name].to(device=device, dtype=dtype)
        else:
            target = torch.device("cpu") if t.device == "cpu" else device
            inputs[t.name] = random_tensor(shape, dtype, rng).to(target)
    for t in spec.construction_inputs:  # drawn after the call-time inputs, as they always were
        if t.name in row_instance.present:
            shape, dtype = shapes[t.name], dtypes[t.name]
            op_kwargs[t.name] = TensorMeta(shape, dtype) if meta_only else random_tensor(shape, dtype, rng).to(device)
    return Instance(spec.name, row.label, dtype_case.name, op_kwargs, inputs, dict(row_instance.env), dtypes,
                    dict(shapes), dict(row_instance.outputs))


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, rng: torch.Generator) -> torch.Tensor:
    """Fresh random data: normal for floats, small non-zero integers otherwise."""
    if dtype.is_floating_point:
        return torch.randn(shape, generator=rng, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=rng).bool()
    low, high = (1, 100) if dtype != torch.uint8 else (1, 255)
    sign = torch.where(torch.rand(shape, generator=rng) < 0.5, -1, 1) if dtype not in (torch.uint8,) else 1
    return (torch.randint(low, high, shape, generator=rng) * sign).to(dtype)


def _meta_tensor(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return torch.empty(value.shape, dtype=value.dtype, device="meta")
    return value


def on_meta(instance: Instance) -> Instance:
    """A ``meta_only`` instance with ``meta`` tensors in place of its shapes: plannable, nothing allocated."""
    instance.inputs = {n: _meta_tensor(v) for n, v in instance.inputs.items()}
    instance.op_kwargs = {n: _meta_tensor(v) for n, v in instance.op_kwargs.items()}
    return instance


def plan_row(spec: OpSpec, cls: type, instance: Instance) -> tuple[Any, Any]:
    """Plan a workload row's instance on ``meta`` tensors: ``(op, plan)``, nothing allocated.

    ``instance`` is a row instantiated ``meta_only`` (or already :func:`on_meta`). The plan is
    the op's own (steps 1-5 through :meth:`Op.plan_for`, the code a call runs), so the call
    specs it holds are exactly what a call with these shapes would select on. The docs'
    support matrix and ``tileops explain --arch`` read it.
    """
    instance = on_meta(instance)
    op = cls(**instance.op_kwargs, check_contents=False)
    return op, op.plan_for(*instance.call_args(spec))

