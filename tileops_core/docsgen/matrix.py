"""The support matrix: which kernel serves which op, on which device, in which dtype, and
where each one refuses, derived by asking the kernels rather than written by hand.

For every workload row of an op, and for every dtype the row lists plus every dtype the
op's primary input declares (its first input with a choice of dtypes), the row is instantiated on ``meta`` tensors and the op's own
call planning (``Op.plan_for``) builds the call spec of each kernel interface, exactly as
a real call would. Each registered implementation is then asked, for each device type and
arch it declares, ``refusal(call)`` on every such call spec. A cell of the matrix (op,
kernel, device, archs, dtype) says how many of those calls the kernel serves, and its
*refusal regions*: each distinct reason it gave and the rows it gave it for.

A kernel that runs on any device (``devices = ("*",)``) is shown on ``any`` and asked as
if the call were on its backend's first device type. Archs whose answers are identical
are merged into one cell. Nothing is built, nothing is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence


from ..bench.catalog import benchable_specs, op_class
from ..bench.workloads import instantiate, plan_row
from ..errors import TileOpsError
from ..kernels import registry
from ..kernels.interface import CallSpec, KernelInterface
from ..lang.dtypes import DTypeSet
from ..op.torchtypes import name_of
from ..spec.nodes import OpSpec
from ..workloads import dtype_cases

__all__ = ["Probe", "RefusalRegion", "SupportCell", "OpSupport", "probes_for", "support_matrix"]


@dataclass(frozen=True)
class Probe:
    """One call an op would make for a workload row and dtype: its call spec per interface."""

    row: str
    case: str
    dtype: str
    calls: dict[str, CallSpec]  # interface name -> call spec (built on the meta device)

    @property
    def name(self) -> str:
        return f"{self.row}[{self.case}]"


@dataclass(frozen=True)
class RefusalRegion:
    """One reason a kernel gave, and the calls (``row[case]``) it gave it for."""

    reason: str
    calls: tuple[str, ...]


@dataclass(frozen=True)
class SupportCell:
    """One kernel on one device (and arch group) for one dtype of the op's primary input."""

    op: str
    interface: str
    kernel: str
    backend: str
    general: bool
    device: str
    archs: tuple[str, ...]
    dtype: str
    served: tuple[str, ...]
    refused: tuple[RefusalRegion, ...]

    @property
    def total(self) -> int:
        return len(self.served) + sum(len(r.calls) for r in self.refused)

    @property
    def status(self) -> str:
        """``yes`` (every call served), ``partial`` or ``no``."""
        if not self.refused:
            return "yes"
        return "partial" if self.served else "no"

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "interface": self.interface, "kernel": self.kernel, "backend": self.backend,
                "general": self.general, "device": self.device, "archs": list(self.archs), "dtype": self.dtype,
                "status": self.status, "served": list(self.served),
                "refused": [{"reason": r.reason, "calls": list(r.calls)} for r in self.refused]}


@dataclass
class OpSupport:
    """Every cell of one op, the dtypes probed, and what could not be probed (with why)."""

    spec: OpSpec
    dtypes: list[str] = field(default_factory=list)
    cells: list[SupportCell] = field(default_factory=list)
    unserved: list[str] = field(default_factory=list)  # interfaces with no registered implementation
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.spec.name, "file": f"{self.spec.file}:{self.spec.line}", "dtypes": self.dtypes,
                "cells": [c.as_dict() for c in self.cells], "interfaces_without_kernels": self.unserved,
                "problems": self.problems}


def _primary_dtypes(spec: OpSpec) -> tuple[str | None, list[str]]:
    """The input whose dtype the matrix is laid out by, and the dtypes it declares.

    The first call input declaring a choice of dtypes (SSD's ``x``, not its float32-only
    ``A``); failing that, the first input with a declared set; else none.
    """
    sets = [(t.name, t.dtype) for t in spec.call_inputs if isinstance(t.dtype, DTypeSet)]
    chosen = next((s for s in sets if len(s[1].names) > 1), sets[0] if sets else None)
    if chosen is None:
        return (spec.call_inputs[0].name if spec.call_inputs else None), []
    return chosen[0], list(chosen[1].names)


