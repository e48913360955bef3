"""``benchmarks/model_host_path.py`` runs on the CPU (so it cannot rot): a tiny Qwen3.5-MoE's decode step on the
CUDA backend's launchers with their compiled functions stood in for, every module's op timed."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tileops_cuda")

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "model_host_path.py"


def test_every_op_of_the_tiny_qwen3_5_moe_step_is_timed_on_its_tilelang_launcher(capsys):
    spec = importlib.util.spec_from_file_location("model_host_path", _PATH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    step_us, ops = bench.measure("qwen3_5_moe", steps=2, rounds=1)
    expected = {"LinearFwdOp", "RecurrentGatedDeltaRuleFwdOp", "CausalConv1dUpdateFwdOp", "AttentionDecodeFwdOp",
                "MoETopKRoutingFwdOp", "MoEPermuteFwdOp", "MoEGroupedExpertsFwdOp", "MoESharedExpertFwdOp",
                "MoEUnpermuteFwdOp", "ZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "QKNormRopeFwdOp"}
    assert expected <= set(ops), sorted(expected - set(ops))
    assert all(n >= 1 and us > 0 for n, us in ops.values())
    assert step_us >= sum(n * us for n, us in ops.values()) * 0.5  # the ops' time is inside the step's
    assert bench.main(["--steps", "1", "--rounds", "1"]) == 0
    assert "LinearFwdOp" in capsys.readouterr().out
