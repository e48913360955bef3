"""Attention on the GPU: decode's device time and KV-cache bandwidth as a share of the copy
ceiling measured in the same run; prefill's time against F.scaled_dot_product_attention's
fastest backend on the same prompts.

Usage (from the repository root, tilelang and a CUDA GPU present)::

    python backends/cuda/bench/attention_bench.py [--reps 50] [--json PATH] [--no-prefill] [--no-decode]
        [--settings pipelined:tiles:torch,overlap:heads:kernel:attention]

Prefill rows are timed with their cache write, once per setting named
(``program:grid:tile_counts[:cache_write[:attention_writes_upto]]``, the build key's fields, the cache write
``launch`` when left out; e.g. ``overlap:heads:kernel:launch:4096`` writes the caches from the attention
where the mean prompt is at most 4096 tokens; default: every combination of ``PREFILL_PROGRAMS`` x ``PREFILL_GRIDS`` x
``PREFILL_TILE_COUNTS`` x ``PREFILL_CACHE_WRITES`` the key accepts and the op's registered key (its per-call bound),
all compiled concurrently
first); SDPA's three backends get the same prompts as a batch
(``[B, heads, T / B, D]``, causal, GQA) and no cache write. A summary table closes the run:
each row and setting, its time and its speed as a multiple of SDPA's best.

Method: every measurement is the median over ``--reps`` (>= 50) CUDA-event timings after a
warm-up, the L2 cache flushed before each (a 256 MiB buffer written), one call a timing. The
copy ceiling is ``torch.mul(a, 1, out=b)`` on 1 GiB bf16 (2 GiB moved). A decode row's bytes are
the cache it reads, ``2 · B · context · NKV · D · 2`` (K and V, positions ``0 .. n``); the queries,
new keys/values and outputs are < 0.1% of that and are left out. Each decode row is also
compared with a copy of its own size, timed the same way: ``torch.mul`` moving the row's bytes
(reading half, writing half), which pays the same launch and memory latency, so a small row that
no kernel could bring near the 1 GiB copy's bandwidth is judged against what a copy reaches at
its size ("% of same-size copy"; the peak column stays). Inputs follow the manifest
rows' generator (``full``: every sequence at capacity, blocks drawn at random from a pool) but
are made on the device. Each row's output is checked against a float32 reference for its first
and last sequence (a sanity check; the tests compare against float64).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

_BACKENDS = Path(__file__).resolve().parents[2]
for _p in (str(_BACKENDS / "cuda"), str(_BACKENDS / "cpu_ref")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tileops_cuda.kernels.attention_decode import (  # noqa: E402
    DecodeBuildKey, build_attention_decode, call_plan,
)
from tileops_cuda.kernels.attention_prefill import (  # noqa: E402
    PREFILL_SETTINGS, REGISTERED_ATTENTION_WRITES_UPTO, PrefillBuildKey, build_attention_prefill,
)

NQ, NKV, D = 16, 2, 256
#: The manifest's Qwen3-Next decode rows: (label, B, context, block size or None for contiguous).
DECODE_ROWS = [
    ("qwen3-next-b1-4k", 1, 4096, None), ("qwen3-next-b16-8k", 16, 8192, None),
    ("qwen3-next-b64-4k", 64, 4096, None), ("qwen3-next-b1-32k", 1, 32768, None),
    ("qwen3-next-paged-b1-4k", 1, 4096, 16), ("qwen3-next-paged-b8-32k", 8, 32768, 16),
    ("qwen3-next-paged-b64-16k", 64, 16384, 16), ("qwen3-next-paged-b64-32k", 64, 32768, 16),
]


def log(*a: object) -> None:
    print(*a, flush=True)


class Timer:
    """Median device time (µs) of ``fn`` over ``reps`` calls, L2 flushed before each."""

    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, warmup: int = 5) -> float:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def copy_us(timer: Timer, moved: int) -> float:
    """Device time (µs) of ``torch.mul(a, 1, out=b)`` on bf16 buffers of ``moved / 2`` bytes each:
    a copy moving ``moved`` bytes (half read, half written)."""
    a = torch.randn(max(1, moved // 4), device="cuda").to(torch.bfloat16)
    b = torch.empty_like(a)
    us = timer(lambda: torch.mul(a, 1, out=b))
    del a, b
    return us


def copy_ceiling(timer: Timer) -> float:
    """Bytes/s of ``torch.mul(a, 1, out=b)`` on 1 GiB of bf16 (reads 1 GiB, writes 1 GiB)."""
    return 2 * 2**30 / (copy_us(timer, 2 * 2**30) * 1e-6)


def decode_inputs(B: int, context: int, block: int | None, gen: torch.Generator) -> dict:
    """A ``full`` row: every sequence holds context - 1 tokens (the step writes the last slot)."""
    r = lambda *s: torch.randn(*s, device="cuda", generator=gen, dtype=torch.bfloat16)  # noqa: E731
    inputs = dict(query=r(B, NQ, D), key=r(B, NKV, D), value=r(B, NKV, D),
                  cache_seqlens=torch.full((B,), context - 1, dtype=torch.int32, device="cuda"))
    if block is None:
        inputs.update(key_cache=r(B + 2, context, NKV, D), value_cache=r(B + 2, context, NKV, D), block_table=None)
        return inputs
    M = -(-context // block)
    N = B * M + 4
    table = torch.randperm(N, device="cuda", generator=gen)[: B * M].view(B, M).int()
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D), block_table=table)
    return inputs


def reference_error(inputs: dict, out: torch.Tensor, b: int) -> float:
    """Relative error of sequence ``b``'s output against float32 attention over its cache."""
    n = int(inputs["cache_seqlens"][b])
    pos = torch.arange(n + 1, device="cuda")
    table = inputs["block_table"]
    L = inputs["key_cache"].shape[1]
    rows, at = (torch.full_like(pos, b), pos) if table is None else (table[b].long()[pos // L], pos % L)
    k = inputs["key_cache"][rows, at].float().transpose(0, 1)  # [NKV, n + 1, D]
    v = inputs["value_cache"][rows, at].float().transpose(0, 1)
    q = inputs["query"][b].float().unsqueeze(1)  # [NQ, 1, D]
    ref = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), enable_gqa=True)[0, :, 0]
    return float((out[b].float() - ref).norm() / ref.norm())


