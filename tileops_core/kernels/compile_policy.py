"""Which ops ``torch.compile`` may decompose into their traceable kernel instead of the opaque custom op.

Under ``torch.compile`` an op is one opaque custom op by default: Inductor cannot fuse it with
its neighbours. For a small op (RMSNorm, SiluAndMul) whose kernel is plain torch code, the
decomposition can win: Inductor fuses it into the surrounding kernels. The policy, per op:

* an op decomposes only if it is named by ``TILEOPS_COMPILE_DECOMPOSE`` (or
  :func:`set_decompose_policy`): ``"RMSNormFwdOp,SiluAndMulFwdOp"``; ``"auto"`` names every op;
  ``"-Op"`` takes one out again (``"auto,-GemmFwdOp"``). Unset: no op decomposes, so a
  compiled graph is exactly the custom ops it always was;
* and only where every kernel that selection picks for the call declares ``traceable = True``
  (a kernel the compiler can trace: the reference kernels of such ops do). A specialised
  kernel (TileLang) is never traced through: where it serves, the call stays the custom op,
  so the policy can only trade a custom op for the very computation it would have run;
* and only for an op with one fresh output (no ``out=`` buffer, alias or mutated input).

The decomposition is applied by backends that decompose (Inductor, ``aot_eager_decomp_partition``);
``aot_eager`` keeps the custom op. The choice per op is meant to follow the measurement on the
GPU (the decode step with the policy against "all custom ops" and "all decompositions").
Every change bumps the registry generation, so a compiled graph is traced again.
"""

from __future__ import annotations

from typing import Callable

from dataclasses import dataclass

from ..errors import TileOpsError
from .settings import Setting

__all__ = ["DecomposePolicy", "parse_decompose_policy", "set_decompose_policy", "decompose_policy", "on_policy_change",
           "refresh_env_decompose_policy", "ENV_VAR"]

ENV_VAR = "TILEOPS_COMPILE_DECOMPOSE"


@dataclass(frozen=True)
class DecomposePolicy:
    """Ops named for decomposition (``every``: all but ``excluded``) and where the policy came from."""

    named: frozenset[str]
    excluded: frozenset[str]
    every: bool
    source: str
    text: str

    def wants(self, op: str) -> bool:
        """Whether the policy asks to decompose ``op`` (the kernel must still be traceable)."""
        return op not in self.excluded and (self.every or op in self.named)

    def __str__(self) -> str:
        return f"{self.text} (from {self.source})"


def parse_decompose_policy(text: str, source: str) -> DecomposePolicy:
    """Parse ``Op,Op``, ``auto`` and ``-Op`` entries (module docstring)."""
    named: set[str] = set()
    excluded: set[str] = set()
    every = False
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        if entry == "auto":
            every = True
            continue
        name = entry[1:] if entry.startswith("-") else entry
        if not name.isidentifier():
            raise TileOpsError(f"{source}: {entry!r} is not an op name, '-Op' or 'auto' (e.g. "
                               "'RMSNormFwdOp,SiluAndMulFwdOp' or 'auto,-GemmFwdOp')")
        (excluded if entry.startswith("-") else named).add(name)
    return DecomposePolicy(frozenset(named), frozenset(excluded), every, source, text.strip())


_setting = Setting(ENV_VAR, parse_decompose_policy)


#: Called after every change of the policy (the op layer drops decompositions it no longer wants
#: from Inductor's table; this layer cannot import it).
_on_change: list[Callable[[], None]] = []


def on_policy_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every change of the policy."""
    _on_change.append(listener)


def set_decompose_policy(text: str | None, source: str = "set_decompose_policy()") -> DecomposePolicy | None:
    """Set (or with None, clear) the decomposition policy; it replaces ``TILEOPS_COMPILE_DECOMPOSE``."""
    policy = _setting.set(text, source)
    for listener in _on_change:
        listener()
    return policy


def refresh_env_decompose_policy() -> None:
    """Read ``TILEOPS_COMPILE_DECOMPOSE`` again (read at import; a malformed value raises when compiling)."""
    _setting.refresh_env()
    for listener in _on_change:
        listener()


def decompose_policy() -> DecomposePolicy | None:
    """The policy in force (None: no op decomposes)."""
    return _setting.get()
