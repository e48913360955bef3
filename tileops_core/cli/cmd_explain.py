"""``tileops explain OP``: which kernel a call would get, and why each candidate was kept or dropped.
``tileops explain --model TYPE``: the model report, which op and kernel serves each module of a
Hugging Face model on TileOPs (:mod:`.explain_model`).

The call is built as the op itself builds it: a workload row of the op's spec is
instantiated (fresh random tensors on the device), the op is constructed with the row's
params, and the op's own call planning (steps 1-5) gives the call spec of each interface.
No kernel is built or run. For each interface the selection rule's report is printed,
together with the active target and every target layer, so that an override is visible.

``--arch`` simulates a device this machine does not have (``--device npu --arch
ascend310p``): the call is planned on ``meta`` tensors (nothing is allocated, no device
is touched) and each call spec gets ``--device``'s type and ``--arch`` in place of
``meta``'s, so selection runs exactly as it would on that device.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
from typing import Any

import torch

from ..bench.workloads import dtype_cases, instantiate, plan_row, random_tensor
from ..lang.tensor_meta import TensorMeta
from ..bench.catalog import UnknownName, resolve_specs
from ..errors import TileOpsError, UsageError
from ..kernels import registry
from ..kernels.interface import CallSpec
from ..kernels.select import Selection, select_kernel, target_problem
from ..kernels.targets import Target, active_target_source, current_target, default_device, target_layers, use_target
from ..op.decompose import compile_path
from ..spec.nodes import OpSpec, WorkloadRow
from ..kernels.overrides import kernel_overrides
from ..kernels.steering import steering_layers
from .explain_model import add_model_arguments, run_model
from .main import EXIT_FINDINGS, EXIT_OK, options_given
from .steer_options import add_kernels_argument, installed_device_types, kernels_argument, steering_lines, \
    target_argument

__all__ = ["NAME", "HELP", "add_arguments", "run", "explain", "op_class", "parse_shapes"]

NAME = "explain"
HELP = ("show the call spec an op builds for a workload row, every candidate kernel and why it was kept or dropped; "
        "--model TYPE: which op and kernel serves each module of a model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("op", metavar="OP", nargs="?", help="op class name, e.g. RMSNormFwdOp")
    parser.add_argument("--workload", metavar="LABEL", help="workload row label (default: the first row)")
    parser.add_argument("--dtype", metavar="DTYPE", help="entry of the row's dtypes (default: the first); with --model "
                                                         "the model's dtype (default float32)")
    parser.add_argument("--device", metavar="D", help="device to build the call on (default: the target's device "
                                                      "class, else the process accelerator, else cpu)")
    parser.add_argument("--arch", metavar="ARCH", help="simulate a --device of this arch (e.g. ascend310p): plan on "
                                                       "meta tensors, select as on that device; no hardware needed")
    parser.add_argument("--target", metavar="T", help="explain under use_target(T) (device[:arch][@backend])")
    parser.add_argument("--shape", metavar="NAME=D0,D1,...", action="append", default=[],
                        help="give input NAME this shape (fresh random data of the row's dtype) instead of the "
                             "row's; repeatable. The op checks the call as any call: a shape its spec refuses is "
                             "an error naming the declaration")
    add_kernels_argument(parser)
    add_model_arguments(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def op_class(spec: OpSpec) -> type:
    """The op class of ``spec``: ``source.op`` names its module (core or plugin)."""
    module_name = spec.source.get("op")
    if not module_name:
        raise TileOpsError(f"{spec.name}: the spec has no source.op naming the module of its op class "
                           f"({spec.file}:{spec.line})")
    module = importlib.import_module(module_name)
    cls = getattr(module, spec.name, None)
    if cls is None:
        raise TileOpsError(f"{spec.name}: module {module_name} (source.op) defines no class {spec.name}")
    return cls


def _row(spec: OpSpec, label: str | None) -> WorkloadRow:
    if not spec.workloads:
        raise TileOpsError(f"{spec.name} has no workload rows to build a call from ({spec.file}:{spec.line})")
    if label is None:
        return spec.workloads[0]
    for row in spec.workloads:
        if row.label == label:
            return row
    known = ", ".join(r.label for r in spec.workloads)
    raise UnknownName(f"{spec.name} has no workload labelled {label!r} (labels: {known})")


def _case(row: WorkloadRow, dtype: str | None) -> Any:
    cases = dtype_cases(row)
    if dtype is None:
        return cases[0]
    for case in cases:
        if str(case) == dtype:
            return case
    raise UnknownName(f"workload {row.label} has no dtypes entry {dtype!r} (entries: "
                       f"{', '.join(str(c) for c in cases)})")


def simulated_device_type(text: str | None, arch: str) -> str:
    """The device type ``--arch`` simulates, from ``--device type[:index]``: one that an installed
    backend or kernel declares (a misspelt one would match no kernel, silently).

    Read as text, not ``torch.device``: torch knows a backend's device type (``npu``) only
    once that backend's extension is loaded, and simulating means not having it.
    """
    if text is None:
        raise UsageError(f"--arch {arch} simulates a device: name its type with --device (e.g. --device npu)")
    device_type, _, index = text.partition(":")
    if not device_type.isidentifier() or (index and not index.isdigit()):
        raise UsageError(f"--device {text!r} is not a device: write type[:index], e.g. npu or npu:0")
    if device_type in ("cpu", "meta"):
        raise UsageError(f"--arch simulates an accelerator; {device_type} has no arch to choose")
    known = installed_device_types()
    if device_type not in known:
        raise UnknownName(f"--device {text!r}: no installed backend or kernel is for device type {device_type!r} "
                          f"(installed: {', '.join(sorted(known)) or 'none'})")
    return device_type


def _device(text: str | None, target: Target | None) -> torch.device:
    if text is None:
        device = default_device(target)  # (a target's device is checked as --device is: found in review)
    else:
        try:
            device = torch.device(text)
        except RuntimeError as exc:
            raise UsageError(f"--device {text!r} is not a device: {exc} (--arch ARCH simulates a device type "
                             "this torch does not know)") from None
    if device.type not in ("cpu", "meta"):
        acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
        if acc is None or acc.type != device.type:
            raise UsageError(f"device {device} is not available on this machine (accelerator: "
                             f"{acc.type if acc is not None else 'none'}); explain builds the call on the device "
                             "(--arch ARCH simulates one)")
    return device


def as_if_on(call: CallSpec, device_type: str, arch: str) -> CallSpec:
    """``call`` (planned on meta tensors) as the same call on a ``device_type`` device of ``arch``."""
    return CallSpec(call.op, call.interface, device_type, arch, call.dtypes, call.dims, call.flags)


def parse_shapes(texts: list[str]) -> dict[str, tuple[int, ...]]:
    """``["x=8,1000", "w=1000"]`` as ``{"x": (8, 1000), "w": (1000,)}`` (``x=`` is a 0-d tensor)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, eq, dims = text.partition("=")
        parts = [p.strip() for p in dims.split(",")] if dims.strip() else []
        if not eq or not name.strip().isidentifier() or not all(p.isdigit() for p in parts):
            raise UsageError(f"--shape {text!r}: write NAME=D0,D1,... with non-negative integer sizes, "
                             "e.g. --shape x=8,1000")
        shapes[name.strip()] = tuple(int(p) for p in parts)
    return shapes


