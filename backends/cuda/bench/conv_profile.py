"""Issue 17's conv rows launched once each through their ops, for Nsight Compute to read their counters.

The causal conv1d kernels sit at 78-82% of the same-size copy on the H200 whatever their block
shape, register ring or asynchronous-copy ring (NOTES.md, ninth session): timing says how long a
row takes, not why. This script runs each manifest row through its op (so the registered kernel
and block shape serve it), once untimed (build and first launch), then once inside an NVTX range
named after the row; ``benchmarks/gpu/s_ncuconv.sh`` profiles exactly those ranges.

    python3 conv_profile.py [--rows LABEL,...] [--build-only]
"""

import argparse
import importlib

import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases

#: (op, row label): the rows issue 17 measures against the copy.
DEFAULT_ROWS = (
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-8seq"),
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-1seq"),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t1"),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t2-mtp"),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default=",".join(label for _, label in DEFAULT_ROWS))
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    wanted = set(args.rows.split(","))
    manifest = load_manifest()
    for op_name, label in DEFAULT_ROWS:
        if label not in wanted:
            continue
        spec = manifest[op_name]
        module = importlib.import_module(spec.source["op"])
        row = next(r for r in spec.workloads if r.label == label)
        inst = instantiate(spec, row, dtype_cases(row)[0], device="cuda", rng=torch.Generator().manual_seed(17))
        op = getattr(module, op_name)(**inst.op_kwargs)
        op(**inst.inputs)
        torch.cuda.synchronize()
        if args.build_only:
            continue
        with torch.cuda.nvtx.range(label):
            op(**inst.inputs)
        torch.cuda.synchronize()
        print("row", op_name, label, flush=True)


if __name__ == "__main__":
    main()
