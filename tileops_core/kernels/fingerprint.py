"""The selection state as one value: what a compiled graph and a lock file are keyed by.

The selection state is everything that decides which kernel serves a call spec: the
registered backends and kernels (with their declarations), the per-op overrides in force,
the lock followed and the compile decomposition policy. :func:`selection_fingerprint` hashes its content (``tileops lock``
records it in the lock's header, ``tileops explain`` and ``tileops backends`` print it).

Every change of that state bumps the registry generation (:data:`.registry.GENERATION`):
registering or removing a backend, :func:`~.overrides.set_kernel_overrides`,
:func:`~.lock.set_lock`, :func:`~.compile_policy.set_decompose_policy`. :func:`selection_state_guard` is read by the compile boundary
while dynamo traces an op call; dynamo guards on every value a traced call compares, so a
compiled graph is recompiled after the selection state changes, never reused across it.
On disk: a cached graph that calls the custom op selects at run time under the state of
that process; one that inlined a decomposition is keyed by the fingerprint too (the custom
op's compile key, :func:`tileops_core.op.decompose.compile_key`). The fingerprint holds the
kernels' declarations, not their code: a traceable kernel edited without a new version of its
distribution can be served from torch's cache as it was (``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``
while developing one).
"""

from __future__ import annotations

import hashlib

from ..errors import TileOpsError
from .compile_policy import decompose_policy
from .lock import active_lock
from .overrides import kernel_overrides
from .registry import GENERATION, Registry, active

__all__ = ["selection_fingerprint", "selection_state_guard"]


def selection_fingerprint(registry: Registry | None = None) -> str:
    """A short hash of the selection state's content (module docstring)."""
    registry = active() if registry is None else registry
    parts = [f"backend {name} {info.distribution} {info.version}" for name, info in sorted(registry.backends().items())]
    for interface in registry.interfaces():
        for impl in registry.implementations(interface):
            parts.append(f"kernel {impl.qualname()} [{registry.backend_of(impl)}] devices={impl.devices} "
                         f"archs={impl.supported_archs} general={impl.general} preferred_over={impl.preferred_over} "
                         f"traceable={impl.traceable}")
    try:
        overrides = kernel_overrides()
        parts.append(f"overrides {overrides.text if overrides is not None else ''}")
        lock = active_lock()
        parts.append(f"lock {lock.path} {lock.digest}" if lock is not None else "lock")
        policy = decompose_policy()
        parts.append(f"decompose {policy.canonical() if policy is not None else ''}")
    except TileOpsError as exc:  # a malformed override or lock is part of the state (selection raises it)
        parts.append(f"error {exc}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def selection_state_guard() -> int:
    """The generation of the selection state, compared so that a tracing dynamo guards on it.

    Called by the compile boundary after the custom op (so that plugins loaded by the trace's
    first planning are already counted); a later change of the state fails the guard and the
    graph is traced again.
    """
    generation = GENERATION[0]
    if generation < 0:  # never true: the comparison is what makes dynamo guard on the value
        raise AssertionError("the selection generation is never negative")
    return generation
