"""Dispatch statistics: which kernels served this process, how often, and what fell back and why.

One process-wide counter per (op, call spec, kernel, fallback reason), behind one lock.
By default it counts **plans**, not calls: a count is added when an op's plan binds a
kernel for an interface (once per op instance, call key and target), so the per-call hot
path does nothing at all. ``TILEOPS_DISPATCH_STATS=calls`` (or :func:`count_calls`) counts
every launch instead, through a wrapper around each kernel bound from then on.

:func:`dispatch_report` returns the counts; ``TILEOPS_DISPATCH_REPORT=1`` prints its
summary to stderr when the process exits. The fallback reason is the text of the one-time
fallback warning (the general kernel serving an accelerator call, and why), so a run can
answer "did the slow reference serve anything, and why" without reading warnings.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from .interface import CallSpec, KernelInterface
from .registry import GENERATION

__all__ = ["DispatchRow", "DispatchReport", "count", "counting", "dispatch_report", "reset_dispatch_stats",
           "count_calls", "counts_calls", "STATS_ENV", "REPORT_ENV"]

STATS_ENV = "TILEOPS_DISPATCH_STATS"
REPORT_ENV = "TILEOPS_DISPATCH_REPORT"

_Key = tuple[str, CallSpec, str, str, str | None]  # op, call, kernel qualname, backend, fallback reason
_lock = threading.Lock()
_counts: Counter[_Key] = Counter()
_per_call = [os.environ.get(STATS_ENV, "").strip().lower() == "calls"]


@dataclass(frozen=True)
class DispatchRow:
    """One counted (op, call spec, kernel, fallback reason) and how many plans (or calls) it served."""

    op: str
    call: CallSpec
    kernel: str
    backend: str
    fallback: str | None
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "call": self.call.as_dict(), "kernel": self.kernel, "backend": self.backend,
                "fallback": self.fallback, "count": self.count}


@dataclass(frozen=True)
class DispatchReport:
    """What :func:`dispatch_report` returns: rows by op, kernel and call, and what was counted."""

    rows: tuple[DispatchRow, ...]
    unit: str  # "plans" or "calls"

    @property
    def fallbacks(self) -> tuple[DispatchRow, ...]:
        return tuple(r for r in self.rows if r.fallback is not None)

    def by_kernel(self) -> dict[tuple[str, str], int]:
        """Total count per (op, kernel)."""
        totals: Counter[tuple[str, str]] = Counter()
        for r in self.rows:
            totals[(r.op, r.kernel)] += r.count
        return dict(totals)

    def text(self) -> str:
        """The summary printed at exit: per op and kernel, then every fallback with its reason."""
        if not self.rows:
            return f"tileops dispatch report: no kernel was bound in this process (counting {self.unit})"
        lines = [f"tileops dispatch report (counting {self.unit}):"]
        lines.extend(f"  {op}: {kernel}  x{n}" for (op, kernel), n in sorted(self.by_kernel().items()))
        if self.fallbacks:
            lines.append("fallbacks to a general kernel:")
            lines.extend(f"  {r.op} -> {r.kernel} x{r.count} for {r.call!r}: {r.fallback}" for r in self.fallbacks)
        return "\n".join(lines)


def count(impl: type[KernelInterface], backend: str, call: CallSpec, fallback: str | None, n: int = 1) -> None:
    """Add ``n`` to the counter of (op, call, kernel, fallback reason)."""
    key = (call.op, call, impl.qualname(), backend, fallback)
    with _lock:
        _counts[key] += n


def counting(kernel: Callable[..., Any], impl: type[KernelInterface], backend: str, call: CallSpec,
             fallback: str | None) -> Callable[..., Any]:
    """``kernel`` wrapped to count each launch (per-call mode only; the default counts plans)."""
    key = (call.op, call, impl.qualname(), backend, fallback)

    def counted(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            _counts[key] += 1
        return kernel(*args, **kwargs)
    return counted


def counts_calls() -> bool:
    """Whether every launch is counted (else plans are)."""
    return _per_call[0]


def count_calls(on: bool) -> None:
    """Count every launch (True) or plans only (False); kernels bound from now on follow."""
    _per_call[0] = bool(on)
    GENERATION[0] += 1  # plans bound under the other mode bind again


def dispatch_report() -> DispatchReport:
    """The process's dispatch counts so far (a snapshot)."""
    with _lock:
        items = list(_counts.items())
    rows = tuple(DispatchRow(op, call, kernel, backend, fallback, n)
                 for (op, call, kernel, backend, fallback), n in
                 sorted(items, key=lambda kv: (kv[0][0], kv[0][2], repr(kv[0][1]))))
    return DispatchReport(rows, "calls" if _per_call[0] else "plans")


def reset_dispatch_stats() -> None:
    """Forget every count (tests; a new measurement window)."""
    with _lock:
        _counts.clear()


def _print_at_exit() -> None:
    print(dispatch_report().text(), file=sys.stderr)


if os.environ.get(REPORT_ENV, "").strip() not in ("", "0"):
    atexit.register(_print_at_exit)
