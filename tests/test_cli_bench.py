"""The bench, calibrate, ops and docs commands: exit codes, one-line usage errors, data output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

from tileops_core.bench.catalog import benchable_specs
from tileops_core.bench.profiles import load_profile
from tileops_core.bench.report import RESULT_SCHEMA
from tileops_core.cli.main import main

FAST = ["--min-samples", "3", "--min-time", "0.005", "--warmup", "1"]


@pytest.fixture(autouse=True)
def no_saved_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "user-profiles"))


def _usage_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_bench_writes_json_that_matches_the_schema_and_a_plot(tmp_path, capsys):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["bench", "--quick", "RMSNormFwdOp", "RecurrentGatedDeltaRuleFwdOp", *FAST, "--json", str(out),
                 "--plot", str(png)])
    assert code == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, RESULT_SCHEMA)
    assert [r["op"] for r in doc["results"]] == ["RMSNormFwdOp", "RecurrentGatedDeltaRuleFwdOp"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = capsys.readouterr().out
    assert "RecurrentGatedDeltaRuleFwdOp" in text and "2 case(s), 0 failed" in text


def test_bench_format_json_prints_only_the_document(capsys):
    assert main(["bench", "SumFwdOp", "--workload", "small-full", *FAST, "--baseline", "none",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, RESULT_SCHEMA)
    assert doc["baseline"] == "none" and doc["results"][0]["baseline"] is None


@pytest.mark.parametrize("argv,message", [
    (["bench", "NoSuchOp"], "tileops bench: error: unknown op 'NoSuchOp'"),
    (["bench", "RMSNormFwdOp", "--workload", "nope"], "tileops bench: error: no workload labelled 'nope'"),
    (["bench", "--device", "cuda"], "tileops bench: error: device 'cuda' is not available"),
    (["bench", "--device", "bogus"], "tileops bench: error: 'bogus' is not a device"),
    (["bench", "--profile", "h900"], "tileops bench: error: no hardware profile named 'h900'"),
    (["bench", "--min-time", "0"], "tileops bench: error: --min-time must be positive"),
    (["bench", "--plot", "chart.svg"], "tileops bench: error: --plot writes a PNG file"),
    (["bench", "--policy", "a=RMSNormFwdOp"], "tileops bench: error: --policy chooses decomposition policies of "
                                              "--decode-step"),
    (["bench", "--decode-step", "--policy", "RMSNormFwdOp"], "tileops bench: error: --policy 'RMSNormFwdOp': write "
                                                             "NAME=TEXT"),
    (["bench", "--decode-step", "--policy", "default=auto"], "tileops bench: error: --policy 'default=auto': default "
                                                             "is already a policy of the run"),
    (["bench", "--decode-step", "--policy", "x=RMS Norm"], "tileops bench: error: --policy x: 'RMS Norm' is not an op "
                                                           "name"),
    (["bench", "--only-policies"], "tileops bench: error: --only-policies chooses decomposition policies of "
                                   "--decode-step"),
    (["bench", "--decode-step", "--only-policies"], "tileops bench: error: --only-policies runs the --policy entries "
                                                    "alone: give at least one"),
    (["ops", "Nope"], "tileops ops: error: unknown op 'Nope'"),
    (["calibrate", "--device", "cuda:0"], "tileops calibrate: error: device 'cuda:0' is not available"),
    (["calibrate", "--matmul-n", "8"], "tileops calibrate: error: the matmul size must be at least 64"),
    (["bench", "--warmup", "0"], "tileops bench: error: --warmup must be at least 1"),
    (["bench", "--profile", "nvidia-h200"], "tileops bench: error: hardware profile 'nvidia-h200' describes a cuda "
                                             "device; this run is on cpu"),
    (["calibrate", "--copy-mib", "0"], "tileops calibrate: error: the copy must be at least 1 MiB"),  # (0 was "default")
    # --decode-step runs no op rows: their options are refused by name, not ignored (found in review)
    (["bench", "--decode-step", "RMSNormFwdOp", "--workload", "x", "--plot", "a.png", "--min-samples", "9"],
     "tileops bench: error: --decode-step times a fixed decode step; OP names, --workload, --plot, --min-samples "
     "apply to op rows only"),
    (["bench", "--decode-step", "--baseline", "none"], "tileops bench: error: --decode-step times a fixed decode step; "
                                                        "--baseline apply"),
])
def test_a_user_error_is_one_line_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    assert _usage_line(capsys).startswith(message)


def test_bench_decode_step_runs_an_extra_policy_beside_the_three_and_writes_them(tmp_path, capsys):
    out = tmp_path / "decode.json"
    threads = torch.get_num_threads()
    try:
        assert main(["bench", "--decode-step", "--quick", "--threads", "1", "--policy", "rms_norm_only=RMSNormFwdOp",
                     "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    doc = json.loads(out.read_text())
    assert doc["policies"]["rms_norm_only"] == "RMSNormFwdOp"
    assert [(w["way"], w["policy"]) for w in doc["ways"]][1:] == [
        ("compile_fullgraph", p) for p in ("custom_ops", "all_decompositions", "default", "rms_norm_only")]
    assert next(w for w in doc["ways"] if w["policy"] == "rms_norm_only")["decomposed"] == ["RMSNormFwdOp"]
    assert "compile_fullgraph [rms_norm_only]" in capsys.readouterr().out


def test_bench_decode_step_runs_only_the_given_policies_under_their_own_names(tmp_path, capsys):
    out = tmp_path / "decode.json"
    threads = torch.get_num_threads()
    try:
        assert main(["bench", "--decode-step", "--quick", "--threads", "1", "--only-policies",
                     "--policy", "default=RMSNormFwdOp", "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    doc = json.loads(out.read_text())
    assert doc["policies"] == {"default": "RMSNormFwdOp"}
    assert [(w["way"], w["policy"]) for w in doc["ways"]] == [("eager", None), ("compile_fullgraph", "default")]
    assert doc["policy_verdicts"] == []  # nothing to compare the default with
    assert "compile_fullgraph [default]" in capsys.readouterr().out


def test_bench_decode_step_prints_its_results_when_its_json_cannot_be_written(tmp_path, monkeypatch, capsys):
    path = tmp_path / "d.json"
    path.write_text("read-only\n")
    access = os.access

    def read_only(name, mode, *args, **kwargs):  # found only when writing (chmod does not stop root, who runs CI)
        return not mode & os.W_OK if Path(name).resolve() == path.resolve() else access(name, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", read_only)
    threads = torch.get_num_threads()
    try:
        code = main(["bench", "--decode-step", "--quick", "--threads", "1", "--json", str(path)])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert code == 1 and "compile_fullgraph" in out
    assert "tileops bench: cannot write --json" in err and "Traceback" not in err
    assert path.read_text() == "read-only\n"


def test_min_samples_takes_as_many_samples_as_asked_past_the_time_cap(capsys):
    from tileops_core.bench.timing import DEFAULT

    asked = 400
    assert main(["bench", "SumFwdOp", "--workload", "small-full", "--min-samples", str(asked), "--min-time", "1e-6",
                 "--warmup", "1", "--baseline", "none", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"][0]["time"]["samples"] >= asked and doc["timing"]["max_time_s"] >= 3600 > DEFAULT.max_time_s


def test_a_host_time_that_could_not_be_measured_fails_the_run(monkeypatch, capsys):
    """Found in review: the case printed "not measured" and the run exited 0."""
    from tileops_core.bench import runner

    def broken(*args, **kwargs):
        raise RuntimeError("no launch to take apart")

    monkeypatch.setattr(runner, "measure_host_times", broken)
    assert main(["bench", "SumFwdOp", "--workload", "small-full", *FAST, "--baseline", "none", "--host-time",
                 "--format", "json"]) == 1
    assert "no launch to take apart" in json.loads(capsys.readouterr().out)["results"][0]["host_time"]["error"]


@pytest.mark.parametrize("seconds, text", [(0.99996, "1 s"), (9.9996e-4, "1 ms"), (1.234e-5, "12.3 us"),
                                           (4e-10, "0.4 ns")])
def test_times_are_rounded_before_their_unit_is_chosen(seconds, text):
    from tileops_core.bench.report import format_rate, format_time

    assert format_time(seconds) == text
    assert format_rate(999.7e9, "B") == "1 TB/s"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_demo_counts_must_be_positive_integers(value, capsys):
    for flag in ("--tokens", "--batch"):
        with pytest.raises(SystemExit) as exit_:
            main(["demo", flag, value])
        assert exit_.value.code == 2
        assert "Traceback" not in capsys.readouterr().err


def test_an_unknown_baseline_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--baseline", "numpy"])
    assert exit_.value.code == 2
    assert "invalid choice: 'numpy'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["bench", "calibrate", "ops", "docs"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert f"usage: tileops {command}" in capsys.readouterr().out


def test_ops_json_holds_every_implemented_op_with_its_cells(capsys):
    assert main(["ops", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {o["op"] for o in data["ops"]} == set(benchable_specs())
    rgdr = next(o for o in data["ops"] if o["op"] == "RecurrentGatedDeltaRuleFwdOp")
    reference = [c for c in rgdr["cells"] if c["backend"] == "cpu_ref"]
    assert {c["dtype"] for c in reference} == {"float16", "bfloat16", "float32"}
    assert all(c["status"] == "yes" and len(c["served"]) == len(rgdr_rows()) for c in reference)


def rgdr_rows() -> list:
    return list(benchable_specs()["RecurrentGatedDeltaRuleFwdOp"].workloads)


def test_ops_text_has_a_table_per_op(capsys):
    assert main(["ops", "SSDDecodeFwdOp"]) == 0
    text = capsys.readouterr().out
    assert "SSDDecodeFwdOp  (manifest/mamba.yaml" in text
    assert "RefSSDDecode (general)  cpu_ref  any     cpu   3/3      3/3" in text


def test_docs_writes_a_page_per_op(tmp_path, capsys):
    assert main(["docs", "--out", str(tmp_path), "--format", "html"]) == 0
    for name in benchable_specs():
        assert (tmp_path / "ops" / f"{name}.html").is_file()
    assert not (tmp_path / "index.md").exists()
    assert "under" in capsys.readouterr().out


def test_docs_refuses_a_file_as_output_folder(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["docs", "--out", str(target)]) == 2
    assert _usage_line(capsys).startswith("tileops docs: error: --out")


def test_calibrate_writes_a_profile_bench_can_use(tmp_path, capsys):
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--quick", "--copy-mib", "4", "--matmul-n", "128", "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.memory.measured > 0 and profile.compute["float32"].measured > 0
    capsys.readouterr()
    assert main(["bench", "ReciprocalFwdOp", "--workload", "small", *FAST, "--profile", str(out),
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"]["origin"] == "file" and doc["profile"]["name"] == profile.name
    assert doc["profile"]["bandwidth"] == profile.memory.measured


def test_no_traceback_reaches_the_terminal_for_a_user_error():
    proc = subprocess.run([sys.executable, "-m", "tileops_core", "bench", "NoSuchOp"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tileops bench: error: unknown op 'NoSuchOp'")


def test_an_unwritable_output_is_one_line_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["docs", "--out", str(blocker / "sub")]) == 2
    assert _usage_line(capsys).startswith(f"tileops docs: error: cannot write under --out {blocker / 'sub'}")
    assert main(["bench", "SumFwdOp", "--quick", *FAST, "--baseline", "none", "--json", str(blocker / "r.json")]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "the CPU is busy" not in line]  # depends on the machine
    assert len(lines) == 1 and "Traceback" not in captured.err
    assert lines[0] == f"tileops bench: error: --json {blocker / 'r.json'}: {blocker} is a file, not a folder"
    assert "results in" not in captured.out


@pytest.mark.parametrize("load,warned", [(3.0, True), (0.0, False)])
def test_a_busy_cpu_is_pointed_out_before_multi_threaded_timing(load, warned, monkeypatch, capsys):
    import torch

    from tileops_core.cli import cmd_bench

    monkeypatch.setattr(cmd_bench.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(cmd_bench.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    cmd_bench._warn_if_busy(torch.device("cpu"))
    err = capsys.readouterr().err
    assert ("the CPU is busy (1-minute load 3.0 on 2 cores)" in err) is warned
