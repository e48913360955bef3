"""The steering options several sub-commands share: ``--kernels``, ``--lock`` and ``--target``, and how they print.

``--kernels SPEC`` sets the per-op overrides for the command (the syntax of
``TILEOPS_KERNELS``, which it replaces); ``--lock PATH`` makes selection follow a lock file
(replacing ``TILEOPS_LOCK``); ``--target T`` runs the command under ``use_target(T)``. They
go through the same functions a program calls
(:func:`~tileops_core.kernels.overrides.use_kernel_overrides`,
:func:`~tileops_core.kernels.lock.use_lock`, :func:`~tileops_core.kernels.targets.use_target`),
so the command shows what a run would do. A value the command cannot use (a malformed
``--kernels`` or ``--target``, a ``--lock`` file missing or no lock, a ``--target`` naming a
device type or backend nothing installed has) is a usage error, exit 2, as a bad flag is.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator

from ..errors import TileOpsError, UsageError
from ..kernels import registry
from ..kernels.lock import use_lock
from ..kernels.overrides import use_kernel_overrides
from ..kernels.select import target_problem
from ..kernels.targets import Target, parse_target

__all__ = ["add_kernels_argument", "kernels_argument", "target_argument", "installed_device_types", "steering_lines"]


def add_kernels_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernels", metavar="SPEC", help="per-op kernel overrides, replacing TILEOPS_KERNELS ('' "
                                                         "for none): "
                                                         "'Op=kernel|backend|-denied[,...];...', e.g. "
                                                         "'RMSNormFwdOp=cpu_ref;RecurrentGatedDeltaRuleFwdOp=-TileLangRGDR'")
    parser.add_argument("--lock", metavar="PATH", help="follow this lock file (written by `tileops lock`), "
                                                       "replacing TILEOPS_LOCK")


@contextlib.contextmanager
def kernels_argument(args: argparse.Namespace) -> Iterator[None]:
    """The command runs under ``--kernels`` and ``--lock``; what was in force before comes back after."""
    with contextlib.ExitStack() as stack:
        if getattr(args, "kernels", None) is not None:
            # --kernels '' replaces TILEOPS_KERNELS by no override (found in review: it was skipped); the empty
            # text would mean "fall back to the environment" to the setting, ';' is the empty list of entries.
            try:
                stack.enter_context(use_kernel_overrides(args.kernels or ";", "--kernels"))
            except TileOpsError as exc:  # what was typed (found in review: exit 1, as for a failure)
                raise UsageError(str(exc)) from None
        if getattr(args, "lock", None):
            try:
                stack.enter_context(use_lock(args.lock))
            except TileOpsError as exc:  # a missing file, or one that is no lock (found in review: exit 1)
                raise UsageError(f"--lock: {exc}") from None
        yield


def installed_device_types() -> set[str]:
    """The device types an installed backend or kernel is for (``*``, any device, left out)."""
    backends = registry.active().backends().values()
    known = {t for info in backends for t in info.device_types}
    known |= {d for info in backends for k in info.kernels for d in k.devices}
    return known - {"*"}


def target_argument(args: argparse.Namespace) -> Target | None:
    """``--target T`` as a target (None when not given); one that is malformed, or names a device type or
    a backend nothing installed has, is a usage error (found in review: ``--target nope`` exited 1, from
    ``tileops lock`` with a "no kernel serves" problem for every row)."""
    if not getattr(args, "target", None):
        return None
    try:
        target = parse_target(args.target, "--target")
    except TileOpsError as exc:
        raise UsageError(str(exc)) from None
    if target is None:
        return None
    known = installed_device_types() | {"cpu"}
    if target.device_type is not None and target.device_type not in known:
        raise UsageError(f"target {target} (--target) names device type {target.device_type!r}, which no installed "
                         f"backend or kernel is for (installed: {', '.join(sorted(known))}): a typo, or its backend "
                         "is not installed")
    problem = target_problem(registry.active(), target)
    if problem:
        raise UsageError(problem)
    return target


def steering_lines(steering: dict[str, Any]) -> list[str]:
    """The steering layers (:func:`~tileops_core.kernels.steering.steering_layers`) as text lines."""
    lines = [f"per-op overrides: {steering['overrides'] or '-'}"]
    lines.extend(f"  problem: {p}" for p in steering["override_problems"])
    lines.append(f"lock: {steering['lock_error'] or steering['lock'] or '-'}")
    lines.extend(f"  drift: {d}" for d in steering["lock_drift"])
    lines.append(f"torch.compile decomposes: {steering['decompose'] or '- (every op is an opaque custom op)'}")
    lines.append(f"selection fingerprint: {steering['fingerprint']}")
    return lines
