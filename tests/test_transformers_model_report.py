"""The model report: which TileOPs op and kernel serves each module of a patched model (``apply_tileops``'
report, ``tileops explain --model``), checked against what actually runs on the CPU."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from tileops_core.cli.main import main  # noqa: E402
from tileops_core.integrations.transformers import apply_tileops, cache_kwargs, cache_of  # noqa: E402
from tileops_core.integrations.transformers._tiny import tiny_model  # noqa: E402
from test_transformers_integration import _left_padded_batch  # noqa: E402


def _modules_run(model, ids: torch.Tensor, mask: torch.Tensor) -> set[str]:
    """The modules whose forward runs in a prefill and one decode step (their forward pre-hooks: a MoE block
    that does its router's work runs the router's forward hooks for HF's output capture, not its forward)."""
    ran: set[str] = set()
    handles = [m.register_forward_pre_hook(lambda mod, args, name=name: ran.add(name))
               for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
            step = out.logits[:, -1].argmax(-1, keepdim=True)
            model(input_ids=step, attention_mask=torch.cat([mask, torch.ones_like(step)], 1), use_cache=True,
                  **cache_kwargs(model, cache_of(out)))
    finally:
        for h in handles:
            h.remove()
    return ran


def test_every_module_of_the_tiny_qwen3_5_moe_runs_on_a_tileops_op_on_the_cpu() -> None:
    model = tiny_model("qwen3_5_moe", seed=50)
    report = apply_tileops(model, every_module=True)
    assert report.unserved_modules() == []
    ran = _modules_run(model, *_left_padded_batch(model.config.vocab_size, seed=51))
    modules = dict(model.named_modules())
    # Every module that ran, containers aside, ran TileOPs' forward, not the one its class defines ...
    hf_code = sorted(n for n in ran - report.containers if "forward" not in vars(modules[n]))
    assert hf_code == []
    # ... and every module that did not run is one whose work a served route of an ancestor does.
    for name in set(modules) - ran - report.containers:
        own, covering = report.routes_of(name)
        assert not own and covering and all(r.served for r in covering), name
    kinds = {kind for name, kind in report.modules if name in ran}
    assert {"Embedding", "Linear", "Qwen3_5MoeAttention", "Qwen3_5MoeSparseMoeBlock"} <= kinds


def test_without_every_module_only_the_plain_layers_stay_torchs_and_say_how_to_route_them() -> None:
    model = tiny_model("qwen3_5_moe", seed=52)
    report = apply_tileops(model)
    kinds = dict(report.modules)
    assert {kinds[n] for n in report.unserved_modules()} == {
        "Embedding", "Linear", "Qwen3_5MoeSparseMoeBlock", "Qwen3_5MoeTopKRouter"}  # blocks: the router's logits
    assert all("every_module=True" in r.reason for r in report.left())


def test_explain_model_lists_each_module_with_its_op_and_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--model", "qwen3_5_moe", "--every-module"]) == 0
    out = capsys.readouterr().out
    assert "  model.layers.3.self_attn [Qwen3_5MoeAttention]\n" in out
    assert "      attention decode: -> AttentionDecodeFwdOp: RefAttentionDecode [cpu_ref]\n" in out
    assert ("  model.layers.0.mlp.experts [Qwen3_5MoeExperts]\n      inside model.layers.0.mlp's experts: "
            "MoEPermuteFwdOp, MoEGroupedExpertsFwdOp, MoEUnpermuteFwdOp: RefMoEPermute [cpu_ref], "
            "RefMoEGroupedExperts [cpu_ref], RefMoEUnpermute [cpu_ref]\n") in out
    assert "  model.embed_tokens [Embedding]\n      lookup: -> MoEUnpermuteFwdOp: RefMoEUnpermute [cpu_ref]\n" in out
    assert out.rstrip().endswith("every module is served by a TileOPs op")


def test_explain_model_exits_1_naming_the_modules_left_on_torch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--model", "qwen3_next", "--format", "json", "--set", "linear_key_head_dim=32"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "lm_head" in data["unserved"] and "model.layers.3.self_attn" not in data["unserved"]
    conv = next(m for m in data["modules"] if m["module"] == "model.layers.0.linear_attn.conv1d")
    assert [i["op"] for i in conv["inside"]] == ["CausalConv1dUpdateFwdOp", "CausalConv1dVarlenFwdOp"]
    gdn = next(m for m in data["modules"] if m["module"] == "model.layers.0.linear_attn")
    assert {r["piece"] for r in gdn["routes"]} >= {"recurrent decode", "chunked prefill"}


@pytest.mark.parametrize("argv, message", [
    (["--model", "qwen3_next", "--set", "linear_key_head_dimm=32"], "has no field 'linear_key_head_dimm'; did you "
                                                                     "mean linear_key_head_dim"),
    (["--model", "qwen3_5_moe", "--set", "intermediate_size=64"], "Qwen3_5MoeTextConfig has no field 'intermediate_size'"),
    (["--model", "qwen3_next", "--set", "head_dim=--5"], "write KEY=VALUE with a positive integer value"),
    (["--model", "qwen3_next", "--set", "hidden_size=0"], "write KEY=VALUE with a positive integer value"),
    (["--model", "qwen3_next", "--workload", "x", "--arch", "sm_90"], "explain --model does not take --workload, "
                                                                       "--arch"),
    (["RMSNormFwdOp", "--every-module", "--set", "head_dim=8"], "explain an op does not take --every-module, --set"),
])
def test_explain_refuses_what_its_mode_does_not_take_and_a_set_it_cannot_apply(argv, message, capsys) -> None:
    """Found in review: these passed silently (a misspelt field, a dropped one, the other mode's options) or
    ended in a traceback."""
    assert main(["explain", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_explain_takes_an_op_or_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 2  # a usage error
    assert "takes an op (tileops explain RMSNormFwdOp) or --model TYPE" in capsys.readouterr().err


def test_build_kernels_names_a_build_that_failed_where_the_next_kernel_served_and_counts_no_dispatch(
        fresh_registry) -> None:
    """Found in review: selection contained the failed build (the next kernel served) and build_kernels returned
    no failure; and its builds were counted in the dispatch report as kernels that served calls."""
    import warnings

    from fake_backends import add_backend, make_call, make_impl, make_interface
    from tileops_core.integrations.transformers import build_kernels
    from tileops_core.kernels.dispatch_stats import dispatch_report, reset_dispatch_stats

    def broken():
        raise ZeroDivisionError("tile size 0")

    iface = make_interface()
    add_backend("vendor", make_impl(iface, "FastK", build=broken))
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    reset_dispatch_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        failed = build_kernels([(iface, make_call(iface, N=8), None)])
    assert len(failed) == 1 and "fakes:FastK [vendor] failed: build failed" in failed[0]
    assert not dispatch_report().rows


def test_build_kernels_builds_every_kernel_the_forward_and_the_static_step_then_use(fresh_registry) -> None:
    from tileops_core.integrations.transformers import build_kernels, static_decode_session
    from tileops_core.kernels.select import build_count

    model = tiny_model("qwen3_5_moe", seed=53)
    report = apply_tileops(model, every_module=True)
    assert build_count() == 0  # planning builds nothing
    assert build_kernels(report.kernel_calls) == []
    built = build_count()
    ids, mask = _left_padded_batch(model.config.vocab_size, seed=54)
    _modules_run(model, ids, mask)
    session = static_decode_session(model, 2, 16)
    session.step(session.prefill(ids, mask).argmax(-1))
    assert built > 0 and build_count() == built


def test_layers_left_on_torch_add_no_kernel_to_build() -> None:
    def ops_to_build(every_module: bool) -> set[str]:
        report = apply_tileops(tiny_model("qwen3_5_moe", seed=55), every_module=every_module)
        return {call.op for _, call, _ in report.kernel_calls}

    assert ops_to_build(True) - ops_to_build(False) == {"LinearFwdOp"}
