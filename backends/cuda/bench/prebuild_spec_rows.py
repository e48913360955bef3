"""Compile, in parallel, every TileLang kernel the workload rows of the named ops select.

TileLang's disk cache spans processes, so a GPU test or bench run after this one loads its
kernels instead of compiling them one at a time (a spec-row test run compiles some fifty).
Each row is planned on ``meta`` tensors (nothing allocated: an expert bank at real size is
gigabytes); its call specs, moved to the CUDA device and arch, select a kernel exactly as a
call on the GPU does, and the distinct build identities are built through ``compile_many``. A build that fails is printed
with its reason (the test that needs it reports it again).

    python backends/cuda/bench/prebuild_spec_rows.py [OpName ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

_BACKENDS = Path(__file__).resolve().parents[2]
for _p in (str(_BACKENDS / "cuda"), str(_BACKENDS / "cpu_ref")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tileops_core.kernels import select_kernel  # noqa: E402
from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.spec_rows import cuda_calls  # noqa: E402

#: The ops whose rows the spec-row GPU tests and the model-op bench run.
MODEL_OPS = ("ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "GDNGatingFwdOp",
             "QKNormRopeFwdOp", "SigmoidGateMulFwdOp", "MoETopKRoutingFwdOp", "MoEPermuteFwdOp",
             "MoEUnpermuteFwdOp", "MoEGroupedExpertsFwdOp", "MoESharedExpertFwdOp")


def cuda_entries(ops: tuple[str, ...], arch: str) -> dict[Any, Any]:
    """``{build identity: build}`` of the CUDA kernels every row and dtype of ``ops`` selects."""
    entries: dict[Any, Any] = {}
    for _, _, interface, call in cuda_calls(ops, arch):
        selection = select_kernel(interface, call)
        if selection.chosen_backend == "cuda":
            entry = selection.chosen.entry_for(call)
            entries.setdefault(entry.build_key, entry.build)
    return entries


def main() -> None:
    ops = tuple(sys.argv[1:]) or MODEL_OPS
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    started = time.perf_counter()
    entries = cuda_entries(ops, f"sm_{major}{minor}")
    results = compile_many(entries.values())
    failed = [(key, r) for key, r in zip(entries, results) if isinstance(r, BaseException)]
    for key, exc in failed:
        print(f"build failed: {key}: {type(exc).__name__}: {exc}", flush=True)
    print(f"prebuilt {len(entries) - len(failed)} of {len(entries)} kernels in {time.perf_counter() - started:.0f} s",
          flush=True)


if __name__ == "__main__":
    main()