def _reshaped(spec: OpSpec, instance: Any, shapes: dict[str, tuple[int, ...]], rng: torch.Generator) -> None:
    """Replace the inputs ``shapes`` names by fresh random tensors of those shapes (same dtype, device)."""
    for name, shape in shapes.items():
        current = instance.inputs.get(name)
        if current is None:
            known = ", ".join(instance.inputs) or "none"
            raise TileOpsError(f"--shape {name}=...: {spec.name} ({spec.file}:{spec.line}) has no call-time input "
                               f"{name!r} present in this row (inputs: {known})")
        try:
            fresh = random_tensor(shape, current.dtype, rng) if not isinstance(current, TensorMeta) else None
        except (RuntimeError, OverflowError) as exc:  # a size no memory holds (found in review: a traceback)
            raise TileOpsError(f"--shape {name}={','.join(map(str, shape))}: explain calls the op on real tensors, "
                               f"and this one cannot be allocated here ({str(exc).splitlines()[0]})") from exc
        instance.inputs[name] = (TensorMeta(shape, current.dtype) if fresh is None
                                 else fresh.to(current.device))


def explain(op_name: str, *, workload: str | None = None, dtype: str | None = None, device: str | None = None,
            arch: str | None = None, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """Build the call of ``op_name`` for a workload row and apply the selection rule to each interface.

    With ``arch``, the ``device`` is simulated (module docstring). ``shapes`` gives inputs other
    shapes than the row's (``--shape``): any call a vendor wants explained, checked as a call is.
    """
    spec = resolve_specs([op_name])[0]  # (an unknown name is a usage error that suggests the closest)
    cls = op_class(spec)
    row = _row(spec, workload)
    case = _case(row, dtype)
    simulated = simulated_device_type(device, arch) if arch is not None else None
    rng = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    if simulated is None:
        instance = instantiate(spec, row, case, device=_device(device, current_target()), rng=rng)
        _reshaped(spec, instance, shapes or {}, rng)
        op = cls(**instance.op_kwargs)
        plan = op.plan_for(*instance.call_args(spec))  # the code a call runs: the call spec it would select on
    else:
        instance = instantiate(spec, row, case, rng=rng, meta_only=True)
        _reshaped(spec, instance, shapes or {}, rng)
        op, plan = plan_row(spec, cls, instance)
    target = current_target(op.target)
    interfaces = op.definition().interfaces
    calls = {i: plan.call_specs[i] for i in interfaces}
    if simulated is not None and arch is not None:
        calls = {i: as_if_on(call, simulated, arch) for i, call in calls.items()}
    selections: list[Selection] = [select_kernel(i, calls[i], target) for i in interfaces]
    compiled = compile_path(op.definition(), calls, target)
    return {
        "op": spec.name, "spec": f"{spec.file}:{spec.line}", "workload": row.label, "case": instance.case,
        "row": row.loc.where(),
        "device": str(plan.device) if simulated is None else f"{device} (simulated, arch {arch}; planned on meta "
                                                              "tensors)",
        "inputs": {n: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "device": str(t.device)}
                   for n, t in instance.inputs.items()},
        "target": {"active": None if target is None else str(target), "source": active_target_source(op.target),
                   "layers": _layers(spec.name, op.target),
                   "problem": target_problem(registry.active(), target)},
        "steering": steering_layers(registry.active()),
        "compiled_path": compiled.text,
        # The selection among traceable kernels: what a decomposition traces (empty where the
        # policy does not name the op).
        "compiled_interfaces": [_selection_data(s) for s in compiled.selections],
        "compiled_report": [s.report() for s in compiled.selections],
        "interfaces": [_selection_data(s) for s in selections],
        "report": [s.report() for s in selections],
    }


