"""What RGDR's memory structure alone reaches on this card: its decode traffic with no recurrence.

Why: on the H200 the registered RGDR programs read and write a T_b = 1 decode step's states at 80-92% of
the copy ceiling, where on the H100 the same programs reach 93-98%; neither more bytes in flight (the
tenth session's ring) nor fewer instructions (rounds 1-3) closed it. This separates the structure from
the arithmetic: each program here walks the pool exactly as an RGDR layout does (a program a (sequence,
value head, tile of rows), or a (sequence, key head) streaming its group's rows in chunks; a row over
``tpr`` lanes in 16-byte runs interleaved across them; ``rows`` rows a thread; slots gathered from an index
tensor) but only loads each state tile and stores it back in place, after ``work`` dependent FMAs an
element (x * a + b with a = 1, b = -0.0 passed at run time: the bits stay, nothing folds). With no work
it is the layout's ceiling; with work, how much arithmetic a byte the layout hides. The ``bulk`` layout
moves the chunks through shared memory with bulk copies (TMA) instead of registers: a design RGDR does not
have yet, timed as a structure first.

Reported beside the 1 GiB copy ceiling, the in-place copy ceiling (``bench_cuda``) and RGDR layouts
(:func:`rgdr_variants`: the registered schedule and candidates) on the same rows, all in this run, as µs and
% of the copy ceiling by the bytes each moves (the structures: the states read and written; RGDR:
``rgdr_bytes``, its inputs included). CUDA-graph replay medians after ``RGDR_WARMUP_MS`` of untimed
replays. Every structure is first checked with ``a = 2`` (every live slot scaled by ``2 ** work``, bit for
bit; every other slot untouched, or still NaN out of place), and every RGDR layout against float64 on a
decode step and a ragged batch (``check_rgdr``). ``--tbs`` adds RGDR rows of more tokens a sequence.

    python3 rgdr_structure.py [--states bfloat16,float32] [--batches 128,256] [--tbs 1,2] [--only SUBSTRING] [--json F]
"""

import argparse
import functools
import json
import math

import torch
from cuda_bench_common import (RGDR_WARMUP_MS, ROTATE_BYTES, calls_on, rgdr_bytes, rgdr_calls, rgdr_check_cases,
                               rgdr_key, time_graph)

from tileops_cuda.kernels._common import ELEM_BYTES, annotate_pass_configs, compile_many, compile_prim_func
from tileops_cuda.kernels.rgdr import STREAM_CUTS, TILED_CUTS, RGDRSchedule, RGDRTiling, build_rgdr, default_schedule
from tileops_cuda.testing import check_rgdr

NK, NV, DV, DK = 16, 32, 128, 128


def structures(state: str) -> dict:
    """Name -> (layout, threads, lanes a row, rows a thread, programs an SM, depth, work, in place); for the
    ``bulk`` layout (:func:`bulk_program`) rows are a chunk's and depth its stages.

    ``depth``: the streamed layout's chunks in flight ahead of the one stored (1 is RGDR's prefetch). In
    place, the program reads and writes one pool parameter, as RGDR does, and a compiler fence between
    chunks holds each chunk's loads in their place; out of place (``src`` read-only) the compiler hoists
    every load of a program to its top: that is the layout with all its bytes in flight, a ceiling."""
    out = {}
    for rows, blocks in ((1, 8), (1, 16), (2, 4), (2, 8), (2, 16), (4, 4), (4, 8), (8, 4), (8, 8)):
        out[f"tiled-r{rows}-b{blocks}"] = ("tiled", 128, 16, rows, blocks, 0, 1, True)
    out["tiled-r4-b8-hoisted"] = ("tiled", 128, 16, 4, 8, 0, 0, False)
    out["tiled256-r4-b4"] = ("tiled", 256, 16, 4, 4, 0, 1, True)
    for rows in (4, 8):
        for depth in (1, 2, 3):
            out[f"stream-r{rows}-d{depth}"] = ("stream", 128, 16, rows, 4, depth, 1, True)
        out[f"stream-r{rows}-hoisted"] = ("stream", 128, 16, rows, 4, 1, 0, False)
    # Bulk copies: chunk rows, stages, programs an SM within 228 KB of shared memory and no spill (ptxas).
    bulk = ((64, 2, 4), (64, 3, 3), (32, 3, 4), (32, 4, 4)) if state == "bfloat16" else ((64, 2, 3), (32, 2, 4),
                                                                                            (32, 3, 4))
    for rows, stages, blocks in bulk:
        out[f"bulk-r{rows}-s{stages}-b{blocks}"] = ("bulk", 128, 16, rows, blocks, stages, 1, True)
    # The same with the stores by bulk copy too (registers -> shared -> TMA store): one chunk buffer more a
    # program, so one program an SM fewer where shared memory bounds them.
    for rows, stages, blocks in bulk:
        fewer = max(blocks - 1, 2)
        out[f"bulkst-r{rows}-s{stages}-b{fewer}"] = ("bulkst", 128, 16, rows, fewer, stages, 1, True)
    for work in (4, 8, 16):
        out[f"tiled-r4-b8-w{work}"] = ("tiled", 128, 16, 4, 8, 0, work, True)
        out[f"stream-r8-d1-w{work}"] = ("stream", 128, 16, 8, 4, 1, work, True)
    return out


