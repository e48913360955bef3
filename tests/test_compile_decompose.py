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
            lambda x, weight, normalized_shape, eps: torch.nn.functional.rms_norm(x, normalized_shape, weight, eps))))})
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


def test_ops_that_stay_custom_ops_compile_cold_under_inductor_beside_each_other(monkeypatch):
    # Inductor refuses to fall back to an op that has a decomposition in its table, even one
    # that declines ("both a fallback and a decomp for same op"): with no policy, no op may be
    # in the table. (The H200's GPU test caught it; aot_eager never consults the table.)
    import torch._inductor.config as inductor_config

    from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp
    from tileops_core.ops.normalization import RMSNormFwdOp

    monkeypatch.delenv("TILEOPS_COMPILE_DECOMPOSE", raising=False)
    rgdr, norm = RecurrentGatedDeltaRuleFwdOp(check_contents=False), RMSNormFwdOp([16], eps=1e-6)

    def block(q, k, v, beta, state, lengths, slots, w):
        return norm(rgdr(q, k, v, beta, state, lengths, slots), w)

    T, g = 3, torch.Generator().manual_seed(7)
    q, k = (torch.nn.functional.normalize(torch.randn(T, 2, 16, generator=g), dim=-1) for _ in range(2))
    args = [q, k, torch.randn(T, 4, 16, generator=g), torch.rand(T, 4, generator=g), torch.randn(5, 4, 16, 16),
            torch.ones(T, dtype=torch.int32), torch.arange(T, dtype=torch.int32), torch.randn(16)]
    eager_state = args[4].clone()
    want = block(*args[:4], eager_state, *args[5:])
    torch._dynamo.reset()
    # Cold: lowered now, not read from disk. (The config's own patch: monkeypatch's undo deletes
    # the attribute from torch's config module, and every later Inductor compile fails.)
    with inductor_config.patch(fx_graph_cache=False):
        got = torch.compile(block, fullgraph=True)(*args)
    torch.testing.assert_close(got, want)
    assert torch.equal(args[4], eager_state)
