"""``benchmarks/hf_gpu_decode.py --smoke``: the H200 benchmark's every measurement runs on the CPU at tiny
sizes, so the script cannot rot between GPU runs; its correctness figures must hold there too. The
variants run are Qwen3-Next's dense one and issue 21's Qwen3.5-MoE (every module on TileOPs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "hf_gpu_decode.py"
VARIANTS = ("dense", "qwen3_5_moe")


def _bench():
    spec = importlib.util.spec_from_file_location("hf_gpu_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _errors(tree, path="") -> list[str]:
    if isinstance(tree, dict):
        return [f"{path}: {tree['error']}"] if "error" in tree else [
            e for k, v in tree.items() for e in _errors(v, f"{path}/{k}")]
    return []


@pytest.fixture(scope="module")
def smoke_result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("hf_gpu_decode")
    bench = _bench()
    assert bench.main(["--smoke", "--out", str(out), "--variants", *VARIANTS, "--batches", "2", "--reps", "2",
                       "--warmup", "1", "--check-steps", "3"]) == 0
    return json.loads((out / "hf_gpu_decode.json").read_text())


def test_smoke_run_measures_every_setup_without_an_error(smoke_result: dict) -> None:
    assert not _errors(smoke_result["variants"])
    for variant in VARIANTS:
        rows = smoke_result["variants"][variant]["batches"]["2"]
        assert set(rows["decode"]) == set(rows["prefill"]) == {"tileops", "hf_torch", "hf_fla"}
        assert all(r["step_s"] > 0 for r in rows["decode"].values())
        assert all(r["prefill_s"] > 0 for r in rows["prefill"].values())
        assert rows["captured"]["static_eager_step_s"] > 0
        tileops = rows["decode"]["tileops"]
        assert tileops["tileops_call_path_s"] > 0 and tileops["host_s"] >= tileops["tileops_call_path_s"] * 0.5


def test_smoke_run_logits_match_the_fp32_reference_and_tokens_agree(smoke_result: dict) -> None:
    for variant in VARIANTS:
        logits = smoke_result["variants"][variant]["logits"]
        assert logits["tileops_within_tolerance"]
        assert logits["tileops_max_abs_dlogits"] <= 1e-4 and logits["tileops_static_max_abs_dlogits"] <= 1e-4
        assert logits["tileops_tokens_equal_fp32"] and logits["tileops_static_tokens_equal_fp32"]


def test_the_qwen3_5_moe_variant_has_every_module_on_tileops_and_prints_its_model_report(smoke_result: dict) -> None:
    v = smoke_result["variants"]["qwen3_5_moe"]
    assert v["unserved_modules"] == [] and v["build_failures"] == []
    table = "\n".join(v["model_report"])
    assert "  model.layers.3.self_attn [Qwen3_5MoeAttention]\n      q/k norm + rotary: -> QKNormRopeFwdOp" in table
    assert "  lm_head [Linear]\n      matmul: -> LinearFwdOp: RefLinear [cpu_ref]" in table
    dense = smoke_result["variants"]["dense"]
    assert any(name.endswith("lm_head") for name in dense["unserved_modules"])  # Linear layers stay torch's there


def test_hf_torch_setup_calls_hfs_torch_functions_and_restores_the_wrappers_after() -> None:
    import importlib

    bench = _bench()
    modeling = importlib.import_module(bench.MODELING)
    wrappers = {n: getattr(modeling, n) for n in bench.HF_GDN_FUNCTIONS}
    with bench.setup_context("hf_torch"):
        inside = {n: getattr(modeling, n) for n in bench.HF_GDN_FUNCTIONS}
    assert all(f is not wrappers[n] and not hasattr(f, "__wrapped__") for n, f in inside.items())
    assert all(getattr(modeling, n) is f for n, f in wrappers.items())
