"""The example plugin: discovered, applied whole, and selected where it applies (in-process)."""

from __future__ import annotations

import torch

from tileops_core.cli.cmd_explain import explain
from tileops_core.kernels import registry


def _register(isolated_plugins):
    import tileops_example.plugin

    return isolated_plugins.register_plugin(tileops_example.plugin, "example", distribution="tileops-example",
                                            version="0.1.0")


def test_plugin_contributes_backend_spec_op_and_kernels(isolated_plugins):
    record = _register(isolated_plugins)
    assert record.status == "loaded", record.reason
    assert record.backend == "example"
    assert record.ops == ("SquaredReluFwdOp",)
    info = registry.backends()["example"]
    assert sorted(k.__name__ for k in info.kernels) == ["ExampleRMSNormLastAxis", "RefSquaredRelu"]
    assert info.distribution == "tileops-example"


def test_new_op_binds_to_the_plugin_spec_and_matches_its_definition(isolated_plugins, rng):
    _register(isolated_plugins)
    from tileops_example.ops import SquaredReluFwdOp

    assert SquaredReluFwdOp.op_spec().file == "example:manifest/squared_relu.yaml"
    x = torch.randn(3, 5, 7, generator=rng)
    torch.testing.assert_close(SquaredReluFwdOp()(x), torch.relu(x) ** 2)


def test_new_op_in_half_precision_rounds_once_from_float32(isolated_plugins, rng):
    _register(isolated_plugins)
    from tileops_example.ops import SquaredReluFwdOp

    x = torch.randn(64, 33, generator=rng).to(torch.bfloat16)
    y = SquaredReluFwdOp()(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, (torch.relu(x.float()) ** 2).to(torch.bfloat16), rtol=0, atol=0)


def test_rmsnorm_on_one_float32_axis_selects_the_example_kernel(isolated_plugins, rng):
    _register(isolated_plugins)
    data = explain("RMSNormFwdOp", workload="small-fp32-weight")
    (selection,) = data["interfaces"]
    assert selection["chosen"] == "tileops_example.kernels:ExampleRMSNormLastAxis"
    from tileops_core.ops.normalization import RMSNormFwdOp

    x, w = torch.randn(6, 96, generator=rng), torch.randn(96, generator=rng)
    torch.testing.assert_close(RMSNormFwdOp([96], eps=1e-6)(x, w),
                               torch.nn.functional.rms_norm(x, [96], w, 1e-6))


def test_rmsnorm_outside_the_narrow_region_falls_to_the_reference_with_the_refusal_shown(isolated_plugins):
    _register(isolated_plugins)
    data = explain("RMSNormFwdOp", workload="llama3-8b-prefill-2k", dtype="bfloat16")
    (selection,) = data["interfaces"]
    assert selection["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
    reasons = {c["impl"]: c["reason"] for c in selection["candidates"]}
    assert reasons["tileops_example.kernels:ExampleRMSNormLastAxis"] == (
        "refused: x is bfloat16: this kernel computes in the input dtype, so it serves float32 only")


def test_plugin_rolled_back_leaves_core_ops_on_the_reference(isolated_plugins, rng):
    _register(isolated_plugins)
    isolated_plugins.unregister_plugin("example")
    assert "example" not in registry.backends()
    data = explain("RMSNormFwdOp")
    assert data["interfaces"][0]["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"


# Installed from its wheel on top of a wheel-installed tileops, discovered, selected and uninstalled:
# tests/test_packaging.py::test_a_third_party_plugin_installs_on_top_is_selected_and_uninstalls_cleanly.
