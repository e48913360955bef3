"""``benchmarks/cpu_fallback.py``'s torch baselines compute what the reference kernels compute, on the
arguments the ops pass their kernels: a race against something else says nothing. The benchmark checks
each row before timing it; this runs that check on every op's first workload row, so a baseline that
no longer takes the kernels' arguments (a dtype given by its name: found when the script failed) or
drifts from the op's semantics fails here rather than on the next benchmark run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cpu_fallback.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("cpu_fallback", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up while it loads)
    spec.loader.exec_module(module)
    return module


BENCH = _load_bench()


#: The rows checked here: every workload row and dtype case with at most this many MB of inputs (the
#: benchmark's limit is 64), which keeps the module to seconds and still holds rows with every param form
#: (Softmax's and Sum's ``dtype`` among them).
MAX_MB = 8.0


@pytest.fixture(scope="module")
def cases():
    return list(BENCH.op_cases(list(BENCH.TORCH_CALLS), max_mb=MAX_MB, first_only=False))


@pytest.fixture(scope="module")
def first_cases(cases):
    """Each op's first checked case."""
    firsts: dict = {}
    for c in cases:
        if not c.skipped:
            firsts.setdefault(c.name, c)
    return firsts


@pytest.fixture(scope="module")
def reference_kernels():
    import tileops_cpu_ref.kernels as current

    return BENCH.kernel_classes(current)


def test_every_op_of_the_table_has_rows_that_are_checked_among_them_a_named_dtype(cases, first_cases):
    assert set(first_cases) == set(BENCH.TORCH_CALLS)
    named = [c.label for c in cases if not c.skipped and c.name in ("SoftmaxFwdOp", "SumFwdOp")
             and any(isinstance(a, str) and a.startswith("float") for a in c.launch.args)]
    assert named, "no row passes a dtype by name: the check would not cover that form"


@pytest.mark.parametrize("name", sorted(BENCH.TORCH_CALLS))
def test_the_torch_baseline_computes_what_the_reference_kernel_computes(name, cases, reference_kernels):
    checked = [c for c in cases if c.name == name and not c.skipped]
    assert checked
    for case in checked:
        kernel = BENCH.kernel_for(reference_kernels[name], case.launch.call)
        why = BENCH.baseline_mismatch(BENCH.TORCH_CALLS[name], kernel, list(case.launch.args))
        assert why is None, f"{case.label}: {why}"


def test_a_baseline_that_computes_something_else_is_caught_and_one_that_raises_fails(first_cases,
                                                                                     reference_kernels):
    case = first_cases["SigmoidGateMulFwdOp"]
    kernel = BENCH.kernel_for(reference_kernels["SigmoidGateMulFwdOp"], case.launch.call)
    args = list(case.launch.args)
    off = BENCH.baseline_mismatch(lambda attn, gate: attn * torch.sigmoid(gate) + 1e-2, kernel, args)
    assert off is not None and off.startswith("output 0:")
    assert "2 outputs" in BENCH.baseline_mismatch(lambda attn, gate: (attn, gate), kernel, args)
    with pytest.raises(TypeError):
        BENCH.baseline_mismatch(lambda attn: attn, kernel, args)


def test_the_baselines_run_on_copies_so_a_kernel_writing_an_input_does_not_feed_the_other_side(first_cases,
                                                                                              reference_kernels):
    """The fused add writes its residual: the torch side must see the residual as the op was given it."""
    case = first_cases["FusedAddZeroCentredRMSNormFwdOp"]
    args = list(case.launch.args)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel = BENCH.kernel_for(reference_kernels["FusedAddZeroCentredRMSNormFwdOp"], case.launch.call)
    assert BENCH.baseline_mismatch(BENCH.TORCH_CALLS["FusedAddZeroCentredRMSNormFwdOp"], kernel, args) is None
    assert all(torch.equal(a, b) for a, b in zip(args, before) if isinstance(a, torch.Tensor))