def rgdr_variants(state: str) -> dict:
    """Name -> RGDR schedule timed beside the structures: the registered one, the tiled 1-2-row layouts
    for both states, and for bf16 the tiled layouts the structures favour (4 rows a thread at 8 programs
    an SM, 8 at 4; speculating; with and without round 2's instruction cuts) and streamed layouts with
    more warps an SM, run at every batch size."""
    key = rgdr_key(NK, NV, state)
    out = {"rgdr (registered)": default_schedule(key)}
    # The tiled layouts of 1-2 rows a thread that led the structures on the H200 at B = 128/256 (s38d:
    # bf16 tiled-r2-b16 86.4% of the copy against the registered RGDR's 80.4%, fp32 tiled-r1-b16 93.3%
    # against 89.8%), as RGDR programs of the small role's form (dependent launches). At 16 programs an
    # SM (32 registers) RGDR spills; at 12 (40) these lower without a spill for sm_90a (ptxas), 2 rows
    # at fp32 only at 8 (64 registers).
    for rows, blocks in ((1, 12), (2, 8)) + (((2, 12),) if state == "bfloat16" else ()):
        t = RGDRTiling(128, 16, rows, blocks, False, True, **TILED_CUTS, dependent_launch=True)
        out[f"rgdr tiled-r{rows}-b{blocks}"] = RGDRSchedule(t, t, 1 << 62)
    if state == "bfloat16":
        cuts = dict(unpack_bits=True, row_deltas=True, stage_live_warps=True)  # round 2's fields
        # (256 threads at 4 rows: a 64-row tile, the per-program staging over twice the rows at the same 32 warps)
        for threads, rows, blocks in ((128, 4, 8), (128, 8, 4), (256, 4, 4)):
            for more in ({}, cuts):
                t = RGDRTiling(threads, 16, rows, blocks, False, True, **TILED_CUTS, **more, dependent_launch=True)
                wide = "256" if threads == 256 else ""
                out[f"rgdr tiled{wide}-r{rows}-b{blocks}{'-cuts' if more else ''}"] = RGDRSchedule(t, t, 1 << 62)
        # The streamed layout with more warps an SM at the same registers a thread: 256 threads a program
        # (4 rows at 3 programs an SM, 2 rows at 4; 80 / 64 registers), and the 4-row program of B = 16..63.
        for threads, rows, blocks in ((256, 4, 3), (256, 2, 4), (128, 4, 6)):
            t = RGDRTiling(threads, 16, rows, blocks, True, True, **STREAM_CUTS, dependent_launch=True)
            out[f"rgdr stream{threads}-r{rows}-b{blocks}"] = RGDRSchedule(t, t, 1 << 62)
    return out


def _fma_chain(x, a, b, work: int):
    """``work`` dependent FMAs on ``x`` (``x * a + b`` each), written out as one expression."""
    for _ in range(work):
        x = x * a + b
    return x


def structure_kernel(state: str, *config) -> object:
    """:func:`structure_program` (or :func:`bulk_program` for the ``bulk`` layout) compiled for sm_90."""
    if config[0] in ("bulk", "bulkst"):
        _, threads, _, rows, blocks, depth, work, _ = config
        return compile_prim_func(bulk_program(state, threads, rows, blocks, depth, work, config[0] == "bulkst"),
                                 "sm_90")
    return compile_prim_func(structure_program(state, *config), "sm_90")


