"""Issue 16's rows of the RGDR kernel launched once each, for Nsight Compute to read their counters.

Issue 16 asks for a profile of every losing row before the kernel changes further: achieved DRAM
throughput, occupancy, stall reasons. Timing experiments (``bench_cuda.py``, ``rgdr_speculate.py``)
say how long a row takes, not why; ``ncu`` reads the counters on the H200's Firecracker machines
(``--clock-control none``, as the device tool's METHOD.md asks). This script builds the default
schedule's launcher for each row, runs one call untimed (the build and first-launch costs stay out
of the profile), then one call inside an NVTX range named after the row, and prints the rows in
launch order: ``benchmarks/gpu/s_ncu.sh`` profiles exactly those ranges and pairs each kernel
with its row. ``--build-only`` compiles the rows' programs and stops (fill TileLang's disk cache
outside the profiler, which slows compiles).

Rows: ``STATE:B:T_b`` (Qwen3.5 heads NK=16 NV=32, DK=DV=128, bf16 inputs, in-kernel l2norm, g),
comma-separated.
"""

import argparse

import torch
from cuda_bench_common import calls_on, rgdr_calls, rgdr_key

from tileops_cuda.kernels.rgdr import build_rgdr

#: The rows issue 16 still loses (NOTES.md, seventh session): B >= 128 both states, B = 32, B = 1.
DEFAULT_ROWS = (
    "bfloat16:256:1,float32:256:1,bfloat16:128:2,float32:128:2,bfloat16:32:1,float32:32:1,float32:1:1,bfloat16:1:1"
)


def parse_rows(text: str) -> list[tuple[str, int, int]]:
    rows = []
    for item in text.split(","):
        state, b, tb = item.split(":")
        rows.append((state, int(b), int(tb)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="STATE:B:T_b,... (default: issue 16's losing rows)")
    ap.add_argument("--build-only", action="store_true", help="compile every row's programs and stop")
    args = ap.parse_args()
    rows = parse_rows(args.rows)
    launchers = {state: build_rgdr(rgdr_key(16, 32, state)) for state in dict.fromkeys(s for s, _, _ in rows)}
    if args.build_only:
        print("built:", ", ".join(launchers), flush=True)
        return
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    for state, B, tb in rows:
        launcher = launchers[state]
        sets, _ = rgdr_calls(launcher, rgdr_key(16, 32, state), B, tb, gen, 1)
        (call,) = calls_on(launcher, sets)
        call()  # the first launch of this row's program: not the one profiled
        torch.cuda.synchronize()
        name = f"{state}-B{B}-Tb{tb}"
        with torch.cuda.nvtx.range(name):
            call()
        torch.cuda.synchronize()
        tiling = launcher.schedule.pick(B, B * tb)
        print(f"row {name}: tiling {tiling}", flush=True)
        del sets


if __name__ == "__main__":
    main()
