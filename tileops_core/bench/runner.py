"""The bench runner: workload rows in, measured and analysed results out.

For each case (an op, one of its workload rows, one ``dtypes`` entry) the runner
instantiates the row with fresh random inputs on the device (generators fill in metadata
tensors), constructs the op from the row, calls it once (planning, kernel selection and
the build happen outside timing), evaluates the spec's roofline for that call
(``op.eval_roofline()``), builds the baseline from the same call, and times op and
baseline interleaved (:mod:`.timing`). Mutated inputs are restored between samples.

On a GPU, consecutive calls must not find their inputs in L2: when one input set is
smaller than ``rotate_bytes`` (twice the L2 by default), the runner makes several
independent input sets and calls cycle through them.

A case that fails (a kernel that raises, a row too large for the device's memory) is
recorded with its error and the run goes on; the CLI exits 1 when any case failed.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from ..errors import TileOpsError
from ..kernels.select import select_kernel
from ..kernels.targets import current_target
from ..op.torchtypes import name_of
from ..roofline import Roofline
from ..spec.nodes import OpSpec, WorkloadRow
from ..workloads import dtype_cases
from .baselines import BASELINES, make_baseline
from .catalog import UnknownName, import_op_module, op_class
from .host_time import HostTimes, measure_host_times
from .metrics import Analysis, analyse
from .profiles import Basis, ProfileEntry
from .progress import Progress
from .roofline import roofline_of_row
from .timing import DEFAULT, Measurement, Subject, TimingOptions, time_subjects
from .workloads import Instance, instantiate

__all__ = ["BenchCase", "BenchConfig", "CaseResult", "plan_cases", "run_case", "run_bench", "input_bytes", "mutated_restorer", "Interrupted"]

#: Errors a case can end with without ending the run (torch raises RuntimeError subclasses,
#: out-of-memory included; kernels may raise NotImplementedError for what they lack).
CASE_ERRORS = (TileOpsError, RuntimeError, NotImplementedError, MemoryError, ValueError)


@dataclass(frozen=True)
class BenchCase:
    """One op, one workload row, one entry of the row's ``dtypes``."""

    spec: OpSpec
    row: WorkloadRow
    case: Any

    @property
    def case_text(self) -> str:
        """The dtype entry as text (``float32``, ``query=bfloat16,state=float32``)."""
        return _case_text(self.case)

    @property
    def name(self) -> str:
        return f"{self.spec.name} {self.row.label}[{self.case_text}]"


@dataclass(frozen=True)
class BenchConfig:
    """Where and how to run: device, baseline, timing, profile and input rotation."""

    device: torch.device
    baseline: str = "ref"
    timing: TimingOptions = DEFAULT
    profile: ProfileEntry | None = None
    basis: Basis = "measured"
    rotate_bytes: int | None = None
    max_sets: int = 32
    memory_budget: int = 8 << 30
    #: Measure host time per call (op, raw launch, torch's op): None = on any device but the CPU.
    host_time: bool | None = None

    @property
    def measures_host_time(self) -> bool:
        return self.device.type != "cpu" if self.host_time is None else self.host_time

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise UnknownName(f"unknown baseline {self.baseline!r} (known: {', '.join(BASELINES)})")


@dataclass
class CaseResult:
    """What one case gave (``error`` set and measurements None when it failed)."""

    case: BenchCase
    seed: int
    dtype: str | None = None
    kernel: str | None = None
    backend: str | None = None
    sets: int = 1
    measurement: Measurement | None = None
    roofline: Roofline | None = None
    analysis: Analysis | None = None
    baseline: str = "none"
    baseline_measurement: Measurement | None = None
    baseline_error: str | None = None
    error: str | None = None
    host: HostTimes | None = None
    host_error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def _case_text(case: Any) -> str:
    if case is None:
        return "default"
    if isinstance(case, dict):
        return ",".join(f"{k}={v}" for k, v in case.items())
    return str(case)


def input_bytes(spec: OpSpec, row: WorkloadRow, case: Any) -> int:
    """Bytes of every input of a row (computed without allocating)."""
    inst = instantiate(spec, row, case, meta_only=True)
    metas = list(inst.inputs.values()) + [v for k, v in inst.op_kwargs.items() if k in spec.inputs]
    return sum(m.numel() * m.itemsize for m in metas)


def plan_cases(specs: Sequence[OpSpec], labels: Iterable[str] = (), quick: bool = False) -> list[BenchCase]:
    """The cases to run: every row and dtype entry, or only rows with the given labels; with
    ``quick``, the smallest row of each op (by input bytes) and its first dtype entry."""
    labels = list(labels)
    cases: list[BenchCase] = []
    matched: set[str] = set()
    for spec in specs:
        import_op_module(spec)  # generators
        rows = [r for r in spec.workloads if not labels or r.label in labels]
        matched.update(r.label for r in rows)
        if quick and rows:
            sized = [(input_bytes(spec, r, dtype_cases(r)[0]), r.index, r) for r in rows]
            smallest = min(sized, key=lambda item: item[:2])[2]
            cases.append(BenchCase(spec, smallest, dtype_cases(smallest)[0]))
            continue
        for row in rows:
            cases.extend(BenchCase(spec, row, c) for c in dtype_cases(row))
    missing = [label for label in labels if label not in matched]
    if missing:
        known = sorted({r.label for s in specs for r in s.workloads})
        raise UnknownName(f"no workload labelled {', '.join(repr(m) for m in missing)} in "
                          f"{', '.join(s.name for s in specs)} (labels: {', '.join(known)})")
    return cases