def probes_for(spec: OpSpec) -> tuple[list[Probe], list[str]]:
    """The probes of every row x dtype, and the problems of rows that could not be planned."""
    cls = op_class(spec)
    primary, declared = _primary_dtypes(spec)
    probes: list[Probe] = []
    problems: list[str] = []
    seen: set[tuple[int, str]] = set()
    for row in spec.workloads:
        own = dtype_cases(row)
        extra = [d for d in declared if d not in [c for c in own if isinstance(c, str)]]
        for case in [*own, *extra]:
            swept = case in extra
            try:
                inst = instantiate(spec, row, case, meta_only=True)
            except TileOpsError as exc:
                if not swept:
                    problems.append(f"{row.label}[{case}]: {exc}")
                continue
            dtype = name_of(inst.dtypes[primary]) if primary in inst.dtypes else str(case)
            if (row.index, dtype) in seen:
                continue
            try:
                _, plan = plan_row(spec, cls, inst)
            except TileOpsError as exc:
                if not swept:  # a swept dtype the spec does not allow (dtype_combos) is simply not a call
                    problems.append(f"{row.label}[{case}]: {str(exc).splitlines()[0]}")
                continue
            seen.add((row.index, dtype))
            probes.append(Probe(row.label, inst.name.rsplit("[", 1)[1].rstrip("]"), dtype,
                                {i.__name__: c for i, c in plan.call_specs.items()}))
    return probes, problems


def _ask(impl: type[KernelInterface], call: CallSpec) -> str | None:
    try:
        return impl.refusal(call)
    except Exception as exc:  # a refusal that crashes is shown in the matrix as what it is
        return f"refusal() raised {type(exc).__name__}: {exc}"


def _targets(impl: type[KernelInterface]) -> list[tuple[str, str, list[str]]]:
    """(device shown, device type asked, archs to ask) for each device the kernel declares."""
    info = registry.backends().get(registry.backend_of(impl))
    home = (info.device_types[0] if info is not None and info.device_types else "cpu")
    out = []
    for device in impl.devices:
        asked = home if device == "*" else device
        shown = "any" if device == "*" else device
        if "*" in impl.supported_archs:
            archs = ["cpu" if asked == "cpu" else "*"]
        else:
            archs = list(impl.supported_archs)
        out.append((shown, asked, archs))
    return out


def _outcome(impl: type[KernelInterface], interface: type[KernelInterface], probes: Sequence[Probe],
             device_type: str, arch: str) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """(served calls, ((reason, refused calls), ...)) of one kernel for some probes on one arch."""
    served: list[str] = []
    refused: dict[str, list[str]] = {}
    for p in probes:
        base = p.calls[interface.__name__]
        why = _ask(impl, CallSpec(base.op, base.interface, device_type, arch, base.dtypes, base.dims, base.flags))
        if why is None:
            served.append(p.name)
        else:
            refused.setdefault(why, []).append(p.name)
    return tuple(served), tuple((r, tuple(c)) for r, c in refused.items())


def _cells_for(spec: OpSpec, interface: type[KernelInterface], impl: type[KernelInterface],
               probes: Sequence[Probe], dtypes: Sequence[str]) -> list[SupportCell]:
    """The kernel's cells; archs that answer every dtype alike share one row of cells."""
    cells = []
    by_dtype = {d: [p for p in probes if p.dtype == d and interface.__name__ in p.calls] for d in dtypes}
    for shown, asked, archs in _targets(impl):
        groups: dict[tuple[Any, ...], list[str]] = {}
        for arch in archs:
            key = tuple(_outcome(impl, interface, by_dtype[d], asked, arch) for d in dtypes)
            groups.setdefault(key, []).append(arch)
        for outcomes, arch_group in groups.items():
            for dtype, (served, refused) in zip(dtypes, outcomes):
                cells.append(SupportCell(spec.name, interface.__name__, impl.qualname(), registry.backend_of(impl), impl.general,
                                         shown, tuple(arch_group), dtype, served,
                                         tuple(RefusalRegion(r, c) for r, c in refused)))
    return cells


def support_matrix(specs: Iterable[OpSpec] | None = None) -> list[OpSupport]:
    """The matrix of the given specs (default: every implemented op), from the registered kernels."""
    out = []
    for spec in (benchable_specs().values() if specs is None else specs):
        support = OpSupport(spec)
        try:
            probes, support.problems = probes_for(spec)
            cls = op_class(spec)
        except TileOpsError as exc:
            support.problems.append(str(exc))
            out.append(support)
            continue
        order = _primary_dtypes(spec)[1]
        found = {p.dtype for p in probes}
        support.dtypes = [d for d in order if d in found] + sorted(found - set(order))
        for interface in cls.interfaces:
            impls = registry.implementations(interface)
            if not impls:
                support.unserved.append(interface.__name__)
            for impl in impls:
                support.cells.extend(_cells_for(spec, interface, impl, probes, support.dtypes))
        out.append(support)
    return out