def bulk_program(state: str, threads: int, rows: int, blocks: int, stages: int, work: int, bulk_store: bool = False):
    """In place ``kern(pool, slots, a, b)``: a program a (sequence, key head) streams its group's rows in
    chunks of ``rows`` rows through shared memory with bulk copies (``T.copy`` of a whole chunk: TMA on
    Hopper), ``stages`` chunks in flight (``T.Pipelined``), each chunk then through registers (``work``
    FMAs an element) and back to its place. The bytes in flight sit in shared memory, not registers: the
    design the issue names next (bulk asynchronous copies of state tiles), as a structure. ``bulk_store``:
    the chunk goes back through shared memory by a bulk copy too (a TMA store), so neither direction of the
    state traffic is issued thread by thread."""
    import tilelang.language as T

    f32 = "float32"
    S, B = T.dynamic("S"), T.dynamic("B")
    group = NV // NK * DV
    nch = group // rows
    assert group % rows == 0 and work >= 1, (rows, work)

    @T.prim_func
    def kern(pool: T.Tensor((S, NV * DV, DK), state), slots: T.Tensor((B,), "int32"), a: T.float32, b: T.float32):
        annotate_pass_configs(True)  # as the register structures: every access in bounds by construction
        with T.Kernel(NK, B, threads=threads) as (bx, by):
            T.annotate_min_blocks_per_sm(blocks)
            slot = T.alloc_var("int32")
            slot = slots[by]
            chunk_s = T.alloc_shared((rows, DK), state)
            chunk_r = T.alloc_fragment((rows, DK), state)
            chunk_o = T.alloc_shared((rows, DK), state) if bulk_store else None
            for c in T.Pipelined(nch, num_stages=stages):
                T.copy(pool[slot, bx * group + c * rows : bx * group + (c + 1) * rows, :], chunk_s)
                T.copy(chunk_s, chunk_r)
                for i, j in T.Parallel(rows, DK):
                    chunk_r[i, j] = T.cast(_fma_chain(T.cast(chunk_r[i, j], f32), a, b, work), state)
                if bulk_store:
                    T.copy(chunk_r, chunk_o)
                T.copy(chunk_o if bulk_store else chunk_r,
                       pool[slot, bx * group + c * rows : bx * group + (c + 1) * rows, :])

    return kern


