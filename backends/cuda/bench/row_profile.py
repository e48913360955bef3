"""Workload rows launched once each through their ops, for Nsight Compute to read their counters.

Timing says how long a row takes, not why: the conv kernels sit at 78-82% of the same-size copy
whatever their block shape (NOTES.md, ninth and tenth sessions), and the attention prefill's paged
B=4 rows at 0.65-0.87x of cuDNN while its contiguous rows reach 0.97-0.98x (twelfth session). This
script runs each row of a set through its op (so the registered kernel and build key serve it),
once untimed (build and first launch), then once inside an NVTX range named after the row;
``benchmarks/gpu/prefix.sh``'s ``ncu_row_set`` profiles exactly those ranges.

    python3 row_profile.py {conv,decode,experts,prefill,rgdr,routing,routingforms} [--rows LABEL,...]
        [--build-only | --labels]
"""

import argparse
import contextlib
import importlib
from typing import Any, Iterator

import torch

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases

#: Set name -> the rows it profiles: (op, row label), or (op, row label, {kernel class: block-shape fields}) for the
#: row served by that class's registered block shapes with those fields laid over them (``laid_over``).
ROW_SETS: dict[str, tuple[tuple[Any, ...], ...]] = {
    # Issue 17: the conv rows measured against the copy.
    "conv": (
        ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-8seq"),
        ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-1seq"),
        ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t1"),
        ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t2-mtp"),
    ),
    # Issue 21: a paged B=4 prefill row beside the contiguous B=1 row of the same T (same programs, a
    # quarter of the key-tile steps): what the paged row pays that the model of NOTES.md does not explain.
    "prefill": (
        ("AttentionPrefillFwdOp", "qwen3-next-paged-4k-b4"),
        ("AttentionPrefillFwdOp", "qwen3-next-4k-b1"),
    ),
    # Issue 21: decode at B=1 (contiguous 4k and 32k, paged 4k), far below the copy at every split count,
    # beside B=64 4k at 98% of it: the split program's and the combine's fixed costs.
    "decode": (
        ("AttentionDecodeFwdOp", "qwen3-next-b1-4k"),
        ("AttentionDecodeFwdOp", "qwen3-next-b1-32k"),
        ("AttentionDecodeFwdOp", "qwen3-next-paged-b1-4k"),
        ("AttentionDecodeFwdOp", "qwen3-next-b64-4k"),
    ),
    # Issue 21: MoE routing at 35-56% of the same-size copy whatever the tokens a program: is a row bound by
    # issue (instructions a token), by its warps' dependent chains (shuffles, reductions), or by occupancy?
    "routing": (
        ("MoETopKRoutingFwdOp", "qwen3-next-80b-prefill-4k"),
        ("MoETopKRoutingFwdOp", "qwen3.5-35b-prefill-4k"),
        ("MoETopKRoutingFwdOp", "qwen3-next-80b-decode-b64"),
    ),
    # Issue 21: Qwen3-Next's 4k routing row (70% of the same-size copy) through three forms of its long program. Two
    # readings part on them (NOTES, fifty-ninth session): ``late_refill`` runs about 63 fewer instructions a token
    # (444 -> 381 on the fast path, static SASS) with the same chain of ten reductions, and 8 heads a lane about 44
    # more with a deeper network; the first tied the registered form in three H100 sweeps, the second lost by 0.2 us.
    # Issue slots busy and the stall reasons of each say whether the row waits on issue or on its warps' chains.
    "routingforms": (
        ("MoETopKRoutingFwdOp", "qwen3-next-80b-prefill-4k"),
        ("MoETopKRoutingFwdOp", "qwen3-next-80b-prefill-4k", {"TileLangMoETopKRouting": {"late_refill": True}}),
        ("MoETopKRoutingFwdOp", "qwen3-next-80b-prefill-4k", {"TileLangMoETopKRouting": {"long_heads": 8}}),
    ),
    # Issue 16: RGDR's large rows, below their targets at B=128 (bf16 80-87%, fp32 87-91% of the copy on the H200) where
    # the best layout without the recurrence reads 86-93%: where a program's warps wait (ncusrc).
    "rgdr": (
        ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b128-t2-bf16state"),
        ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b128-t1-fp32state"),
    ),
    # Issue 21's model at decode: the MoE experts' warp-per-feature programs read their weights at 50-60% of the
    # same-size copy where the skinny linear program reads a weight at 80-90% (2026-12-04e): the routed experts
    # at B=1 and B=16 (the tile map, gate/up and down kernels), the shared expert at T=1 (its fused logit).
    "experts": (
        ("MoEGroupedExpertsFwdOp", "qwen3.5-35b-decode-b1"),
        ("MoEGroupedExpertsFwdOp", "qwen3-next-80b-decode-b16"),
        ("MoESharedExpertFwdOp", "qwen3-next-80b-decode-b1"),
    ),
}


def row_op(op_name: str, label: str, seed: int = 17) -> tuple[object, dict]:
    """``(op, inputs)`` of the workload row ``label`` of ``op_name`` on the GPU: the op built from the row's
    construction arguments (so the registered kernel and build key serve it), its first dtype case, inputs drawn
    with ``seed``."""
    spec = load_manifest()[op_name]
    module = importlib.import_module(spec.source["op"])
    row = next(r for r in spec.workloads if r.label == label)
    inst = instantiate(spec, row, dtype_cases(row)[0], device="cuda", rng=torch.Generator().manual_seed(seed))
    return getattr(module, op_name)(**inst.op_kwargs), inst.inputs


def range_name(row: tuple[Any, ...]) -> str:
    """The NVTX range a row is profiled in: its label, then each laid-over field as ``.name-value`` (booleans as
    0/1), so that the forms of one row are told apart and ncu's ``--nvtx-include NAME/`` takes the name as it is."""
    fields = {k: v for per_class in (row[2] if len(row) > 2 else {}).values() for k, v in per_class.items()}
    return row[1] + "".join(f".{k}-{int(v) if isinstance(v, bool) else v}" for k, v in fields.items())


@contextlib.contextmanager
def laid_over(overrides: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Within the block, each named kernel class's registered block shapes (``block_shapes.BLOCK_SHAPES``, read at
    every key) carry ``overrides[class]``'s fields over their own, every row width alike; restored after."""
    from tileops_cuda.kernels import block_shapes

    saved = {name: block_shapes.BLOCK_SHAPES[name] for name in overrides}
    try:
        for name, fields in overrides.items():
            block_shapes.BLOCK_SHAPES[name] = tuple((bound, {**shape, **fields}) for bound, shape in saved[name])
        yield
    finally:
        block_shapes.BLOCK_SHAPES.update(saved)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("set", choices=sorted(ROW_SETS))
    ap.add_argument("--rows", default=None, help="labels of the set's rows to run (default: all)")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--labels", action="store_true", help="print the set's row labels (for ncu's NVTX filters)")
    args = ap.parse_args()
    rows = ROW_SETS[args.set]
    if args.labels:
        print("\n".join(range_name(row) for row in rows))
        return
    wanted = set(args.rows.split(",")) if args.rows else {row[1] for row in rows}
    for row in rows:
        op_name, label = row[:2]
        if label not in wanted:
            continue
        with laid_over(row[2] if len(row) > 2 else {}):
            op, inputs = row_op(op_name, label)
            op(**inputs)
            torch.cuda.synchronize()
            if args.build_only:
                continue
            with torch.cuda.nvtx.range(range_name(row)):
                op(**inputs)
            torch.cuda.synchronize()
        print("row", op_name, range_name(row), flush=True)


if __name__ == "__main__":
    main()
