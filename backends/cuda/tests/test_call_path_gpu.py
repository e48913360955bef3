"""The call path on an NVIDIA GPU: the right kernel from the first call, no syncs, four ways of a step.

* In a fresh process, with nothing preloaded, the first call of every CUDA-served op
  selects its TileLang kernel, the same one ``tileops explain`` reports for that row.
* No CUDA-served op synchronises with the device (``set_sync_debug_mode("error")``).
* A decode step (RMSNorm -> RGDR -> SiluAndMul, B=32, a state pool with slot indices) run
  eager, in a CUDA graph, compiled fullgraph and compiled reduce-overhead leaves the same
  state pool and output as eager, bit for bit.

Skips cleanly where there is no GPU or no tilelang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tileops_core import load_manifest

#: (op, workload label) of every CUDA-served op: the rows the TileLang kernels serve.
ROWS = [
    ("RMSNormFwdOp", "qwen3-14b-decode-256"),
    ("SoftmaxFwdOp", "attn-probs-2k"),
    ("SiluAndMulFwdOp", "llama3-8b-mlp-decode-256"),
    ("GroupNormFwdOp", "image-g32-affine"),
    ("SumFwdOp", "rows-16m"),
    ("GemmFwdOp", "llama3-8b-up-decode"),
    ("LinearFwdOp", "llama3-8b-up-decode"),
    ("BmmFwdOp", "llama-attn-values-1k"),
    ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b1-t1-fp32state"),
]

FIRST_CALL = """
import importlib, sys, warnings
warnings.filterwarnings("error", message=".*falling back")  # a fallback to the reference fails the call
import torch
from tileops_core import load_manifest
from tileops_core.bench.workloads import dtype_cases, instantiate
name, label = sys.argv[1], sys.argv[2]
spec = load_manifest()[name]
cls = getattr(importlib.import_module(spec.source["op"]), name)  # the op's module registers its row generators
row = next(r for r in spec.workloads if r.label == label)
inst = instantiate(spec, row, dtype_cases(row)[0], device=torch.device("cuda"), rng=torch.Generator().manual_seed(1))
op = cls(**inst.op_kwargs)
op(*inst.call_args(spec))
torch.cuda.synchronize()
bound = op.last_plan.bound[None]
print("KERNELS", *(bound.kernels[i].qualname() for i in op.last_plan.call_specs))
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TILEOPS_")}


@pytest.mark.parametrize("name,label", ROWS, ids=[n for n, _ in ROWS])
def test_first_call_of_a_fresh_process_selects_what_explain_reports(cuda_device, name, label):
    first = subprocess.run([sys.executable, "-c", FIRST_CALL, name, label], env=_env(), capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    explained = subprocess.run([sys.executable, "-m", "tileops_core", "explain", name, "--workload", label,
                                "--device", "cuda", "--format", "json"], env=_env(), capture_output=True, text=True,
                               timeout=600)
    assert explained.returncode == 0, explained.stderr[-3000:]
    chosen = [i["chosen"] for i in json.loads(explained.stdout)["interfaces"]]
    served = [line.split()[1:] for line in first.stdout.splitlines() if line.startswith("KERNELS ")]
    assert served == [chosen]
    assert all(c.startswith("tileops_cuda.") for c in chosen), chosen


@pytest.mark.parametrize("name,label", ROWS, ids=[n for n, _ in ROWS])
def test_a_cuda_served_op_never_synchronises_with_the_device(cuda_device, name, label):
    import importlib

    from tileops_core.bench.workloads import dtype_cases, instantiate

    spec = load_manifest()[name]
    row = next(r for r in spec.workloads if r.label == label)
    inst = instantiate(spec, row, dtype_cases(row)[0], device=cuda_device[0], rng=torch.Generator().manual_seed(2))
    op = getattr(importlib.import_module(spec.source["op"]), name)(**inst.op_kwargs, check_contents=False)
    args = inst.call_args(spec)
    op(*args)  # plan, select, build (a build may sync; calls may not)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            op(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_decode_step_four_ways_match_eager_under_each_compile_policy(cuda_device):
    # Bit for bit wherever no op decomposes; a decomposing policy (Inductor's code for RMSNorm and
    # SiluAndMul in place of the TileLang kernels) within the documented tolerance, its state
    # pool written in exactly eager's slots.
    from tileops_core.bench.decode_step import POLICIES, WAYS, DecodeStepConfig, run_decode_step

    result = run_decode_step(cuda_device[0], DecodeStepConfig(steps=20, repeats=3), seed=5)
    assert [(w.way, w.policy) for w in result.ways] == [
        (way, policy) for way in WAYS for policy in (POLICIES if way.startswith("compile") else (None,))]
    for way in result.ways:
        assert way.error is None, f"{way.label}: {way.error}"
        assert way.matches_eager and way.state_written_where_eager_writes, way.label
        if way.policy in (None, "custom_ops"):
            assert way.equal_to_eager and not way.decomposed, way.label
        else:
            assert way.decomposed == ["RMSNormFwdOp", "SiluAndMulFwdOp"], way.label
    assert result.device_s is not None and result.device_s > 0
