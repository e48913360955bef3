"""L2/L3 conformance: the op's generated checks agree with the spec on every workload row.

For each row the lint instantiated (and each row with a generator, instantiated here after
running the generator), the op is constructed with the row's params and static dims and
its generated call checks (:meth:`OpDef.plan`, exactly what a call runs, and what
the compile boundary's fake runs) are applied to *meta* tensors of the row's shapes and
dtypes: nothing is allocated, so the largest benchmark shape costs as little as the
smallest. The checks must accept the row and produce the output shapes (L2) and dtypes
(L3) the spec gives; with an out buffer of the right shape and dtype passed they must
accept it too (check 8, the buffer branch); and an input given a dtype its declaration
does not accept must be rejected (L3).
"""

from __future__ import annotations

from typing import Any

import torch

from ..workloads.generators import get_generator
from ..errors import TileOpsError
from ..lang.dtypes import DTYPE_NAMES, DTypeSet, SameAs
from ..op.torchtypes import TORCH_DTYPES, name_of
from .context import SpecContext
from .diagnostics import Diagnostic
from .rows import RowInstance, instantiate_row
from .workloads import generator_name

__all__ = ["check_inference", "generator_rows"]

_META = torch.device("meta")


def generator_rows(ctx: SpecContext) -> tuple[list[RowInstance], list[Diagnostic]]:
    """Rows with a generator: run it (seeded), then instantiate and unify the row with its output."""
    instances: list[RowInstance] = []
    out: list[Diagnostic] = []
    if ctx.broken("workloads"):
        return instances, out
    for row in ctx.spec.workloads:
        if "generator" not in row.values:
            continue
        name = generator_name(row)
        if name is None:
            continue  # L4.value, reported by the lint
        try:
            fn = get_generator(name)
        except TileOpsError as exc:
            out.append(ctx.diag("L4.generator", f"workload row {row.label!r}: {exc}", loc=row.loc, key=f"gen:{name}"))
            continue
        values = dict(row.values)
        spec_args = values.get("generator")
        if isinstance(spec_args, dict):
            values.update({k: v for k, v in spec_args.items() if k != "name"})
        try:
            got = fn(values, torch.Generator().manual_seed(0))
        except Exception as exc:  # a generator's own bug: report it on the row, keep validating
            out.append(ctx.diag("L4.generator", f"workload row {row.label!r}: generator {name} failed: "
                                f"{type(exc).__name__}: {exc}", loc=row.loc, key=f"gen-failed:{name}"))
            continue
        generated = got.meta()
        instance, found = instantiate_row(ctx, row, generated)
        out.extend(found)
        if instance is not None and not found:
            instances.append(instance)
    return instances, out


def check_inference(ctx: SpecContext, cls: type, rows: list[RowInstance]) -> list[Diagnostic]:
    """L2/L3 (and the buffer branch of check 8) on every instantiated row."""
    out: list[Diagnostic] = []
    probed = False
    for row in rows:
        for dtypes in row.dtypes:
            try:
                found = _run_row(ctx, cls, row, dtypes)
            except (RuntimeError, TypeError, OverflowError) as exc:  # sizes no tensor has (found in review)
                first = str(exc).splitlines()[0]  # (torch appends its C++ frames)
                out.append(ctx.diag("C7.instantiate", f"workload row {row.row.label!r}: its tensors cannot exist, "
                                    f"even on the meta device: {type(exc).__name__}: {first}", loc=row.row.loc,
                                    key=f"sizes:{row.row.label}"))
                break
            out.extend(found)
            if not found and not probed:
                out.extend(_probe_rejects(ctx, cls, row, dtypes))
                probed = True
    return out


