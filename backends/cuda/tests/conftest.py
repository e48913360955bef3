"""Shared fixtures: make the sibling packages importable and gate GPU tests.

GPU tests skip cleanly (not fail) where torch has no CUDA device or tilelang is absent,
which is every CI machine; on the H200 they run against the float64 reference.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

# Under pytest-xdist each worker compiles into its own TileLang cache directory, so two
# workers never write the same cache entry at once.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TILELANG_CACHE_DIR"):
    os.environ["TILELANG_CACHE_DIR"] = os.path.join(os.environ["TILELANG_CACHE_DIR"], os.environ["PYTEST_XDIST_WORKER"])

_BACKENDS = pathlib.Path(__file__).resolve().parents[2]
for _p in (_BACKENDS / "cuda", _BACKENDS / "cpu_ref"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


@pytest.fixture(scope="session")
def cuda_device():
    """The CUDA device, or a skip naming what is missing."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tilelang")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the TileLang kernels run only on NVIDIA GPUs")
    major, minor = torch.cuda.get_device_capability()
    return torch.device("cuda"), f"sm_{major}{minor}"


@pytest.fixture(scope="session")
def prebuild_all() -> bool:
    """Whether a module's prebuild fixture compiles every kernel its tests use, up front: in one process,
    yes (nvcc runs in parallel, ahead of the first test); under pytest-xdist, no. There each worker would
    compile every key of the module at once, beside fifteen others doing the same into their own caches
    (twenty-eighth session: both attention files under ``-n 16``, 441 tests, none finished in 262 s),
    while on first use a worker compiles only what its own tests need."""
    return not os.environ.get("PYTEST_XDIST_WORKER")


@pytest.fixture
def gen(cuda_device):
    """A CUDA generator seeded from entropy: every test draws fresh random data."""
    import torch

    g = torch.Generator(device=cuda_device[0])
    g.seed()
    return g
