"""What ``apply_tileops`` did: one route per piece of a module, the op and the kernel that serves it.

A route whose ``kernel`` is None was left on the library's own code; its ``reason`` says why
(no TileOPs op for it, or no kernel that serves the module's shapes on this device). A route
may also do the work of submodules its module no longer calls (``covers``: a GatedDeltaNet's
``conv1d`` weights are read by its conv ops, a MoE block's router and experts run inside the
block's ops), so the report can answer for every module of the model, not only for the ones
whose forward was replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._serving import KernelCall

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
    #: submodules (dotted paths) whose work this piece does: their own forwards are no longer called
    covers: tuple[str, ...] = ()

    @property
    def served(self) -> bool:
        return self.kernel is not None


@dataclass
class TileOpsReport:
    """The routes of one ``apply_tileops`` call, printable like ``tileops explain``.

    ``modules`` lists every module of the model (path, class name) in the model's order;
    ``containers`` those that only call their children (the model wrappers, module lists),
    which no op serves or needs to; ``kernel_calls`` the kernel calls planned for the routes
    (what ``build_kernels`` compiles ahead of the first forward).
    """

    model: str
    device: str
    routes: list[Route] = field(default_factory=list)
    modules: list[tuple[str, str]] = field(default_factory=list)
    containers: set[str] = field(default_factory=set)
    kernel_calls: list[KernelCall] = field(default_factory=list)

    def served(self) -> list[Route]:
        return [r for r in self.routes if r.served]

    def left(self) -> list[Route]:
        return [r for r in self.routes if not r.served]

    def routes_of(self, module: str) -> tuple[list[Route], list[Route]]:
        """``(own, covering)``: the module's own routes, and the routes of an ancestor that do its work."""
        own = [r for r in self.routes if r.module == module]
        covering = [r for r in self.routes if module in r.covers]
        return own, covering

    def unserved_modules(self) -> list[str]:
        """Modules (containers aside) that no TileOPs op serves: no route of their own or covering
        them, or one of their own routes left as it was."""
        out = []
        for name, _ in self.modules:
            if name in self.containers:
                continue
            own, covering = self.routes_of(name)
            if not (own or covering) or not all(r.served for r in own + covering):
                out.append(name)
        return out

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

    def module_table(self) -> list[str]:
        """Every module of the model with what serves it: its own routes (op: kernel, or why it was
        left), the route of the ancestor that does its work, or ``container``; unrouted modules say so."""
        lines = []
        for name, kind in self.modules:
            head = f"  {name or '(model)'} [{kind}]"
            if name in self.containers:
                lines.append(f"{head}: container (runs its children)")
                continue
            own, covering = self.routes_of(name)
            if not own and not covering:
                lines.append(f"{head}: NOT ROUTED (runs as the library wrote it)")
                continue
            lines.append(head)
            for r in own:
                served = f"-> {r.op}: {r.kernel}" if r.served else f"-- left as it was: {r.reason}"
                lines.append(f"      {r.piece}: {served}")
            for r in covering:
                served = f"{r.op}: {r.kernel}" if r.served else f"left as it was: {r.reason}"
                lines.append(f"      inside {r.module}'s {r.piece}: {served}")
        return lines

    def __str__(self) -> str:
        served, left = len(self.served()), len(self.left())
        head = f"TileOPs on {self.model} ({self.device}): {served} pieces served by TileOPs, {left} left as they were"
        return "\n".join([head, *self.summary()])
