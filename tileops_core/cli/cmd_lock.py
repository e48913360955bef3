"""``tileops lock``: record the kernel selection chooses for each workload row's call spec.

For every implemented op (or those named), each workload row in each of its dtypes entries
is planned on ``meta`` tensors (the op's own planning, nothing allocated) as a call on
``--device`` of ``--arch`` (default: the CPU), and the selection rule, under the steering in
force (``--kernels``, ``--target``), picks a kernel for each interface. The lock file holds
one JSON line per call spec with the kernel and its backend, under a header recording the
distributions' versions and the selection fingerprint. ``TILEOPS_LOCK=PATH`` then makes
selection follow it (:mod:`tileops_core.kernels.lock`).

A row that cannot be planned, or a call no kernel serves, is reported and makes the exit
code 1; the lock still holds every call spec that was chosen. An unknown op name, or a
``--kernels``/``--target`` that cannot be used, is a usage error (exit 2). The lock file is
replaced whole or not at all (:mod:`.output`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from ..bench.catalog import UnknownName, benchable_specs, unknown_op
from ..bench.workloads import dtype_cases, instantiate, plan_row
from ..errors import TileOpsError, UsageError
from ..kernels import registry
from ..kernels.fingerprint import selection_fingerprint
from ..kernels.lock import write_lock
from ..kernels.select import select_kernel
from ..kernels.steering import installed_distributions
from ..kernels.targets import current_target, use_target
from ..spec.manifest import load_manifest
from ..spec.nodes import OpSpec
from .cmd_explain import as_if_on, op_class, simulated_device_type
from .main import EXIT_FINDINGS, EXIT_OK
from .output import replacing
from .steer_options import add_kernels_argument, kernels_argument, target_argument

__all__ = ["NAME", "HELP", "add_arguments", "run", "lock_rows"]

NAME = "lock"
HELP = "write a lock file: the kernel chosen for each workload row's call spec, and the distributions' versions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ops", nargs="*", metavar="OP", help="op class names (default: every implemented op)")
    parser.add_argument("-o", "--output", metavar="PATH", default="tileops.lock", help="lock file to write "
                                                                                       "(default: tileops.lock)")
    parser.add_argument("--device", metavar="TYPE", default="cpu", help="device type the calls are for (default: cpu)")
    parser.add_argument("--arch", metavar="ARCH", help="the device's arch (required for a device other than cpu), "
                                                       "e.g. sm_90")
    parser.add_argument("--target", metavar="T", help="lock under use_target(T) (device[:arch][@backend])")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    add_kernels_argument(parser)


def _specs(names: list[str]) -> list[OpSpec]:
    specs = benchable_specs()
    manifest = load_manifest()
    for name in names:
        if name not in manifest:  # a typo, said as every command says it (found in review: "not implemented")
            raise unknown_op(name, specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise UnknownName(f"not implemented ops with workloads: {', '.join(unknown)} (ops: {', '.join(specs)})")
    return [specs[n] for n in names] if names else list(specs.values())


def lock_rows(specs: list[OpSpec], device_type: str, arch: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One lock row per (row, dtype entry, interface) that selection serves; problems for the rest."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    target = current_target()
    for spec in specs:
        cls = op_class(spec)
        for row in spec.workloads:
            for case in dtype_cases(row):
                where = f"{spec.name} {row.label} [{case}]"
                try:
                    _, plan = plan_row(spec, cls, instantiate(spec, row, case, meta_only=True))
                except TileOpsError as exc:
                    problems.append(f"{where}: {str(exc).splitlines()[0]}")
                    continue
                for interface, meta_call in plan.call_specs.items():
                    call = as_if_on(meta_call, device_type, arch)
                    selection = select_kernel(interface, call, target)
                    if selection.chosen is None:
                        problems.append(f"{where}: no kernel serves {interface.__name__}:\n{selection.report()}")
                        continue
                    rows.append({"op": spec.name, "interface": interface.__name__, "call": call.as_dict(),
                                 "kernel": selection.chosen.qualname(), "backend": selection.chosen_backend,
                                 "workload": f"{row.label} [{case}]"})
    return rows, problems


def run(args: argparse.Namespace) -> int:
    if args.device != "cpu" and not args.arch:
        raise UsageError(f"--device {args.device}: name its arch with --arch (e.g. --arch sm_90)")
    if args.device == "cpu" and args.arch not in (None, "cpu"):  # (found in review: cpu/sm_90 lines no call matches)
        raise UsageError(f"--arch {args.arch} names the arch of a device other than cpu: "
                         f"name the device with --device (e.g. --device cuda)")
    arch = args.arch or "cpu"
    # Calls carry a device type: cuda:0 is cuda, and a type no kernel is for is refused (found in review:
    # --device cuda:0 locked every row to the reference kernel and exited 0).
    device_type = "cpu" if args.device == "cpu" else simulated_device_type(args.device, arch)
    scoped = target_argument(args)
    with kernels_argument(args), use_target(scoped) if scoped is not None else contextlib.nullcontext():
        rows, problems = lock_rows(_specs(args.ops), device_type, arch)
        active = registry.active()
        try:
            with replacing(args.output) as temporary:  # whole or not at all: a lock is followed line by line
                written = write_lock(temporary, rows, installed_distributions(active), selection_fingerprint(active))
        except OSError as exc:  # (found in review: a traceback)
            raise TileOpsError(f"cannot write -o {args.output}: {exc.strerror or exc}") from None
    if args.format == "json":
        print(json.dumps({"path": args.output, "call_specs": written, "problems": problems}, indent=2))
    else:
        print(f"{args.output}: {written} call specs locked for {device_type}/{arch}")
        for problem in problems:
            print(f"problem: {problem}")
    return EXIT_FINDINGS if problems else EXIT_OK
