"""The example plugin's tests: its source tree importable, and the ``install`` marker.

The in-process tests load the plugin through ``register_plugin`` from the source tree; the
``install`` test builds the wheel and installs it into a fresh virtual environment
(about 15 s; deselect with ``-m 'not install'``).
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

EXAMPLE_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(EXAMPLE_ROOT) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_ROOT))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "install: builds a wheel and installs it into a fresh virtual environment")


@pytest.fixture
def isolated_plugins():
    """Installed plugins loaded, then everything registered by the test rolled back."""
    from tileops_core import plugins

    plugins.load_plugins()
    snap = plugins.snapshot()
    try:
        yield plugins
    finally:
        plugins.restore(snap)


@pytest.fixture
def rng() -> torch.Generator:
    """A generator seeded from entropy: every run draws fresh data."""
    g = torch.Generator()
    g.seed()
    return g
