"""Fixtures shared by the core tests: in-test kernels under a fake backend, extra manifest files."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tileops_core.kernels import registry
from tileops_core.kernels.interface import KernelInterface
from tileops_core.kernels.select import clear_caches
from tileops_core.spec import manifest as manifest_module
from tileops_core.spec.manifest import ManifestSource


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``register(*impls)`` registers kernel classes under a backend named ``fake``.

    Installed plugins are not loaded during the test (what a test selects is only what it
    registered); the registry and the selection caches are restored afterwards.
    """
    monkeypatch.setenv("TILEOPS_DISABLE_PLUGIN_AUTOLOAD", "1")
    snap = registry.snapshot()
    registry.register_backend(registry.BackendInfo("fake", description="kernels defined in a test"))
    clear_caches()

    def register(*impls: type[KernelInterface]) -> None:
        for impl in impls:
            registry.register_kernel(impl, "fake")

    try:
        yield register
    finally:
        registry.restore(snap)
        clear_caches()


@pytest.fixture
def extra_manifest(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``add(yaml_text, file="extra.yaml", label="extra")`` adds a manifest file for the test.

    The file is shown as ``<label>/<file>`` in locations and merged with the installed
    manifest (after it); the previous source provider is put back afterwards.
    """
    previous = manifest_module._source_provider
    sources: dict[str, ManifestSource] = {}

    def add(text: str, file: str = "extra.yaml", label: str = "extra") -> Path:
        directory = tmp_path / label
        directory.mkdir(exist_ok=True)
        path = directory / file
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        sources[label] = ManifestSource(label, directory)
        manifest_module.set_source_provider(lambda: [*(previous() if previous else []), *sources.values()])
        return path

    try:
        yield add
    finally:
        manifest_module.set_source_provider(previous)
