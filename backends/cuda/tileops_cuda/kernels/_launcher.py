"""The compiled form of a kernel whose launch function is made from its build key.

Nothing here imports tilelang or torch.
"""

from __future__ import annotations

from typing import Any, Callable

from ._common import cached_build, compile_prim_func, direct_entry

__all__ = ["RunLauncher", "build_run_launcher"]


class RunLauncher:
    """A compiled TileLang kernel (``kernel``, its direct entry ``fn``) and ``run``, the
    interface-shaped launch function ``make_run(key, fn)`` makes around it."""

    __slots__ = ("key", "kernel", "fn", "run")

    def __init__(self, key: Any, kernel: Any, make_run: Callable[[Any, Any], Callable[..., Any]]) -> None:
        self.key = key
        self.kernel = kernel
        self.fn = direct_entry(kernel)
        self.run = make_run(key, self.fn)


def build_run_launcher(name: str, key: Any, refusal: Callable[[Any], str | None], program: Callable[[Any], Any],
                       make_run: Callable[[Any, Any], Callable[..., Any]]) -> RunLauncher:
    """Compile ``program(key)`` for ``key.arch`` once per process (``cached_build`` under
    ``(name, key)``) and return its :class:`RunLauncher`; ValueError with ``refusal(key)``'s
    reason when the kernel was not written for ``key``."""
    reason = refusal(key)
    if reason is not None:
        raise ValueError(reason)
    return cached_build((name, key), lambda: RunLauncher(key, compile_prim_func(program(key), key.arch), make_run))
