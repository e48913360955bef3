"""One RGDR row on two draws of its inputs, one of which the bench's history makes slow, with the slot
permutations swapped between the draws, and a fan copy writing each draw's own state addresses.

Why: on an H100 (session 32, results ``session-2026-12-05i/experiments``) 16/32 heads, fp32 state, B=256
T_b=4 took 966 us on the inputs drawn first in a process and 1121 us on inputs drawn right after
``check_rgdr`` had run on a case of the same size and freed it, every time. Copying the pool to other
offsets from a 2 MiB boundary changed nothing, and neither did the slot permutation alone: the slow
draw's pool with the fast draw's slots ran at 966 us, and so did the fast pool with the slow slots.
A gather of the slow pool's head states and a pass over all of it ran as fast as the fast pool's. So only
the pairing of that pool's memory with its own slot permutation is slow, and RGDR writes each state
``T_b`` times at the addresses that pairing gives.
This repeats those steps and adds the one they lacked: the fan copy (``fan_copy.py``) writing
``T_b`` copies of each sequence's head states exactly where RGDR writes them, in each draw's pool
with its own slots and with the other's, its programs numbered sequence-major and head-major (which
addresses are written at once is what the pairing could change). If the copy slows on the slow pairing as RGDR does, the
memory system sets that row's ceiling: no kernel
can write those addresses faster, and the next step is the order in which programs write. If the
copy holds, the lead is the kernel. Last, the row's tiling with its grid transposed
(``RGDRTiling.sequences_fastest``) on both draws: the candidate where the order of writes is the cause.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/rgdr_pool_pairing.py
"""

import argparse
import json
from pathlib import Path

import torch

from dataclasses import replace

from cuda_bench_common import calls_on, log, rgdr_bytes, rgdr_calls, rgdr_key, time_graph
from fan_copy import BLOCK, fan_copy_kernel
from tileops_cuda.kernels.rgdr import build_rgdr, default_schedule
from tileops_cuda.testing import check_rgdr, rgdr_case


def state_destinations(slots: torch.Tensor, B: int, tb: int, nv: int, head_blocks: int,
                       heads_first: bool = False) -> torch.Tensor:
    """``dst[k, b]``: the 8 KiB block of the pool that copy ``k`` of source block ``b`` lands in, where
    source block ``b`` is block ``j`` of head ``h`` of sequence ``s``, numbered sequence-major (``s, h, j``)
    or, ``heads_first``, head-major (``h, s, j``: programs launched together write one head of many
    sequences), and copy ``k`` goes to the slot of the sequence's ``k``-th token: the blocks RGDR writes
    after each token."""
    slot = slots.view(B, tb).long()  # [s, k]
    h = torch.arange(nv, device=slots.device)
    j = torch.arange(head_blocks, device=slots.device)
    dst = (slot.t()[:, :, None, None] * nv + h[None, None, :, None]) * head_blocks + j  # [k, s, h, j]
    if heads_first:
        dst = dst.transpose(1, 2)  # [k, h, s, j]
    return dst.reshape(tb, -1).to(torch.int32).contiguous()


def time_fan_at(pool: torch.Tensor, slots: torch.Tensor, B: int, tb: int, heads_first: bool) -> float:
    """Microseconds of the fan copy writing ``T_b`` copies of B sequences' head states into ``pool`` at
    ``slots`` (a fresh source of the same size: the writes are RGDR's, the reads contiguous)."""
    nv = pool.shape[1]
    head_blocks = pool[0, 0].numel() * pool.element_size() // (4 * BLOCK)
    y = pool.view(torch.float32).view(-1, BLOCK)
    x = torch.randn(B * nv * head_blocks, BLOCK, device=pool.device)
    dst = state_destinations(slots, B, tb, nv, head_blocks, heads_first)
    kern = fan_copy_kernel(tb)
    kern(x, dst, y)
    torch.cuda.synchronize()
    assert torch.equal(y[dst[tb - 1].long()], x), "the fan copy wrote wrong data"
    return time_graph([lambda: kern(x, dst, y)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--row", default="16,32,float32,256,4", help="NK,NV,state,B,T_b")
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    nk, nv, state, B, tb = (f(v) for f, v in zip((int, int, str, int, int), opts.row.split(",")))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(31)
    key = rgdr_key(nk, nv, state)
    launcher = build_rgdr(key)
    foot = rgdr_bytes(B, tb, nk, nv, 4 if state == "float32" else 2)
    log(torch.cuda.get_device_name(), f"{nk}/{nv} {state} B={B} T_b={tb}, {foot / 2**30:.2f} GiB a call")
    res: dict = {}

    def rgdr(tag: str, draw: tuple) -> None:
        res[tag] = time_graph(draw[1])
        log(f"rgdr {tag:28s} {res[tag]:8.1f} us {foot / res[tag] / 1e3:6.0f} GB/s")

    a = rgdr_calls(launcher, key, B, tb, gen, 1)
    rgdr("first draw (a)", a)
    case = rgdr_case(key, [tb] * B, device="cuda", generator=gen)
    check_rgdr(launcher, case)
    del case
    b = rgdr_calls(launcher, key, B, tb, gen, 1)
    rgdr("draw after a check (b)", b)
    sa, sb = (d[0][0]["ssm_state_indices"] for d in (a, b))
    ia, ib = sa.clone(), sb.clone()
    sa.copy_(ib)
    rgdr("a's pool, b's slots", a)
    sb.copy_(ia)
    rgdr("b's pool, a's slots", b)
    sa.copy_(ia)
    sb.copy_(ib)
    # The candidate if the memory system is the cause: the row's tiling with its grid transposed
    # (RGDRTiling.sequences_fastest), so programs launched together write other slots.
    tiling = default_schedule(key).pick(B, B * tb)
    if not tiling.stream:
        transposed = build_rgdr(key, replace(tiling, sequences_fastest=True))
        for name, draw in (("a", a), ("b", b)):
            tag = f"rgdr sequences fastest, {name}'s draw"
            res[tag] = time_graph(calls_on(transposed, draw[0]))
            log(f"{tag:48s} {res[tag]:8.1f} us {foot / res[tag] / 1e3:6.0f} GB/s")
    for pname, draw in (("a", a), ("b", b)):
        for sname, slots in (("a", ia), ("b", ib)):
            for order, heads_first in (("sequence-major", False), ("head-major", True)):
                tag = f"fan copy: {pname}'s pool, {sname}'s slots, {order}"
                res[tag] = time_fan_at(draw[0][0]["state"], slots, B, tb, heads_first)
                log(f"{tag:48s} {res[tag]:8.1f} us")
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
