"""Targets: which device class, arch and backend a process, a scope or an op asks for.

A target is written ``device[:arch][@backend]``, each part optional: ``"cuda"``,
``"cuda:sm_90"``, ``"cpu@cpu_ref"``, ``"@example"``. Layers, each visible and each
overriding the next: an op's ``target=`` > the innermost ``with use_target(...)`` >
:func:`set_target` > the ``TILEOPS_TARGET`` environment variable > none (automatic: the
selection rule alone decides, and a fallback to the reference on an accelerator warns once).
An explicit target that cannot serve a call is an error, never a silent fallback.
"""

from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import TileOpsError

__all__ = [
    "Target", "parse_target", "set_target", "use_target", "current_target", "active_target_source",
    "refresh_env_target", "target_layers", "default_device",
]


@dataclass(frozen=True)
class Target:
    """A requested device type, arch and/or backend (None: no constraint)."""

    device_type: str | None = None
    arch: str | None = None
    backend: str | None = None
    source: str = "explicit"

    def __str__(self) -> str:
        text = self.device_type or ""
        if self.arch:
            text += f":{self.arch}"
        if self.backend:
            text += f"@{self.backend}"
        return text or "<any>"

    @property
    def process_wide(self) -> bool:
        """Set for the whole process (``set_target()``, ``TILEOPS_TARGET``): a per-op pin outranks it."""
        return self.source in ("set_target()", "TILEOPS_TARGET")

    def allows(self, device_type: str, arch: str, backend: str) -> str | None:
        """Why an implementation (on ``device_type``/``arch``, from ``backend``) is outside the target."""
        if self.backend is not None and backend != self.backend:
            return f"target {self} asks for backend {self.backend!r}, this is {backend!r}"
        if self.device_type is not None and device_type != self.device_type:
            return f"target {self} asks for device {self.device_type!r}, the call is on {device_type!r}"
        if self.arch is not None and arch != self.arch:
            return f"target {self} asks for arch {self.arch!r}, the device is {arch!r}"
        return None


def parse_target(text: str | Target | None, source: str = "explicit") -> Target | None:
    """Parse ``device[:arch][@backend]`` (None or "" means no target); a ``torch.device`` names its device
    type (its index is no arch: found in review, a device raised a bare AttributeError)."""
    if text is None or isinstance(text, Target):
        return text
    if type(text).__name__ == "device" and hasattr(text, "type"):  # torch.device, without importing torch here
        text = text.type
    if not isinstance(text, str):
        raise TileOpsError(f"{source} target {text!r}: expected 'device[:arch][@backend]' or a torch.device, "
                           f"not {type(text).__name__}")
    text = text.strip()
    if not text:
        return None
    body, _, backend = text.partition("@")
    device, _, arch = body.partition(":")
    for part in (device, arch, backend):
        if part and not all(c.isalnum() or c in "_-." for c in part):
            raise TileOpsError(f"invalid target {text!r}: write device[:arch][@backend], e.g. 'cuda:sm_90' or "
                               "'cpu@cpu_ref'")
    if not (device or arch or backend):
        raise TileOpsError(f"invalid target {text!r}")
    return Target(device or None, arch or None, backend or None, source)


_scoped: ContextVar[Target | None] = ContextVar("tileops_target", default=None)
_process: list[Target | None] = [None]
_env_target: list[Target | TileOpsError | None] = [None]
#: The process-wide layers resolved: set_target()'s target, else TILEOPS_TARGET's (or the error
#: reading it). Kept up to date by their setters, so that an op call reads one slot, not three.
_process_wide: list[Target | TileOpsError | None] = [None]


def _resolve_process_wide() -> None:
    _process_wide[0] = _process[0] if _process[0] is not None else _env_target[0]


def set_target(target: str | Target | None) -> None:
    """Pin (or with None, unpin) the target for the whole process."""
    _process[0] = parse_target(target, "set_target()")
    _resolve_process_wide()


@contextlib.contextmanager
def use_target(target: str | Target | None) -> Iterator[Target | None]:
    """Pin a target within a ``with`` block (per thread / async task)."""
    token = _scoped.set(parse_target(target, "use_target()"))
    try:
        yield _scoped.get()
    finally:
        _scoped.reset(token)


def current_target(op_target: Target | None = None) -> Target | None:
    """The effective target: op's > scoped > process > TILEOPS_TARGET > None."""
    if op_target is not None:
        return op_target
    target = _scoped.get() or _process_wide[0]  # a Target is always true
    if isinstance(target, TileOpsError):
        raise target
    return target


def refresh_env_target() -> None:
    """Read ``TILEOPS_TARGET`` again (it is read once, when this module is imported).

    A malformed value does not break the import; it is raised at the first selection.
    """
    env = os.environ.get("TILEOPS_TARGET")
    try:
        _env_target[0] = parse_target(env, "TILEOPS_TARGET") if env else None
    except TileOpsError as exc:
        _env_target[0] = TileOpsError(f"TILEOPS_TARGET: {exc}")
    _resolve_process_wide()


refresh_env_target()


def active_target_source(op_target: Target | None = None) -> str:
    """Which layer the effective target comes from (for ``tileops explain``)."""
    target = current_target(op_target)
    if target is None:
        return "automatic (no target set)"
    return f"{target} from {'the op' if op_target is not None else target.source}"


def target_layers(op_target: Target | None = None) -> list[tuple[str, Target | str | None]]:
    """Every layer, highest precedence first, with what it holds (None: not set).

    ``tileops explain`` prints all of them so that an override is never invisible; a
    malformed ``TILEOPS_TARGET`` shows as its error text.
    """
    env_target = _env_target[0]
    return [("op target=", op_target), ("use_target()", _scoped.get()), ("set_target()", _process[0]),
            ("TILEOPS_TARGET", str(env_target) if isinstance(env_target, TileOpsError) else env_target)]


def default_device(target: Target | None = None) -> Any:
    """The device a call lands on when no tensor decides it: the target's class, else detection.

    A target naming a device type picks that type's current device (index 0 when it is not
    the process accelerator); with no device type, the process accelerator's current device
    (``torch.accelerator``), else the CPU.
    """
    import torch  # this module stays importable without torch

    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if target is not None and target.device_type is not None:
        if target.device_type == "cpu":
            return torch.device("cpu")
        if acc is not None and acc.type == target.device_type:
            return torch.device(acc.type, torch.accelerator.current_device_index())
        try:
            return torch.device(target.device_type, 0)
        except RuntimeError:
            raise TileOpsError(f"target {target} ({target.source}) names device type {target.device_type!r}, which "
                               "this torch does not know: a typo, or its backend's torch extension (e.g. torch_npu) "
                               "is not installed") from None
    if acc is not None:
        return torch.device(acc.type, torch.accelerator.current_device_index())
    return torch.device("cpu")
