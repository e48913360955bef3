"""Time the gated-delta-net layer's memory-bound TileLang kernels (issue 17), QKNormRope and MoE
routing (issue 21) at their largest workload rows over many block shapes each, against copies
of the same size in the same run.

Usage (on a GPU machine, from the repository root, the project installed):
    python3 backends/cuda/bench/layer_ops_sweep.py [--reps 60] [--only Gated] [--budget 200] [--json PATH]
At other token counts than the rows' own (each matching entry whose row has a token count ``T``, its registered
key only with ``--candidates 0``; ``run.sh routetokens``):
    python3 backends/cuda/bench/layer_ops_sweep.py --only MoETopKRoutingFwdOp/qwen3-next-80b-prefill --candidates 0 \
        --tokens 1024,2048,4096,8192
Without a GPU (lowers, compiles and assembles every candidate; registers, spills, load widths):
    python3 backends/cuda/bench/layer_ops_sweep.py --compile-only [--arch sm_90a]

Candidates (``SWEEP``): per row, the block shape the registered kernel takes from
``tileops_cuda/kernels/block_shapes.py`` ("registered") and the block shapes listed, each the
build-key fields it sets over the build key's own defaults. Every candidate's build key is
formed from the row planned on meta tensors (the call spec a call makes), and all of them are
compiled at once (``compile_many``) before the first is timed. Then per row, per candidate:

* checked against the float64 reference of the conformance suite (fp32 where the suite's
  reference is), with poisoned outputs (NaN; the most negative integer for ids: an unwritten
  element fails) and the suite's tolerances, on the timed row and on every other workload row
  of the op that builds the same kernel (smaller M: partial programs, a persistent grid wider
  than the rows); inputs are random (the seed is printed), each launch gets fresh copies;
* timed alone: ``reps`` launches, each between two CUDA events after a 256 MB write (no input
  in L2); the median (column ``us``);
* timed as ``tileops bench`` times (column ``graph``): a CUDA graph of back-to-back calls, each
  on its own input set (at least 256 MB in all), replayed; the median per call.

Bandwidth counts the bytes of the manifest's roofline (inputs read once, outputs written
once). Two ceilings, both measured in this run and both printed:

* ``%peak``: against the copy peak, ``torch.mul(a, 1, out=b)`` on 1 GiB (NOTES' "copy ceiling");
* ``%same``: against the fastest device copy (``torch.mul(a, 1, out=b)`` or ``b.copy_(a)``)
  of the row's own bytes (half read, half written), timed by the same method (single launch,
  or graph of rotated buffers). This is the fair ceiling of a row: a 10 MB kernel cannot beat
  a 10 MB copy, which pays the same launch and ramp.

Each candidate prints one JSON line as it finishes; the last lines are a table (op, row, block
shape, us, %peak, %same, graph us, %peak, %same, error) and, per row, the fastest correct block
shape by graph time, printed as an entry of ``block_shapes.BLOCK_SHAPES``. ``--budget``
seconds after the start, candidates not yet timed are listed as skipped and the table is
printed, so a run under a time limit still ends with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

_ROOT = Path(__file__).resolve().parents[3]
_BENCH = Path(__file__).resolve().parent  # cuda_bench_common, the timing this sweep shares with the other benches
for _p in (_ROOT / "backends" / "cuda", _ROOT / "backends" / "cpu_ref", _ROOT / "tests", _BENCH):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from catalogue_references import REFERENCES, TOLERANCE, relative_error  # noqa: E402
from cuda_bench_common import time_graph  # noqa: E402

from tileops_cuda.kernels._common import compile_many  # noqa: E402
from tileops_cuda.kernels.block_shapes import block_shape_of  # noqa: E402
from tileops_cuda.launch_policy import with_dependent_launch  # noqa: E402

from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.baselines import capture_launches  # noqa: E402
from tileops_core.bench.roofline import roofline_of_row  # noqa: E402
from tileops_core.bench.workloads import instantiate, plan_row  # noqa: E402
from tileops_core.kernels import CallSpec, select_kernel  # noqa: E402
from tileops_core.spec.nodes import WorkloadRow  # noqa: E402
from tileops_core.workloads import dtype_cases  # noqa: E402

FLUSH_BYTES = 256 * 2**20
ROTATE_BYTES = 256 * 2**20
COPY_BYTES = 2**30
#: SMs of the H200 (and H100 SXM): the persistent grids below are whole multiples of it.
SMS = 132


def _norm_candidates() -> list[dict[str, Any]]:
    """Zero-centred norm block shapes (4096-wide bf16 rows): the first measured kernel (weight
    read in the output loop), one pass over threads x rows and register bounds, two passes,
    persistent grids of one and two passes. A persistent grid is as many programs as the
    register bound lets an SM hold (65536 / (threads x registers) an SM); the register bounds
    are the lowest at which ``--compile-only`` showed no spill or a few bytes (at most 40)."""
    one = [{"threads": t, "rows": r} for t, r in ((256, 1), (512, 1), (1024, 1), (256, 2), (512, 2))]
    bounds = [{"threads": 128, "registers": 0}, {"threads": 128, "registers": 64},
              {"threads": 256, "registers": 48}]
    two = [{"passes": 2, "threads": 128, "registers": 64},
           *({"passes": 2, "threads": t, "registers": 32} for t in (256, 512, 1024))]
    persistent = [{"threads": 128, "programs": 4 * SMS, "registers": 128},
                  {"threads": 256, "programs": 4 * SMS, "registers": 64},
                  {"threads": 256, "programs": 3 * SMS, "registers": 80},
                  {"threads": 512, "programs": 2 * SMS, "registers": 64},
                  {"passes": 2, "threads": 256, "programs": 6 * SMS, "registers": 40},
                  {"passes": 2, "threads": 512, "programs": 4 * SMS, "registers": 32}]
    return [{"early_weight": False}, *one, *bounds, *two, *persistent]


def _conv_varlen_candidates() -> list[dict[str, Any]]:
    """Varlen shapes beside the registered one (128 threads x chunk 16 x 4-row groups, one group ahead in
    registers, 128 registers, 64 threads for one sequence, the start order of ``with_start_order``, SiLU through
    ``tanh.approx``). First that key with SiLU through ``exp`` and a reciprocal (``tanh_silu`` off, as registered
    until the forty-third session), then chunks of 32 and 64 with its other fields (chunk 64 until the forty-first
    session: a 4k call was then one wave streaming all of ``x`` at once, 78-81% of the same-size copy on an H100
    against 83-87% at chunk 16; NOTES.md), so that the H200 compares chunks like for like. Then the older shapes,
    every other field at its default (the sweep's base): 64 threads for one sequence alone, no bounds checks
    (``unchecked_index``: 2352 -> 1480 static SASS instructions at 4k 8 sequences, NOTES "Unchecked accesses in
    the memory-bound kernels", yet slower in every sweep), and 256 or 64 threads. ``plan_sweep`` times the
    registered key as a programmatic dependent too. Rings of asynchronous row copies, explicit 128-bit stores,
    tighter register bounds (tenth session) and 8- or 4-byte vectors a thread (results/session-2026-12-03d) measured
    no better and were dropped."""
    registered = {"one_sequence_threads": 64, "end_rows_first": True, "unrolled_starts": True, "tanh_silu": True}
    return [{**registered, "tanh_silu": False}, {**registered, "chunk": 32}, {**registered, "chunk": 64},
            {"one_sequence_threads": 64}, {"unchecked_index": True}, {"threads": 256}, {"threads": 64}]

#: The registered decode-conv shape (block_shapes.py): without TileLang's bounds checks (registered), and that
#: launched as a programmatic dependent (``dependent_launch``, seventeenth session: the launch and block
#: scheduling of a call overlap the previous call's tail; RGDR's small roles gained 1.18-1.20x at 3-4 µs).
_CONV_UNCHECKED = {"threads": 128, "registers": 0, "unchecked_index": True}
_CONV_DEPENDENT = {**_CONV_UNCHECKED, "dependent_launch": True}

#: QKNormRope at D=256 bf16 (16 q + 2 k heads): the registered entry is the lanes program at 40 registers
#: (61-67% of the same-size copy on the H200; 4 rows a thread, 128 and 512 threads measured slower and are
#: left out). The candidates (qknr3, NOTES "QKNormRope: instructions a row"): the per-(token, frequency)
#: table on every warp (``pairs``: a k program forms its 8 tokens' table in one round, not 8 rounds on 2
#: warps each waiting on its own positions load), the 2π-reduced hardware sincos, the rotation partners
#: as one vector and the rotation in 16-bit instructions (the guarded float32 rotation was ~240 of a
#: row's ~330 SASS instructions), and the warp's own table with no block barrier (``warp``). ptxas for
#: sm_90a (registers / spill bytes): pairs+reduced+vectors+native 64 / 0 unbounded, 48 / 4, 40 / 28;
#: warp+all 56 / 0, 48 / 0, 40 / 44; vectors+native alone at 40: 40 / 20 (the registered entry: 40 / 24).
#: Most promising first: the sweep starts no candidate after its budget.
_QK_FAST = {"sincos": "reduced", "partners": "vectors", "rotation": "native"}
#: Ordered by the twelfth session's sweep (graph time on the Qwen3-Next 16k / 4k rows, qknr3_sweep.log):
#: 81.4 / 23.8 µs, 81.1 / -, 84.9 / 23.7, 86.7 / 24.5, 91.1 / 25.8, 86.1 / 25.5, 94.3 / 27.7, 104.9 / 29.6,
#: 115.9 / 32.7; the registered entry 123.3 / 34.1.
_QK_CANDIDATES = [
    {"registers": 40, "table": "pairs", **_QK_FAST},
    {"registers": 40, "table": "warp", **_QK_FAST},
    {"registers": 48, "table": "pairs", "partners": "vectors", "rotation": "native"},
    {"registers": 48, "table": "warp", **_QK_FAST},
    {"registers": 48, "table": "pairs", **_QK_FAST},
    {"registers": 40, "partners": "vectors", "rotation": "native"},
    {"registers": 40, "table": "pairs", "sincos": "reduced", "partners": "vectors"},
    {"registers": 0, "table": "pairs", **_QK_FAST},
    {"registers": 40, "table": "pairs"}]

#: MoE routing (E=512 top-10 and E=256 top-8 in bf16). The registered shape first: the logits program (issue 21:
#: selection on the logits' keys, expf for the top_k + 1 only; ~450 fast-path SASS instructions a token at E=512
#: top-10 bf16, ~300 at E=256, against the candidates program's ~650-780), one token (warp) a program, without
#: TileLang's bounds checks, launched as a programmatic dependent (both keys' shape until the forty-third session).
#: Then the logits program plain and without bounds checks alone (thirty-first session: plain won Qwen3.5's 4k row
#: by 0.9 us, the dependent its 64-token row), E=256's registered key, and at 2-16 tokens a program (4-16 also
#: plainly): a one-warp block caps an SM at 32 resident warps, and a 4k-token call (one wave) leaves the
#: early-launched blocks of a dependent next call one slot an SM; under Nsight Compute the 4k rows' warps were
#: resident two thirds of the time a one-wave grid allows, and E=256's 31% fewer instructions a warp ran in E=512's
#: time (forty-second session, H100). Last the candidates program (registered
#: until the thirty-first session; 48 registers at E=512, 38 at E=256, no spills) at its registered shape until then
#: (it lost every row at 1-4 tokens a program in every sweep since).
_ROUTING_CANDIDATES = [# first (``--candidates 2`` times them alone beside the registered key): both long forms
                       # with the other ``late_refill`` (the refilling rounds only for a token whose lane ran dry
                       # before the last round; fifty-second session, registered for E=256 in the fifty-third)
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 2048, "long_tokens": 16, "long_heads": 4, "late_refill": True},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 2048, "long_tokens": 32, "long_heads": 4},
                       # then where the long programs start (``long_from``; 2048 since the fifty-ninth session, when
                       # the short programs led both rows at 1024 tokens, s59a): both registered forms from 1024 as
                       # before, and E=256's from 4096 (it tied the short program at 2048); ``--candidates 5`` with
                       # ``--tokens`` times them beside the registered key
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "long_heads": 4},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32, "long_heads": 4, "late_refill": True},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 4096, "long_tokens": 32, "long_heads": 4, "late_refill": True},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True},
                       {"program": "logits", "tokens": 1},
                       {"program": "logits", "tokens": 1, "unchecked_index": True},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_plain": True},
                       *({"program": "logits", "tokens": t, "unchecked_index": True, "dependent_launch": True}
                         for t in (2, 4, 8, 16)),
                       {"program": "logits", "tokens": 4},
                       *({"program": "logits", "tokens": t, "unchecked_index": True} for t in (4, 8, 16)),
                       # long programs for calls of 1024 tokens and more (long_from): E=512's key until the
                       # forty-third session's second run (4 tokens a program below, one above), then 16 tokens a
                       # program above, which led both 4k rows in two H100 runs and is registered (block_shapes.py;
                       # as a dependent at E=512; at E=256 plainly, its key until the forty-fourth session), and 16
                       # plainly below 4
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 1},
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "long_plain": True},
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "long_plain": True},
                       # 32 tokens a program above 1024 (1024-thread blocks: a 4k call is 128 of them, one an SM;
                       # E=256's key since the forty-fourth session, 3.50 us against 4.11 at 4k on an H100)
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32, "long_plain": True},
                       # the registered forms with 4 heads a lane, refilled from the row (``heads``: the fast path
                       # ~14% fewer static instructions at E=512, ~5% at E=256; forty-third session)
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "heads": 4},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "long_plain": True, "heads": 4},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32, "heads": 4},
                       # the registered forms with 2 heads a lane in the long program (4 registered: the fast path
                       # shrinks again, and most tokens refill some lane a round or two)
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 16, "long_heads": 2},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32, "long_heads": 2},
                       # E=256's registered form with 8 heads in its long program too, as it was until the
                       # forty-fifth session (``long_heads`` 4 registered since; E=512's is among the long forms
                       # above)
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 1024, "long_tokens": 32},
                       {"program": "candidates", "tokens": 1, "unchecked_index": True, "dependent_launch": True},
                       # the registered forms with the rounds' record and pops off the ALU pipe (``lean_rounds``,
                       # fifty-ninth session: about 38 fewer ALU instructions a token at E=512, 55 more in all), E=512's
                       # with the late refill too; ``--candidates 0 --with-field lean_rounds`` times them alone
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 2048, "long_tokens": 16, "long_heads": 4, "lean_rounds": True},
                       {"program": "logits", "tokens": 4, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 2048, "long_tokens": 16, "long_heads": 4, "late_refill": True,
                        "lean_rounds": True},
                       {"program": "logits", "tokens": 1, "unchecked_index": True, "dependent_launch": True,
                        "long_from": 2048, "long_tokens": 32, "long_heads": 4, "late_refill": True,
                        "lean_rounds": True}]

#: (op, row label, candidates): each candidate is the block-shape fields it sets on the build
#: key (the others keep the build key's defaults); the registered block shape is always first.
SWEEP: list[tuple[str, str, list[dict[str, Any]]]] = [
    ("ZeroCentredRMSNormFwdOp", "qwen3.5-h4096-prefill-4k", _norm_candidates()),
    ("FusedAddZeroCentredRMSNormFwdOp", "qwen3.5-h4096-prefill-4k", _norm_candidates()),
    ("GatedRMSNormFwdOp", "qwen3-next-prefill-4k", [
        {"early_weight": False},
        *({"threads": t, "rows": r} for t, r in ((64, 4), (128, 8), (128, 16), (256, 16), (256, 32))),
        {"threads": 64, "rows": 16, "registers": 0}, {"registers": 0},
        {"threads": 64, "rows": 8, "programs": 12 * SMS, "registers": 80},
        {"threads": 128, "rows": 16, "programs": 6 * SMS, "registers": 80},
        {"threads": 256, "rows": 32, "programs": 3 * SMS, "registers": 80},
        # The output loop's exact SiLU is ~40 instructions an element: with the approximate one.
        {"fast_silu": True}, {"fast_silu": True, "threads": 128, "rows": 16},
        {"fast_silu": True, "threads": 128, "rows": 16, "programs": 6 * SMS, "registers": 80}]),
    ("GDNGatingFwdOp", "qwen3-next-prefill-32k", [
        *({"threads": t, "vectors": v}
          for t, v in ((128, 1), (128, 2), (128, 4), (128, 8), (256, 1), (256, 4), (256, 8), (512, 1), (512, 2),
                       (512, 4), (64, 8), (1024, 1))),
        *({"threads": t, "vectors": v, "fast_math": True}
          for t, v in ((256, 2), (128, 1), (128, 4), (128, 8), (256, 8), (512, 1)))]),
    # Update: B = 256 is 2056 programs of 128 threads, 2.6 waves at 76-84 registers (ncu: latency-bound). One
    # wave needs 32 registers (ptxas for sm_90a: 88 bytes spilled; 40 registers, 12 programs an SM: 48 bytes).
    # Several sequences a program, their loads issued together, measured 2-30% slower (tenth session, NOTES).
    # The windows through shared memory as the block's consecutive vectors, and 8-byte vectors a thread,
    # measured no faster (results/session-2026-12-03d/conv_sweep.log) and were deleted.
    # First the registered shape without TileLang's bounds checks (``unchecked_index``: 80 -> 74 registers,
    # 4 of the token loop's guards gone; NOTES "Unchecked accesses in the memory-bound kernels").
    # The registered shape at 64 registers (ptxas: no spill; 8 programs an SM, 1.95 waves instead of 2.6 at 84):
    # the varlen conv read 92% of the copy as one wave of streaming programs and 95-100% as about two, and
    # 88.8% at 1.3 (conv_structure.py, forty-first session, H100). Each also with ``tanh_silu`` (one MUFU op an
    # element for SiLU's two; 784 -> 752 static SASS instructions at 84 registers, sm_90a; forty-second session).
    # On an H100 (forty-third session, s43a) tanh_silu tied (15.10 / 22.70 us against 15.04 / 22.69) and 64
    # registers lost both rows (17.1 / 30.7 us): kept for the H200, whose larger copy rate wants more in flight.
    # Then the window guessed at the T // B-th token (``speculate``, fifty-second session): the slot, x row and
    # window loads beside the metadata's, one dependent round trip fewer where the guess holds, as in decode; first
    # after the registered shape's two forms. On an H100 it lost both rows (s53h: 15.33 / 23.35 us against 15.10 /
    # 22.76); kept for the H200's update rows (79-81% of the copy in a graph, s47a).
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t1", [_CONV_DEPENDENT, _CONV_UNCHECKED,
                                                    {**_CONV_DEPENDENT, "speculate": 1},
                                                    {**_CONV_DEPENDENT, "tanh_silu": True},
                                                    {**_CONV_DEPENDENT, "registers": 64, "tanh_silu": True},
                                                    {**_CONV_DEPENDENT, "registers": 64}, {"threads": 64},
                                                    {"threads": 64, "registers": 0}, {"registers": 40}]),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b256-t2-mtp", [_CONV_DEPENDENT, _CONV_UNCHECKED,
                                                        {**_CONV_DEPENDENT, "speculate": 2},
                                                        {**_CONV_DEPENDENT, "tanh_silu": True},
                                                        {**_CONV_DEPENDENT, "registers": 64, "tanh_silu": True},
                                                        {**_CONV_DEPENDENT, "registers": 64}, {"threads": 64},
                                                        {"registers": 0}]),
    # Varlen: ``chunk`` tokens a program in groups of ``tokens`` rows, the next group in flight.
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-8seq", _conv_varlen_candidates()),
    ("CausalConv1dVarlenFwdOp", "qwen3.5-prefill-4k-1seq", _conv_varlen_candidates()),
    # QKNormRope (issue 21): the registered lanes program against its candidates; the prefill
    # rows of Qwen3-Next (NeoX) and Qwen3.5 (MRoPE) share one kernel per block shape.
    *(("QKNormRopeFwdOp", label, _QK_CANDIDATES)
      for label in ("qwen3-next-prefill-16k", "qwen3-next-prefill-4k", "qwen3.5-prefill-4k")),
    # MoE routing (issue 21): both models' prefill 4k (4 and 2 MB of logits) and decode batch of 64 (the
    # registered program is one per row width, so a program registered for both widths must win all four).
    *(("MoETopKRoutingFwdOp", label, _ROUTING_CANDIDATES)
      for label in ("qwen3-next-80b-prefill-4k", "qwen3.5-35b-prefill-4k", "qwen3-next-80b-decode-b64",
                    "qwen3.5-35b-decode-b64")),
]


def log(*a: Any) -> None:
    print(*a, flush=True)


# ----------------------------------------------------------------------------------- candidates

@dataclasses.dataclass
class Candidate:
    """One block shape of one row: its build key and, once built, the launch function."""

    name: str  # "registered" or the fields it sets, as JSON
    key: Any
    fn: Any = None


@dataclasses.dataclass
class SweepRow:
    """A sweep entry: the op's spec and kernel class, the rows it is checked on, the candidates."""

    op: str
    label: str
    spec: Any
    impl: Any
    cases: list  # (row, dtype case) of every workload row that builds the same kernel, timed row first
    candidates: list


def _call_spec(spec: Any, row: Any, case: Any, arch: str) -> tuple[Any, CallSpec]:
    """The (interface, call spec) a call of this row makes on a CUDA device of ``arch``."""
    cls = getattr(importlib.import_module(spec.source["op"]), spec.name)
    _, plan = plan_row(spec, cls, instantiate(spec, row, case, meta_only=True))
    (interface, c), = plan.call_specs.items()
    return interface, CallSpec(c.op, c.interface, "cuda", arch, c.dtypes, c.dims, c.flags)


def _without_block_shape(key: Any) -> Any:
    """``key`` with every block-shape field at the build key's own default."""
    defaults = {f.name: f.default for f in dataclasses.fields(key) if f.name in block_shape_of(key)}
    return dataclasses.replace(key, **defaults)


def _launch_flipped(key: Any) -> Any:
    """``key`` launched the other way (plainly where it is a programmatic dependent, and the reverse),
    or None where it has no such field. The launch policy was measured on the decode step's graph and
    a prefill row can lose by it (the varlen conv, thirty-eighth session), so every row is timed both
    ways in one run."""
    if not hasattr(key, "dependent_launch"):
        return None
    return with_dependent_launch(key, not key.dependent_launch)


def _at_tokens(row: WorkloadRow, tokens: int) -> WorkloadRow:
    """``row`` with ``T`` tokens in place of its own, labelled so (``--tokens``)."""
    return WorkloadRow(row.index, {**row.values, "T": tokens, "label": f"{row.label}@T={tokens}"}, row.loc)


def plan_sweep(arch: str, only: str = "", most: int | None = None, tokens: tuple[int, ...] = (),
               with_field: str = "") -> list[SweepRow]:
    """Every sweep entry's candidates (build keys for ``arch``) and the rows each is checked on:
    the entries whose ``op/row label`` contains ``only``, the registered block shape and it launched
    the other way (``_launch_flipped``), then the first ``most`` candidates of each (all when None) and, past them,
    those that set the field ``with_field`` (``--with-field``: a new field's candidates without the whole list).

    With ``tokens``, each matching entry whose row has a token count ``T`` is timed at each of those
    counts instead, every other dim its own, and checked on that row alone: how a row's time over its
    copy grows with the tokens of a call (``--tokens``; the routing model in NOTES, fifty-sixth session)."""
    manifest = load_manifest()
    rows = []
    for op_name, label, configs in SWEEP:
        if only not in f"{op_name}/{label}":
            continue
        spec = manifest[op_name]
        timed = next(r for r in spec.workloads if r.label == label)
        chosen = configs[:most] + [c for c in configs[most:] if with_field in c] if most is not None else configs
        if not tokens:
            rows.append(_entry(arch, op_name, spec, timed, chosen))
        elif "T" in timed.values:
            rows.extend(_entry(arch, op_name, spec, _at_tokens(timed, t), chosen, same_kernel_rows=False)
                        for t in tokens)
    return rows


def _entry(arch: str, op_name: str, spec: Any, timed: WorkloadRow, configs: list[dict[str, Any]],
           same_kernel_rows: bool = True) -> SweepRow:
    """One sweep entry on ``timed``: the registered key, flipped, and ``configs``, checked on every workload row that
    builds the same kernel where ``same_kernel_rows``, else on ``timed`` alone."""
    interface, call = _call_spec(spec, timed, dtype_cases(timed)[0], arch)
    impl = select_kernel(interface, call).chosen
    registered = impl.key(call)
    base = _without_block_shape(registered)
    cases = [(timed, dtype_cases(timed)[0])]
    for row in spec.workloads if same_kernel_rows else ():
        for case in dtype_cases(row):
            if (row, case) != cases[0]:
                other_interface, other_call = _call_spec(spec, row, case, arch)
                other = select_kernel(other_interface, other_call).chosen
                if other is impl and _without_block_shape(other.key(other_call)) == base:
                    cases.append((row, case))
    candidates = [Candidate("registered", registered)]
    flipped = _launch_flipped(registered)
    if flipped is not None:
        candidates.append(Candidate(f"registered, dependent_launch={flipped.dependent_launch}", flipped))
    for cfg in configs:
        key = dataclasses.replace(base, **cfg)
        if all(key != c.key for c in candidates):  # the registered key, flipped or not, once
            candidates.append(Candidate(json.dumps(cfg), key))
    return SweepRow(op_name, timed.label, spec, impl, cases, candidates)


def build_all(rows: list[SweepRow]) -> float:
    """Compile every candidate at once; a build that fails is kept as its exception. The last
    rows of ``SWEEP`` (the conv kernels, the slowest to compile) are submitted first."""
    started = time.perf_counter()
    flat = [(r, c) for r in reversed(rows) for c in r.candidates]
    refusals = [r.impl.reason(None, c.key) for r, c in flat]

    def thunk(r: SweepRow, c: Candidate, refusal: str | None) -> Callable[[], Any]:
        def build() -> Any:
            if refusal is not None:
                return ValueError(f"refused: {refusal}")
            fn = r.impl.launcher(c.key)
            log(f"built {r.op} {r.label} {c.name} ({time.perf_counter() - started:.0f} s)")
            return fn
        return build

    for (r, c), fn in zip(flat, compile_many([thunk(r, c, why) for (r, c), why in zip(flat, refusals)])):
        c.fn = fn
    return time.perf_counter() - started


# -------------------------------------------------------------------------------------- timing

class Timer:
    """Median device time of one launch, each launch alone after a write of ``FLUSH_BYTES``."""

    def __init__(self, reps: int, warmup: int = 5) -> None:
        self.reps, self.warmup = reps, warmup
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def us(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            self.flush.fill_(1)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def rotations(nbytes: float) -> int:
    """Input sets a graph cycles through: at least ``ROTATE_BYTES`` touched in all (2 to 32)."""
    return max(2, min(32, -(-ROTATE_BYTES // max(int(nbytes), 1))))


def graph_us(sets: list, fn: Callable[..., Any], replays: int = 20, warmup_ms: float = 0.0) -> float:
    """Per-call time as ``tileops bench`` measures it: one CUDA graph of back-to-back calls
    ``fn(*args)``, one per argument set of ``sets``, repeated until the graph covers
    ``cuda_bench_common.GRAPH_MIN_US`` (so a replay's start gap is under 1% of it), replayed after
    ``warmup_ms`` of untimed replays (``--warmup-ms``: a large RGDR row reads 10% slow for its first
    40-50 ms of replays after a check, ``rgdr_history.py``; a sweep at 0 and at 200 says whether these
    rows have such a phase); the median per call over ``replays`` replays."""
    return time_graph([lambda args=args: fn(*args) for args in sets], target_ms=math.inf, max_replays=replays,
                      warmup_ms=warmup_ms)


class Copies:
    """Device copies timed like the kernels: the 1 GiB peak and, per size, the fastest of
    ``torch.mul(a, 1, out=b)`` and ``b.copy_(a)`` moving that many bytes (half each way)."""

    def __init__(self, timer: Timer, warmup_ms: float = 0.0) -> None:
        self.timer, self.warmup_ms = timer, warmup_ms
        self._same: dict[int, tuple[float, float]] = {}
        a = torch.ones(COPY_BYTES // 2, device="cuda", dtype=torch.bfloat16)  # 1 GiB each way, as before
        b = torch.empty_like(a)
        self.peak_bps = 2 * a.nbytes / (timer.us(lambda: torch.mul(a, 1, out=b)) * 1e-6)

    def same_size(self, nbytes: float) -> tuple[float, float]:
        """``(single-launch us, graph us per call)`` of the fastest copy of ``nbytes`` in all."""
        n = max(8, int(nbytes) // 2 // 2)  # bf16 elements read (and written)
        if n not in self._same:
            bufs = [(torch.ones(n, device="cuda", dtype=torch.bfloat16), torch.empty(n, device="cuda",
                                                                                   dtype=torch.bfloat16))
                    for _ in range(rotations(nbytes))]
            a, b = bufs[0]
            ways = (lambda a, b: torch.mul(a, 1, out=b), lambda a, b: b.copy_(a))
            single = min(self.timer.us(lambda w=w: w(a, b)) for w in ways)
            graphed = min(graph_us(bufs, w, warmup_ms=self.warmup_ms) for w in ways)
            self._same[n] = (single, graphed)
            del bufs
        return self._same[n]


def launch_floor(timer: Timer) -> float:
    """The method's floor: the smallest kernel torch launches, timed like every kernel here."""
    t = torch.zeros(1, device="cuda")
    return timer.us(lambda: t.add_(1))


# ------------------------------------------------------------------------------- checked rows

@dataclasses.dataclass
class Row:
    """One workload row, ready to launch: the launch arguments, the reference, the bytes."""

    spec: Any
    params: dict
    originals: dict  # input name -> CPU tensor
    arg_names: list  # per launch argument: an input name, or None for a non-tensor argument
    launch_args: tuple
    out_shapes: list
    out_dtypes: list
    bytes: float
    expected: dict  # output or mutated input name -> reference tensor (CPU)


def prepare(spec: Any, row: Any, case: Any, seed: int) -> Row:
    """Instantiate a row on the GPU with random inputs, record the launch the op makes for it,
    and compute its reference."""
    cls = getattr(importlib.import_module(spec.source["op"]), spec.name)
    inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(seed))
    originals = {n: t.clone() for n, t in inst.inputs.items() if isinstance(t, torch.Tensor)}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    launch = capture_launches(op, args)[0]
    names = {id(a): t.name for a, t in zip(args, spec.call_inputs) if a is not None}
    plan = op.last_plan
    params = {"activation": None, "seq_lens_style": "lengths", **op.params}  # the references read these
    return Row(spec, params, originals, [names.get(id(a)) for a in launch.args], tuple(launch.args),
               list(plan.out_shapes), list(plan.out_dtypes), roofline_of_row(spec, row, case).bytes,
               REFERENCES[spec.name](None, originals, params))


def fresh_args(row: Row) -> list:
    """Launch arguments on fresh CUDA copies of the original inputs, then poisoned outputs: NaN, or
    the most negative value of an integer output (routing's ids), never a valid one."""
    args = [row.originals[n].to("cuda") if n is not None else a for n, a in zip(row.arg_names, row.launch_args)]
    fills = [float("nan") if d.is_floating_point else torch.iinfo(d).min for d in row.out_dtypes]
    return args + [torch.full(s, f, dtype=d, device="cuda") for s, f, d in zip(row.out_shapes, fills, row.out_dtypes)]


def check(row: Row, fn: Callable[..., Any]) -> float:
    """The largest relative error of the outputs and mutated inputs against the reference (inf
    on a NaN); AssertionError past the suite's tolerance."""
    args = fresh_args(row)
    fn(*args)
    torch.cuda.synchronize()
    got = dict(zip(row.spec.outputs, args[len(row.arg_names):]))
    by_name = {n: a for n, a in zip(row.arg_names, args) if n is not None}
    got.update({t.name: by_name[t.name] for t in row.spec.call_inputs if t.mutated and t.name in by_name})
    worst = 0.0
    for name, out in got.items():
        err = relative_error(out.cpu(), row.expected[name])
        if err > TOLERANCE[out.dtype]:
            raise AssertionError(f"{name}: relative error {err:.3g} > {TOLERANCE[out.dtype]:g}")
        worst = max(worst, err)
    return worst


def measure(r: SweepRow, timer: Timer, copies: Copies, opts: Any, started: float, seed: int) -> list[dict]:
    """Check and time every candidate of one sweep entry; one JSON line per candidate."""
    recs = []
    checked = [prepare(r.spec, row, case, seed + i) for i, (row, case) in enumerate(r.cases)]
    timed = checked[0]
    same_us, same_graph_us = copies.same_size(timed.bytes)
    log(f"{r.op} {r.label}: {timed.bytes / 1e6:.1f} MB; same-size copy {same_us:.2f} us alone, "
        f"{same_graph_us:.2f} us in a graph; checked on {[row.label for row, _ in r.cases]}")
    for c in r.candidates:
        rec: dict[str, Any] = {"op": r.op, "row": r.label, "candidate": c.name, "shape": block_shape_of(c.key),
                               "bytes": timed.bytes}
        recs.append(rec)
        if time.perf_counter() - started > opts.budget:
            rec["error"] = "skipped: budget spent"
            log(json.dumps(rec))
            continue
        try:
            if isinstance(c.fn, Exception):
                raise c.fn
            rec["rel_err"] = max(check(row, c.fn) for row in checked)
            args = fresh_args(timed)
            us = timer.us(lambda: c.fn(*args))
            g_us = graph_us([fresh_args(timed) for _ in range(rotations(timed.bytes))], c.fn, warmup_ms=opts.warmup_ms)
            rec.update(us=us, pct_peak=100 * timed.bytes / (us * 1e-6) / copies.peak_bps, pct_same=100 * same_us / us,
                       graph_us=g_us, graph_pct_peak=100 * timed.bytes / (g_us * 1e-6) / copies.peak_bps,
                       graph_pct_same=100 * same_graph_us / g_us, same_us=same_us, same_graph_us=same_graph_us)
        except Exception as exc:  # a candidate that fails to build or check is reported, not fatal
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log(json.dumps(rec))
    return recs


def report(results: list[dict]) -> None:
    """The closing table and, per row, the fastest correct block shape as a table entry."""
    log("")
    log(f"{'op':26} {'row':26} {'block shape (fields set)':44} {'us':>7} {'%peak':>6} {'%same':>6} "
        f"{'graph':>7} {'%peak':>6} {'%same':>6} {'err':>7}")
    for r in results:
        head = f"{r['op'][:26]:26} {r['row'][:26]:26} {r['candidate'][:44]:44}"
        if "us" in r:
            log(f"{head} {r['us']:7.2f} {r['pct_peak']:6.1f} {r['pct_same']:6.1f} {r['graph_us']:7.2f} "
                f"{r['graph_pct_peak']:6.1f} {r['graph_pct_same']:6.1f} {r['rel_err']:7.1e}")
        else:
            log(f"{head} {r['error'][:100]}")
    log("")
    log("fastest correct block shape per row (graph time), as a block_shapes.BLOCK_SHAPES entry:")
    for op, label in dict.fromkeys((r["op"], r["row"]) for r in results):
        timed = [r for r in results if (r["op"], r["row"]) == (op, label) and "graph_us" in r]
        if timed:
            best = min(timed, key=lambda r: r["graph_us"])
            log(f"  {op} {label}: {best['graph_us']:.2f} us, {best['graph_pct_same']:.1f}% of the same-size copy, "
                f"{best['graph_pct_peak']:.1f}% of the peak: (None, {best['shape']!r})")


# -------------------------------------------------------------------------- without a GPU

def _source_of(key: Any) -> str:
    """The generated CUDA of a candidate's kernel (from the build cache: built already)."""
    from tileops_cuda.kernels import (
        conv1d, gated_rmsnorm, gdn_gating, moe_topk_routing, qk_norm_rope, zero_centred_rmsnorm,
    )

    builders = {zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey: zero_centred_rmsnorm.build_zero_centred_rmsnorm,
                gated_rmsnorm.GatedRMSNormBuildKey: gated_rmsnorm.build_gated_rmsnorm,
                gdn_gating.GDNGatingBuildKey: gdn_gating.build_gdn_gating,
                moe_topk_routing.MoETopKRoutingBuildKey: moe_topk_routing.build_moe_topk_routing}
    if type(key) in builders:
        built = builders[type(key)](key)
        # A routing key with a long program builds two launchers (ByTokenCount): its own program is the short one.
        return getattr(built, "short", built).kernel.get_kernel_source()
    if isinstance(key, qk_norm_rope.QKNormRopeBuildKey):
        return qk_norm_rope.build_qk_norm_rope(key).kernel.get_kernel_source()
    build = conv1d.build_conv_update if isinstance(key, conv1d.ConvUpdateBuildKey) else conv1d.build_conv_varlen
    return build(key).source()


def nvcc_cubin(source: str, arch: str, cubin: Path) -> str:
    """Compile a kernel's generated CUDA into ``cubin`` with nvcc (TileLang's and CUTLASS's headers) and return
    ``ptxas -v``'s report; RuntimeError with nvcc's output where it fails."""
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    cu = cubin.with_suffix(".cu")
    cu.write_text(source)
    out = subprocess.run(["nvcc", "--cubin", "-O3", "-std=c++20", f"-arch={arch}", "-I" + TILELANG_TEMPLATE_PATH,
                          "-I" + CUTLASS_INCLUDE_DIR, "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return out.stderr


def ptxas_report(source: str, arch: str) -> dict[str, Any]:
    """Registers and spill bytes from ``ptxas -v`` on a kernel's generated CUDA, and the widths
    of its global loads (``*(uint4*)(x + ...)`` is a 16-byte load of x), by buffer."""
    with tempfile.TemporaryDirectory() as tmp:
        report = nvcc_cubin(source, arch, Path(tmp) / "k.cubin")
    regs = [int(m) for m in re.findall(r"Used (\d+) registers", report)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)]
    params = set(re.findall(r"\* __restrict__ (\w+)", source))
    loads: dict[str, set[str]] = {}
    for width, buf in re.findall(r"=\s*\*\((\w+)\*\)\((\w+) \+", source):
        if buf in params:
            loads.setdefault(buf, set()).add(width)
    return {"registers": max(regs, default=0), "spill_bytes": sum(spills),
            "loads": {b: sorted(w) for b, w in sorted(loads.items())}}


def compile_only(arch: str, only: str, most: int | None = None) -> int:
    """Compile every candidate for ``arch`` and print its registers, spills and load widths."""
    rows = plan_sweep(arch, only, most)
    log(f"{sum(len(r.candidates) for r in rows)} candidates for {arch}")
    log(f"compiled in {build_all(rows):.0f} s")
    failed = 0
    for r in rows:
        log(f"{r.op} {r.label}: checked on {[row.label for row, _ in r.cases]}")
        for c in r.candidates:
            rec: dict[str, Any] = {"op": r.op, "row": r.label, "candidate": c.name, "shape": block_shape_of(c.key)}
            if isinstance(c.fn, Exception):
                rec["error"] = f"{type(c.fn).__name__}: {str(c.fn)[:300]}"
                failed += 1
            else:
                rec.update(ptxas_report(_source_of(c.key), arch))
            log(json.dumps(rec))
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--only", default="", help="substring of 'op/row label' (QKNorm, QKNormRopeFwdOp/qwen3.5)")
    ap.add_argument("--candidates", type=int, default=None, help="the first N candidates of a row (beside the "
                    "registered block shape); default all")
    ap.add_argument("--with-field", default="", help="also time the candidates past --candidates that set this "
                    "block-shape field (e.g. long_plain)")
    ap.add_argument("--budget", type=float, default=200, help="seconds after which no candidate is timed")
    ap.add_argument("--compile-only", action="store_true", help="no GPU: compile, print registers and spills")
    ap.add_argument("--arch", default="sm_90a", help="the arch --compile-only builds for")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "layer_ops_sweep.json"))
    ap.add_argument("--tokens", default="", help="comma-separated token counts: each matching entry with a token "
                    "count T timed at these instead (e.g. --only MoETopKRoutingFwdOp/qwen3-next-80b-prefill "
                    "--tokens 1024,2048,4096,8192)")
    ap.add_argument("--warmup-ms", type=float, default=0.0,
                    help="untimed graph replays before the timed ones, in ms (kernels and copies alike)")
    opts = ap.parse_args()
    if opts.compile_only:
        return compile_only(opts.arch, opts.only, opts.candidates)
    started = time.perf_counter()
    major, minor = torch.cuda.get_device_capability()
    tokens = tuple(int(t) for t in opts.tokens.split(",") if t)
    rows = plan_sweep(f"sm_{major}{minor}", opts.only, opts.candidates, tokens, opts.with_field)
    log(f"{sum(len(r.candidates) for r in rows)} candidates in {len(rows)} rows; {torch.cuda.get_device_name()}")
    log(f"compiled in {build_all(rows):.0f} s")
    timer = Timer(opts.reps)
    copies = Copies(timer, opts.warmup_ms)
    log(f"copy peak {copies.peak_bps / 1e12:.3f} TB/s (torch.mul, 1 GiB); launch floor {launch_floor(timer):.2f} us")
    seed = int.from_bytes(os.urandom(4), "little")
    log(f"seed {seed}")
    results: list[dict] = []
    for r in rows:
        try:
            results.extend(measure(r, timer, copies, opts, started, seed))
        except Exception as exc:  # a row that cannot even be prepared is reported, the sweep goes on
            rec = {"op": r.op, "row": r.label, "candidate": "*", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            results.append(rec)
            log(json.dumps(rec))
    with open(opts.json, "w") as f:
        json.dump({"copy_peak_tbps": copies.peak_bps / 1e12, "seed": seed, "results": results}, f, indent=1)
    report(results)
    return 1 if any("error" in r and not r["error"].startswith(("ValueError: refused", "skipped")) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
