"""The bench on the CPU: smallest rows, few repetitions (``TimingOptions``), real kernels.

These tests check what the bench *reports* (that it timed the selected kernel, that the
roofline is the spec's, that the baseline is the reference called directly, that the
document matches its schema, that the chart is drawn), never how fast anything is.
"""

from __future__ import annotations

import copy
import os

import jsonschema
import pytest
import torch

from tileops_core.bench.baselines import capture_launches, make_baseline, reference_implementation
from tileops_core.bench.catalog import UnknownName, op_class, resolve_specs
from tileops_core.bench.plot import plot_roofline
from tileops_core.bench.profiles import profile_for
from tileops_core.bench.report import RESULT_SCHEMA, build_document, format_table
from tileops_core.bench.roofline import roofline_of_row
from tileops_core.bench.runner import BenchCase, BenchConfig, input_bytes, mutated_restorer, plan_cases, run_bench
from tileops_core.bench.timing import Subject, TimingOptions, time_cpu
from tileops_core.bench.workloads import instantiate
from tileops_core.plugins import ensure_plugins_loaded

FAST = TimingOptions(warmup=1, min_samples=3, max_samples=50, min_time_s=0.005, max_time_s=0.2, sample_s=2e-4)


@pytest.fixture(scope="module", autouse=True)
def plugins():
    ensure_plugins_loaded()


@pytest.fixture(autouse=True)
def no_saved_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "none"))


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def _config(baseline: str = "ref") -> BenchConfig:
    return BenchConfig(torch.device("cpu"), baseline, FAST, profile_for("cpu", "any cpu"))


@pytest.fixture(scope="module")
def quick_results():
    """One run of the quick plan (smallest row of every op), shared by the report tests."""
    ensure_plugins_loaded()
    cases = plan_cases(resolve_specs([]), quick=True)
    config = BenchConfig(torch.device("cpu"), "ref", FAST, profile_for("cpu", "any cpu"))
    return cases, config, run_bench(cases, config, seed=_seed())


def test_quick_plan_takes_the_smallest_row_of_every_op_rgdr_included():
    specs = resolve_specs([])
    cases = plan_cases(specs, quick=True)
    assert [c.spec.name for c in cases] == [s.name for s in specs]
    assert "RecurrentGatedDeltaRuleFwdOp" in {c.spec.name for c in cases}
    for case in cases:
        sizes = [input_bytes(case.spec, r, r.values.get("dtypes", [None])[0]) for r in case.spec.workloads]
        assert input_bytes(case.spec, case.row, case.case) == min(sizes)


def test_full_plan_has_one_case_per_row_and_dtype_entry():
    spec = resolve_specs(["GemmFwdOp"])[0]
    cases = plan_cases([spec])
    assert len(cases) == sum(len(r.values["dtypes"]) for r in spec.workloads)


def test_a_workload_label_selects_rows_and_an_unknown_one_lists_the_labels():
    cases = plan_cases(resolve_specs(["RMSNormFwdOp", "LinearFwdOp"]), ["small-fp32", "small-bias"])
    assert [(c.spec.name, c.row.label) for c in cases] == [("RMSNormFwdOp", "small-fp32"),
                                                           ("LinearFwdOp", "small-bias")]
    with pytest.raises(UnknownName, match=r"no workload labelled 'nope' in RMSNormFwdOp \(labels: "):
        plan_cases(resolve_specs(["RMSNormFwdOp"]), ["nope"])


def test_an_unknown_op_suggests_the_closest_names():
    with pytest.raises(UnknownName, match="unknown op 'RMSNormOp'; did you mean RMSNormFwdOp"):
        resolve_specs(["RMSNormOp"])


def test_every_quick_case_runs_on_the_cpu_reference(quick_results):
    cases, _, results = quick_results
    for r in results:
        assert r.ok, f"{r.case.name}: {r.error}"
        assert r.backend == "cpu_ref" and r.kernel.startswith("tileops_cpu_ref.kernels:Ref")
        assert r.measurement.median_s > 0 and r.measurement.samples >= FAST.min_samples
        assert r.measurement.p10_s <= r.measurement.median_s <= r.measurement.p90_s
        assert r.baseline_measurement is not None and r.baseline_error is None


def test_the_reported_roofline_is_the_spec_formula_for_that_row(quick_results):
    _, _, results = quick_results
    for r in results:
        expected = roofline_of_row(r.case.spec, r.case.row, r.case.case)
        assert (r.roofline.flops, r.roofline.bytes) == (expected.flops, expected.bytes)
        assert r.analysis.bytes_per_s == pytest.approx(expected.bytes / r.measurement.median_s)