def _layers(op_name: str, op_target: Target | None) -> dict[str, str | None]:
    """Every layer, highest first: the target layers with this op's override rules in their place."""
    layers = [(layer, None if value is None else str(value)) for layer, value in target_layers(op_target)]
    try:
        overrides = kernel_overrides()
        rules = ", ".join(r.entry for r in overrides.for_op(op_name)) if overrides is not None else ""
        entry = f"{rules} ({overrides.source})" if rules and overrides is not None else None
    except TileOpsError as exc:
        entry = str(exc)
    layers.insert(2, ("per-op overrides", entry))
    return dict(layers)


def _selection_data(selection: Selection) -> dict[str, Any]:
    return {
        "interface": selection.interface.qualname(), "call": selection.call.as_dict(),
        "chosen": None if selection.chosen is None else selection.chosen.qualname(),
        "chosen_backend": selection.chosen_backend,
        "steering": list(selection.steering.notes) if selection.steering is not None else [],
        "candidates": [{"impl": c.impl.qualname(), "backend": c.backend, "kept": c.kept, "reason": c.reason}
                       for c in selection.candidates],
    }


def _text(data: dict[str, Any]) -> str:
    lines = [f"{data['op']}  ({data['spec']})",
             f"workload: {data['workload']} [{data['case']}]  ({data['row']})"]
    for name, t in data["inputs"].items():
        lines.append(f"  input {name}: {t['dtype']}{t['shape']} on {t['device']}")
    lines.append(f"device: {data['device']}")
    lines.append(f"target: {data['target']['source']}")
    if data["target"]["problem"]:
        lines.append(f"  problem: {data['target']['problem']}")
    lines.append("  layers (highest first): " + "; ".join(f"{k} {v or '-'}" for k, v in data["target"]["layers"].items()))
    lines.extend(steering_lines(data["steering"]))
    lines.append(f"under torch.compile: {data['compiled_path']}")
    for report in data["compiled_report"]:
        lines.append("  the decomposition's selection, among traceable kernels only:")
        lines.extend(f"    {line}" for line in report.splitlines())
    for report, sel in zip(data["report"], data["interfaces"]):
        lines.append("")
        lines.append(report)
        if sel["chosen"]:
            lines.append(f"chosen: {sel['chosen']} (backend {sel['chosen_backend']})")
        else:
            lines.append("chosen: none (a call would raise SelectionError with the reasons above)")
    return "\n".join(lines)


#: Options of one mode that the other has no use for, with their values when not given.
_OP_ONLY: dict[str, Any] = {"workload": None, "shape": [], "arch": None}
_MODEL_ONLY: dict[str, Any] = {"every_module": False, "set": []}


def _refuse_other_modes_options(args: argparse.Namespace) -> None:
    """An option of the other mode is refused by name, not ignored (found in review: --model dropped
    --workload, --shape and --arch; an op dropped --every-module and --set)."""
    given = options_given(args, _OP_ONLY if args.model is not None else _MODEL_ONLY)
    if given:
        mode = "--model" if args.model is not None else "an op"
        raise UsageError(f"explain {mode} does not take {', '.join(given)}")


def run(args: argparse.Namespace) -> int:
    if (args.op is None) == (args.model is None):
        raise UsageError("tileops explain takes an op (tileops explain RMSNormFwdOp) or --model TYPE, one of them")
    _refuse_other_modes_options(args)
    scoped = target_argument(args)
    with kernels_argument(args), use_target(scoped) if scoped is not None else contextlib.nullcontext():
        if args.model is not None:
            return run_model(args, _device(args.device, current_target()))
        data = explain(args.op, workload=args.workload, dtype=args.dtype, device=args.device, arch=args.arch,
                       shapes=parse_shapes(args.shape))
    print(json.dumps(data, indent=2, default=str) if args.format == "json" else _text(data))
    return EXIT_OK if all(s["chosen"] for s in data["interfaces"]) else EXIT_FINDINGS

