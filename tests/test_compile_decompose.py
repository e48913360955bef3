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


@pytest.mark.parametrize("text", ["RMSNormFwOp", "auto,-RMSNormFwOp"])
def test_a_policy_naming_no_op_of_the_manifest_is_refused_with_the_close_name(text):
    """A typo would name no op, silently (found in review; TILEOPS_KERNELS refuses its typos too)."""
    set_decompose_policy(text)
    with pytest.raises(Exception, match=r"names no op of the manifest: RMSNormFwOp \(did you mean RMSNormFwdOp\?\)"):
        compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))


def test_without_a_policy_every_op_stays_the_custom_op():
    _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


@pytest.fixture
def opaque_kernel():
    """A specialised CPU RMSNorm kernel that is not traceable (as a TileLang kernel on a GPU): it
    beats the general, traceable reference in eager calls, and counts the calls it serves."""
    from tileops_core.kernels.registry import register_kernel
    from tileops_core.plugins import ensure_plugins_loaded

    served = []

    def rms_norm(x, weight, normalized_shape, eps):
        served.append(x.shape)
        return torch.nn.functional.rms_norm(x, normalized_shape, weight, eps)

    ensure_plugins_loaded()
    register_backend(BackendInfo("opaque", device_types=("cpu",)))
    kernel = type("OpaqueRMSNorm", (RMSNormKernel,), {
        "devices": ("cpu",), "entry_for": classmethod(lambda cls, call: KernelEntry(("opaque",), lambda: rms_norm))})
    register_kernel(kernel, "opaque")
    kernel.served = served
    return kernel


def test_a_named_op_decomposes_into_the_traceable_kernel_where_a_specialised_one_serves_eagerly(opaque_kernel):
    set_decompose_policy("RMSNormFwdOp")
    op, x = RMSNormFwdOp([32]), torch.randn(4, 32)
    want = op(x)
    assert opaque_kernel.served == [(4, 32)]  # eager: the specialised kernel
    got, graphs = compile_and_trace(op, x)
    assert CUSTOM_OP not in graphs[-1] and "aten.rsqrt" in graphs[-1]  # compiled: the reference's torch code
    assert opaque_kernel.served == [(4, 32)]
    torch.testing.assert_close(got, want)


def test_the_decomposition_selects_among_traceable_kernels_by_the_one_rule(opaque_kernel):
    from tileops_core.kernels.select import NOT_TRACEABLE, select_kernel

    call = RMSNormFwdOp([32]).plan_for(torch.randn(4, 32)).call_specs[RMSNormKernel]
    eager, traced = select_kernel(RMSNormKernel, call), select_kernel(RMSNormKernel, call, traceable=True)
    assert eager.chosen is opaque_kernel
    assert traced.chosen.qualname() == "tileops_cpu_ref.kernels:RefRMSNorm"
    assert [c.reason for c in traced.candidates if c.impl is opaque_kernel] == [NOT_TRACEABLE]


def test_a_named_op_no_traceable_kernel_can_serve_stays_the_custom_op_and_warns_once(opaque_kernel):
    from tileops_core.kernels.overrides import use_kernel_overrides

    set_decompose_policy("RMSNormFwdOp")
    with use_kernel_overrides("RMSNormFwdOp=-RefRMSNorm"), pytest.warns(RuntimeWarning) as caught:
        got, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
        compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]
    texts = [str(w.message) for w in caught if "decomposition policy" in str(w.message)]
    assert texts == ["RMSNormFwdOp: the decomposition policy (RMSNormFwdOp (from set_decompose_policy())) names it, "
                     "and no traceable kernel can serve RMSNormKernel for this call, so the compiled call stays the "
                     "custom op; `tileops explain RMSNormFwdOp` shows why each kernel dropped out"]


def test_an_op_named_through_auto_that_no_traceable_kernel_serves_stays_the_custom_op_quietly(opaque_kernel):
    import warnings

    from tileops_core.kernels.overrides import use_kernel_overrides

    set_decompose_policy("auto")
    with use_kernel_overrides("RMSNormFwdOp=-RefRMSNorm"), warnings.catch_warnings():
        warnings.simplefilter("error")  # auto names ops whatever their kernels: no warning
        _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


def test_a_pin_on_a_kernel_that_is_not_traceable_keeps_the_named_op_the_custom_op(opaque_kernel):
    from tileops_core.kernels.overrides import use_kernel_overrides

    set_decompose_policy("auto")
    with use_kernel_overrides("RMSNormFwdOp=opaque"):
        _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
    assert CUSTOM_OP in graphs[-1]


def test_the_measured_policy_names_the_documented_ops_and_none_names_no_op():
    from tileops_core.kernels.compile_policy import MEASURED

    measured = parse_decompose_policy("measured", "X")
    assert {"RMSNormFwdOp", "SiluAndMulFwdOp"} <= MEASURED
    assert all(measured.wants(op) for op in MEASURED) and not measured.wants("GemmFwdOp")
    assert not parse_decompose_policy("measured,-SiluAndMulFwdOp", "X").wants("SiluAndMulFwdOp")
    assert parse_decompose_policy("measured,GemmFwdOp", "X").wants("GemmFwdOp")
    none = parse_decompose_policy("none", "X")
    assert not none.wants("RMSNormFwdOp") and none.canonical() == "none"
    with pytest.raises(TileOpsError, match="X: 'none' \\(no op decomposes\\) stands alone, got 'none,RMSNormFwdOp'"):
        parse_decompose_policy("none,RMSNormFwdOp", "X")


