"""Whether nvcc's split 16-byte stores cost the RGDR programs time (a timing experiment).

Read off the PTX that nvcc 13.0 gives for sm_90a (backends/cuda/NOTES.md, ninth session): in every
RGDR program one of a thread's state rows is written as four ``st.global.u32``/``f32``, the others as
one ``st.global.v4``. A split store is four instructions, each touching every line of the warp's 512
bytes partially: four times the store requests for a quarter of the state's bytes. TileLang's
``tl.enable_lower_ldgstg`` pass turns every vector global access into explicit 128-bit PTX instead.
This compiles the default decode schedule's program at B = 32, 128 and 256 (T_b = 1, both states)
plain and with the pass, checks both give the same bits (output and state), and times them on the
same rotated input sets (CUDA-graph replay, medians of ``--rounds`` interleaved rounds) beside a copy
of the same bytes. (The conv kernels' version of this is their ``wide_stores`` build-key field, timed
by ``layer_ops_sweep.py``.)

    python3 store_width.py [--rounds 3] [--json out.json]
"""

import argparse
import json
import statistics

import torch
from cuda_bench_common import rgdr_key
from rgdr_speculate import same_bits, time_row
from rgdr_splits import Forced

from tileops_cuda.kernels._common import compile_prim_func, direct_entry
from tileops_cuda.kernels.rgdr import build_rgdr, stream_splits
from tileops_cuda.kernels.rgdr_program import rgdr_program
from tileops_cuda.testing import rgdr_case

WIDE = {"tl.enable_lower_ldgstg": True}


def rgdr_rows(rounds: int, gen) -> list[dict]:
    out = []
    for st in ("float32", "bfloat16"):
        key = rgdr_key(16, 32, st)
        launcher = build_rgdr(key)
        for B in (32, 128, 256):
            t = launcher.schedule.pick(B, B)
            wide_fn = direct_entry(compile_prim_func(rgdr_program(key, t), key.arch, WIDE))
            splits = stream_splits(key, t, B, torch.cuda.get_device_properties(0).multi_processor_count)
            variants = {"plain": Forced(launcher, t, splits), "wide": Forced(launcher, t, splits, fn=wide_fn)}
            case = rgdr_case(key, [1] * B, device="cuda", generator=gen)
            same = same_bits(variants["plain"], variants["wide"], case)
            foot, copy_us, times = time_row(variants, key, B, 1, gen, rounds)
            out.append({"row": f"rgdr {st} B={B} {t}", "same_bits": same, "copy_us": copy_us,
                        **{f"{n}_us": statistics.median(v) for n, v in times.items()}})
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(16)
    results = rgdr_rows(args.rounds, gen)
    print(f"{'row':58s} {'bits':>5s} {'copy':>8s} {'plain':>16s} {'wide':>16s} {'x':>6s}")
    for r in results:
        c, p, w = r["copy_us"], r["plain_us"], r["wide_us"]
        print(f"{r['row'][:58]:58s} {str(r['same_bits']):>5s} {c:8.2f} {p:8.2f} {100 * c / p:6.1f}% "
              f"{w:8.2f} {100 * c / w:6.1f}% {p / w:6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
