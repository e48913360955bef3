"""The registered varlen conv on 4k tokens cut into sequences in different ways: where its time goes.

Why: on the H200 the 4k-token prefill reads 83-86% of the same-size copy as one prompt and 71% as eight
prompts of 512 (issue 17's target is 85%), run after run. The two rows differ in more than the sequence
count: the eight-prompt row is cu_seqlens-style with initial states read from the pool (128 threads a
program); the one-prompt row is lengths-style without them (its own 64-thread program). Each row here
changes one thing at a time: the sequence count (1 to 64, starts on chunk boundaries), the metadata style,
the initial states, and starts off the 64-token chunk boundaries. Every row is checked against the CPU
reference (float32 sums; the bf16 output within 1e-2 of 1 + |reference|, every final window bit for bit) and
then timed in CUDA graphs beside a copy of the same bytes.

    python3 conv_varlen_layouts.py [--rows layouts|positions] [--twin FIELD|FIELD=INT] [--json F]

``--rows positions`` asks where one extra sequence's cost comes from: a second start early, in the middle or
late in the grid, on and off a chunk boundary, with and without an initial state, and with padding slots (no
pool read or write at the start: what is left is the start's slow path in the program).
"""

import argparse
import dataclasses
import functools
import json

import torch
from cuda_bench_common import same_size_copy, time_graph
from tileops_cpu_ref.conv import causal_conv1d_varlen

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels._common import compile_many
from tileops_cuda.kernels.conv1d import ConvVarlenBuildKey, build_conv_varlen
from tileops_cuda.registered import TileLangCausalConv1dVarlen

T, D, W = 4096, 8192, 4
#: Input sets a row's graph cycles through (8 x 135 MB: no set is in L2 when its turn comes).
SETS = 8

#: label -> (sequence lengths, metadata style, initial states[, "padding": every slot -1, or "fresh": every flag False])
ROWS = {
    "1 x 4096, lengths, no init (the 1-prompt row)": ([4096], "lengths", False),
    "1 x 4096, cu_seqlens, init": ([4096], "cu_seqlens", True),
    "2 x 2048, cu_seqlens, init": ([2048] * 2, "cu_seqlens", True),
    "4 x 1024, cu_seqlens, init": ([1024] * 4, "cu_seqlens", True),
    "8 x 512, cu_seqlens, init (the 8-prompt row)": ([512] * 8, "cu_seqlens", True),
    "8 x 512, cu_seqlens, no init": ([512] * 8, "cu_seqlens", False),
    "8 x 512, lengths, init": ([512] * 8, "lengths", True),
    "8 x 512, lengths, no init": ([512] * 8, "lengths", False),
    # The no-init rows' work through the initial-state program: every flag False, as vLLM passes fresh prompts
    # (the no-init program read 72-74% of the copy on the H200 where this one reads 83-87%; since the
    # thirty-ninth session the no-init rows above run this program too: conv1d.batch_key).
    "8 x 512, cu_seqlens, init key, every flag False": ([512] * 8, "cu_seqlens", True, "fresh"),
    "8 x ~512 off the chunk boundaries, cu_seqlens, init": ([509, 515, 507, 517, 505, 519, 503, 521], "cu_seqlens",
                                                             True),
    "16 x 256, cu_seqlens, init": ([256] * 16, "cu_seqlens", True),
    "64 x 64, cu_seqlens, init": ([64] * 64, "cu_seqlens", True),
}

#: The same form: one extra start moved through the grid (the labels count 64-token chunks, the registered chunk
#: until the forty-first session; 16 since: chunk 32 of the labels is chunk 128).
POSITION_ROWS = {
    "1 x 4096, cu_seqlens, init": ([4096], "cu_seqlens", True),
    "1 x 4096, cu_seqlens, no init": ([4096], "cu_seqlens", False),
    "2, second start at chunk 1 (64 + 4032), init": ([64, 4032], "cu_seqlens", True),
    "2, second start at chunk 32 (2048 + 2048), init": ([2048, 2048], "cu_seqlens", True),
    "2, second start at chunk 63 (4032 + 64), init": ([4032, 64], "cu_seqlens", True),
    "2, second start in chunk 32 at 32 (2080 + 2016), init": ([2080, 2016], "cu_seqlens", True),
    "2, second start at chunk 32, no init": ([2048, 2048], "cu_seqlens", False),
    "2, second start at chunk 63, no init": ([4032, 64], "cu_seqlens", False),
    "2, second start at chunk 32, padding slots": ([2048, 2048], "cu_seqlens", True, "padding"),
    "8 x 512, cu_seqlens, init": ([512] * 8, "cu_seqlens", True),
    "8 x 512, cu_seqlens, padding slots": ([512] * 8, "cu_seqlens", True, "padding"),
}


def twinned(key: ConvVarlenBuildKey, twin: str) -> ConvVarlenBuildKey:
    """``key`` with ``twin`` applied: ``FIELD`` flips a boolean field, ``FIELD=INT`` sets a field
    (``threads=64``, ``few_sequences=8``: block-shape candidates; ``has_init=1``: a boolean set, not flipped); the
    registered key where ``twin`` is empty."""
    if not twin:
        return key
    field, _, value = twin.partition("=")
    now = getattr(key, field)
    if not value:
        return dataclasses.replace(key, **{field: not now})
    return dataclasses.replace(key, **{field: bool(int(value)) if isinstance(now, bool) else int(value)})