def decode_key(block: int | None, arch: str) -> DecodeBuildKey:
    return DecodeBuildKey("bfloat16", NQ, NKV, D, block is not None, "int32", None if block is None else "int32", arch)


def prebuild(arch: str) -> None:
    """Compile the rows' kernels concurrently (nvcc runs in parallel)."""
    from tileops_cuda.kernels._common import compile_many

    blocks = {block for _, _, _, block in DECODE_ROWS}

    def build(block: int | None) -> None:
        launcher = build_attention_decode(decode_key(block, arch))
        if block is not None:
            launcher.prepare(block)

    for block, failure in zip(blocks, compile_many([lambda b=b: build(b) for b in blocks])):
        if isinstance(failure, Exception):
            log(f"build for block size {block} FAILED: {type(failure).__name__}: {failure}")


def bench_decode(timer: Timer, copy_bw: float, arch: str, results: list) -> None:
    gen = torch.Generator(device="cuda")
    gen.seed()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    prebuild(arch)
    for label, B, context, block in DECODE_ROWS:
        try:
            run = build_attention_decode(decode_key(block, arch)).run
            inputs = decode_inputs(B, context, block, gen)
            out = torch.empty_like(inputs["query"])
            args = [inputs[n] for n in ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens",
                                        "block_table")]
            run(*args, None, out)
            torch.cuda.synchronize()
            err = max(reference_error(inputs, out, 0), reference_error(inputs, out, B - 1))
            us = timer(lambda: run(*args, None, out))
            kv_bytes = 2 * B * context * NKV * D * 2
            capacity = context if block is None else -(-context // block) * block
            splits = call_plan(decode_key(block, arch), B, block, capacity, lambda: sms)[2]
            same = copy_us(timer, kv_bytes)
            row = dict(op="AttentionDecodeFwdOp", label=label, B=B, context=context, block=block, us=round(us, 2),
                       kv_bytes=kv_bytes, tb_s=round(kv_bytes / us / 1e6, 3),
                       pct_copy=round(100 * kv_bytes / (us * 1e-6) / copy_bw, 1), splits=splits, rel_err=err,
                       same_size_copy_us=round(same, 2), pct_same_size_copy=round(100 * same / us, 1))
            results.append(row)
            log(f"{label:28s} B={B:3d} ctx={context:6d} splits={splits:3d} {us:9.2f} us "
                f"{row['tb_s']:6.3f} TB/s {row['pct_copy']:5.1f}% of copy  {row['pct_same_size_copy']:5.1f}% of a "
                f"same-size copy ({same:.2f} us)  rel.err(fp32 ref) {err:.2e}")
            del inputs, args, out
            torch.cuda.empty_cache()
        except Exception as exc:  # one failing row does not hide the others
            log(f"{label:28s} FAILED: {type(exc).__name__}: {exc}")
            results.append(dict(op="AttentionDecodeFwdOp", label=label, error=f"{type(exc).__name__}: {exc}"))


#: The manifest's Qwen3-Next prefill rows: (label, tokens, prompts, block size or None).
PREFILL_ROWS = [("qwen3-next-4k-b1", 4096, 1, None), ("qwen3-next-paged-4k-b4", 4096, 4, 16),
                ("qwen3-next-16k-b1", 16384, 1, None), ("qwen3-next-paged-16k-b4", 16384, 4, 16)]


def sdpa_best(timer: Timer, inputs: dict, B: int, results: list) -> tuple[float, str]:
    """The fastest of F.scaled_dot_product_attention's backends on the row's own prompts
    (B causal prompts of T / B tokens, as ``[B, heads, T / B, D]`` copies)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    T = inputs["query"].shape[0]
    q, k, v = (inputs[n].view(B, T // B, -1, D).transpose(1, 2).contiguous() for n in ("query", "key", "value"))
    best = (float("inf"), "none")
    for name, backend in backends.items():
        try:
            with sdpa_kernel(backend):
                us = timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
            results.append(dict(op="sdpa_prefill", T=T, B=B, backend=name, us=round(us, 2)))
            log(f"  sdpa {name:9s} T={T:6d} B={B} {us:10.2f} us")
            best = min(best, (us, name))
        except Exception as exc:
            log(f"  sdpa {name:9s} T={T:6d} B={B} unavailable: {type(exc).__name__}: {str(exc)[:100]}")
    return best


def prefill_inputs(T: int, B: int, block: int | None, gen: torch.Generator) -> dict:
    r = lambda *s: torch.randn(*s, device="cuda", generator=gen, dtype=torch.bfloat16)  # noqa: E731
    n = T // B
    inputs = dict(query=r(T, NQ, D), key=r(T, NKV, D), value=r(T, NKV, D),
                  cu_seqlens=torch.arange(0, T + 1, n, dtype=torch.int32, device="cuda"))
    if block is None:
        inputs.update(key_cache=r(B + 2, n + 3, NKV, D), value_cache=r(B + 2, n + 3, NKV, D), slot_mapping=None)
        return inputs
    N = T // block + 4
    pool = torch.randperm(N, device="cuda", generator=gen)[: T // block]
    pos = torch.arange(T, device="cuda")
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D),
                  slot_mapping=(pool[pos // block] * block + pos % block).int())
    return inputs


def prefill_error(inputs: dict, out: torch.Tensor, B: int) -> float:
    """Relative error of the first and last prompts' outputs against float32 SDPA."""
    T = inputs["query"].shape[0]
    n = T // B
    worst = 0.0
    for s in sorted({0, (B - 1) * n}):
        q, kk, vv = (inputs[x][s : s + n].transpose(0, 1).unsqueeze(0).float() for x in ("query", "key", "value"))
        ref = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=True)[0].transpose(0, 1)
        worst = max(worst, float((out[s : s + n].float() - ref).norm() / ref.norm()))
    return worst


