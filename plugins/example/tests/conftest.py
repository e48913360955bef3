"""The example plugin's tests: its source tree importable.

The tests load the plugin in-process through ``register_plugin`` from the source tree; its
wheel is installed and used in a fresh virtual environment by ``tests/test_packaging.py``.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

EXAMPLE_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(EXAMPLE_ROOT) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_ROOT))


@pytest.fixture
def isolated_plugins(fresh_registry):
    """The plugin API, with the installed plugins loaded into the test's fresh registry."""
    from tileops_core import plugins

    plugins.load_plugins()
    return plugins


@pytest.fixture
def rng() -> torch.Generator:
    """A generator seeded from entropy: every run draws fresh data."""
    g = torch.Generator()
    g.seed()
    return g