@functools.cache
def launcher(style: str, init: bool, twin: str = ""):
    """The launcher of the registered kernel class's program key for such a call (launched plainly, as
    every row here always was); ``twin``: that key changed by ``twinned`` (a candidate timed beside the
    registered program)."""
    key = TileLangCausalConv1dVarlen.program_key(CallSpec(
        "CausalConv1dVarlenFwdOp", "causal_conv1d_varlen", "cuda", "sm_90",
        {"x": "bfloat16", "actual_seq_lengths": "int32", "conv_state_indices": "int32"}, {"D": D, "W": W},
        {"activation": "silu", "has_bias": False, "has_has_initial_state": init, "seq_lens_style": style}))
    return build_conv_varlen(twinned(key, twin))


def inputs(lengths, style: str, init: bool, gen, variant: str = "") -> dict:
    """One input set; ``variant``: "padding" (every slot -1: no pool read or write) or "fresh" (every
    initial-state flag False)."""
    B = len(lengths)
    pad = variant == "padding"
    slots = torch.full((B,), -1, dtype=torch.int32) if pad else torch.randperm(B + 3)[:B].to(torch.int32)
    x = torch.randn(T, D, device="cuda", generator=gen).to(torch.bfloat16)
    n = torch.tensor(lengths, dtype=torch.int32)
    meta = n if style == "lengths" else torch.nn.functional.pad(n.cumsum(0), (1, 0)).to(torch.int32)
    return {"x": x, "conv_state": torch.randn(B + 3, D, W - 1, device="cuda", generator=gen).to(torch.bfloat16),
            "weight": torch.randn(D, W, device="cuda", generator=gen).to(torch.bfloat16),
            "actual_seq_lengths": meta.cuda(), "conv_state_indices": slots.cuda(),
            "has_initial_state": ((torch.arange(B) % 3 != 1) & (variant != "fresh")).cuda() if init else None}


def call(run, c: dict, style: str, out, activation: str | None = "silu"):
    return run(c["x"], c["conv_state"], c["weight"], c["actual_seq_lengths"], c["conv_state_indices"],
               c["has_initial_state"], None, activation, style, out)


def check(run, c: dict, style: str, activation: str | None = "silu") -> str | None:
    """Why ``run``'s output or final windows differ from the CPU reference of ``activation`` (SiLU or none), or None."""
    pool = c["conv_state"].clone()
    ref_pool = c["conv_state"].float().cpu()
    out = torch.full_like(c["x"], float("nan"))
    call(run, dict(c, conv_state=pool), style, out, activation)
    ref = causal_conv1d_varlen(c["x"].float().cpu(), ref_pool, c["weight"].float().cpu(),
                               c["actual_seq_lengths"].cpu(), c["conv_state_indices"].cpu(),
                               None if c["has_initial_state"] is None else c["has_initial_state"].cpu(),
                               activation=activation, seq_lens_style=style)
    err = ((out.float().cpu() - ref).abs() / (1 + ref.abs())).max().item()
    if not err <= 1e-2:  # bf16 rounding of the output: 2 ** -8 relative
        return f"output off by {err:.3g} (relative to 1 + |reference|)"
    if not torch.equal(pool.float().cpu(), ref_pool):
        return "final windows differ"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", choices=("layouts", "positions"), default="layouts")
    ap.add_argument("--twin", default="", help="FIELD (a boolean build-key field, flipped) or FIELD=INT: each row "
                    "also timed with the registered key so changed")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = ROWS if args.rows == "layouts" else POSITION_ROWS
    gen = torch.Generator(device="cuda")
    gen.manual_seed(17)
    twins = ("", args.twin) if args.twin else ("",)
    ways = sorted({(row[1], row[2], twin) for row in rows.values() for twin in twins})
    for way, built in zip(ways, compile_many([functools.partial(launcher, *w) for w in ways])):
        if isinstance(built, BaseException):
            print(f"build failed {way}: {built!r}"[:400], flush=True)
    moved = 2 * T * D * 2  # x read, out written (the windows are noise beside them)
    # Until the fortieth session the copy's graph held 2 calls against the rows' 8, so the rows carried an eighth of
    # a replay's start gap and the copy half of it (graph_gap.py); time_graph now fills every graph to GRAPH_MIN_US.
    copy_us = same_size_copy(moved)
    print(f"same-size copy ({moved / 2**20:.0f} MiB moved): {copy_us:.2f} us", flush=True)
    results = []
    for label, (lengths, style, init, *variant) in rows.items():
        sets = [inputs(lengths, style, init, gen, *variant) for _ in range(SETS)]
        for twin in twins:
            built = launcher(style, init, twin)  # compiled above: the process's build cache
            run = built.run
            why = check(run, sets[0], style)
            rec = {"row": label, "twin": twin, "key": dataclasses.asdict(built.key), "ok": why is None, "why": why}
            if why is None:
                outs = [torch.empty_like(c["x"]) for c in sets]
                us = time_graph([lambda c=c, o=o, run=run: call(run, c, style, o) for c, o in zip(sets, outs)],
                                warmup_ms=100)
                rec.update(us=us, pct_same=100 * copy_us / us)
            results.append(rec)
            field = twin.partition("=")[0]
            name = label + (f" [{field}={getattr(built.key, field)}]" if twin else "")
            print(f"{name:72s} " + (f"{rec['us']:7.2f} us  {rec['pct_same']:5.1f}% of the same-size copy"
                                     if why is None else f"FAILED: {why}"), flush=True)
        del sets
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_us": copy_us, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