def bench_prefill(timer: Timer, arch: str, settings: list[str], results: list) -> None:
    """Each ``program:grid:tile_counts[:cache_write]`` setting and SDPA's backends on every prefill row, then
    the summary."""
    from tileops_cuda.kernels._common import compile_many

    def key(block: int | None, setting: str) -> PrefillBuildKey:
        return _setting_key(setting, block is not None, arch)

    keys = [key(b, p) for b in (None, 16) for p in settings]
    for k, failure in zip(keys, compile_many([lambda k=k: build_attention_prefill(k) for k in keys])):
        if isinstance(failure, Exception):
            log(f"prefill build paged={k.paged} {k.program}:{k.grid}:{k.tile_counts}:{k.cache_write} FAILED: "
                f"{type(failure).__name__}: {failure}")
    gen = torch.Generator(device="cuda")
    gen.seed()
    summary = []
    for label, T, B, block in PREFILL_ROWS:
        inputs = prefill_inputs(T, B, block, gen)
        args = [inputs[n] for n in ("query", "key", "value", "key_cache", "value_cache", "cu_seqlens", "slot_mapping")]
        flops = 2 * NQ * D * T * (T // B + 1)  # causal: B · n(n+1)/2 scores, QK and PV
        timed = []
        for setting in settings:
            try:
                run = build_attention_prefill(key(block, setting)).run
                out = torch.full_like(inputs["query"], float("nan"))
                run(*args, None, out)
                err = prefill_error(inputs, out, B)
                us = timer(lambda: run(*args, None, out))
                timed.append((setting, us, err))
                log(f"{label:28s} {setting:33s} T={T:6d} B={B} {us:10.2f} us {flops / us / 1e6:7.1f} TFLOP/s "
                    f"rel.err {err:.2e}")
            except Exception as exc:
                log(f"{label:28s} {setting:33s} FAILED: {type(exc).__name__}: {exc}")
                results.append(dict(op="AttentionPrefillFwdOp", label=label, setting=setting,
                                    error=f"{type(exc).__name__}: {exc}"))
        sdpa_us, sdpa_name = sdpa_best(timer, inputs, B, results)
        for setting, us, err in timed:
            ratio = sdpa_us / us
            results.append(dict(op="AttentionPrefillFwdOp", label=label, setting=setting, T=T, B=B, block=block,
                                us=round(us, 2), tflops=round(flops / us / 1e6, 1), rel_err=err, sdpa_best=sdpa_name,
                                sdpa_us=round(sdpa_us, 2), speed_vs_sdpa=round(ratio, 3)))
            summary.append((label, setting, us, err, sdpa_name, sdpa_us, ratio))
        del inputs, args
        torch.cuda.empty_cache()
    log("\nprefill summary (speed = SDPA's best time / ours; target >= 0.9; WRONG: rel.err above bf16's 1.6e-2)")
    log(f"{'row':28s} {'program:grid:tile_counts:cache_write':33s} {'us':>9s} {'rel.err':>8s} {'SDPA best':>16s} {'speed':>6s}")
    for label, setting, us, err, sdpa_name, sdpa_us, ratio in summary:
        log(f"{label:28s} {setting:33s} {us:9.1f} {err:8.1e} {sdpa_name:>7s} {sdpa_us:8.1f} {ratio:5.2f}x"
            f"{'' if ratio >= 0.9 else '  below'}{'' if err <= 1.6e-2 else '  WRONG'}")


def known_settings() -> list[str]:
    """Every ``program:grid:tile_counts:cache_write`` the prefill build key accepts."""

    return [":".join(setting.values()) for setting in PREFILL_SETTINGS]


def registered_setting() -> str:
    """The setting of the key the op registers: the key's default fields and the registered per-call bound."""
    key = PrefillBuildKey("bfloat16", NQ, NKV, D)
    return f"{key.program}:{key.grid}:{key.tile_counts}:{key.cache_write}:{REGISTERED_ATTENTION_WRITES_UPTO}"


def _setting_key(setting: str, paged: bool, arch: str) -> PrefillBuildKey:
    """The Qwen3-Next build key that ``program:grid:tile_counts[:cache_write[:attention_writes_upto]]`` names;
    ValueError (the key's own reason) for one it refuses."""
    fields = setting.split(":")
    if not 3 <= len(fields) <= 5 or (len(fields) == 5 and not fields[4].isdigit()):
        raise ValueError(f"{setting!r} is not program:grid:tile_counts[:cache_write[:attention_writes_upto]]")
    upto = int(fields.pop()) if len(fields) == 5 else 0
    return PrefillBuildKey("bfloat16", NQ, NKV, D, paged, "int32", "int32" if paged else None, arch, *fields,
                           attention_writes_upto=upto)


def _known_setting(setting: str) -> bool:
    """``setting`` names a key the build key accepts (its own checks, not a second copy of them)."""
    try:
        _setting_key(setting, False, "sm_90")
    except ValueError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-prefill", action="store_true")
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument("--settings", default=None,
                        help="comma-separated prefill settings program:grid:tile_counts[:cache_write[:upto]] "
                             "(default: all)")
    args = parser.parse_args()
    if args.reps < 50:
        parser.error("--reps must be >= 50 (medians over fewer are not reported)")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    timer = Timer(args.reps)
    copy_bw = copy_ceiling(timer)
    log(f"device {torch.cuda.get_device_name()} ({arch}); copy ceiling {copy_bw / 1e12:.3f} TB/s "
        f"(torch.mul on 1 GiB bf16, median of {args.reps})")
    results: list = [dict(op="copy_ceiling", bytes_per_s=copy_bw)]
    if not args.no_decode:
        bench_decode(timer, copy_bw, arch, results)
    if not args.no_prefill:
        settings = [*known_settings(), registered_setting()] if args.settings is None else args.settings.split(",")
        unknown = [s for s in settings if not _known_setting(s)]
        if unknown:
            parser.error(f"--settings: {unknown} not among {known_settings()} (a setting without its cache_write "
                         f"writes the caches with their own launch; a fifth field, the key's attention_writes_upto, "
                         f"follows a launched cache write of a program that can write them)")
        bench_prefill(timer, arch, settings, results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
