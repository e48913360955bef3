"""Which ops ``torch.compile`` decomposes into a traceable kernel instead of the opaque custom op.

Under ``torch.compile`` an op is one opaque custom op by default: Inductor cannot fuse it with
its neighbours. For a small op (RMSNorm, SiluAndMul) with a kernel written in plain torch, the
decomposition can win: Inductor fuses that torch code into the surrounding kernels. The
policy is the explicit choice, per op:

* an op decomposes only if the policy names it: ``TILEOPS_COMPILE_DECOMPOSE`` (or
  :func:`set_decompose_policy`, :func:`use_decompose_policy`) is a comma-separated list of
  ``Op`` names (``"RMSNormFwdOp,SiluAndMulFwdOp"``), ``measured`` (the ops of :data:`MEASURED`,
  the documented default), ``auto`` (every op: "all decompositions"), and ``-Op`` to take one
  out again (``"measured,-SiluAndMulFwdOp"``, ``"auto,-GemmFwdOp"``); ``none`` alone names no
  op even where the environment names some. Unset: no op decomposes, so a compiled graph is
  exactly the custom ops it always was;
* a named op's compiled call traces the kernel that the one selection rule picks among the
  *traceable* kernels (``traceable = True``: plain torch code; the references of such ops
  are), even where a specialised kernel that is not traceable (TileLang) serves the eager
  call: naming the op is choosing Inductor's code over that kernel. Where no traceable
  kernel can serve the call (none installed, all refuse, denied or shadowed by a pin or a
  lock line), the call stays the custom op, and ``tileops explain`` says why;
* and only an op with one fresh output (no ``out=`` buffer, alias or mutated input).

The decomposition is applied by backends that decompose (Inductor, ``aot_eager_decomp_partition``);
``aot_eager`` keeps the custom op. Every change bumps the registry generation, so a compiled
graph is traced again (and the decision with it).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import TileOpsError
from .settings import Setting

__all__ = ["DecomposePolicy", "parse_decompose_policy", "set_decompose_policy", "use_decompose_policy",
           "decompose_policy", "on_policy_change", "refresh_env_decompose_policy", "ENV_VAR", "MEASURED"]

ENV_VAR = "TILEOPS_COMPILE_DECOMPOSE"

#: The ops ``measured`` names: those whose decomposition under Inductor beat their custom op on
#: the H200's decode step (``tileops bench --decode-step --device cuda``; 2026-12-02, logs in
#: ``backends/cuda/bench/results/session-2026-12-02e/decode_policy_*.txt``). Device time a step
#: 45.2-45.7 µs decomposed against 47.4-47.5 µs as custom ops in every run; wall time in the run
#: with nothing else on the host: compiled fullgraph 139.0 µs against 198.8 µs (custom ops),
#: reduce-overhead 62.7 µs against 65.5 µs. RGDR has no traceable kernel (it mutates its state).
MEASURED = frozenset({"RMSNormFwdOp", "SiluAndMulFwdOp"})


@dataclass(frozen=True)
class DecomposePolicy:
    """Ops named for decomposition and where the policy came from: ``named`` by hand, the
    :data:`MEASURED` ops when ``measured``, every op when ``every``; never those ``excluded``."""

    named: frozenset[str]
    excluded: frozenset[str]
    every: bool
    source: str
    text: str
    measured: bool = False

    def wants(self, op: str) -> bool:
        """Whether the policy asks to decompose ``op`` (a traceable kernel must still serve it)."""
        return op not in self.excluded and (self.every or op in self.named or (self.measured and op in MEASURED))

    def canonical(self) -> str:
        """The policy as a normalised text: two spellings of one policy give one text (the fingerprint)."""
        parts = ["auto"] if self.every else []
        parts += sorted(self.named | (MEASURED if self.measured else frozenset()))
        parts += [f"-{name}" for name in sorted(self.excluded)]
        return ",".join(parts) or "none"

    def __str__(self) -> str:
        return f"{self.text} (from {self.source})"

    def described(self) -> str:
        """What ``tileops explain``/``backends`` print: the text, its source, and the ops it names
        where the text does not list them (``measured``, ``auto``, ``none``)."""
        canonical = self.canonical()
        return str(self) if canonical == self.text else f"{self}: {canonical}"


def parse_decompose_policy(text: str, source: str) -> DecomposePolicy:
    """Parse ``Op``, ``measured``, ``auto``, ``-Op`` entries and a lone ``none`` (module docstring)."""
    named: set[str] = set()
    excluded: set[str] = set()
    every = measured = False
    entries = [e for e in (e.strip() for e in text.split(",")) if e]
    if "none" in entries and len(entries) > 1:
        raise TileOpsError(f"{source}: 'none' (no op decomposes) stands alone, got {text.strip()!r}")
    for entry in entries:
        if entry in ("auto", "measured", "none"):
            every, measured = every or entry == "auto", measured or entry == "measured"
            continue
        name = entry[1:] if entry.startswith("-") else entry
        if not name.isidentifier():
            raise TileOpsError(f"{source}: {entry!r} is not an op name, '-Op', 'measured', 'auto' or 'none' (e.g. "
                               "'RMSNormFwdOp,SiluAndMulFwdOp', 'measured,-SiluAndMulFwdOp' or 'auto,-GemmFwdOp')")
        (excluded if entry.startswith("-") else named).add(name)
    return DecomposePolicy(frozenset(named), frozenset(excluded), every, source, text.strip(), measured)


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
    _changed()
    return policy


@contextlib.contextmanager
def use_decompose_policy(text: str | None, source: str = "use_decompose_policy()") -> Iterator[DecomposePolicy | None]:
    """:func:`set_decompose_policy` for the block (process-wide, like it); the previous policy comes back after."""
    try:
        with _setting.use(text, source) as policy:
            _changed()
            yield policy
    finally:
        _changed()


def _changed() -> None:
    for listener in _on_change:
        listener()


def refresh_env_decompose_policy() -> None:
    """Read ``TILEOPS_COMPILE_DECOMPOSE`` again (read at import; a malformed value raises when compiling)."""
    _setting.refresh_env()
    _changed()


def decompose_policy() -> DecomposePolicy | None:
    """The policy in force (None: no op decomposes)."""
    return _setting.get()