def _meta(shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    return torch.empty(shape, dtype=TORCH_DTYPES[dtype], device=_META)


def _construct(ctx: SpecContext, cls: type, row: RowInstance, dtypes: dict[str, str]) -> Any:
    kwargs = dict(row.construct)
    for t in ctx.spec.construction_inputs:
        if t.name in row.present:
            kwargs[t.name] = _meta(row.shapes[t.name], dtypes[t.name])
    return cls(**kwargs)


def _plan(op: Any, values: list[Any]) -> Any:
    return op.definition().plan(op, values, kernels=False)


def _call_values(ctx: SpecContext, row: RowInstance, dtypes: dict[str, str],
                 buffers: dict[str, torch.Tensor] | None = None) -> list[Any]:
    spec = ctx.spec
    values: list[Any] = [_meta(row.shapes[t.name], dtypes[t.name]) if t.name in row.present else None
                         for t in spec.call_inputs]
    values.extend((buffers or {}).get(o.buffer) for o in spec.outputs.values() if o.buffer)
    return values


def _run_row(ctx: SpecContext, cls: type, row: RowInstance, dtypes: dict[str, str]) -> list[Diagnostic]:
    spec = ctx.spec
    label = f"workload row {row.row.label!r}"
    shown = ", ".join(f"{n}={d}" for n, d in dtypes.items() if n in spec.inputs)

    def diag(rule: str, message: str) -> Diagnostic:
        return ctx.diag(rule, f"{label} ({shown}): {message}", loc=row.row.loc, key=f"{rule}:{message}")

    try:
        op = _construct(ctx, cls, row, dtypes)
    except TileOpsError as exc:
        return [diag("L2.inference", f"constructing {cls.__name__} with the row's values fails: {exc}")]
    try:
        plan = _plan(op, _call_values(ctx, row, dtypes))
    except TileOpsError as exc:
        rule = "L3.inference" if "dtype" in str(exc) else "L2.inference"
        return [diag(rule, f"the op's generated checks reject the row, which the spec accepts: {exc}")]
    out = []
    for name, shape, dtype in zip(plan.out_names, plan.out_shapes, plan.out_dtypes):
        want = row.outputs.get(name)
        got = tuple(int(s) for s in shape)
        if want is not None and got != tuple(want):
            out.append(diag("L2.inference", f"generated inference gives output {name} shape {list(got)}, the spec "
                            f"gives {list(want)}"))
        want_dtype = dtypes.get(name)
        if want_dtype is not None and name_of(dtype) != want_dtype:
            out.append(diag("L3.inference", f"generated inference gives output {name} dtype {name_of(dtype)}, the "
                            f"spec gives {want_dtype}"))
    buffers = {o.buffer: _meta(row.outputs[o.name], dtypes[o.name]) for o in spec.outputs.values()
               if o.buffer and o.name in row.outputs and o.name in dtypes}
    if buffers and not out:
        try:
            _plan(op, _call_values(ctx, row, dtypes, buffers))
        except TileOpsError as exc:
            out.append(diag("L2.inference", f"the generated checks reject out buffer(s) "
                            f"{', '.join(buffers)} of the spec's shape and dtype: {exc}"))
    return out


def _probe_rejects(ctx: SpecContext, cls: type, row: RowInstance, dtypes: dict[str, str]) -> list[Diagnostic]:
    """An input given a dtype its declared set excludes must be rejected by the generated checks."""
    spec = ctx.spec
    for t in spec.call_inputs:
        if t.name not in row.present or not isinstance(t.dtype, DTypeSet):
            continue
        outside = next((d for d in sorted(DTYPE_NAMES) if d not in t.dtype.names and d in TORCH_DTYPES), None)
        if outside is None:
            continue
        probe = dict(dtypes)
        for u in spec.inputs.values():
            if u.name == t.name or (isinstance(u.dtype, SameAs) and u.dtype.tensor == t.name):
                probe[u.name] = outside
        try:
            op = _construct(ctx, cls, row, probe)
            _plan(op, _call_values(ctx, row, probe))
        except TileOpsError:
            return []  # rejected, as it should be
        return [ctx.diag("L3.inference", f"the op's generated checks accept input {t.name} with dtype {outside}, which "
                         f"its declaration {t.dtype_text} excludes (workload row {row.row.label!r})",
                         loc=t.loc.child("dtype"), key=f"probe:{t.name}")]
    return []
