"""The CUDA backend as a plugin, on a machine without a GPU: registration, arch, refusals.

Calls are planned by the ops themselves on ``meta`` tensors (every workload row of the
core manifest), then re-addressed to a simulated ``cuda``/``sm_90`` device: the dtypes,
dims and flags are exactly what a GPU call carries. Selection must pick the TileLang
kernel where its refusal is None, and fall back to the reference otherwise with the
kernel's reason in the report; nothing may import tilelang.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.kernels import CallSpec, registry, select_kernel
from tileops_core.plugins import ensure_plugins_loaded
from tileops_core.workloads import dtype_cases

ensure_plugins_loaded()
pytestmark = pytest.mark.skipif("cuda" not in registry.backends(), reason="tileops-cuda is not installed")

CUDA_OPS = ("RMSNormFwdOp", "SoftmaxFwdOp", "SiluAndMulFwdOp", "SumFwdOp", "GroupNormFwdOp", "GemmFwdOp", "BmmFwdOp",
            "LinearFwdOp", "RecurrentGatedDeltaRuleFwdOp", "MoESharedExpertFwdOp")


def _simulated_calls(name: str, arch: str = "sm_90"):
    spec = load_manifest()[name]
    module = importlib.import_module(spec.source["op"])
    cls = getattr(module, name)
    for row in spec.workloads:
        for case in dtype_cases(row):
            inst = instantiate(spec, row, case, meta_only=True)
            args = [None if m is None else torch.empty(m.shape, dtype=m.dtype, device="meta")
                    for m in inst.call_args(spec)]
            plan = cls(**inst.op_kwargs).plan_for(*args)
            for interface, call in plan.call_specs.items():
                yield inst.name, interface, CallSpec(call.op, call.interface, "cuda", arch, call.dtypes, call.dims,
                                                     call.flags)


@pytest.mark.parametrize("name", CUDA_OPS)
def test_every_workload_row_selects_the_tilelang_kernel_or_names_why_not(name):
    for label, interface, call in _simulated_calls(name):
        selection = select_kernel(interface, call)
        reasons = {c.impl: c.impl.refusal(call) for c in selection.candidates if c.backend == "cuda"}
        serving = [impl for impl, reason in reasons.items() if reason is None]
        if serving:
            assert selection.chosen in serving, f"{label}: {selection.report()}"
        else:
            assert selection.chosen_backend == "cpu_ref", label
            for reason in reasons.values():
                assert f"refused: {reason}" in selection.report(), label


def test_the_qwen_rgdr_rows_and_large_norm_rows_are_served_by_tilelang():
    served = {label for label, interface, call in _simulated_calls("RecurrentGatedDeltaRuleFwdOp")
              if select_kernel(interface, call).chosen_backend == "cuda"}
    assert {"qwen3.5-b1-t1-fp32state[bfloat16]", "qwen3.5-b128-t2-bf16state[bfloat16]",
            "qwen3.5-tp2-b256-t8-bf16state[bfloat16]"} <= served
    norms = {label for label, interface, call in _simulated_calls("RMSNormFwdOp")
             if select_kernel(interface, call).chosen_backend == "cuda"}
    assert "llama3-70b-prefill-16k[bfloat16]" in norms


def test_fp32_gemm_falls_back_to_the_reference_with_the_kernels_reason():
    interface, call = next((i, c) for label, i, c in _simulated_calls("GemmFwdOp") if label == "tiny-nt[float32]")
    selection = select_kernel(interface, call)
    assert selection.chosen_backend == "cpu_ref"
    assert ("refused: GEMM TileLang kernel: dtype float32 is not one of ('float16', 'bfloat16'); use torch.matmul"
            in selection.report())


def test_an_arch_the_kernels_were_not_written_for_is_unavailable():
    label, interface, call = next(iter(_simulated_calls("RMSNormFwdOp", arch="sm_70")))
    selection = select_kernel(interface, call)
    assert selection.chosen_backend == "cpu_ref"
    assert "supports archs sm_80, sm_86, sm_89, sm_90, sm_90a, the device is sm_70" in selection.report()


def test_plugin_loading_and_selection_import_no_tilelang():
    code = (
        "import sys\n"
        "from tileops_core.plugins import ensure_plugins_loaded\n"
        "from tileops_core.kernels import registry\n"
        "ensure_plugins_loaded()\n"
        "assert 'cuda' in registry.backends(), registry.failures()\n"
        "import tileops_cuda.registered\n"
        "assert 'tilelang' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
