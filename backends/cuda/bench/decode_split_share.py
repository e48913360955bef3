"""How much of a small-batch attention decode step is the combine: the rule's schedule on the rows of B <= 8,
timed in CUDA graphs whole and with its split launch alone, beside a copy moving the row's KV bytes.

Why: at B <= 8 the decode reads 37-78% of a same-size copy (fifty-first session, s51c) and every such call is
two launches, the split programs and the combine. A split merged through distributed shared memory (a
thread-block cluster; NOTES.md, "Next avenue for the decode at B <= 8") would remove the second launch and the
partials' global round trip, but not the split's own chain. This probe says what is left to win: if the split
alone already sits near the copy, removing the combine is the step; if it does not, the split program is.

The split-alone launch leaves ``out`` unmerged (its time is what is measured); the whole step is checked against a
float32 reference first, as ``attention_decode_sweep.py`` checks its candidates.

Usage (repository root, tilelang and a CUDA GPU present)::

    python backends/cuda/bench/decode_split_share.py [--json PATH] [--plain]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
for _p in (str(_HERE), str(_HERE.parents[0] / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from attention_bench import decode_inputs, decode_key, log, reference_error  # noqa: E402
from attention_decode_sweep import BF16_TOLERANCE, NAMES, kv_bytes  # noqa: E402
from cuda_bench_common import ROTATE_BYTES, same_size_copy, time_graph  # noqa: E402

from tileops_cuda.kernels.attention_decode import _make_run, build_attention_decode, call_plan  # noqa: E402

#: ``(B, context, block)``: the small-batch rows of the decode sweep (block None: contiguous; 16: vLLM's pages).
ROWS = [(1, 4096, None), (1, 8192, None), (1, 32768, None), (2, 8192, None), (4, 8192, None), (8, 4096, None),
        (1, 4096, 16), (8, 32768, 16)]


def bench_row(B: int, context: int, block: int | None, arch: str, dependent: bool, gen: torch.Generator) -> dict:
    key = dataclasses.replace(decode_key(block, arch), dependent_launch=dependent)
    launcher = build_attention_decode(key)
    if block is not None:
        launcher.prepare(block)
    # The same launch function with the combine stood in for by nothing: the split launch alone.
    split_only = _make_run(key, launcher.programs, lambda kind: (lambda *args: None))
    moved = kv_bytes(B, context)
    nsets = max(1, min(32, -(-ROTATE_BYTES // moved)))
    sets = [decode_inputs(B, context, block, gen) for _ in range(nsets)]
    outs = [torch.empty_like(s["query"]) for s in sets]
    capacity = context if block is None else -(-context // block) * block
    schedule, _, splits, _ = call_plan(key, B, block, capacity,
                                       lambda: torch.cuda.get_device_properties(0).multi_processor_count)
    whole = [lambda s=s, o=o: launcher.run(*[s[n] for n in NAMES], None, o) for s, o in zip(sets, outs)]
    whole[0]()
    torch.cuda.synchronize()
    err = max(reference_error(sets[0], outs[0], 0), reference_error(sets[0], outs[0], B - 1))
    alone = [lambda s=s, o=o: split_only(*[s[n] for n in NAMES], None, o) for s, o in zip(sets, outs)]
    whole_us, split_us, copy_us = time_graph(whole), time_graph(alone), same_size_copy(moved)
    row = dict(B=B, context=context, block=block, dependent=dependent, combine=schedule.combine,
               block_h=schedule.block_h, splits=splits, rel_err=err, ok=err <= BF16_TOLERANCE,
               whole_us=round(whole_us, 2), split_us=round(split_us, 2), copy_us=round(copy_us, 2),
               pct_whole=round(100 * copy_us / whole_us, 1), pct_split=round(100 * copy_us / split_us, 1))
    log(f"{'paged' if block else 'contig':6s} B={B} ctx={context:6d} {schedule.combine:8s} splits={splits:3d} "
        f"whole {whole_us:7.2f} us ({row['pct_whole']:5.1f}%)  split alone {split_us:7.2f} us "
        f"({row['pct_split']:5.1f}%)  copy {copy_us:7.2f} us  rel.err {err:.1e}{'' if row['ok'] else '  WRONG'}")
    del sets, outs
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plain", action="store_true", help="launch plainly, not as programmatic dependents")
    args = parser.parse_args()
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    gen = torch.Generator(device="cuda")
    gen.seed()
    log(f"device {torch.cuda.get_device_name()} ({arch}); % = a same-size copy's graph time over the row's")
    rows = []
    for B, context, block in ROWS:
        rows.append(bench_row(B, context, block, arch, not args.plain, gen))
        if args.json:
            args.json.write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()
