"""Settings for every test directory: metadata contents are always checked in the test suite."""

import os

# RGDR.md: the checks that read tensor contents are off by default and always on in tests.
os.environ.setdefault("TILEOPS_CHECK_CONTENTS", "1")


import pytest  # noqa: E402  (after the environment above, which must be set before anything imports the core)


@pytest.fixture
def fresh_registry():
    """The one isolation seam of every test directory: a fresh, empty registry is active for the test.

    Everything the test registers, loads (installed plugins load into it on first use, as in a
    fresh process) or caches (selections, builds, warnings given) lives and dies with it; the
    registry active before comes back afterwards, untouched.
    """
    from tileops_core.kernels.registry import Registry, use_registry

    with use_registry(Registry()) as registry:
        yield registry