def structure_program(state: str, layout: str, threads: int, tpr: int, rows: int, blocks: int, depth: int,
                      work: int, in_place: bool):
    """In place ``kern(pool, slots, a, b)``, else ``kern(src, dst, slots, a, b)``: the states of ``slots``
    (B int32) of the pool ((S, NV*DV, DK)) stored to the same slots after ``work`` FMAs an element
    (``x * a + b``), laid out as the module docstring says."""
    import tilelang.language as T

    f32 = "float32"
    S, B = T.dynamic("S"), T.dynamic("B")
    vec = 16 // ELEM_BYTES[state]
    ept = DK // tpr
    nvec = ept // vec
    lanes_rows = threads // tpr
    bv = lanes_rows * rows
    group = NV // NK * DV
    nch = group // bv
    assert ept % vec == 0 and DV % bv == 0 and group % bv == 0, (state, layout, rows)
    assert work or not in_place, "in place, a store of the loaded value could be dropped: give it work"
    grid = NV * DV // bv if layout == "tiled" else NK

    def col(cc, lane, e):
        return (cc * tpr + lane) * vec + e

    @T.macro
    def load(src, bufs, k, slot, row0, rg, lane):
        for r in T.unroll(rows):
            for cc in T.unroll(nvec):
                for e in T.vectorized(vec):
                    bufs[k, r, cc * vec + e] = src[slot, row0 + r * lanes_rows + rg, col(cc, lane, e)]

    @T.macro
    def store(dst, bufs, k, slot, row0, rg, lane, a, b):
        if work:
            for r in T.unroll(rows):
                for i in T.unroll(ept):
                    # A loop of dependent FMAs on one variable (the form the H100 runs measured; the bulk
                    # structures' written-out chain lowers to other CUDA for these programs)
                    x = T.alloc_var(f32)
                    x = T.cast(bufs[k, r, i], f32)
                    for _ in T.unroll(work):
                        x = x * a + b
                    bufs[k, r, i] = T.cast(x, state)
        for r in T.unroll(rows):
            for cc in T.unroll(nvec):
                for e in T.vectorized(vec):
                    dst[slot, row0 + r * lanes_rows + rg, col(cc, lane, e)] = bufs[k, r, cc * vec + e]

    @T.macro
    def body_tiled(src, dst, bufs, slot, bx, rg, lane, a, b):
        load(src, bufs, 0, slot, bx * bv, rg, lane)
        store(dst, bufs, 0, slot, bx * bv, rg, lane, a, b)

    @T.macro
    def body_stream(src, dst, bufs, slot, bx, rg, lane, a, b):
        for c in T.unroll(min(depth, nch)):
            load(src, bufs, c, slot, bx * group + c * bv, rg, lane)
        for c in T.unroll(nch):  # unrolled: each chunk's buffer index is a constant, a register set
            if in_place:  # a compiler fence: the chunk `depth` ahead is the furthest load in flight
                T.evaluate(T.call_extern("int32", "__syncwarp"))
            if c + depth < nch:
                load(src, bufs, (c + depth) % (depth + 1), slot, bx * group + (c + depth) * bv, rg, lane)
            store(dst, bufs, c % (depth + 1), slot, bx * group + c * bv, rg, lane, a, b)

    body = body_tiled if layout == "tiled" else body_stream

    @T.macro
    def program(src, dst, slots, a, b):
        annotate_pass_configs(True)  # every access in bounds: slots are checked by the caller
        with T.Kernel(grid, B, threads=threads) as (bx, by):
            T.annotate_min_blocks_per_sm(blocks)
            tid = T.get_thread_binding()
            slot = T.alloc_var("int32")
            slot = slots[by]
            bufs = T.alloc_local((depth + 1, rows, ept), state)
            body(src, dst, bufs, slot, bx, tid // tpr, tid % tpr, a, b)

    pool_t = T.Tensor((S, NV * DV, DK), state)
    if in_place:

        @T.prim_func
        def kern(pool: pool_t, slots: T.Tensor((B,), "int32"), a: T.float32, b: T.float32):
            program(pool, pool, slots, a, b)

    else:

        @T.prim_func
        def kern(src: T.Tensor((S, NV * DV, DK), state), dst: T.Tensor((S, NV * DV, DK), state),
                 slots: T.Tensor((B,), "int32"), a: T.float32, b: T.float32):
            program(src, dst, slots, a, b)

    return kern


def run(kern, in_place: bool, pool, slots, a: float):
    """One call: in place on ``pool``, or from ``pool`` to itself through both parameters."""
    if in_place:
        kern(pool, slots, a, -0.0)
    else:
        kern(pool, pool, slots, a, -0.0)


def check(kern, state: str, config: tuple, gen) -> str | None:
    """None if ``kern`` scales every live slot by ``2 ** work`` (exact) and touches no other slot."""
    work, in_place = config[6], config[7]
    src = torch.randn(9, NV * DV, DK, device="cuda", generator=gen).to(getattr(torch, state))
    slots = torch.tensor([7, 0, 3, 5], dtype=torch.int32, device="cuda")
    if in_place:
        pool = src.clone()
        kern(pool, slots, 2.0, -0.0)
    else:
        pool = torch.full_like(src, float("nan"))
        kern(src, pool, slots, 2.0, -0.0)
    torch.cuda.synchronize()
    live = slots.long()
    dead = [i for i in range(9) if i not in live.tolist()]
    if not torch.equal(pool[live], src[live] * 2.0**work):
        return "live slots differ"
    if not (torch.equal(pool[dead], src[dead]) if in_place else torch.isnan(pool[dead].float()).all()):
        return "a slot outside the batch was written"
    return None


def _rotations(nbytes: int) -> int:
    """Input sets a timed graph cycles through: at least ``ROTATE_BYTES`` of distinct memory (1 to 16)."""
    return max(1, min(16, math.ceil(ROTATE_BYTES / nbytes)))


def rows_of(kern, in_place: bool, state: str, B: int, gen) -> list:
    """Calls of ``kern`` in place on rotated pools of ``B + 1`` slots (B of them drawn at random)."""
    calls = []
    for _ in range(_rotations(2 * B * NV * DV * DK * ELEM_BYTES[state])):
        pool = torch.randn(B + 1, NV * DV, DK, device="cuda", generator=gen).to(getattr(torch, state))
        slots = torch.randperm(B + 1, device="cuda", generator=gen)[:B].to(torch.int32)
        calls.append(functools.partial(run, kern, in_place, pool, slots, 1.0))
    return calls


def main() -> None:
    from bench_cuda import copy_ceiling, in_place_ceiling

    ap = argparse.ArgumentParser()
    ap.add_argument("--states", default="bfloat16,float32")
    ap.add_argument("--batches", default="128,256")
    ap.add_argument("--tbs", default="1", help="tokens a sequence for the RGDR rows (the structures: 1 only)")
    ap.add_argument("--only", default="", help="structures whose name holds one of these comma-separated parts")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(35)
    states = args.states.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    tbs = [int(t) for t in args.tbs.split(",")]
    wanted = args.only.split(",")
    todo = [(st, name, cfg) for st in states for name, cfg in structures(st).items() if any(w in name for w in wanted)]
    thunks = [functools.partial(structure_kernel, st, *cfg) for st, _, cfg in todo]
    rg = [(st, name, sc) for st in states for name, sc in rgdr_variants(st).items()]
    thunks += [functools.partial(build_rgdr, rgdr_key(NK, NV, st), sc) for st, _, sc in rg]
    built = compile_many(thunks)
    kernels, rgdr = {}, {}
    cfgs = {(st, name): cfg for st, name, cfg in todo}
    for (st, name, cfg), k in zip(todo, built):
        why = repr(k)[:300] if isinstance(k, BaseException) else check(k, st, cfg, gen)
        print(json.dumps({"structure": [st, name], "config": cfg, "ok": why is None, "why": why}), flush=True)
        if why is None:
            kernels[st, name] = k
    for (st, name, _), launcher in zip(rg, built[len(todo):]):
        why = repr(launcher)[:300] if isinstance(launcher, BaseException) else None
        for case in [] if why else rgdr_check_cases(rgdr_key(NK, NV, st), gen):
            res = check_rgdr(launcher, case)
            if not res["ok"]:
                why = res["why"]
                break
        print(json.dumps({"rgdr": [st, name], "ok": why is None, "why": why}), flush=True)
        if why is None:
            rgdr[st, name] = launcher
    ceiling = copy_ceiling("structure")["GBps"]
    in_place = in_place_ceiling()["GBps"]
    results = {"copy_GBps": ceiling, "in_place_GBps": in_place, "rows": []}
    print(f"\ncopy ceiling {ceiling:.0f} GB/s, in place {in_place:.0f} GB/s ({100 * in_place / ceiling:.1f}%)")
    for st in states:
        for B, tb in [(B, 1) for B in batches] + [(B, tb) for B in batches for tb in tbs if tb > 1]:
            moved = 2 * B * NV * DV * DK * ELEM_BYTES[st]
            line = {}
            key = rgdr_key(NK, NV, st)
            foot = rgdr_bytes(B, tb, NK, NV, ELEM_BYTES[st])
            for (s, name), launcher in rgdr.items():
                if s != st:
                    continue
                sets, _ = rgdr_calls(launcher, key, B, tb, gen, _rotations(foot))
                line[name] = (time_graph(calls_on(launcher, sets), warmup_ms=RGDR_WARMUP_MS), foot)
                del sets
                torch.cuda.empty_cache()
            for (s, name), k in kernels.items():
                if s != st or tb > 1:  # the structures are a decode step's traffic: one read, one write
                    continue
                us = time_graph(rows_of(k, cfgs[st, name][7], st, B, gen), warmup_ms=RGDR_WARMUP_MS)
                line[name] = (us, moved)
                torch.cuda.empty_cache()
            print(f"\n{st} B={B} T_b={tb}")
            for name, (us, nbytes) in sorted(line.items(), key=lambda kv: kv[1][0] / kv[1][1]):
                pct = 100 * nbytes / (us * 1e-6) / 1e9 / ceiling
                results["rows"].append({"state": st, "B": B, "Tb": tb, "name": name, "us": us, "bytes": nbytes,
                                        "pct": pct})
                print(f"  {name:26s} {us:8.2f} us  {pct:5.1f}% of copy", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
