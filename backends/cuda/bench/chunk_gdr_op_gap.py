"""Where the chunked prefill op's time over its launcher goes (issue 17: at 32k the op measured 2-3%,
55-72 us, slower than the launcher it calls; ninth session, backends/cuda/NOTES.md).

For each row: the op (public API) and the TileLang launcher called directly on the same inputs,
timed interleaved (one op call, one launcher call, repeated; device events around each, medians),
so that clocks, heat and allocator state are the same for both; then each call's host time
(perf_counter around the call, no sync) and the device kernels and CPU-side ATen ops one call
runs, from torch.profiler. A difference in the kernel lists is device work the op adds; equal
lists with a time gap point at host time before the first launch.

    PYTHONPATH=backends/cuda:backends/cpu_ref python3 backends/cuda/bench/chunk_gdr_op_gap.py [--rows PREFIX]
"""

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chunk_gdr_baseline import OP, ChunkGDRBuildKey, ChunkGatedDeltaRuleFwdOp, build_chunk_gdr  # noqa: E402
from tileops_core import load_manifest  # noqa: E402
from tileops_core.bench.workloads import dtype_cases, instantiate  # noqa: E402


def _events(fn) -> float:
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    fn()
    en.record()
    en.synchronize()
    return st.elapsed_time(en) * 1e3


def _host(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6


def _profile(fn) -> tuple[Counter, Counter]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels, cpu = Counter(), Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name[:60]] += 1
        elif e.name.startswith("aten::"):
            cpu[e.name] += 1
    return kernels, cpu


def _allocation_forms(T: int, B: int, NV: int, DK: int, DV: int, dtype) -> dict:
    """Host µs (median of 200) of a call's work buffers two ways: one ``torch.empty`` each (the
    launcher's form until the eleventh session) and the launcher's two allocations carved into views."""
    from tileops_cuda.kernels import chunk_gdr

    NC, f32 = (T + 63 * B) // 64, torch.float32
    shapes, shapes32 = chunk_gdr._work_shapes(NC, NV, DK, DV), chunk_gdr._float32_work_shapes(B, NC, NV)

    def separate():
        return ([torch.empty(s, dtype=dtype, device="cuda") for s in shapes]
                + [torch.empty(s, dtype=f32, device="cuda") for s in shapes32])

    def carved():
        return chunk_gdr._carve(shapes, dtype, "cuda") + chunk_gdr._carve(shapes32, f32, "cuda")

    result = {}
    for name, fn in (("separate", separate), ("carved", carved)) * 2:  # the second round is the one kept
        fn(), fn()
        samples = []
        for _ in range(200):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
        result[name] = statistics.median(samples)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="qwen3.5-32k")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    spec = load_manifest()[OP]
    gen = torch.Generator().manual_seed(0)
    for row in spec.workloads:
        if not row.label.startswith(args.rows):
            continue
        inst = instantiate(spec, row, dtype_cases(row)[0], device="cuda", rng=gen)
        i = inst.inputs
        op = ChunkGatedDeltaRuleFwdOp(**inst.op_kwargs)
        T, NK, DK = i["query"].shape
        NV, DV = i["value"].shape[1:]
        name = lambda t: str(t.dtype).replace("torch.", "")  # noqa: E731
        major, minor = torch.cuda.get_device_capability()
        run = build_chunk_gdr(ChunkGDRBuildKey(name(i["query"]), name(i["state"]), NK, NV, DK, DV,
                                               f"sm_{major}{minor}", cu_dtype=name(i["cu_seqlens"]),
                                               slot_dtype=name(i["ssm_state_indices"]))).run
        pool = i["state"].clone()
        op_args = dict(i, state=pool)
        out = torch.empty_like(i["value"])
        calls = {"op": lambda: op(**op_args),
                 "launcher": lambda: run(**dict(i, state=pool), scale=None,
                                         use_qk_l2norm_in_kernel=inst.op_kwargs.get("use_qk_l2norm_in_kernel", False)),
                 "launcher+out": lambda: run(**dict(i, state=pool), scale=None,
                                             use_qk_l2norm_in_kernel=inst.op_kwargs.get("use_qk_l2norm_in_kernel",
                                                                                         False), out=out)}
        for fn in calls.values():
            fn(), fn()
        times: dict = {k: [] for k in calls}
        hosts: dict = {k: [] for k in calls}
        for _ in range(args.reps):
            for k, fn in calls.items():
                times[k].append(_events(fn))
                hosts[k].append(_host(fn))
        print(f"{row.label} T={T} B={i['ssm_state_indices'].shape[0]} op kwargs {inst.op_kwargs}")
        for k in calls:
            print(f"  {k:<13} device {statistics.median(times[k]):9.1f} us (min {min(times[k]):9.1f})  "
                  f"host {statistics.median(hosts[k]):7.1f} us")
        forms = _allocation_forms(T, i["ssm_state_indices"].shape[0], NV, DK, DV, i["query"].dtype)
        print("  work buffers, host: " + ", ".join(f"{k} {v:.1f} us" for k, v in forms.items()))
        for k in ("op", "launcher"):
            kernels, cpu = _profile(calls[k])
            print(f"  {k} kernels: {dict(kernels)}")
            print(f"  {k} aten: {dict(cpu)}")
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
