"""The entry point of the example plugin (``[project.entry-points.tileops] example = ...``).

TileOPs calls :func:`tileops_register` once, when it loads its plugins. Everything declared
here is applied as one unit: if any step fails (a missing spec directory, a kernel that
contradicts another backend's, a core of another major), none of it stays registered and
``tileops backends`` shows why.
"""

from __future__ import annotations

from pathlib import Path

from tileops_core.plugins import Registrar, hookimpl

from . import BUILT_FOR_CORE_MAJOR, __version__

__all__ = ["tileops_register"]


@hookimpl
def tileops_register(registrar: Registrar) -> None:
    """Describe the ``example`` backend; contribute its specs, op module, kernels and a hardware profile."""
    from .kernels import KERNELS  # the interfaces only; the op class is imported by TileOPs below

    registrar.backend("example", device_types=("cpu",), core_major=BUILT_FOR_CORE_MAJOR, version=__version__,
                      description="worked third-party example: a narrow fast RMSNorm and the SquaredReluFwdOp op")
    here = Path(__file__).resolve().parent
    registrar.manifest_dir(here / "manifest")
    registrar.ops("tileops_example.ops")  # imported after the spec directory above is visible
    registrar.kernels(*KERNELS)
    registrar.hardware_profile(here / "profiles" / "example-epyc-9654.yaml")
