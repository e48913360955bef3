"""What the varlen conv's memory structure alone reaches: its prefill traffic with no convolution.

Why: the varlen conv read 4k tokens at 78-81% of the same-size copy on an H100 and 80-88% on the H200 (issue
17's target is 85%), where rings of asynchronous row copies, explicit 128-bit stores, tighter register bounds
and other thread counts had measured no better (NOTES.md, sixth to tenth sessions). Each structure here walks
``x`` exactly as a varlen program does (a program a chunk of ``chunk`` tokens and a channel block, a thread's
16-byte vector a row, the chunk's ``W - 1`` rows before it read first, groups of ``tokens`` rows with
``ahead`` groups in flight) and stores each row to ``out`` after ``work`` dependent FMAs an element
(``x * a + b``, ``a`` and ``b`` passed at run time). With one FMA it is the layout's ceiling; the variants
say whether more bytes in flight a thread (``ahead``, ``tokens``), more threads, or more waves (shorter
chunks, or fewer programs an SM through ``resident``) is what the layout lacks. The answer on an H100
(forty-first session): the waves. At chunk 64 a 4k call is one wave of 512 programs streaming all of ``x``
at once, 91% of the copy at any depth; 16-token chunks, or the same chunks two programs an SM, 95-99%. The
registered chunk is 16 since.

Reported in one run beside the same-size copy (``cuda_bench_common.same_size_copy``) and the registered
varlen conv and its twins (``--conv-twins``) on the 1-prompt and 8-prompt rows (``conv_varlen_layouts``), as µs
and % of the copy. Every structure is first checked with ``a = 2``: every output row is its input times
``2 ** work``, bit for bit; every conv row against the CPU reference.

    python3 conv_structure.py [--only SUBSTRING] [--conv-twins chunk=64,chunk=32] [--json F]
"""

import argparse
import json

import torch
from conv_varlen_layouts import ROWS, SETS, D, W, call, check, inputs, launcher
from conv_varlen_layouts import T as TOKENS
from cuda_bench_common import same_size_copy, time_graph

from tileops_cuda.kernels._common import annotate_pass_configs, compile_many, compile_prim_func

VC = 8  # bf16 channels a thread: one 16-byte vector a row

#: name -> (threads, tokens a group, groups ahead, chunk, min programs an SM, work[, resident[, rounds]]). The first
#: is the varlen program's layout until the forty-first session (128 threads, chunk 64, groups of 4 rows, one group
#: ahead, 4 programs an SM); chunk 16 (``t128-g4-a1-c16``) is the registered one since.
#: ``resident`` caps the programs an SM by the shared memory each takes (a 4k call's 512 programs of 64-token
#: chunks are one wave; at 2 an SM, two).
STRUCTURES = {
    "t128-g4-a1-c64": (128, 4, 1, 64, 4, 1),
    "t128-g4-a1-c64-w16": (128, 4, 1, 64, 4, 16),
    "t128-g4-a2-c64": (128, 4, 2, 64, 4, 1),
    "t128-g4-a3-c64": (128, 4, 3, 64, 4, 1),
    "t128-g8-a1-c64": (128, 8, 1, 64, 4, 1),
    "t128-g8-a2-c64": (128, 8, 2, 64, 4, 1),
    "t128-g2-a2-c64": (128, 2, 2, 64, 4, 1),
    "t128-g2-a4-c64": (128, 2, 4, 64, 4, 1),
    "t64-g4-a1-c64": (64, 4, 1, 64, 8, 1),
    "t64-g4-a2-c64": (64, 4, 2, 64, 8, 1),
    "t256-g4-a1-c64": (256, 4, 1, 64, 2, 1),
    "t128-g4-a1-c32": (128, 4, 1, 32, 8, 1),
    "t128-g4-a2-c32": (128, 4, 2, 32, 8, 1),
    "t128-g4-a1-c16": (128, 4, 1, 16, 8, 1),
    "t128-g4-a1-c128": (128, 4, 1, 128, 4, 1),
    "t128-g8-a2-c128": (128, 8, 2, 128, 4, 1),
    # With the arithmetic of a convolution a row (about 8 dependent FMAs an element): does depth then pay?
    "t128-g4-a1-c64-w8": (128, 4, 1, 64, 4, 8),
    "t128-g4-a2-c64-w8": (128, 4, 2, 64, 4, 8),
    "t128-g4-a4-c64-w8": (128, 4, 4, 64, 4, 8),
    "t128-g8-a2-c64-w8": (128, 8, 2, 64, 4, 8),
    "t128-g2-a4-c64-w8": (128, 2, 4, 64, 4, 8),
    "t128-g4-a1-c16-w8": (128, 4, 1, 16, 8, 8),
    "t128-g4-a2-c32-w8": (128, 4, 2, 32, 8, 8),
    "t64-g4-a2-c64-w8": (64, 4, 2, 64, 8, 8),
    "t128-g4-a2-c64-w16": (128, 4, 2, 64, 4, 16),
    "t128-g4-a4-c64-w16": (128, 4, 4, 64, 4, 16),
    # Waves or chunk length? The same chunks at fewer programs an SM (more waves), and shorter chunks.
    "t128-g4-a1-c64-r2": (128, 4, 1, 64, 4, 1, 2),
    "t128-g4-a1-c64-r3": (128, 4, 1, 64, 4, 1, 3),
    "t128-g4-a1-c32-r4": (128, 4, 1, 32, 4, 1, 4),
    "t128-g4-a1-c16-r4": (128, 4, 1, 16, 4, 1, 4),
    "t128-g2-a1-c16-b8": (128, 2, 1, 16, 8, 1),
    "t128-g4-a1-c8-b8": (128, 4, 1, 8, 8, 1),
    "t64-g4-a1-c16-b16": (64, 4, 1, 16, 16, 1),
    "t256-g4-a1-c16-b4": (256, 4, 1, 16, 4, 1),
    "t128-g4-a1-c16-b8-w8": (128, 4, 1, 16, 8, 8),
    # What is left between the registered conv (chunk 16: 84-87% on an H100) and its structure (96-99%): the
    # arithmetic at its four programs an SM, and its metadata search before the group loop (``rounds``).
    "t128-g4-a1-c16-r4-w8": (128, 4, 1, 16, 4, 8, 4),
    "t128-g4-a1-c16-r4-p2": (128, 4, 1, 16, 4, 1, 4, 2),
    "t128-g4-a1-c16-r4-p5": (128, 4, 1, 16, 4, 1, 4, 5),
    "t128-g4-a1-c16-r4-w8-p5": (128, 4, 1, 16, 4, 8, 4, 5),
    "t128-g4-a1-c64-p5": (128, 4, 1, 64, 4, 1, 0, 5),
}

