"""Dispatch statistics: one count per plan binding (or per launch when asked), exact under 32 threads.

The counter is process-wide; each test resets it and runs in a fresh registry with an
in-test kernel for ``RMSNormFwdOp`` (so what is counted is only what the test did).
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import tileops_core
from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core.kernels import dispatch_stats
from tileops_core.kernels.select import kernel_for
from tileops_core.ops.normalization import RMSNormFwdOp, RMSNormKernel

THREADS = 32


@pytest.fixture(autouse=True)
def fresh_counts():
    dispatch_stats.reset_dispatch_stats()
    dispatch_stats.count_calls(False)
    yield
    dispatch_stats.count_calls(False)
    dispatch_stats.reset_dispatch_stats()


@pytest.fixture
def rms_kernel(fake_backend):
    return fake_backend.kernel(RMSNormKernel, lambda x, w, shape, eps: torch.nn.functional.rms_norm(x, shape, w, eps))


def run_threads(body):
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker():
        try:
            start.wait()
            body()
        except BaseException as exc:  # collected and re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_plans_are_counted_once_per_op_instance_under_32_threads_however_many_calls(rms_kernel):
    x = torch.randn(4, 16)

    def body():
        op = RMSNormFwdOp([16])
        for _ in range(50):
            op(x)

    run_threads(body)
    [row] = tileops_core.dispatch_report().rows
    assert (row.op, row.kernel, row.backend, row.fallback, row.count) == (
        "RMSNormFwdOp", rms_kernel.qualname(), "fake", None, THREADS)
    assert row.call.dims == {"N": (16,)}


def test_calls_are_counted_per_launch_when_asked_under_32_threads(rms_kernel):
    dispatch_stats.count_calls(True)
    x = torch.randn(4, 16)
    shared = RMSNormFwdOp([16])

    def body():
        for _ in range(50):
            shared(x)

    run_threads(body)
    report = tileops_core.dispatch_report()
    assert report.unit == "calls"
    assert report.by_kernel() == {("RMSNormFwdOp", rms_kernel.qualname()): THREADS * 50}


def test_each_call_spec_is_its_own_row(rms_kernel):
    op16, op32 = RMSNormFwdOp([16]), RMSNormFwdOp([32])
    op16(torch.randn(2, 16))
    op32(torch.randn(2, 32))
    assert sorted(r.call.dims["N"] for r in tileops_core.dispatch_report().rows) == [(16,), (32,)]


def test_a_fallback_is_counted_with_its_reason_and_the_warning_points_to_the_report(fresh_registry):
    iface = make_interface()
    fast = make_impl(iface, "FastK", devices=("cuda",), archs=("sm_90+",))
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("b", fast, ref, device_types=("cuda",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_80", N=8))
    assert "tileops_core.dispatch_report() counts every fallback" in str(caught[0].message)
    [row] = tileops_core.dispatch_report().fallbacks
    assert row.fallback == "fakes:FastK: supports archs sm_90+, the device is sm_80"
    assert "fallbacks to a general kernel:" in tileops_core.dispatch_report().text()


def test_the_report_says_when_nothing_was_bound():
    assert tileops_core.dispatch_report().text() == (
        "tileops dispatch report: no kernel was bound in this process (counting plans)")


def test_the_environment_variable_prints_the_summary_at_exit():
    import os
    import subprocess
    import sys

    script = ("import torch\nfrom tileops_core.ops.normalization import RMSNormFwdOp\n"
              "RMSNormFwdOp([8])(torch.randn(2, 8))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TILEOPS_DISPATCH_REPORT": "1"})
    assert done.returncode == 0, done.stderr
    assert "tileops dispatch report (counting plans):\n  RMSNormFwdOp: tileops_cpu_ref.kernels:RefRMSNorm  x1" in done.stderr
