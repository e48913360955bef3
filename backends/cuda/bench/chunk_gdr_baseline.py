"""The chunked prefill (ChunkGatedDeltaRuleFwdOp) on the GPU: TileOPs' TileLang kernels beside FLA.

For every Qwen3.5 row of ``manifest/gated_delta_prefill.yaml`` (4k tokens in 1 and 8
sequences, 32k in 1, 8 and 64; bf16 q/k/v, fp32 state, in-kernel q/k l2norm) this script
measures, in one run on the same fresh inputs made by the row's own workload generator:

* flash-linear-attention 0.6.0's ``chunk_gated_delta_rule`` in its native varlen layout
  (``[1, T, H, K]`` inputs, ``cu_seqlens``, ``initial_state [B, HV, K, V]`` gathered from the
  pool with zeros where a sequence has no initial state, final state returned);
* the op through its public API (``ours``: on CUDA it selects the TileLang kernels of
  ``tileops_cuda.kernels.chunk_gdr``, or the reference as the fallback where they refuse);
* the TileLang launcher called directly (``kernel``: the op layer's cost excluded), where it
  serves the row;

each as the median device time of eager calls (CUDA events; FLA's varlen path reads
``cu_seqlens`` on the host, so nothing is graph-captured), and each one's relative error,
output and final states, against the float64 truth: the reference's chunked algebra in
float64 on the GPU, which ``backends/cpu_ref/tests/test_chunk_gdr_reference.py`` shows equal
to the decode step's float64 recurrence run token by token to 1e-12.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/chunk_gdr_baseline.py

Writes $OUT/chunk_gdr_baseline.json (or --json) and prints a table last.
"""

import argparse
import json
import os
import statistics
import sys
import traceback
from pathlib import Path

import torch

