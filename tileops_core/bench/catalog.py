"""Which ops the tools see: the specs of the manifest (core and plugins) and their op classes.

The bench, the docs and ``tileops ops`` all start from the same list, so an op a plugin
ships appears in all three as soon as its plugin is loaded. Importing an op's module (the
spec's ``source.op``) is also what registers its workload generators and ``func``
rooflines, so every consumer goes through :func:`op_class` before instantiating a row.
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Iterable

from ..errors import TileOpsError, UsageError
from ..spec.manifest import load_manifest
from ..spec.nodes import OpSpec

if TYPE_CHECKING:
    from ..op.base import Op

__all__ = ["UsageError", "UnknownName", "benchable_specs", "import_op_module", "op_class", "resolve_specs",
           "unknown_op"]


class UnknownName(UsageError):
    """A name the user typed (op, workload label, device) that does not exist."""


def benchable_specs() -> dict[str, OpSpec]:
    """Specs that have an op class to run (``status: implemented`` with ``source.op``), by name."""
    return {name: spec for name, spec in sorted(load_manifest().items())
            if spec.status == "implemented" and spec.usable and spec.source.get("op")}


def import_op_module(spec: OpSpec) -> ModuleType | None:
    """Import the spec's op module (``source.op``), which registers its generators and rooflines."""
    module_name = spec.source.get("op")
    if not module_name:
        return None
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise TileOpsError(f"{spec.name}: cannot import its op module {module_name} (source.op): {exc}") from exc


def op_class(spec: OpSpec) -> type[Op]:
    """The op class of ``spec``, importing its module (which registers its generators)."""
    from ..op.base import Op  # torch: only once an op is actually wanted (the CLI's usage errors need none)

    module = import_op_module(spec)
    if module is None:
        raise TileOpsError(f"{spec.name}: the spec names no op module (source.op) ({spec.location.where()})")
    module_name = module.__name__
    cls = getattr(module, spec.name, None)
    if not (isinstance(cls, type) and issubclass(cls, Op)):
        raise TileOpsError(f"{spec.name}: module {module_name} (source.op) defines no class {spec.name}")
    return cls


def resolve_specs(names: Iterable[str]) -> list[OpSpec]:
    """The specs named (all benchable ones when ``names`` is empty); an unknown name is an error
    that suggests the closest names."""
    specs = benchable_specs()
    names = list(names)
    if not names:
        return list(specs.values())
    out = []
    for name in names:
        spec = specs.get(name)
        if spec is None:
            raise unknown_op(name, specs)
        if spec not in out:
            out.append(spec)
    return out


def unknown_op(name: str, known: Iterable[str]) -> UnknownName:
    """The error for an op name that is none of ``known``: it suggests the closest names, else lists them."""
    names = list(known)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f" (known: {', '.join(names)})"
    return UnknownName(f"unknown op {name!r}{hint}")
