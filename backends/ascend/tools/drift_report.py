"""How far the 310P kernel's fp16 state drifts from an fp32 state over a long decode.

The 310P kernel keeps the recurrent state in fp16 between calls (its infershape pins
both outputs to fp16), so every decode step re-quantises it. This tool decodes the
same token stream twice, one token per sequence per step, each step reading the slot
the previous step wrote:

* fp16 path: the CPU schedule model of the 310P kernel (fp16 inputs and state, fp32
  arithmetic, fp16 out), driven by this package's tiling;
* fp32 path: the CPU reference (``tileops_cpu_ref``) with an fp32 state and fp32
  arithmetic, fed the same fp16 input values.

Both start from the same state: an fp32 warm-up decode from zeros, rounded to fp16.
Inputs follow Qwen3-Next/Qwen3.5's gated DeltaNet: q and k l2-normalised (the 310P
kernel has no in-kernel normalisation, so the caller does it), ``beta = sigmoid(.)``,
``g = -exp(A_log)·softplus(a + dt_bias)`` with ``A_log = log U(1, 16)`` and ``dt``
log-uniform in ``[1e-3, 1e-1]`` per head (the models' initialisation).

Run: ``PYTHONPATH=backends/ascend:backends/cpu_ref python backends/ascend/tools/drift_report.py``
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tileops_ascend.launch import prepare_kernel_inputs, tiling_for
from tileops_ascend.schedule_model import run_schedule
from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule


@dataclass(frozen=True)
class DriftRow:
    """Errors of the fp16 path against the fp32 path after ``step`` decode steps."""

    step: int
    out_max_abs: float
    out_rel: float
    state_max_abs: float
    state_rel: float


def _errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    diff = got.double() - want.double()
    return float(diff.abs().max()), float(diff.norm() / want.double().norm())


def drift(
    *,
    batch: int = 4,
    nk: int = 16,
    nv: int = 32,
    dk: int = 128,
    dv: int = 128,
    report_steps: tuple[int, ...] = (1, 8, 64, 512),
    warmup: int = 64,
    seed: int = 0,
) -> list[DriftRow]:
    """Decode ``max(report_steps)`` steps on both paths and report the drift at each of ``report_steps``."""
    gen = torch.Generator().manual_seed(seed)
    a_log = torch.log(torch.empty(nv).uniform_(1.0, 16.0, generator=gen))
    dt = torch.exp(torch.empty(nv).uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    lengths = torch.ones(batch, dtype=torch.int32)
    slots = torch.arange(batch, dtype=torch.int32)

    def step_inputs():
        q = F.normalize(torch.randn(batch, nk, dk, generator=gen), dim=-1).half()
        k = F.normalize(torch.randn(batch, nk, dk, generator=gen), dim=-1).half()
        v = torch.randn(batch, nv, dv, generator=gen).half()
        beta = torch.sigmoid(torch.randn(batch, nv, generator=gen)).half()
        a = torch.randn(batch, nv, generator=gen)
        g = -torch.exp(a_log) * F.softplus(a + dt_bias)
        return q, k, v, beta, g

    state32 = torch.zeros(batch, nv, dv, dk)
    for _ in range(warmup):
        q, k, v, beta, g = step_inputs()
        recurrent_gated_delta_rule(q, k, v, beta, state32, lengths, slots, g)
    state16 = state32.half()
    state32 = state16.float()

    rows: list[DriftRow] = []
    tiling = None
    for step in range(1, max(report_steps) + 1):
        q, k, v, beta, g = step_inputs()
        inputs = prepare_kernel_inputs(
            query=q, key=k, value=v, beta=beta, state=state16, actual_seq_lengths=lengths, ssm_state_indices=slots, g=g
        )
        if tiling is None:
            tiling = tiling_for(inputs)
        out16 = run_schedule(inputs, tiling.data)
        out32 = torch.empty(batch, nv, dv, dtype=torch.float32)
        recurrent_gated_delta_rule(q, k, v, beta, state32, lengths, slots, g, out=out32)
        if step in report_steps:
            out_abs, out_rel = _errors(out16, out32)
            state_abs, state_rel = _errors(state16, state32)
            rows.append(DriftRow(step, out_abs, out_rel, state_abs, state_rel))
    return rows


def main() -> None:
    """Print the drift table as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=64)
    args = parser.parse_args()
    rows = drift(batch=args.batch, seed=args.seed, warmup=args.warmup)
    print(f"NK=16, NV=32, DK=DV=128, B={args.batch}, warm-up {args.warmup} steps, seed {args.seed}")
    print()
    print("| steps | out max abs | out rel (L2) | state max abs | state rel (L2) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r.step} | {r.out_max_abs:.3e} | {r.out_rel:.3e} | {r.state_max_abs:.3e} | {r.state_rel:.3e} |")


if __name__ == "__main__":
    main()