def _instance_sets(case: BenchCase, config: BenchConfig, seed: int) -> tuple[list[Instance], str | None]:
    """The input sets a case's calls rotate through, and a note where they cannot leave the L2 behind.

    One cycle through them must touch ``rotate_bytes`` (twice the L2): counted in the bytes a call
    touches (its roofline's), not the bytes a set holds: a decode step reads a few slots of a pool or
    a few experts of many (found in review: an attention decode's 24 MiB sets, 8 MiB touched a call,
    cycled through 40 MiB). The sets' memory stays within ``memory_budget``."""
    first = instantiate(case.spec, case.row, case.case, device=config.device,
                        rng=torch.Generator().manual_seed(seed))
    if config.rotate_bytes is None:
        return [first], None
    held = max(1, sum(t.numel() * t.element_size() for t in first.inputs.values() if isinstance(t, torch.Tensor)))
    try:
        touched = min(held, max(1, int(roofline_of_row(case.spec, case.row, case.case).bytes)))
    except CASE_ERRORS:
        touched = held  # a roofline that cannot be evaluated on the row: the sets' own size
    wanted = math.ceil(config.rotate_bytes / touched)
    count = max(1, min(wanted, config.max_sets, config.memory_budget // held))
    note = None
    if count < wanted:
        note = (f"inputs rotate through {count} set(s), {count * touched / 2**20:.0f} MiB touched a cycle, short of "
                f"{config.rotate_bytes / 2**20:.0f} MiB (twice the L2): part of them may be read from the L2")
    return [first] + [instantiate(case.spec, case.row, case.case, device=config.device,
                                  rng=torch.Generator().manual_seed(seed + i)) for i in range(1, count)], note


def mutated_restorer(spec: OpSpec, insts: Sequence[Instance]) -> Callable[[], None] | None:
    """A function putting every mutated input of ``insts`` back to its value now (None: nothing is
    mutated); the timers call it between samples."""
    pairs = [(inst.inputs[t.name], inst.inputs[t.name].clone()) for inst in insts for t in spec.inputs.values()
             if t.mutated and isinstance(inst.inputs.get(t.name), torch.Tensor)]
    if not pairs:
        return None

    def restore() -> None:
        for live, pristine in pairs:
            live.copy_(pristine)

    return restore


def _kernel_of(op: Any) -> tuple[str, str]:
    plan = op.last_plan
    names, backends = [], []
    for interface, call in plan.call_specs.items():
        selection = select_kernel(interface, call, current_target(op.target))
        if selection.chosen is not None:
            names.append(selection.chosen.qualname())
            backends.append(selection.chosen_backend or "?")
    return "+".join(names) or "?", "+".join(dict.fromkeys(backends)) or "?"


def run_case(case: BenchCase, config: BenchConfig, seed: int) -> CaseResult:
    """Run one case; a failure is recorded in the result, not raised."""
    result = CaseResult(case, seed, baseline=config.baseline)
    spec = case.spec
    try:
        cls = op_class(spec)
        insts, rotation_note = _instance_sets(case, config, seed)
        result.sets = len(insts)
        if rotation_note is not None:
            result.notes.append(rotation_note)
        first_output = next(iter(spec.outputs))
        dtype = insts[0].dtypes.get(first_output)
        result.dtype = name_of(dtype) if dtype is not None else None
        op = cls(**insts[0].op_kwargs, check_contents=False)
        args_sets = [inst.call_args(spec) for inst in insts]
        reset = mutated_restorer(spec, insts)
        for args in args_sets:
            op(*args)  # plan, select, build: outside timing
        result.kernel, result.backend = _kernel_of(op)
        result.roofline = op.eval_roofline()
        subjects = [Subject("op", [functools.partial(op, *a) for a in args_sets], reset)]
        if config.baseline != "none":
            try:
                calls, graph = make_baseline(config.baseline, op, args_sets)
                if config.baseline == "torch.compile":
                    for call in calls:
                        call()  # compiles here, outside timing
                subjects.append(Subject(config.baseline, calls, reset, graph))
            except CASE_ERRORS as exc:
                result.baseline_error = _why(exc)
        measured = time_subjects(subjects, config.device, config.timing)
        result.measurement = measured[0]
        if len(measured) > 1:
            result.baseline_measurement = measured[1]
        result.notes.extend(m.note for m in measured if m.note)
        profile = config.profile.profile if config.profile is not None else None
        result.analysis = analyse(result.roofline, measured[0].median_s, profile, result.dtype or "float32",
                                  config.basis)
        if config.measures_host_time:
            try:
                if reset:
                    reset()
                result.host = measure_host_times(op, args_sets[0], config.device)
            except CASE_ERRORS as exc:
                result.host_error = _why(exc)
    except CASE_ERRORS as exc:
        result.error = _why(exc)
    return result


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class Interrupted(Exception):
    """Ctrl-C during a run: carries the cases finished so far, so they can still be reported."""

    def __init__(self, results: list[CaseResult], total: int) -> None:
        super().__init__(f"interrupted after {len(results)} of {total} case(s)")
        self.results = results
        self.total = total


def run_bench(cases: Sequence[BenchCase], config: BenchConfig, progress: Progress | None = None,
              seed: int | None = None) -> list[CaseResult]:
    """Run every case in order (fresh random inputs; the seed of each is recorded).

    Ctrl-C raises :class:`Interrupted` holding the finished cases: a long run stopped by
    hand still reports what it measured.
    """
    base = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    progress = progress or Progress(enabled=False)
    progress.start(len(cases))
    results: list[CaseResult] = []
    try:
        for i, case in enumerate(cases):
            progress.step(case.name)
            results.append(run_case(case, config, base + 1000 * i))
    except KeyboardInterrupt:
        raise Interrupted(results, len(cases)) from None
    finally:
        progress.close()
    return results
