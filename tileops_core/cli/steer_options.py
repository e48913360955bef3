"""The steering options several sub-commands share: ``--kernels`` and ``--lock``, and how they print.

``--kernels SPEC`` sets the per-op overrides for the command (the syntax of
``TILEOPS_KERNELS``, which it replaces); ``--lock PATH`` makes selection follow a lock file
(replacing ``TILEOPS_LOCK``). Both go through the same functions a program calls
(:func:`~tileops_core.kernels.overrides.use_kernel_overrides`,
:func:`~tileops_core.kernels.lock.use_lock`), so the command shows what a run would do.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator

from ..kernels.lock import use_lock
from ..kernels.overrides import use_kernel_overrides

__all__ = ["add_kernels_argument", "kernels_argument", "steering_lines"]


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
            stack.enter_context(use_kernel_overrides(args.kernels or ";", "--kernels"))
        if getattr(args, "lock", None):
            stack.enter_context(use_lock(args.lock))
        yield


def steering_lines(steering: dict[str, Any]) -> list[str]:
    """The steering layers (:func:`~tileops_core.kernels.steering.steering_layers`) as text lines."""
    lines = [f"per-op overrides: {steering['overrides'] or '-'}"]
    lines.extend(f"  problem: {p}" for p in steering["override_problems"])
    lines.append(f"lock: {steering['lock_error'] or steering['lock'] or '-'}")
    lines.extend(f"  drift: {d}" for d in steering["lock_drift"])
    lines.append(f"torch.compile decomposes: {steering['decompose'] or '- (every op is an opaque custom op)'}")
    lines.append(f"selection fingerprint: {steering['fingerprint']}")
    return lines
