"""A registry of functions by name: what a manifest may refer to without importing a path.

Workload generators and roofline functions are both named in specs (``generator:
rgdr_decode``, ``roofline: {func: ...}``) and registered by the op modules or plugins that
define them; a spec never names a module to import. One name, one function: registering
a different function under a taken name is an error naming both modules.
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

from ..errors import TileOpsError

__all__ = ["NamedFunctions"]

F = TypeVar("F", bound=Callable[..., object])


class NamedFunctions(Generic[F]):
    """Thread-safe ``name -> function``; ``kind`` and ``hint`` make its errors readable."""

    def __init__(self, kind: str, hint: str = "") -> None:
        self.kind = kind
        self.hint = hint
        self._lock = threading.Lock()
        self._fns: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator registering ``fn`` under ``name``."""

        def decorate(fn: F) -> F:
            with self._lock:
                existing = self._fns.get(name)
                if existing is not None and existing is not fn:
                    raise TileOpsError(f"{self.kind} {name!r} is registered twice "
                                       f"({existing.__module__} and {fn.__module__})")
                self._fns[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> F:
        with self._lock:
            fn = self._fns.get(name)
            known = sorted(self._fns)
        if fn is None:
            raise TileOpsError(f"no {self.kind} named {name!r} (registered: {', '.join(known) or 'none'})"
                               + (f"; {self.hint}" if self.hint else ""))
        return fn
