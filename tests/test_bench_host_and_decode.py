"""Host time per call beside the raw launch and torch's op, and the decode step run four ways.

On the CPU these run small: what is checked is that the numbers exist, land in the JSON
document with the rest, and that every way of running the decode step computes exactly
what eager does. The figures the targets speak of come from the GPU machine (the bench).
"""

from __future__ import annotations

import json

import jsonschema
import torch

from tileops_core.bench.decode_step import TINY, run_decode_step
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


def test_decode_step_compiled_fullgraph_equals_eager_bit_for_bit_in_the_state_pool():
    result = run_decode_step(torch.device("cpu"), TINY, seed=3, ways=("eager", "compile_fullgraph"))
    assert [w.way for w in result.ways] == ["eager", "compile_fullgraph"]
    for way in result.ways:
        assert way.error is None, way.error
        assert way.equal_to_eager is True
        assert way.host_s > 0 and way.wall_s >= way.host_s
