"""The compiled form of a kernel whose launch function is made from its build key.

Nothing here imports tilelang or torch.
"""

from __future__ import annotations

from typing import Any, Callable

from ._common import direct_entry

__all__ = ["RunLauncher"]


class RunLauncher:
    """A compiled TileLang kernel (``kernel``, its direct entry ``fn``) and ``run``, the
    interface-shaped launch function ``make_run(key, fn)`` makes around it."""

    __slots__ = ("key", "kernel", "fn", "run")

    def __init__(self, key: Any, kernel: Any, make_run: Callable[[Any, Any], Callable[..., Any]]) -> None:
        self.key = key
        self.kernel = kernel
        self.fn = direct_entry(kernel)
        self.run = make_run(key, self.fn)
