"""Do the small rows pay for switching the SMs' shared-memory carveout between kernels?

Nsight Compute ran the attention decode's split program at B=1 4k in a 233 KB shared-memory configuration and
its combine in a 32.8 KB one (``session-2026-12-06k/s45c_ncu_decode.txt``, "Shared Memory Configuration Size"),
and the split kernel's SMs were active for 10.1 k of its 20.9 k elapsed cycles. An SM changes its carveout only
when drained, and blocks of two kernels in different configurations do not share an SM, so a graph that
alternates the two may drain the SMs at every switch, and the combine, launched as a programmatic dependent,
cannot start beside the split's tail. The driver picks a configuration per kernel where the kernel states no
preference (TileLang's do not); ``cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED)`` asks for the largest shared
memory for every such kernel of the context.

This times rows through their ops (the registered kernels) in CUDA graphs, each beside the same-size copy, with
the context's preference ``none`` and ``shared`` alternating (none, shared, none, shared: a drift shows as a
difference between the two runs of one setting), and prints the ratio. Rows default to the attention decode's
small-batch rows and a few others of mixed shared memory; ``--rows OP:LABEL,...`` picks others.

    python3 carveout_probe.py [--rows OP:LABEL,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_bench_common import ROTATE_BYTES, log, same_size_copy, time_graph  # noqa: E402
from row_profile import row_op  # noqa: E402

from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.roofline import roofline_of_row  # noqa: E402
from tileops_core.workloads import dtype_cases  # noqa: E402

#: The rows timed by default: the decode rows furthest from the copy (issue 21), then rows whose kernels hold
#: little shared memory beside ones that hold much (RGDR, the conv update, the norms, routing).
DEFAULT_ROWS = (
    "AttentionDecodeFwdOp:qwen3-next-b1-4k", "AttentionDecodeFwdOp:qwen3-next-b1-32k",
    "AttentionDecodeFwdOp:qwen3-next-paged-b1-4k", "AttentionDecodeFwdOp:qwen3-next-b16-8k",
    "RecurrentGatedDeltaRuleFwdOp:qwen3.5-b1-t1-fp32state", "CausalConv1dUpdateFwdOp:qwen3.5-b1-t1",
    "MoETopKRoutingFwdOp:qwen3-next-80b-decode-b64",
)

#: ``CUfunc_cache`` values (the driver API's names).
PREFERENCES = {"none": 0, "shared": 1}


def set_preference(name: str) -> None:
    """The current context's cache configuration (``cuCtxSetCacheConfig``), read back to confirm."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    rc = libcuda.cuCtxSetCacheConfig(ctypes.c_int(PREFERENCES[name]))
    got = ctypes.c_int(-1)
    rc2 = libcuda.cuCtxGetCacheConfig(ctypes.byref(got))
    if rc or rc2 or got.value != PREFERENCES[name]:
        raise RuntimeError(f"cuCtxSetCacheConfig({name}): rc {rc}/{rc2}, read back {got.value}")


def row_calls(op_name: str, label: str) -> tuple[list, float]:
    """The calls of one row (an op call each on its own input set, enough sets to rotate past the L2) and the
    row's roofline bytes."""
    spec = load_manifest()[op_name]
    row = next(r for r in spec.workloads if r.label == label)
    moved = float(roofline_of_row(spec, row, dtype_cases(row)[0]).bytes)
    sets = max(1, min(32, -(-ROTATE_BYTES // max(1, int(moved)))))
    calls = []
    for seed in range(sets):
        op, inputs = row_op(op_name, label, seed=100 + seed)
        op(**inputs)  # builds, selects, and the first launch outside the graph
        calls.append(lambda op=op, inputs=inputs: op(**inputs))
    torch.cuda.synchronize()
    return calls, moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    log(f"device {torch.cuda.get_device_name()}")
    results = []
    for item in args.rows.split(","):
        op_name, label = item.split(":", 1)
        try:
            calls, moved = row_calls(op_name, label)
        except Exception as exc:  # a row that cannot build here is reported, the rest still run
            log(f"{item}: FAILED to build: {type(exc).__name__}: {str(exc)[-300:]}")
            continue
        times: dict[str, list[float]] = {p: [] for p in PREFERENCES}
        copies: dict[str, list[float]] = {p: [] for p in PREFERENCES}
        for pref in ("none", "shared", "none", "shared"):
            set_preference(pref)
            times[pref].append(time_graph(calls))
            copies[pref].append(same_size_copy(int(moved)))
        set_preference("none")
        best = {p: min(v) for p, v in times.items()}
        record = dict(row=item, bytes=moved, us=times, copy_us=copies,
                      pct_copy={p: round(100 * min(copies[p]) / best[p], 1) for p in PREFERENCES},
                      shared_over_none=round(best["none"] / best["shared"], 3))
        results.append(record)
        log(f"{item:52s} none {times['none'][0]:8.2f} {times['none'][1]:8.2f} us ({record['pct_copy']['none']:5.1f}%)"
            f"  shared {times['shared'][0]:8.2f} {times['shared'][1]:8.2f} us ({record['pct_copy']['shared']:5.1f}%)"
            f"  x{record['shared_over_none']:.3f}  copy {min(copies['none']):.2f} / {min(copies['shared']):.2f}")
        del calls
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
