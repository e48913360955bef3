"""Plugin spec directories declared in package metadata, found without importing any plugin.

A plugin contributes spec directories from its hook (``registrar.manifest_dir``), and running
the hook means importing the plugin, which usually imports torch. The spec lint needs only
the YAML, so a plugin may also declare its spec directory as an entry point of the group
``tileops.manifests`` whose value is the dotted path of a package directory
(``example = "tileops_example.manifest"``). The directory is located through the import
system's finders (``importlib.util.find_spec`` of the top-level package, which executes
nothing) and the remaining path parts; no module of the plugin is imported.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

from ..errors import Location, SpecError
from .manifest import ManifestSource

__all__ = ["MANIFEST_ENTRY_POINT_GROUP", "declared_sources"]

#: The entry-point group naming plugin spec directories (the value: a dotted package path).
MANIFEST_ENTRY_POINT_GROUP = "tileops.manifests"


def declared_sources() -> tuple[list[ManifestSource], list[SpecError]]:
    """Spec directories declared under :data:`MANIFEST_ENTRY_POINT_GROUP`, and those that cannot be found."""
    sources: list[ManifestSource] = []
    problems: list[SpecError] = []
    for ep in sorted(metadata.entry_points(group=MANIFEST_ENTRY_POINT_GROUP), key=lambda e: e.name):
        directory = _package_dir(ep.value)
        if directory is None:
            dist = getattr(ep, "dist", None)
            owner = f" (distribution {dist.name} {dist.version})" if dist is not None else ""
            problems.append(SpecError(f"entry point {MANIFEST_ENTRY_POINT_GROUP} {ep.name} = {ep.value!r}{owner} names "
                                      "no package directory; its value is the dotted path of a directory of YAML "
                                      "specs inside an installed package", Location(f"{ep.name}:{ep.value}"),
                                      rule="L0.file"))
            continue
        sources.append(ManifestSource(f"{ep.name}:{directory.name}", directory))
    return sources, problems


def _package_dir(dotted: str) -> Path | None:
    """The directory of ``top.sub.dir``: ``top`` located by its finder (not imported), then the parts."""
    top, *rest = dotted.strip().split(".")
    if not top.isidentifier() or not all(p.isidentifier() for p in rest):
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for base in locations:
        directory = Path(base).joinpath(*rest)
        if directory.is_dir():
            return directory.resolve()
    return None
