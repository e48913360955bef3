"""Build the sdist and the wheel of every TileOPs distribution, the way a release does.

    python scripts/build_dists.py [--outdir dist]

The distributions are the core (the repository root) and every ``backends/*`` and
``plugins/*`` folder that has a ``pyproject.toml`` (so a new backend is built as soon as it
has one). Each is built with ``python -m build --no-isolation``: the sdist first, then the
wheel from the unpacked sdist, so a wheel can only contain what the sdist shipped (the
VERSION symlinks of the backends become regular files there). ``--no-isolation`` because
the GPU machine builds offline with the setuptools it has; the build-system requirements
must therefore already be installed (``pip install -e .[dev]`` brings them).

The build runs on a copy of the tree, so the checkout gets no ``build/`` or ``*.egg-info``
from it and a build cannot pick up stale outputs lying in the checkout.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Never part of a distribution's source: VCS and tool folders (every dot entry), build outputs.
_NOT_SOURCE = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__")


@dataclass(frozen=True)
class Built:
    """One distribution's artefacts."""

    source: Path  # its folder in the checkout
    sdist: Path
    wheel: Path


def distribution_dirs(root: Path = ROOT) -> list[Path]:
    """The root, then every backend and plugin folder that has a pyproject.toml, sorted."""
    found = [p.parent for pattern in ("backends/*/pyproject.toml", "plugins/*/pyproject.toml")
             for p in root.glob(pattern)]
    return [root, *sorted(found)]


def build_all(outdir: Path, root: Path = ROOT) -> dict[Path, Built]:
    """Build every distribution into ``outdir``; keyed by its folder in ``root``.

    Raises ``RuntimeError`` with the build's output when a build fails.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    built: dict[Path, Built] = {}
    with tempfile.TemporaryDirectory(prefix="tileops-build-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(root, copy, symlinks=True, ignore=_NOT_SOURCE)
        for source in distribution_dirs(root):
            stage = Path(tmp) / "out" / (source.relative_to(root).as_posix().replace("/", "-") or "root")
            proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(stage),
                                   str(copy / source.relative_to(root))], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"building {source} failed:\n{proc.stdout}\n{proc.stderr}")
            (sdist,) = stage.glob("*.tar.gz")
            (wheel,) = stage.glob("*.whl")
            built[source] = Built(source, Path(shutil.move(sdist, outdir / sdist.name)),
                                  Path(shutil.move(wheel, outdir / wheel.name)))
    return built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist", help="where the sdists and wheels go")
    args = parser.parse_args()
    for b in build_all(args.outdir.resolve()).values():
        print(f"{b.source.relative_to(ROOT).as_posix() or '.'}: {b.sdist.name}, {b.wheel.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
