"""Host time per call beside the raw launch and torch's op, and the decode step run four ways.

On the CPU these run small: what is checked is that the numbers exist, land in the JSON
document with the rest, and that every way of running the decode step computes exactly
what eager does. The figures the targets speak of come from the GPU machine (the bench).
"""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest
import torch

from tileops_core.bench.decode_step import DECOMPOSED_TOLERANCE, TINY, format_decode_step, run_decode_step
from tileops_core.kernels.compile_policy import MEASURED
from tileops_core.bench.report import RESULT_SCHEMA
from tileops_core.cli.main import main

FAST = ["--min-time", "0.01", "--min-samples", "3", "--warmup", "1"]


def test_host_time_is_reported_per_case_with_the_raw_launch_and_torchs_op(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["bench", "--quick", "--host-time", "RMSNormFwdOp", "RecurrentGatedDeltaRuleFwdOp", *FAST,
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, RESULT_SCHEMA)
    rms, rgdr = doc["results"]
    assert rms["host_time"]["torch_api"] == "F.rms_norm"
    assert all(rms["host_time"][k] > 0 for k in ("op_s", "launch_s", "torch_s"))
    assert rgdr["host_time"]["torch_api"] is None and rgdr["host_time"]["torch_s"] is None
    assert rgdr["host_time"]["op_s"] > 0 and rgdr["host_time"]["launch_s"] > 0
    text = capsys.readouterr().out
    assert "host time per call" in text and "raw launch" in text and "F.rms_norm" in text


def test_host_time_is_off_by_default_on_the_cpu(tmp_path):
    out = tmp_path / "r.json"
    assert main(["bench", "--quick", "SoftmaxFwdOp", *FAST, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["results"][0]["host_time"] is None


@pytest.fixture
def one_thread():
    """Inductor's CPU kernels stall for whole scheduler slices on a shared machine with more threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_decode_step_compiled_fullgraph_matches_eager_under_each_compile_policy(one_thread):
    result = run_decode_step(torch.device("cpu"), TINY, seed=3, ways=("eager", "compile_fullgraph"))
    assert [(w.way, w.policy) for w in result.ways] == [
        ("eager", None), ("compile_fullgraph", "custom_ops"), ("compile_fullgraph", "all_decompositions"),
        ("compile_fullgraph", "default")]
    assert result.policies == {"custom_ops": "none", "all_decompositions": "auto",
                               "default": ",".join(sorted(MEASURED))}
    for way in result.ways:
        assert way.error is None, way.error
        assert way.matches_eager is True and way.state_written_where_eager_writes is True
        assert way.host_s > 0 and way.wall_s >= way.host_s
    by_policy = {w.policy: w for w in result.ways}
    assert by_policy[None].equal_to_eager and by_policy["custom_ops"].equal_to_eager  # no op decomposed: bit for bit
    assert by_policy["custom_ops"].decomposed == []
    assert by_policy["all_decompositions"].decomposed == ["RMSNormFwdOp", "SiluAndMulFwdOp"]
    assert by_policy["default"].decomposed == sorted(MEASURED)
    [verdict] = result.verdicts()
    assert verdict["way"] == "compile_fullgraph" and verdict["best_other"] in ("custom_ops", "all_decompositions")
    assert verdict["ratio"] == pytest.approx(by_policy["default"].wall_s / verdict["best_other_wall_s"])
    doc = json.loads(json.dumps(result.as_dict()))
    assert [w["policy"] for w in doc["ways"]] == [None, "custom_ops", "all_decompositions", "default"]
    assert doc["policy_verdicts"] == [verdict] and doc["tolerance"] == DECOMPOSED_TOLERANCE["bfloat16"]
    table = format_decode_step(result)
    assert "compile_fullgraph [all_decompositions]" in table and "RMSNorm,SiluAndMul" in table
    assert "vs the better of custom_ops and all_decompositions" in table


@pytest.mark.parametrize("off_by, matches", [(1e-6, True), (1e-3, False)])
def test_a_decomposing_policy_matches_eager_within_the_tolerance_only(fresh_registry, one_thread, off_by, matches):
    # Eager runs an exact RMSNorm that is not traceable; the decomposition traces one that is off
    # by a relative ``off_by``: the compiled step is then close to eager, never equal to it.
    from tileops_core.kernels.interface import KernelEntry
    from tileops_core.kernels.registry import BackendInfo, register_backend, register_kernel
    from tileops_core.ops.normalization import RMSNormKernel
    from tileops_core.plugins import ensure_plugins_loaded

    def entry(scale):
        def rms_norm(x, weight, normalized_shape, eps):
            return torch.nn.functional.rms_norm(x, normalized_shape, weight, eps) * scale
        return classmethod(lambda cls, call: KernelEntry((cls.__name__,), lambda: rms_norm))

    ensure_plugins_loaded()
    register_backend(BackendInfo("tolerance", device_types=("cpu",)))
    off = type("OffRMSNorm", (RMSNormKernel,), {"devices": ("cpu",), "traceable": True, "entry_for": entry(1 + off_by)})
    exact = type("ExactRMSNorm", (RMSNormKernel,), {"devices": ("cpu",), "preferred_over": (off,),
                                                     "entry_for": entry(1.0)})
    register_kernel(off, "tolerance")
    register_kernel(exact, "tolerance")
    cfg = dataclasses.replace(TINY, dtype="float32", steps=3, repeats=1)
    # torch's on-disk caches off: the compile key holds the kernels' declarations, not their code,
    # and the two cases differ only in the code of OffRMSNorm.
    with torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._inductor.config.patch(fx_graph_cache=False):
        result = run_decode_step(torch.device("cpu"), cfg, seed=4, ways=("compile_fullgraph",),
                                 policies={"custom_ops": "none", "rms_norm": "RMSNormFwdOp"})
    custom, decomposed = result.ways
    assert custom.error is None and custom.equal_to_eager and custom.matches_eager
    assert decomposed.error is None and decomposed.decomposed == ["RMSNormFwdOp"]
    assert not decomposed.equal_to_eager and decomposed.state_written_where_eager_writes
    assert (decomposed.max_rel_diff <= DECOMPOSED_TOLERANCE["float32"]) is matches
    assert decomposed.matches_eager is matches
