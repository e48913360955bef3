"""What ``apply_tileops`` did: one route per piece of a module, the op and the kernel that serves it.

A route whose ``kernel`` is None was left on the library's own code; its ``reason`` says why
(no TileOPs op for it, or no kernel that serves the module's shapes on this device).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Route", "TileOpsReport"]


@dataclass(frozen=True)
class Route:
    """One piece of one module: where it went, or why it stayed."""

    module: str  #: dotted path in the model (``model.layers.0.linear_attn``)
    kind: str  #: the module's class name
    piece: str  #: which part of the module (``decode``, ``norm``, ``router softmax``)
    op: str | None  #: the TileOPs op class, None when no op applies
    kernel: str | None  #: ``Kernel [backend]`` that serves it on this device; None: left as it was
    reason: str = ""  #: why it was left (or a note on how it is served)

    @property
    def served(self) -> bool:
        return self.kernel is not None


@dataclass
class TileOpsReport:
    """The routes of one ``apply_tileops`` call, printable like ``tileops explain``."""

    model: str
    device: str
    routes: list[Route] = field(default_factory=list)

    def served(self) -> list[Route]:
        return [r for r in self.routes if r.served]

    def left(self) -> list[Route]:
        return [r for r in self.routes if not r.served]

    def summary(self) -> list[str]:
        """One line per (kind, piece): how many modules, which op, which kernel or why not."""
        groups: dict[tuple[str, str, str | None, str | None, str], int] = {}
        for r in self.routes:
            key = (r.kind, r.piece, r.op, r.kernel, r.reason)
            groups[key] = groups.get(key, 0) + 1
        lines = []
        for (kind, piece, op, kernel, reason), n in groups.items():
            where = f"{kind}.{piece}" + (f" ×{n}" if n > 1 else "")
            if kernel is not None:
                lines.append(f"  {where:<44} -> {op}: {kernel}" + (f"  ({reason})" if reason else ""))
            else:
                lines.append(f"  {where:<44} -- left as it was: {reason}")
        return lines

    def __str__(self) -> str:
        served, left = len(self.served()), len(self.left())
        head = f"TileOPs on {self.model} ({self.device}): {served} pieces served by TileOPs, {left} left as they were"
        return "\n".join([head, *self.summary()])