def test_none_set_by_the_program_overrides_a_policy_from_the_environment(monkeypatch):
    from tileops_core.kernels.compile_policy import refresh_env_decompose_policy, use_decompose_policy

    monkeypatch.setenv("TILEOPS_COMPILE_DECOMPOSE", "RMSNormFwdOp")
    refresh_env_decompose_policy()
    try:
        with use_decompose_policy("none"):
            _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))
        assert CUSTOM_OP in graphs[-1]
        _, graphs = compile_and_trace(RMSNormFwdOp([32]), torch.randn(4, 32))  # the environment's again
        assert CUSTOM_OP not in graphs[-1]
    finally:
        monkeypatch.delenv("TILEOPS_COMPILE_DECOMPOSE")
        refresh_env_decompose_policy()


@pytest.mark.parametrize("specialised", [False, True], ids=["reference-serves-eagerly", "specialised-serves-eagerly"])
def test_changing_the_policy_traces_the_call_again_and_flips_its_path(specialised, request):
    if specialised:
        request.getfixturevalue("opaque_kernel")
    op, x = RMSNormFwdOp([32]), torch.randn(4, 32)
    graphs: list[str] = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t), fullgraph=True, backend=decomposing_backend(graphs))
    compiled(x)
    set_decompose_policy("RMSNormFwdOp")
    compiled(x)
    set_decompose_policy(None)
    compiled(x)
    assert [CUSTOM_OP in g for g in graphs] == [True, False, True]


def test_a_graph_torch_cached_under_custom_ops_is_not_served_once_the_policy_decomposes(opaque_kernel):
    # Inductor with its on-disk caches: AOTAutograd's is keyed by the graph taken before the
    # decomposition, which is the same custom op call either way but for its compile key.
    op, x = RMSNormFwdOp([32]), torch.randn(4, 32)

    def compiled_call():
        torch._dynamo.reset()
        return torch.compile(lambda t: op(t), fullgraph=True)(x)

    compiled_call()
    assert len(opaque_kernel.served) == 1  # the custom op: the kernel eager runs
    set_decompose_policy("RMSNormFwdOp")
    torch.testing.assert_close(compiled_call(), torch.nn.functional.rms_norm(x, [32]))
    assert len(opaque_kernel.served) == 1  # decomposed: Inductor's code for the reference
    set_decompose_policy(None)
    compiled_call()
    assert len(opaque_kernel.served) == 2


def test_a_malformed_policy_names_the_forms():
    with pytest.raises(TileOpsError, match="X: 'RMS Norm' is not an op name, '-Op', 'measured', 'auto' or 'none'"):
        parse_decompose_policy("RMS Norm", "X")


def explained_custom_op():
    """The custom op of the RMSNormFwdOp class explain resolves (``rms_norm_fwd_op_2`` and so on
    where another test defined a class of that name first)."""
    from tileops_core.cli.cmd_explain import op_class
    from tileops_core.spec.manifest import get_spec

    return "torch.ops." + op_class(get_spec("RMSNormFwdOp")).definition().boundary.qualname.replace("::", ".")


def test_explain_says_which_path_a_compiled_call_takes(capsys):
    import json

    from tileops_core.cli.main import main

    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled_path"] == (
        f"the opaque custom op {explained_custom_op()} (its kernel chosen at run time): the decomposition "
        "policy does not name RMSNormFwdOp (TILEOPS_COMPILE_DECOMPOSE unset)")
    set_decompose_policy("RMSNormFwdOp")
    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled_path"].startswith(
        "decomposed into its traceable kernel tileops_cpu_ref.kernels:RefRMSNorm under backends that decompose")


def test_explain_names_the_traceable_kernel_that_replaces_the_eager_one(capsys, opaque_kernel):
    import json

    from tileops_core.cli.main import main

    set_decompose_policy("RMSNormFwdOp")
    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interfaces"][0]["chosen"] == opaque_kernel.qualname()
    assert data["compiled_interfaces"][0]["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
    assert data["compiled_path"].startswith(
        f"decomposed into its traceable kernel tileops_cpu_ref.kernels:RefRMSNorm (in place of "
        f"{opaque_kernel.qualname()}, which serves the eager call) under backends that decompose (Inductor)")
    assert main(["explain", "RMSNormFwdOp"]) == 0
    assert "the decomposition's selection, among traceable kernels only:" in capsys.readouterr().out


def test_explain_says_why_no_traceable_kernel_serves_a_named_op(capsys, opaque_kernel):
    import json

    from tileops_core.cli.main import main

    set_decompose_policy("RMSNormFwdOp")
    assert main(["explain", "RMSNormFwdOp", "--kernels", "RMSNormFwdOp=-RefRMSNorm", "--format", "json"]) == 0
    path = json.loads(capsys.readouterr().out)["compiled_path"]
    assert path.startswith(f"the opaque custom op {explained_custom_op()} (its kernel chosen at run time): "
                           "no traceable kernel can serve RMSNormKernel (")
    assert f"{opaque_kernel.qualname()}: not traceable: the decomposition under torch.compile traces only" in path
    assert "tileops_cpu_ref.kernels:RefRMSNorm: denied by --kernels" in path


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
