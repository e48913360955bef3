"""Fixtures shared by the core tests: in-test kernels under a fake backend, extra manifest files."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tileops_core.kernels import registry
from tileops_core.kernels.interface import KernelEntry, KernelInterface
from tileops_core.spec import manifest as manifest_module
from tileops_core.spec.manifest import ManifestSource


class FakeBackend:
    """A backend named ``fake`` whose kernels a test defines (see the ``fake_backend`` fixture)."""

    name = "fake"

    def register(self, *impls: type[KernelInterface]) -> None:
        """Register implementation classes written by the test."""
        for impl in impls:
            registry.register_kernel(impl, self.name)

    def kernel(self, interface: type[KernelInterface], fn: Callable[..., Any], **declarations: Any) -> type:
        """Register ``fn`` as the general implementation of ``interface`` on every device (or as declared)."""
        attrs: dict[str, Any] = {"devices": ("*",), "general": True, **declarations,
                                 "entry_for": classmethod(lambda cls, call: KernelEntry((cls.__name__,), lambda: fn))}
        impl = type(f"Test{interface.__name__}", (interface,), attrs)
        self.register(impl)
        return impl


@pytest.fixture
def fake_backend(fresh_registry: registry.Registry, monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    """In-test kernels under a fake backend, in the test's fresh registry.

    Installed plugins are not loaded during the test (what a test selects is only what it
    registered); the registry goes away with the test.
    """
    monkeypatch.setenv("TILEOPS_DISABLE_PLUGIN_AUTOLOAD", "1")
    registry.register_backend(registry.BackendInfo(FakeBackend.name, description="kernels defined in a test"))
    return FakeBackend()


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
