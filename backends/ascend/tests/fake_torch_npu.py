"""A stand-in ``torch_npu`` module: just the ``torch_npu.npu`` calls detection makes, and a count of them."""

from __future__ import annotations

import types


def fake_torch_npu(soc_name: str, vector_cores: int, cube_cores: int, count: int = 1, current: int = 0):
    """A module object to put in ``sys.modules["torch_npu"]``; ``module.calls`` counts ``get_device_name``."""
    module = types.ModuleType("torch_npu")
    module.calls = 0
    props = types.SimpleNamespace(vector_core_num=vector_cores, cube_core_num=cube_cores)

    def get_device_name(index):
        module.calls += 1
        return soc_name

    module.npu = types.SimpleNamespace(
        is_available=lambda: count > 0,
        device_count=lambda: count,
        current_device=lambda: current,
        get_device_name=get_device_name,
        get_device_properties=lambda index: props,
    )
    return module