#: The registered program's rows timed beside them (conv_varlen_layouts' labels).
CONV_ROWS = ("1 x 4096, lengths, no init (the 1-prompt row)", "8 x 512, cu_seqlens, init (the 8-prompt row)")


def structure_program(threads: int, tokens: int, ahead: int, chunk: int, blocks: int, work: int, resident: int = 0,
                      rounds: int = 0):
    """``kern(x, out, a, b)`` over ``[T, D]`` bf16 (T dynamic), laid out as the module docstring says; with
    ``resident``, each program also takes enough shared memory (a row of the window through it) that at most
    ``resident`` share an SM; with ``rounds``, the program runs that many dependent rounds before its group loop
    (a global read whose row depends on the round before, then two barriers), as the varlen program's metadata
    search does (a ``cu`` read, scans and five barriers), its first loads in flight meanwhile."""
    import tilelang.language as T

    dt, f32 = "bfloat16", "float32"
    Tn = T.dynamic("T")
    ncb = D // (threads * VC)
    ng = chunk // tokens
    nbuf = ahead + 1
    assert chunk % tokens == 0 and D % (threads * VC) == 0, (threads, tokens, chunk)

    @T.macro
    def load(x, bufs, k, t0, g, c0):
        for i in T.unroll(tokens):
            for e in T.vectorized(VC):
                bufs[k, i * VC + e] = T.if_then_else(t0 + g * tokens + i < Tn, x[t0 + g * tokens + i, c0 + e],
                                                      T.cast(0, dt))

    @T.prim_func
    def kern(x: T.Tensor((Tn, D), dt), out: T.Tensor((Tn, D), dt), a: T.float32, b: T.float32):
        # every access guarded by the token bound above; the shared row is this thread's own (no barrier)
        annotate_pass_configs(True, {"tl.disable_thread_storage_sync": True})
        with T.Kernel(ncb, T.ceildiv(Tn, chunk), threads=threads) as (bx, by):
            T.annotate_min_blocks_per_sm(blocks)
            tid = T.get_thread_binding()
            c0 = (bx * threads + tid) * VC
            t0 = by * chunk
            win = T.alloc_local(((W - 1) * VC,), dt)  # the rows before the chunk, as the conv reads them
            bufs = T.alloc_local((nbuf, tokens * VC), dt)
            acc = T.alloc_local((VC,), f32)
            held = T.alloc_shared((max(1, (220 * 1024 // resident) // 2 if resident else threads * VC),), dt)
            for k in T.unroll(W - 1):
                for e in T.vectorized(VC):
                    win[k * VC + e] = T.if_then_else(t0 - (W - 1) + k >= 0, x[T.max(t0 - (W - 1) + k, 0), c0 + e],
                                                      T.cast(0, dt))
            for e in T.vectorized(VC):
                held[tid * VC + e] = win[e]
            for g in T.unroll(min(ahead, ng)):
                load(x, bufs, g, t0, g, c0)
            if rounds:
                row = T.alloc_var("int32")
                row = 0
                for _ in T.unroll(rounds):  # each round's read waits for the last: its row is 0 at run time (b = -0)
                    T.sync_threads()
                    for e in T.vectorized(VC):
                        held[tid * VC + e] = x[T.min(t0 + row, Tn - 1), c0 + e]
                    T.sync_threads()
                    row = T.cast(T.cast(held[((tid + 1) % threads) * VC], f32) * b, "int32")
            for g in T.unroll(ng):  # unrolled: each group's buffer is a constant register set
                if g + ahead < ng:
                    load(x, bufs, (g + ahead) % nbuf, t0, g + ahead, c0)
                for i in T.unroll(tokens):
                    for v in T.unroll(VC):
                        acc[v] = T.cast(bufs[g % nbuf, i * VC + v], f32)
                        for _ in T.unroll(work):
                            acc[v] = acc[v] * a + b
                        # the window's rows enter as zeros (-0.0 * their value keeps the bits of acc)
                        if g == 0 and i == 0:
                            acc[v] = acc[v] + b * T.cast(held[tid * VC + v], f32)
                    if t0 + g * tokens + i < Tn:
                        for e in T.vectorized(VC):
                            out[t0 + g * tokens + i, c0 + e] = T.cast(acc[e], dt)

    return kern


def check_structure(kern, work: int, gen) -> str | None:
    """None if every output row is its input row times ``2 ** work`` (exact in bf16), at a ragged T too."""
    x = torch.randn(TOKENS - 37, D, device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    kern(x, out, 2.0, -0.0)
    torch.cuda.synchronize()
    return None if torch.equal(out, x * 2.0**work) else "rows differ"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="only structures whose name contains this")
    ap.add_argument("--conv-twins", default="chunk=64,chunk=32",
                    help="comma-separated twins of the registered conv key (conv_varlen_layouts.twinned) timed too")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    twins = [""] + [t for t in args.conv_twins.split(",") if t]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(18)
    names = [n for n in STRUCTURES if args.only in n]
    built = compile_many([lambda n=n: compile_prim_func(structure_program(*STRUCTURES[n]), "sm_90") for n in names]
                         + [lambda t=t, w=w: launcher(*w, t) for t in twins
                            for w in (("lengths", False), ("cu_seqlens", True))])
    moved = 2 * TOKENS * D * 2  # x read, out written (the window rows are noise beside them)
    copy_us = same_size_copy(moved)
    print(f"same-size copy ({moved / 2**20:.0f} MiB moved): {copy_us:.2f} us", flush=True)
    results = {"copy_us": copy_us, "rows": []}
    xs = [torch.randn(TOKENS, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(SETS)]
    outs = [torch.empty_like(x) for x in xs]
    for name, kern in zip(names, built):
        rec = {"name": name, "config": STRUCTURES[name]}
        if isinstance(kern, BaseException):
            rec.update(ok=False, why=f"build failed: {kern!r}"[:300])
        else:
            why = check_structure(kern, STRUCTURES[name][5], gen)
            rec.update(ok=why is None, why=why)
            if why is None:
                us = time_graph([lambda x=x, o=o: kern(x, o, 1.0, -0.0) for x, o in zip(xs, outs)], warmup_ms=100)
                rec.update(us=us, pct_same=100 * copy_us / us)
        results["rows"].append(rec)
        print(f"{name:28s} " + (f"{rec['us']:7.2f} us  {rec['pct_same']:5.1f}% of the same-size copy" if rec["ok"]
                                else f"FAILED: {rec['why']}"), flush=True)
    del xs, outs
    torch.cuda.empty_cache()
    for label in CONV_ROWS:
        lengths, style, init, *variant = ROWS[label]
        sets = [inputs(lengths, style, init, gen, *variant) for _ in range(SETS)]
        couts = [torch.empty_like(c["x"]) for c in sets]
        for twin in twins:
            try:
                run = launcher(style, init, twin).run
            except Exception as exc:  # a twin the key refuses or that fails to build: reported, the rest go on
                run, why = None, f"build failed: {exc!r}"[:300]
            else:
                why = check(run, sets[0], style)
            rec = {"name": f"conv {twin or 'registered'}: {label}", "ok": why is None, "why": why}
            if why is None:
                us = time_graph([lambda c=c, o=o, run=run: call(run, c, style, o) for c, o in zip(sets, couts)],
                                warmup_ms=100)
                rec.update(us=us, pct_same=100 * copy_us / us)
            results["rows"].append(rec)
            print(f"{rec['name']:28s} " + (f"{rec['us']:7.2f} us  {rec['pct_same']:5.1f}% of the same-size copy"
                                            if rec["ok"] else f"FAILED: {why}"), flush=True)
        del sets, couts
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
