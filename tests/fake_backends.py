"""Fake kernel interfaces, implementations and backends for the selection, plugin and target tests.

Every test builds its own interface (a fresh class), so the installed backends never take
part in what a test selects; each test runs in a fresh registry (the ``fresh_registry``
fixture of the root ``conftest.py``), so nothing it registers outlives it.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from tileops_core.kernels import registry
from tileops_core.kernels.interface import CallSpec, KernelEntry, KernelInterface

__all__ = ["make_interface", "make_impl", "make_call", "add_backend"]

_serial = itertools.count()


def make_interface(op: str = "FakeOp", specialise_on: tuple[str, ...] = ("N",)) -> type[KernelInterface]:
    """A fresh interface class (unique name, so messages never mix tests up)."""
    name = f"FakeKernel{next(_serial)}"
    return type(name, (KernelInterface,), {"op": op, "specialise_on": specialise_on, "__module__": "fakes",
                                           "__qualname__": name})


def make_impl(interface: type[KernelInterface], name: str, *, devices: tuple[str, ...] = ("cpu",),
              archs: tuple[str, ...] = ("*",), general: bool = False, preferred_over: tuple[Any, ...] = (),
              refusal: Callable[[CallSpec], str | None] | None = None,
              build: Callable[[], Callable[..., Any]] | None = None,
              build_key: Callable[[CallSpec], Any] | None = None) -> type[KernelInterface]:
    """An implementation class of ``interface`` named ``fakes:<name>``."""
    attrs: dict[str, Any] = {
        "devices": devices, "supported_archs": archs, "general": general, "preferred_over": preferred_over,
        "__module__": "fakes", "__qualname__": name,
    }
    if refusal is not None:
        attrs["refusal"] = classmethod(lambda cls, call: refusal(call))
    make = build if build is not None else (lambda: (lambda *args: name))
    key = build_key if build_key is not None else (lambda call: (name,))
    attrs["entry_for"] = classmethod(lambda cls, call: KernelEntry(key(call), make))
    return type(name, (interface,), attrs)


def make_call(interface: type[KernelInterface], *, device_type: str = "cpu", arch: str = "cpu",
              dtype: str = "float32", **dims: Any) -> CallSpec:
    """The call spec an op of ``interface`` would build."""
    return CallSpec(interface.op, interface.__name__, device_type, arch, {"x": dtype}, dims, {})


def add_backend(name: str, *impls: type[KernelInterface], device_types: tuple[str, ...] = ("cpu",)) -> None:
    """Register a backend directly (no plugin) and its implementations."""
    registry.register_backend(registry.BackendInfo(name, device_types=device_types))
    for impl in impls:
        registry.register_kernel(impl, name)
