"""Per-op kernel overrides: pin an op to a kernel or a backend, or deny one, without touching code.

Written ``Op=rule[,rule...][;Op=...]``, in ``TILEOPS_KERNELS``, on the command line
(``--kernels``) or through :func:`set_kernel_overrides`::

    TILEOPS_KERNELS="RMSNormFwdOp=cpu_ref;RecurrentGatedDeltaRuleFwdOp=-TileLangRGDR"

A rule is a backend name (``cpu_ref``), a kernel class name (``RefRMSNorm``) or its full
``module:QualName``; a leading ``-`` denies it instead of pinning it. ``*`` as the op applies
the rules to every op (``*=-cuda`` keeps the CUDA backend out everywhere). An op has at most
one pin and any number of denies; an op's own pin outranks a ``*`` pin, whichever is written first.

Where they sit among the layers (highest first): an op's ``target=`` > ``use_target()`` >
**these overrides' pins** > ``set_target()``/``TILEOPS_TARGET`` > automatic. A pin replaces
a process-wide target for its op and is itself replaced by an op's or a scope's target
(``tileops explain`` shows the pin as shadowed then). Denies hold under every layer: a
denied kernel drops out with the deny as its reason, whatever else asks for it.

An override naming an op, a backend or a kernel that is not installed is an error at the
first selection (naming what is installed), never a silent no-op: ``TILEOPS_KERNELS`` is
read when this module is imported and checked against the registry when selection first
reads it; :func:`set_kernel_overrides` parses at once. Every change bumps the registry
generation, so cached selections and op plans are made again.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import SelectionError, TileOpsError
from .interface import KernelInterface
from .registry import GENERATION
from .settings import Setting

if TYPE_CHECKING:
    from .registry import Registry

__all__ = ["KernelRule", "KernelOverrides", "parse_overrides", "set_kernel_overrides", "use_kernel_overrides", "kernel_overrides",
           "refresh_env_overrides", "override_problems", "check_overrides", "ENV_VAR"]

ENV_VAR = "TILEOPS_KERNELS"
Impl = type[KernelInterface]


@dataclass(frozen=True)
class KernelRule:
    """One rule: ``op`` (or ``*``) pins (``deny`` False) or denies ``name``: a backend or a kernel."""

    op: str
    name: str
    deny: bool
    entry: str  # the entry as written, e.g. "RMSNormFwdOp=-TileLangRMSNorm"

    def names(self, impl: Impl, backend: str) -> bool:
        """Whether this rule's name is ``impl`` (class name or ``module:QualName``) or its backend."""
        return self.name in (backend, impl.__name__, impl.qualname())


@dataclass(frozen=True)
class KernelOverrides:
    """The rules of one layer and where they came from (``TILEOPS_KERNELS``, ``--kernels``, ...)."""

    rules: tuple[KernelRule, ...]
    source: str
    text: str

    def for_op(self, op: str) -> tuple[KernelRule, ...]:
        return tuple(r for r in self.rules if r.op in (op, "*"))

    def __str__(self) -> str:
        return f"{self.text} (from {self.source})"


def _valid_name(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c in "_-.:" for c in text)


def parse_overrides(text: str, source: str) -> KernelOverrides:
    """Parse ``Op=rule[,rule];...`` (module docstring); a malformed entry raises, naming it."""
    rules: list[KernelRule] = []
    pins: dict[str, str] = {}
    for entry in (e.strip() for e in text.replace("\n", ";").split(";")):
        if not entry:
            continue
        op, eq, body = (p.strip() for p in entry.partition("="))
        if not eq or not (op == "*" or op.isidentifier()) or not body:
            raise TileOpsError(f"{source}: entry {entry!r} is not 'Op=kernel', 'Op=backend' or 'Op=-denied' "
                               "(e.g. RMSNormFwdOp=cpu_ref;RecurrentGatedDeltaRuleFwdOp=-TileLangRGDR)")
        for item in (i.strip() for i in body.split(",")):
            deny = item.startswith("-")
            name = item[1:].strip() if deny else item
            if not _valid_name(name):
                raise TileOpsError(f"{source}: entry {entry!r}: {item!r} is not a backend or kernel name")
            if not deny:
                if op in pins:
                    raise TileOpsError(f"{source}: {op} is pinned twice ({pins[op]!r} and {entry!r}); an op has "
                                       "one pin (deny the others with '-name')")
                pins[op] = entry
            rules.append(KernelRule(op, name, deny, entry))
    return KernelOverrides(tuple(rules), source, text.strip())


_setting = Setting(ENV_VAR, parse_overrides)


def set_kernel_overrides(text: str | None, source: str = "set_kernel_overrides()") -> KernelOverrides | None:
    """Set (or with None, clear) the per-op overrides of the process; they replace ``TILEOPS_KERNELS``."""
    return _setting.set(text, source)


def use_kernel_overrides(text: str | None, source: str = "use_kernel_overrides()"
                         ) -> contextlib.AbstractContextManager[KernelOverrides | None]:
    """:func:`set_kernel_overrides` for a ``with`` block (process-wide, like it); the previous ones come back after."""
    return _setting.use(text, source)


def refresh_env_overrides() -> None:
    """Read ``TILEOPS_KERNELS`` again (read once at import; a malformed value raises at selection)."""
    _setting.refresh_env()


def kernel_overrides() -> KernelOverrides | None:
    """The overrides in force: :func:`set_kernel_overrides`'s, else ``TILEOPS_KERNELS``'s (None: none)."""
    return _setting.get()


def override_problems(overrides: KernelOverrides, registry: "Registry") -> list[str]:
    """Each rule that names nothing installed, with what is installed (empty: all resolve)."""
    by_op: dict[str, list[tuple[Impl, str]]] = {}
    for interface in registry.interfaces():
        for impl in registry.implementations(interface):
            by_op.setdefault(interface.op, []).append((impl, registry.backend_of(impl)))
    backends = sorted(registry.backends())
    problems = []
    for rule in overrides.rules:
        if rule.op != "*" and rule.op not in by_op:
            close = difflib.get_close_matches(rule.op, list(by_op), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{overrides.source}: {rule.entry!r} names {rule.op}, which no installed kernel "
                            f"implements{hint}")
            continue
        candidates = [c for op, impls in by_op.items() if rule.op in (op, "*") for c in impls]
        if not any(rule.names(impl, backend) for impl, backend in candidates):
            kernels = ", ".join(sorted(f"{impl.__name__} ({backend})" for impl, backend in candidates))
            what = "any op" if rule.op == "*" else rule.op
            problems.append(f"{overrides.source}: {rule.entry!r}: {rule.name!r} is no installed backend or kernel "
                            f"of {what}; installed backends: {', '.join(backends) or 'none'}; kernels of {what}: "
                            f"{kernels or 'none'}")
    return problems


_checked: list[tuple[int, KernelOverrides | None, tuple[str, ...]]] = [(-1, None, ())]


def check_overrides(registry: "Registry") -> KernelOverrides | None:
    """The overrides in force, checked against ``registry`` (once per generation); raise when a
    rule names nothing installed."""
    overrides = kernel_overrides()
    if overrides is None:
        return None
    generation, checked, problems = _checked[0]
    if generation != GENERATION[0] or checked is not overrides:
        problems = tuple(override_problems(overrides, registry))
        _checked[0] = (GENERATION[0], overrides, problems)
    if problems:
        raise SelectionError("kernel overrides name nothing installed:\n  " + "\n  ".join(problems))
    return overrides