def test_the_document_matches_its_schema(quick_results):
    _, config, results = quick_results
    doc = build_document(results, config, "test cpu")
    jsonschema.validate(doc, RESULT_SCHEMA)
    assert {r["op"] for r in doc["results"]} == {c.spec.name for c in quick_results[0]}
    assert all(r["baseline"]["speedup"] > 0 for r in doc["results"])


@pytest.mark.parametrize("mutate", [
    lambda d: d["results"][0].pop("bound"),
    lambda d: d["results"][0].update(status="fine"),
    lambda d: d["results"][0]["time"].update(median_s=0),
    lambda d: d.update(schema="tileops-bench/0"),
])
def test_the_schema_rejects_a_document_that_breaks_it(quick_results, mutate):
    _, config, results = quick_results
    doc = copy.deepcopy(build_document(results, config, "test cpu"))
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, RESULT_SCHEMA)


def test_the_table_has_a_line_per_case_and_names_the_profile(quick_results):
    _, config, results = quick_results
    text = format_table(build_document(results, config, "test cpu"))
    assert "profile generic-cpu (shipped)" in text
    for r in results:
        assert f"{r.case.row.label}[{r.case.case_text}]" in text


def test_the_roofline_chart_is_a_png_with_more_than_one_colour(quick_results, tmp_path):
    import matplotlib.image

    _, config, results = quick_results
    path = plot_roofline(build_document(results, config, "test cpu"), tmp_path / "roof.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    pixels = matplotlib.image.imread(str(path))
    colours = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}
    assert len(colours) > 10


def test_a_failing_case_is_recorded_and_the_run_goes_on():
    specs = resolve_specs(["SiluAndMulFwdOp", "SumFwdOp"])
    cases = plan_cases(specs, quick=True)
    spec = cases[0].spec
    bad = BenchCase(spec, cases[0].row, {"x": "float64"})  # not a dtype SiluAndMul declares: its check refuses it
    results = run_bench([bad, cases[1]], _config("none"), seed=_seed())
    assert results[0].error is not None and "CheckError" in results[0].error
    assert results[1].ok and results[1].baseline_measurement is None


def test_capture_records_what_the_op_hands_its_kernel_and_ref_calls_the_general_kernel():
    spec = resolve_specs(["RMSNormFwdOp"])[0]
    row = next(r for r in spec.workloads if r.label == "small-fp32-weight")
    inst = instantiate(spec, row, "float32", rng=torch.Generator().manual_seed(_seed()))
    op = op_class(spec)(**inst.op_kwargs)
    args = inst.call_args(spec)
    launches = capture_launches(op, args)
    assert len(launches) == 1
    x, weight, normalized_shape, eps = launches[0].args
    assert x is args[0] and weight is args[1] and tuple(normalized_shape) == (4096,) and eps == 1e-6
    assert reference_implementation(launches[0].interface, launches[0].call).__name__ == "RefRMSNorm"
    calls, graph = make_baseline("ref", op, [args])
    assert graph and torch.equal(calls[0](), op(*args))