_BACKENDS = Path(__file__).resolve().parents[2]
for _p in (str(_BACKENDS / "cuda"), str(_BACKENDS / "cpu_ref")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.workloads import dtype_cases, instantiate  # noqa: E402
from tileops_core.ops.gated_delta_prefill import ChunkGatedDeltaRuleFwdOp  # noqa: E402
from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule  # noqa: E402
from tileops_cuda.kernels.chunk_gdr import ChunkGDRBuildKey, build_chunk_gdr, chunk_gdr_refusal  # noqa: E402

OP = "ChunkGatedDeltaRuleFwdOp"


def log(*a):
    print(*a, flush=True)


def median_ms(fn, reps: int = 20) -> float:
    """Median device time of one eager call (after two warm-up calls)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        fn()
        en.record()
        en.synchronize()
        times.append(st.elapsed_time(en))
    return statistics.median(times)


def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm())


def truth(i: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 output and pool after the call, on the GPU."""
    pool = i["state"].clone()
    out = torch.empty(i["value"].shape, dtype=torch.float64, device=pool.device)
    chunk_gated_delta_rule(i["query"], i["key"], i["value"], i["g"], i["beta"], pool, i["cu_seqlens"],
                           i["ssm_state_indices"], i.get("has_initial_state"), use_qk_l2norm_in_kernel=True,
                           compute_dtype=torch.float64, out=out)  # fmt: skip
    return out, pool


def fla_call(fla_fn, i: dict):
    """FLA in its native layout; returns ``(run, scatter)``: the call, and a function that writes
    a call's final states into a pool as the op would."""
    slots = i["ssm_state_indices"].long()
    has = i.get("has_initial_state")
    reads = (slots >= 0) & (torch.zeros_like(slots, dtype=torch.bool) if has is None else has)
    h0 = i["state"][slots.clamp(min=0)].float().transpose(-1, -2).contiguous()  # [B, HV, K, V]
    h0 *= reads.view(-1, 1, 1, 1)  # zeros where a sequence has no initial state
    cu = i["cu_seqlens"].long()
    args = [x.unsqueeze(0) for x in (i["query"], i["key"], i["value"], i["g"], i["beta"])]

    def run():
        return fla_fn(*args, initial_state=h0, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)

    def scatter(pool, final):
        live = (slots >= 0) & (cu[1:] > cu[:-1])  # a sequence without tokens writes nothing
        pool[slots[live]] = final[live].transpose(-1, -2).to(pool.dtype)

    return run, scatter


def kernel_row(i: dict, rec: dict, ref_out: torch.Tensor, ref_pool: torch.Tensor) -> None:
    """The TileLang launcher called directly: its errors and time, or why it does not serve the row."""
    T, NK, DK = i["query"].shape
    NV, DV = i["value"].shape[1:]
    major, minor = torch.cuda.get_device_capability()
    name = lambda t: str(t.dtype).replace("torch.", "")  # noqa: E731
    key = ChunkGDRBuildKey(name(i["query"]), name(i["state"]), NK, NV, DK, DV, f"sm_{major}{minor}",
                           cu_dtype=name(i["cu_seqlens"]), slot_dtype=name(i["ssm_state_indices"]))
    reason = chunk_gdr_refusal(key)
    if reason is not None:
        rec["kernel_refusal"] = reason
        return
    run = build_chunk_gdr(key).run
    pool = i["state"].clone()
    out = torch.full_like(i["value"], float("nan"))
    args = dict(i, state=pool, scale=None, use_qk_l2norm_in_kernel=True, out=out)
    run(**args)
    rec.update(kernel_out_err=rel(out, ref_out), kernel_state_err=rel(pool, ref_pool))
    rec["kernel_ms"] = median_ms(lambda: run(**args))


def bench_row(spec, row, fla_fn, gen) -> dict:
    case = dtype_cases(row)[0]
    inst = instantiate(spec, row, case, device="cuda", rng=gen)
    i = inst.inputs
    rec = {"label": row.label, "T": int(i["value"].shape[0]), "B": int(i["ssm_state_indices"].shape[0])}
    ref_out, ref_pool = truth(i)
    op = ChunkGatedDeltaRuleFwdOp(**inst.op_kwargs)
    pool = i["state"].clone()
    args = dict(i, state=pool)
    out = op(**args)
    rec.update(ours_out_err=rel(out, ref_out), ours_state_err=rel(pool, ref_pool))
    rec["ours_ms"] = median_ms(lambda: op(**args))
    kernel_row(i, rec, ref_out, ref_pool)
    if fla_fn is not None:
        try:
            run, scatter = fla_call(fla_fn, i)
            o, final = run()
            fla_pool = i["state"].clone()
            scatter(fla_pool, final)
            rec.update(fla_out_err=rel(o.squeeze(0), ref_out), fla_state_err=rel(fla_pool, ref_pool))
            rec["fla_ms"] = median_ms(run)
            rec["ours_over_fla"] = rec["ours_ms"] / rec["fla_ms"]
            if "kernel_ms" in rec:
                rec["kernel_over_fla"] = rec["kernel_ms"] / rec["fla_ms"]
        except Exception as exc:
            rec["fla_error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "chunk_gdr_baseline.json"))
    ap.add_argument("--rows", default="qwen3.5", help="run the rows whose label starts with this")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    results: dict = {"device": torch.cuda.get_device_name(0), "rows": [], "errors": []}
    fla_fn = None
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_fn  # noqa: N813

        results["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:
        results["errors"].append(f"fla import: {exc!r}")
    spec = load_manifest()[OP]
    gen = torch.Generator()
    gen.seed()
    for row in spec.workloads:
        if not row.label.startswith(args.rows):
            continue
        try:
            results["rows"].append(bench_row(spec, row, fla_fn, gen))
            log(json.dumps(results["rows"][-1]))
        except Exception as exc:
            results["errors"].append(f"{row.label}: {type(exc).__name__}: {exc}"[:300])
            traceback.print_exc()
        torch.cuda.empty_cache()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    nan = float("nan")
    log(f"{'row':<18} {'T':>6} {'B':>3} | {'op ms':>8} {'kernel':>8} {'out err':>8} {'st err':>8} | {'FLA ms':>8} "
        f"{'out err':>8} {'st err':>8} | op/FLA kernel/FLA")
    for r in results["rows"]:
        log(f"{r['label']:<18} {r['T']:>6} {r['B']:>3} | {r['ours_ms']:8.3f} {r.get('kernel_ms', nan):8.3f} "
            f"{r['ours_out_err']:8.1e} {r['ours_state_err']:8.1e} | {r.get('fla_ms', nan):8.3f} "
            f"{r.get('fla_out_err', nan):8.1e} {r.get('fla_state_err', nan):8.1e} | "
            f"{r.get('ours_over_fla', nan):6.2f} {r.get('kernel_over_fla', nan):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
