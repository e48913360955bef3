"""What the user's steering asks of one selection: the target honoured, denied kernels, a pin or a lock.

The selection rule (:mod:`.select`) asks :func:`steering_for` once per (interface, call
spec, target) it has not cached, and applies the answer before availability: a denied
kernel drops out with the deny as its reason, and when a pin (:mod:`.overrides`) or a lock
line (:mod:`.lock`) applies, every other kernel drops out saying so. Precedence, highest
first: an op's ``target=`` > ``use_target()`` > per-op override pins > ``set_target()`` /
``TILEOPS_TARGET`` > automatic; a lock line decides the kernel under all of them (a target
that excludes the locked kernel is a loud error naming the lock line); denies hold always.
Each layer that took part, or was shadowed, is a line of :attr:`Steering.notes`, which
``tileops explain`` and every selection report print.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import SelectionError, TileOpsError
from .compile_policy import decompose_policy
from .dispatch_stats import dispatch_report
from .fingerprint import selection_fingerprint
from .interface import CallSpec, KernelInterface
from .lock import LockEntry, active_lock, warn_version_drift, write_lock
from .overrides import KernelRule, check_overrides, kernel_overrides, override_problems
from .registry import active
from .targets import Target

if TYPE_CHECKING:
    from .registry import Registry

__all__ = ["Steering", "steering_for", "steering_layers", "installed_distributions", "lock_recorded_run"]

Impl = type[KernelInterface]


@dataclass(frozen=True)
class Steering:
    """The user's steering of one selection (module docstring)."""

    target: Target | None
    denied: dict[Impl, str]
    only: frozenset[Impl] | None = None  # a pin or lock: no other kernel may serve
    only_reason: str = ""
    lock: LockEntry | None = None
    pin: KernelRule | None = None
    notes: tuple[str, ...] = ()

    @property
    def explicit(self) -> bool:
        """Whether the user chose (a target, a pin or a lock): then nothing falls back quietly."""
        return self.target is not None or self.only is not None

    def why_out(self, impl: Impl) -> str | None:
        """Why steering keeps ``impl`` from serving (None: it does not)."""
        denied = self.denied.get(impl)
        if denied is not None:
            return denied
        if self.only is not None and impl not in self.only:
            return self.only_reason
        return None


def installed_distributions(registry: "Registry") -> dict[str, str]:
    """The distributions a lock records: the core, torch, and each backend's (name -> version)."""
    import torch

    out = {"tileops": __version__, "torch": str(torch.__version__).split("+")[0]}
    for info in registry.backends().values():
        if info.distribution:
            out[info.distribution] = str(info.version)
    return out


def steering_for(interface: Impl, call: CallSpec, target: Target | None, registry: "Registry") -> Steering:
    """Denies, pin or lock, and the target selection honours, for ``call`` (module docstring)."""
    overrides = check_overrides(registry)
    rules = overrides.for_op(call.op) if overrides is not None else ()
    impls = registry.implementations(interface)
    backend_of = registry.backend_of
    notes: list[str] = []
    denied: dict[Impl, str] = {}
    for rule in (r for r in rules if r.deny):
        assert overrides is not None
        notes.append(f"deny {rule.entry!r} ({overrides.source})")
        for impl in impls:
            if rule.names(impl, backend_of(impl)):
                denied.setdefault(impl, f"denied by {overrides.source} ({rule.entry!r})")
    pins = [r for r in rules if not r.deny]  # an op's own pin outranks a '*' pin, wherever each is written
    pin = next((r for r in pins if r.op == call.op), pins[0] if pins else None)
    lock = active_lock()
    if lock is not None:
        warn_version_drift(lock, installed_distributions(registry))
    entry = lock.entry_for(call) if lock is not None else None
    if entry is not None:
        locked = frozenset(i for i in impls if i.qualname() == entry.kernel)
        if not locked:
            installed = ", ".join(f"{i.qualname()} [{backend_of(i)}]" for i in impls) or "none"
            raise SelectionError(f"{entry.where}: the lock names {entry.kernel} [{entry.backend}] for {call!r}, and no "
                                 f"such kernel is installed (implementations of {interface.__name__}: {installed})")
        notes.append(f"lock {entry.where}: {entry.kernel} [{entry.backend}]")
        if pin is not None:
            notes.append(f"per-op pin {pin.entry!r}: shadowed by the lock")
        return Steering(target, denied, locked, f"not the kernel locked at {entry.where}", entry, None, tuple(notes))
    if pin is None:
        return Steering(target, denied, notes=tuple(notes))
    assert overrides is not None
    if target is not None and not target.process_wide:
        notes.append(f"per-op pin {pin.entry!r} ({overrides.source}): shadowed by target {target} from {target.source}")
        return Steering(target, denied, notes=tuple(notes))
    if target is not None:
        notes.append(f"target {target} from {target.source}: shadowed for {call.op} by the per-op pin {pin.entry!r}")
    notes.append(f"per-op pin {pin.entry!r} ({overrides.source})")
    pinned = frozenset(i for i in impls if pin.names(i, backend_of(i)))
    return Steering(None, denied, pinned, f"not what {overrides.source} pins for {call.op} ({pin.entry!r})", None, pin,
                    tuple(notes))


def steering_layers(registry: "Registry") -> dict[str, Any]:
    """The steering in force, for ``tileops explain`` and ``tileops backends``: the per-op
    overrides and what in them names nothing installed, the lock followed (or why it cannot
    be read) and the distributions that drifted from it, the compile decomposition policy, and
    the selection fingerprint."""
    out: dict[str, Any] = {"overrides": None, "override_problems": [], "lock": None, "lock_drift": [],
                           "lock_error": None, "decompose": None, "fingerprint": selection_fingerprint(registry)}
    try:
        policy = decompose_policy()
        out["decompose"] = None if policy is None else policy.described()
    except TileOpsError as exc:
        out["decompose"] = str(exc)
    try:
        overrides = kernel_overrides()
    except TileOpsError as exc:
        out["override_problems"] = [str(exc)]
    else:
        if overrides is not None:
            out["overrides"] = str(overrides)
            out["override_problems"] = override_problems(overrides, registry)
    try:
        lock = active_lock()
    except TileOpsError as exc:
        out["lock_error"] = str(exc)
    else:
        if lock is not None:
            out["lock"] = f"{lock.path} ({len(lock.entries)} call specs)"
            out["lock_drift"] = lock.version_drift(installed_distributions(registry))
    return out


def lock_recorded_run(path: str | Path, registry: "Registry | None" = None) -> int:
    """Write a lock file from this process's dispatch report: each call spec a kernel was bound for
    in this run, with the kernel that served it. Returns the number of call specs locked.

    A run whose selection state changed between two bindings of one call spec (two kernels for
    it) cannot be locked: that is an error naming both, not a lock that picks one.
    """
    registry = active() if registry is None else registry
    chosen: dict[CallSpec, tuple[str, str]] = {}
    for row in dispatch_report().rows:
        previous = chosen.setdefault(row.call, (row.kernel, row.backend))
        if previous != (row.kernel, row.backend):
            raise SelectionError(f"the run bound {previous[0]} and {row.kernel} for one call spec {row.call!r}; "
                                 "lock a run made under one selection state")
    rows = [{"op": call.op, "interface": call.interface, "call": call.as_dict(), "kernel": kernel, "backend": backend,
             "workload": "recorded run"} for call, (kernel, backend) in chosen.items()]
    return write_lock(path, rows, installed_distributions(registry), selection_fingerprint(registry))
