"""Fake distributions for plugin tests: real ``.dist-info`` folders on a temporary ``sys.path``
entry, so discovery, distribution names and versions go through ``importlib.metadata`` exactly
as for an installed wheel."""

from __future__ import annotations

import itertools
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tileops_core import plugins

_serial = itertools.count()


@dataclass(frozen=True)
class FakeDevice:
    """A device of a type torch does not know (arch detection only reads ``.type``)."""

    type: str
    index: int = 0


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path to install fake distributions into; their modules are forgotten after."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    for var in (plugins.ENV_ONLY, plugins.ENV_DISABLE, plugins.ENV_NO_AUTOLOAD):
        monkeypatch.delenv(var, raising=False)
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        if name.startswith("fakeplug_"):
            del sys.modules[name]


def install(site: Path, source: str, *, dist: str = "tileops-fakeplug", version: str = "1.2.3",
            entry: str = "fakeplug", files: dict[str, str] | None = None) -> str:
    """Write a distribution whose entry point ``entry`` (group tileops) is a module with ``source``."""
    module = f"fakeplug_{next(_serial)}"
    package = site / module
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(source))
    for name, text in (files or {}).items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(textwrap.dedent(text))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[tileops]\n{entry} = {module}\n")
    return module


def reload_all() -> dict[str, plugins.PluginRecord]:
    plugins.reset_plugins()
    return {r.name: r for r in plugins.load_plugins()}


def install_interrupted_once(site: Path, tmp_path: Path) -> None:
    """Install plugin ``slowpoke`` (distribution ``tileops-slowpoke``), whose first import is
    interrupted by Ctrl-C (a ``KeyboardInterrupt``) and whose next import loads."""
    from tileops_core._version import CORE_MAJOR

    flag = tmp_path / "interrupt-once"
    flag.write_text("")
    install(site, f"""
        import pathlib
        flag = pathlib.Path({str(flag)!r})
        if flag.exists():
            flag.unlink()
            raise KeyboardInterrupt  # Ctrl-C while this plugin imports
        def tileops_register(registrar):
            registrar.backend("slowpoke", device_types=("cpu",), core_major={CORE_MAJOR})
    """, dist="tileops-slowpoke", entry="slowpoke")