def test_each_cases_torch_compile_baseline_is_compiled_past_dynamos_recompile_limit():
    """Dynamo stops compiling a function after recompile_limit graphs and runs it eagerly (found in review:
    from the ninth shape on, "torch.compile" timed eager code): each case's baseline starts afresh."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    spec = resolve_specs(["RMSNormFwdOp"])[0]
    with torch._dynamo.config.patch(recompile_limit=1):
        for rows in (2, 3, 5):
            x = torch.randn(rows, 4096, generator=torch.Generator().manual_seed(_seed()))
            op = op_class(spec)(normalized_shape=[4096])
            before = counters["stats"]["unique_graphs"]
            calls, _ = make_baseline("torch.compile", op, [[x]])
            torch.testing.assert_close(calls[0](), op(x))
            assert counters["stats"]["unique_graphs"] == before + 1, f"{rows} rows: not compiled"


def test_input_sets_rotate_through_twice_the_l2_counted_in_the_bytes_a_call_touches():
    """A decode step touches a few slots of a pool it holds whole (found in review: sets were counted by what
    they hold, so a cycle touched 40 of the 100 MiB asked)."""
    from tileops_core.bench.runner import _instance_sets
    from tileops_core.workloads import dtype_cases

    spec = resolve_specs(["RecurrentGatedDeltaRuleFwdOp"])[0]
    row = next(r for r in spec.workloads if r.label == "tiny-fp32")
    case = BenchCase(spec, row, dtype_cases(row)[0])
    touched = int(roofline_of_row(spec, row, case.case).bytes)
    held = sum(t.numel() * t.element_size() for t in instantiate(spec, row, case.case).inputs.values()
               if isinstance(t, torch.Tensor))
    assert touched < held
    sets, note = _instance_sets(case, BenchConfig(torch.device("cpu"), "none", rotate_bytes=5 * touched), 0)
    assert len(sets) == 5 and note is None
    sets, note = _instance_sets(case, BenchConfig(torch.device("cpu"), "none", rotate_bytes=5 * touched, max_sets=2), 0)
    assert len(sets) == 2 and "2 set(s)" in note and "may be read from the L2" in note


def test_on_an_accelerator_timed_by_wall_clock_the_restore_finishes_before_the_clock_starts(monkeypatch):
    """Found in review: on a device timed around synchronize() (an NPU), the restore's queued copies were
    waited for inside each sample's last call. A queue stands in for the device: work is queued, synchronize
    waits for it; a call queues 1 ms, the restore 20 ms."""
    import time

    from tileops_core.bench.timing import time_subjects

    busy = [0.0]

    def enqueue(seconds):
        busy[0] = max(busy[0], time.perf_counter()) + seconds

    def synchronize(*args, **kwargs):
        while time.perf_counter() < busy[0]:
            pass

    monkeypatch.setattr(torch.xpu, "synchronize", synchronize)
    options = TimingOptions(warmup=1, min_samples=5, max_samples=5, min_time_s=0.0, max_time_s=5.0, sample_s=2e-3)
    subject = Subject("op", [lambda: enqueue(1e-3)], reset=lambda: enqueue(20e-3))
    measured = time_subjects([subject], torch.device("xpu"), options)[0]
    assert measured.median_s < 5e-3  # about 1 ms a call, not 1 ms plus a share of the 20 ms restore


def test_the_restorer_puts_a_mutated_state_back_and_is_none_without_mutation():
    spec = resolve_specs(["RecurrentGatedDeltaRuleFwdOp"])[0]
    row = next(r for r in spec.workloads if r.label == "tiny-fp32")
    inst = instantiate(spec, row, "float32", rng=torch.Generator().manual_seed(_seed()))
    pristine = inst.inputs["state"].clone()
    restore = mutated_restorer(spec, [inst])
    op_class(spec)(**inst.op_kwargs)(*inst.call_args(spec))
    assert not torch.equal(inst.inputs["state"], pristine)  # the decode step wrote its slots
    restore()
    assert torch.equal(inst.inputs["state"], pristine)
    plain = resolve_specs(["SumFwdOp"])[0]
    assert mutated_restorer(plain, [instantiate(plain, plain.workloads[0], "float32")]) is None


def test_rgdr_runs_in_the_bench_with_its_state_restored():
    spec = resolve_specs(["RecurrentGatedDeltaRuleFwdOp"])[0]
    result = run_bench(plan_cases([spec], ["tiny-gates-mtp"]), _config("ref"), seed=_seed())[0]
    assert result.ok and result.kernel == "tileops_cpu_ref.kernels:RefRGDR" and result.measurement.samples >= 3


def test_time_cpu_resets_before_each_sample_and_interleaves_subjects():
    order: list[str] = []
    resets = []
    a = Subject("a", [lambda: order.append("a")], reset=lambda: resets.append(len(order)))
    b = Subject("b", [lambda: order.append("b")])
    options = TimingOptions(warmup=1, min_samples=4, max_samples=4, min_time_s=0.0, sample_s=0.0)
    ma, mb = time_cpu([a, b], options)
    assert ma.samples == mb.samples == 4 and ma.calls_per_sample == 1
    # after each subject's first (calibration) sample, they are sampled alternately
    assert order[-6:] == ["a", "b"] * 3
    assert len(resets) >= ma.samples


def test_rotated_input_sets_are_cycled_through():
    seen: list[int] = []
    subject = Subject("s", [lambda i=i: seen.append(i) for i in range(3)])
    options = TimingOptions(warmup=1, min_samples=2, max_samples=2, min_time_s=0.0, sample_s=0.0)
    time_cpu([subject], options)
    assert set(seen) == {0, 1, 2}
    assert seen[:3] == [0, 1, 2]
