"""The decomposition policy: a named op whose serving kernel is traceable is inlined into the compiled
graph by a backend that decomposes; anything else stays the opaque custom op."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.decomposition import select_decomp_table

from tileops_core import TileOpsError
from tileops_core.kernels.compile_policy import parse_decompose_policy, set_decompose_policy
from tileops_core.kernels.interface import KernelEntry
from tileops_core.kernels.registry import BackendInfo, register_backend
from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel

pytestmark = pytest.mark.usefixtures("fresh_registry")
CUSTOM_OP = "tileops.rms_norm_fwd_op"


@pytest.fixture(autouse=True)
def no_policy():
    set_decompose_policy(None)
    yield
    set_decompose_policy(None)


def decomposing_backend(graphs):
    """A backend that decomposes as Inductor does (its table, read when the graph arrives) and keeps
    each forward graph's text."""
    def keep(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm

    def backend(gm, example_inputs):
        return aot_autograd(fw_compiler=keep, decompositions=select_decomp_table())(gm, example_inputs)
    return backend


def compile_and_trace(op, x):
    """Compile ``op`` with a backend that applies Inductor's decompositions; (result, forward graphs)."""
    graphs: list[str] = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t), fullgraph=True, backend=decomposing_backend(graphs))
    return compiled(x), graphs


def test_a_named_op_served_by_a_traceable_kernel_is_inlined_and_matches_eager():
    set_decompose_policy("RMSNormFwdOp")
    op, x = RMSNormFwdOp([32]), torch.randn(4, 32)
    got, graphs = compile_and_trace(op, x)
    assert CUSTOM_OP not in graphs[-1] and "aten.rsqrt" in graphs[-1]
    torch.testing.assert_close(got, torch.nn.functional.rms_norm(x, [32]))


def test_an_op_the_policy_does_not_name_stays_the_custom_op():
    set_decompose_policy("auto,-RMSNormFwdOp")
    got, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


def test_without_a_policy_every_op_stays_the_custom_op():
    _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


def test_a_call_served_by_a_kernel_that_is_not_traceable_stays_the_custom_op():
    register_backend(BackendInfo("opaque", device_types=("cpu",)))
    fast = type("OpaqueRMSNorm", (RMSNormKernel,), {
        "devices": ("cpu",), "entry_for": classmethod(lambda cls, call: KernelEntry(("opaque",), lambda: (
            lambda x, w, shape, eps: torch.nn.functional.rms_norm(x, shape, w, eps))))})
    from tileops_core.kernels.registry import register_kernel
    from tileops_core.plugins import ensure_plugins_loaded

    ensure_plugins_loaded()
    register_kernel(fast, "opaque")
    set_decompose_policy("auto")
    got, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


def test_changing_the_policy_traces_the_call_again_and_flips_its_path():
    op, x = RMSNormFwdOp([32]), torch.randn(4, 32)
    graphs: list[str] = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t), fullgraph=True, backend=decomposing_backend(graphs))
    compiled(x)
    set_decompose_policy("RMSNormFwdOp")
    compiled(x)
    assert len(graphs) == 2 and CUSTOM_OP in graphs[0] and CUSTOM_OP not in graphs[1]


def test_a_malformed_policy_names_the_forms():
    with pytest.raises(TileOpsError, match="X: 'RMS Norm' is not an op name, '-Op' or 'auto'"):
        parse_decompose_policy("RMS Norm", "X")


def test_explain_says_which_path_a_compiled_call_takes(capsys):
    import json

    from tileops_core.cli.main import main

    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled_path"] == (
        "the opaque custom op torch.ops.tileops.rms_norm_fwd_op (its kernel chosen at run time): the decomposition "
        "policy does not name RMSNormFwdOp (TILEOPS_COMPILE_DECOMPOSE unset)")
    set_decompose_policy("RMSNormFwdOp")
    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled_path"].startswith(
        "decomposed into its traceable kernel tileops_cpu_ref.kernels:RefRMSNorm under backends that decompose")
