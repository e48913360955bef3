"""RGDR's large rows with the state slots where the bench puts them (a random permutation) and in order.

Why: issue 16's table (thirty-first session, H100, ``s31c``) reads 84-96% of the copy ceiling on the
B >= 128 rows that write up to 16384 head states a call (T x NV) and 75-80% on those that write 32768 or more
(16/32 heads at B=256 T_b=4 and B=128 T_b=8, 8/16 at B=256 T_b=8; fp32 8/16 aside, 87%), in either state
dtype, so neither the bytes (bf16 16/32 B=256 T_b=4 writes 1 GB at 79%, fp32 B=128 T_b=4 1 GB at 92%) nor
the program (B=128 and B=256 run the same role) explains them. The bench gives every token its own slot of
the pool at random (``testing.rgdr_case``), as a serving pool does, and each head state is a 32-64 KB run at
a random place in that pool. This
times the default schedule's launcher on the same inputs with the slot indices as drawn and with
``slot = token`` (each sequence's states side by side), and beside them two fan copies at each row's
footprint: 8 KiB blocks read once and written ``T_b`` times, in order and to places permuted at the
granularity of a head state. If the slow rows recover in order and the permuted copy drops as they
do, the dip is the memory system's answer to scattered writes, and the ceiling the table divides by
should be the permuted one; if the copy holds where the kernel drops, the kernel is the lead.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/rgdr_slot_layout.py
"""

import argparse
import json

import torch

from cuda_bench_common import log, rgdr_bytes, rgdr_calls, rgdr_key, time_graph
from fan_copy import BLOCK, fan_copy_kernel, fan_destinations
from tileops_cuda.kernels.rgdr import build_rgdr

#: (NK, NV, state, B, T_b): the three slow rows of each state dtype and a fast row beside each.
ROWS = [(16, 32, st, B, tb) for st in ("float32", "bfloat16") for B, tb in ((128, 4), (256, 4), (128, 8))] + [
    (8, 16, st, 256, tb) for st in ("float32", "bfloat16") for tb in (4, 8)]


def time_fan(state_bytes: int, fan: int, run_bytes: int, scattered: bool) -> float:
    """GB/s (read + written) of the fan copy over a source of ``state_bytes``, runs of ``run_bytes`` in
    order or ``scattered``."""
    blocks = state_bytes // (4 * BLOCK)
    x = torch.randn(blocks, BLOCK, device="cuda")
    y = torch.empty(fan * blocks, BLOCK, device="cuda")
    dst = fan_destinations(fan, blocks, max(1, run_bytes // (4 * BLOCK)), scattered).cuda()
    kern = fan_copy_kernel(fan)
    kern(x, dst, y)
    torch.cuda.synchronize()
    k = int(torch.randint(fan, ()))
    assert torch.equal(y[dst[k].long()], x), "the fan copy wrote wrong data"
    us = time_graph([lambda: kern(x, dst, y)], target_ms=200)
    del x, y, dst
    torch.cuda.empty_cache()
    return (1 + fan) * state_bytes / (us * 1e-6) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(31)
    log(torch.cuda.get_device_name())
    log("row                      |  random us  GB/s | in order us  GB/s | fan copy GB/s in order  permuted")
    results = []
    for nk, nv, state, B, tb in ROWS:
        key = rgdr_key(nk, nv, state)
        launcher = build_rgdr(key)
        sbytes = 4 if state == "float32" else 2
        foot = rgdr_bytes(B, tb, nk, nv, sbytes)
        row = dict(NK=nk, NV=nv, state=state, B=B, Tb=tb, bytes=foot)
        sets, calls = rgdr_calls(launcher, key, B, tb, gen, 1)
        row["random_us"] = time_graph(calls)
        c = sets[0]
        c["ssm_state_indices"].copy_(torch.arange(B * tb, dtype=c["ssm_state_indices"].dtype))
        row["in_order_us"] = time_graph(calls)
        del sets, calls, c
        torch.cuda.empty_cache()
        head_state = 128 * 128 * sbytes
        for name, scattered in (("fan_in_order_GBps", False), ("fan_permuted_GBps", True)):
            row[name] = time_fan(B * nv * head_state, tb, head_state, scattered)
        results.append(row)
        log(f"{nk:2d}/{nv:2d} {state:8s} B={B:3d} T_b={tb} | {row['random_us']:8.1f} "
            f"{foot / row['random_us'] / 1e3:6.0f} | {row['in_order_us']:8.1f} "
            f"{foot / row['in_order_us'] / 1e3:6.0f} | {row['fan_in_order_GBps']:10.0f} "
            f"{row['fan_permuted_GBps']:9.0f}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
