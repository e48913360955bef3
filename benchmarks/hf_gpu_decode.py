"""Qwen3-Next / Qwen3.5-MoE at real layer sizes on the GPU: TileOPs beside HF's torch path and HF with
flash-linear-attention.

Run: ``python benchmarks/hf_gpu_decode.py --out DIR`` on a CUDA machine (``--smoke``: tiny sizes on
the CPU, what the test runs so the script cannot rot). Issue 18's GPU half, and issue 21's model
check (``--variants qwen3_5_moe``), in one run:

The model: a random-init ``Qwen3NextForCausalLM`` with hidden 2048, NK=16, NV=32, DK=DV=128,
attention 16 query / 2 key-value heads of 256, 4 layers (3 GatedDeltaNet, 1 attention), a
vocabulary of 4096, bf16 weights and float32 GatedDeltaNet state; ``dense`` MLPs (intermediate
5120) or a ``moe`` variant (64 experts, 10 per token, expert and shared-expert width 512). The
``qwen3_5_moe`` variant is a ``Qwen3_5MoeForCausalLM`` at Qwen3.5-35B-A3B's layer sizes (the same
GatedDeltaNet and attention heads, rotary on 64 of 256 channels with θ = 1e7 and interleaved MRoPE
sections [11, 11, 10], 256 experts, 8 per token, expert and shared-expert width 512), 4 layers, a
vocabulary of 4096, with every module on TileOPs (``apply_tileops(every_module=True)``: the Linear
layers and the embedding lookup too; ``--every-module`` asks it of the Qwen3-Next variants). Its
model report (which op and kernel serves each module, ``tileops explain --model``'s table) is
printed and kept in the JSON.
One set of weights is built in float32 on the CPU and copied: HF's model (unpatched) and
TileOPs' (``apply_tileops``) on the GPU in bf16, and the float32 CPU copy as the reference.
TileOPs' kernels are compiled up front, in parallel (``build_kernels``; ``build_kernels_s``).

Three setups: ``tileops``; ``hf_torch``, HF's own model with its torch functions forced (the
modeling module's ``causal_conv1d_update``, ``causal_conv1d_fn``, ``torch_chunk_gated_delta_rule``,
``torch_recurrent_gated_delta_rule`` replaced, for the measurement, by the torch functions they
wrap: transformers picks flash-linear-attention's kernels when it is importable, once, at import,
in a closure of each wrapper); ``hf_fla``, the same model as transformers set it up (the JSON
says which implementation serves each function).

Measured at each batch (default 1 and 32), every figure a median over synchronized repetitions
after warm-up:

(a) the eager decode step (``model(next_ids, cache)`` after a short prompt), and for TileOPs its
    host time broken down: TileOPs' call path (time inside ``Op.__call__``, kernel launches
    included), the kernels' launch calls (profiler, ``*LaunchKernel*``), HF's own code (the
    rest of the host time), and the GPU time of the kernels with their count (profiler);
(b) TileOPs' decode step in a CUDA graph (``static_decode_session(capture="cuda_graph")``): replay
    time by CUDA events, whether replays equal the session's eager steps (bit for bit, and the
    max difference), the ratio to HF with flash-linear-attention's eager step (target >= 10x at B=1);
    with ``--compile`` also ``capture="reduce_overhead"``;
(c) the prefill of ``--prefill-len`` tokens (4096) a row, for the three setups;
(d) the logits of the bf16 GPU models against the float32 CPU run of the same weights over a
    left-padded prefill and decode steps (every setup fed the float32 run's greedy tokens, so
    each step compares one context; "tokens equal" says whether its greedy choice agrees). Tolerance (documented): bf16 rounds each weight and
    activation to 8 significant bits, so the reference for what bf16 costs is HF's own bf16
    model on the same GPU; TileOPs passes when its max |dlogits| <= 2x HF torch path's + 1% of
    the largest |logit|, and its greedy tokens are reported beside HF's.

``--setups`` times only some setups (the logits check always runs TileOPs and HF's torch path, its
tolerance's reference); ``--no-prefill`` skips (c).

Output: a table on stdout and ``hf_gpu_decode.json`` in ``--out`` (default ``$OUT`` or ``.``),
rewritten after every measurement so that a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import inspect
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, ContextManager, Iterator

import torch

from tileops_core.integrations.transformers import cache_kwargs, cache_of
from tileops_core.integrations.transformers._tiny import HF_GDN_FUNCTIONS, hf_torch_path

SETUPS = ("tileops", "hf_torch", "hf_fla")
#: HF's GatedDeltaNet functions that transformers may bind to an installed package's kernels.
MODELING = "transformers.models.qwen3_next.modeling_qwen3_next"
VARIANTS = ("dense", "moe", "qwen3_5_moe")
#: The variant -> (model class, modeling module) of the models that are not Qwen3-Next.
_QWEN3_5_MOE = ("Qwen3_5MoeForCausalLM", "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe")


# ---------------------------------------------------------------- the model


def model_config(variant: str, smoke: bool) -> Any:
    """The config of ``variant`` (Qwen3-Next ``dense`` or ``moe``, or ``qwen3_5_moe``): real layer sizes,
    or tiny ones."""
    import transformers as hf

    if variant == "qwen3_5_moe":
        return qwen3_5_moe_config(smoke)

    if smoke:
        sizes: dict[str, Any] = dict(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
                                     linear_key_head_dim=16, linear_value_head_dim=16, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=256)
        moe: dict[str, Any] = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                   shared_expert_intermediate_size=32)
    else:
        sizes = dict(hidden_size=2048, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                     linear_value_head_dim=128, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                     intermediate_size=5120, vocab_size=4096)
        moe = dict(num_experts=64, num_experts_per_tok=10, moe_intermediate_size=512,
                   shared_expert_intermediate_size=512)
    layers = 4
    mlp = dict(mlp_only_layers=list(range(layers))) if variant == "dense" else dict(mlp_only_layers=[],
                                                                                    decoder_sparse_step=1)
    return hf.Qwen3NextConfig(**sizes, **moe, **mlp, num_hidden_layers=layers, linear_conv_kernel_dim=4,
                              max_position_embeddings=32768)


def qwen3_5_moe_config(smoke: bool) -> Any:
    """Qwen3.5-35B-A3B's layer sizes (tiny ones with ``smoke``), 4 layers (3 GatedDeltaNet, then attention)."""
    import transformers as hf

    if smoke:
        sizes: dict[str, Any] = dict(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
                                     linear_key_head_dim=16, linear_value_head_dim=16, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                     moe_intermediate_size=32, shared_expert_intermediate_size=32)
    else:
        sizes = dict(hidden_size=2048, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                     linear_value_head_dim=128, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                     num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                     shared_expert_intermediate_size=512)
    rope = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10]}
    return hf.Qwen3_5MoeTextConfig(**sizes, vocab_size=256 if smoke else 4096, num_hidden_layers=4,
                                   linear_conv_kernel_dim=4, max_position_embeddings=32768, rope_parameters=rope)


class Models:
    """One set of weights three ways: float32 on the CPU (the reference), HF's and TileOPs' on ``device``."""

    def __init__(self, variant: str, smoke: bool, device: torch.device, dtype: torch.dtype, seed: int = 0,
                 every_module: bool = False) -> None:
        import transformers as hf

        from tileops_core.integrations.transformers import apply_tileops, build_kernels

        torch.manual_seed(seed)
        self.config = model_config(variant, smoke)
        cls, self.modeling = _QWEN3_5_MOE if variant == "qwen3_5_moe" else ("Qwen3NextForCausalLM", MODELING)
        self.cpu32 = getattr(hf, cls)(self.config).eval()
        self.hf = copy.deepcopy(self.cpu32).to(device, dtype)
        self.tileops = copy.deepcopy(self.hf)
        if variant != "dense":  # the float32 reference loops over its experts (HF's eager form: any device)
            self.cpu32.set_experts_implementation("eager")
        self.report = apply_tileops(self.tileops, every_module=every_module or variant == "qwen3_5_moe")
        started = time.perf_counter()
        self.build_failures = build_kernels(self.report.kernel_calls)
        self.build_kernels_s = time.perf_counter() - started
        self.device = device

    def of(self, setup: str) -> Any:
        return self.tileops if setup == "tileops" else self.hf


def _served_by(fn: Any) -> str:
    """The function that runs when ``fn`` is called: the ``implementation`` a transformers wrapper
    closes over, or ``fn`` itself (its ``__wrapped__`` chain followed)."""
    while fn is not None:
        closure = inspect.getclosurevars(fn).nonlocals if inspect.isfunction(fn) else {}
        if closure.get("implementation") is not None:
            fn = closure["implementation"]
            break
        if getattr(fn, "__wrapped__", None) is None:
            break
        fn = fn.__wrapped__
    return "absent" if fn is None else f"{fn.__module__}.{fn.__qualname__}"


def hf_implementations(modeling_name: str = MODELING) -> dict[str, str]:
    """Which implementation serves each of HF's GatedDeltaNet functions in this process, now."""
    modeling = importlib.import_module(modeling_name)
    return {name: _served_by(getattr(modeling, name, None)) for name in HF_GDN_FUNCTIONS}


def setup_context(setup: str) -> ContextManager[None]:
    """``hf_torch``: HF's modeling modules call their torch functions for the duration
    (:func:`hf_torch_path`); else nothing changes."""
    return hf_torch_path() if setup == "hf_torch" else contextlib.nullcontext()


def forward(model: Any, ids: torch.Tensor, mask: torch.Tensor | None, cache: Any) -> Any:
    """One forward with the cache under the keyword this transformers uses (5.2x: ``cache``)."""
    return model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1, **cache_kwargs(model, cache))


# ---------------------------------------------------------------- timing


class Clock:
    """Synchronized wall time on the model's device."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def median(self, fn: Callable[[], Any], reps: int, warmup: int) -> float:
        """Median seconds of ``fn`` over ``reps`` calls, each between two synchronizations."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)


def prompt(vocab: int, batch: int, length: int, device: torch.device, seed: int, pad: bool) -> tuple[torch.Tensor, Any]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, length), generator=g)
    if not pad:
        return ids.to(device), None
    mask = torch.ones_like(ids)
    for row in range(1, batch):  # left padding: row b has b pads (at most a third of the prompt)
        pads = min(row, length // 3)
        ids[row, :pads], mask[row, :pads] = 0, 0
    return ids.to(device), mask.to(device)


class DecodeLoop:
    """A prefilled batch that steps one token a row per call (fixed token ids: no argmax sync)."""

    def __init__(self, model: Any, batch: int, prompt_len: int, seed: int) -> None:
        self.model = model
        ids, _ = prompt(model.config.vocab_size, batch, prompt_len, next(model.parameters()).device, seed, False)
        with torch.no_grad():
            self.cache = cache_of(forward(model, ids, None, None))
        self.next_ids = ids[:, -1:].clone()

    def __call__(self) -> Any:
        with torch.no_grad():
            return forward(self.model, self.next_ids, None, self.cache)


@contextlib.contextmanager
def op_call_timer() -> Iterator[list[float]]:
    """Seconds spent inside outermost ``Op.__call__`` (TileOPs' call path and its kernels' launches)."""
    from tileops_core.op.base import Op

    original, spent, depth = Op.__call__, [0.0], [0]

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[0] += time.perf_counter() - t0

    Op.__call__ = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        Op.__call__ = original  # type: ignore[method-assign]


#: Kernels listed by name in a profiled step's breakdown.
_TOP_KERNELS = 16


def _profile(step: Callable[[], Any], steps: int, cuda: bool) -> dict[str, float | int | None]:
    """Per step: kernels' GPU seconds and count, and host seconds in kernel-launch calls."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    kernel_us, kernels, launch_us = 0.0, 0, 0.0
    by_name: dict[str, list[float]] = {}  # name -> [µs, launches]
    for evt in prof.events():
        if "LaunchKernel" in evt.name:
            launch_us += evt.cpu_time_total
        elif cuda and str(getattr(evt, "device_type", "")).endswith("CUDA"):  # kernels, copies, memsets
            us = evt.time_range.elapsed_us()
            kernel_us += us
            kernels += 1
            entry = by_name.setdefault(evt.name, [0.0, 0])
            entry[0] += us
            entry[1] += 1
    # Where a step's GPU time goes: the kernels by name, the costliest first (µs and launches a step).
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:_TOP_KERNELS]
    return {"kernels_gpu_s": kernel_us * 1e-6 / steps if cuda else None,
            "kernels_per_step": kernels // steps if cuda else None, "launch_host_s": launch_us * 1e-6 / steps,
            "kernels_by_name": {name[:120]: {"us": round(us / steps, 2), "launches": n // steps}
                                for name, (us, n) in top} if cuda else None}


def eager_decode(models: Models, setup: str, batch: int, a: Any, clock: Clock) -> dict[str, Any]:
    """(a): the eager decode step's synchronized median; for TileOPs, where its host time goes."""
    model = models.of(setup)
    with setup_context(setup):
        loop = DecodeLoop(model, batch, a.prompt_len, seed=batch)
        row: dict[str, Any] = {"step_s": clock.median(loop, a.reps, a.warmup)}
        if setup == "tileops":
            host = []
            with op_call_timer() as spent:
                for _ in range(a.reps):
                    clock.sync()
                    t0 = time.perf_counter()
                    loop()
                    host.append(time.perf_counter() - t0)
            row["host_s"] = statistics.median(host)
            row["tileops_call_path_s"] = spent[0] / a.reps
            row["hf_code_s"] = row["host_s"] - row["tileops_call_path_s"]
            row.update(_profile(loop, min(5, a.reps), clock.cuda))
    return row


# ---------------------------------------------------------------- (b) the captured step


def _session_run(session: Any, ids: torch.Tensor, tokens: list[torch.Tensor]) -> list[torch.Tensor]:
    out = [session.prefill(ids).clone()]
    for t in tokens:
        out.append(session.step(t).clone())
    return out


def captured_decode(models: Models, batch: int, a: Any, clock: Clock, hf_fla_step_s: float | None) -> dict[str, Any]:
    """(b): the static session's step eagerly, and in a CUDA graph (``--compile``: reduce-overhead)."""
    from tileops_core.integrations.transformers import static_decode_session

    model = models.tileops
    vocab = model.config.vocab_size
    ids, _ = prompt(vocab, batch, a.prompt_len, models.device, seed=batch, pad=False)
    g = torch.Generator().manual_seed(batch + 1)
    tokens = [torch.randint(1, vocab, (batch,), generator=g).to(models.device) for _ in range(a.check_steps)]
    max_len = a.prompt_len + a.check_steps + a.reps + a.warmup + 4
    eager = static_decode_session(model, batch, max_len)
    want = _session_run(eager, ids, tokens)
    eager.prefill(ids)
    row: dict[str, Any] = {"static_eager_step_s": clock.median(lambda: eager.step(tokens[0]), a.reps, a.warmup)}
    modes = ["cuda_graph"] + (["reduce_overhead"] if a.compile else []) if clock.cuda else []
    for mode in modes:
        try:
            session = static_decode_session(model, batch, max_len, capture=mode)
            got = _session_run(session, ids, tokens)
            row[f"{mode}_equal_to_eager"] = all(torch.equal(x, y) for x, y in zip(want, got))
            row[f"{mode}_max_abs_diff"] = max((x.float() - y.float()).abs().max().item() for x, y in zip(want, got))
            session.prefill(ids)
            row[f"{mode}_step_s"] = _replay_time(session, tokens[0], a.reps, a.warmup)
            if hf_fla_step_s and mode == "cuda_graph":
                row["speedup_vs_hf_fla_eager"] = hf_fla_step_s / row[f"{mode}_step_s"]
        except Exception as exc:  # a mode that fails says why; the run goes on
            row[f"{mode}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            traceback.print_exc(limit=-4)
    return row


def _replay_time(session: Any, token: torch.Tensor, reps: int, warmup: int) -> float:
    """Seconds per step: ``reps`` back-to-back steps between two CUDA events, median of 5 samples."""
    for _ in range(warmup):
        session.step(token)
    samples = []
    per = max(1, reps // 5)
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per):
            session.step(token)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / per)
    return statistics.median(samples)


# ---------------------------------------------------------------- (c) prefill, (d) logits


def prefill(models: Models, setup: str, batch: int, a: Any, clock: Clock) -> dict[str, Any]:
    """(c): one forward over ``--prefill-len`` tokens a row, a fresh cache each time."""
    model = models.of(setup)
    ids, _ = prompt(model.config.vocab_size, batch, a.prefill_len, models.device, seed=7, pad=False)
    with setup_context(setup), torch.no_grad():
        return {"prefill_s": clock.median(lambda: forward(model, ids, None, None), a.prefill_reps, 1)}


def _decode_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor, steps: int,
                   feed: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The last position's float32 CPU logits of a prefill and ``steps`` decode steps (HF's forward),
    each step fed the previous step's greedy token, or ``feed[step]`` (every setup sees one context)."""
    cache, logits = None, []
    with torch.no_grad():
        for step in range(1 + steps):
            out = forward(model, ids, mask, cache)
            cache = cache_of(out)
            logits.append(out.logits[:, -1].float().cpu())
            ids = logits[-1].argmax(-1, keepdim=True) if feed is None else feed[step].view(-1, 1)
            ids = ids.to(mask.device)
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
    return logits


def logits_check(models: Models, a: Any) -> dict[str, Any]:
    """(d): bf16 on the device against float32 on the CPU, same weights, left-padded batch of 2; every
    setup is fed the float32 run's greedy tokens."""
    from tileops_core.integrations.transformers import static_decode_session

    vocab = models.config.vocab_size
    ids, mask = prompt(vocab, 2, 16, torch.device("cpu"), seed=3, pad=True)
    with setup_context("hf_torch"):  # transformers may have bound CUDA-only kernels (FLA) at import
        want = _decode_logits(models.cpu32, ids, mask, a.check_steps)
    feed = [w.argmax(-1) for w in want]
    dev_ids, dev_mask = ids.to(models.device), mask.to(models.device)
    got = {"tileops": _decode_logits(models.tileops, dev_ids, dev_mask, a.check_steps, feed)}
    with setup_context("hf_torch"):
        got["hf_torch"] = _decode_logits(models.hf, dev_ids, dev_mask, a.check_steps, feed)
    session = static_decode_session(models.tileops, 2, 16 + a.check_steps + 1,
                                    capture="cuda_graph" if models.device.type == "cuda" else "eager")
    static = [session.prefill(dev_ids, dev_mask).float().cpu()]
    for token in feed[:-1]:
        static.append(session.step(token.to(models.device)).float().cpu())
    got["tileops_static"] = static
    scale = max(w.abs().max().item() for w in want)
    row: dict[str, Any] = {"max_abs_logit_fp32": scale}
    for name, logits in got.items():
        row[f"{name}_max_abs_dlogits"] = max((x - w).abs().max().item() for x, w in zip(logits, want))
        row[f"{name}_tokens_equal_fp32"] = all(torch.equal(x.argmax(-1), w.argmax(-1)) for x, w in zip(logits, want))
    row["tolerance"] = 2 * row["hf_torch_max_abs_dlogits"] + 0.01 * scale
    row["tileops_within_tolerance"] = (row["tileops_max_abs_dlogits"] <= row["tolerance"]
                                       and row["tileops_static_max_abs_dlogits"] <= row["tolerance"])
    return row


# ---------------------------------------------------------------- the run


def _ms(x: Any) -> str:
    return f"{x * 1e3:9.3f}" if isinstance(x, (int, float)) else f"{'-':>9s}"


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{result['sizes']} on {result['device']} ({result['dtype']}); HF's GDN functions (Qwen3-Next): "
             f"{json.dumps(result['hf_implementations'])}"]
    for variant, v in result["variants"].items():
        unserved = v.get("unserved_modules")
        lines.append(f"\n[{variant}] modules not served by a TileOPs op: {unserved or 'none'}; kernels built ahead in "
                     f"{v.get('build_kernels_s', 0):.1f} s")
        lines.append(f"[{variant}] ms per call (synchronized medians)")
        lines.append(f"{'B':>3s} {'setup':9s} {'decode':>9s} {'prefill':>9s}  notes")
        for b, rows in v.get("batches", {}).items():
            for setup in SETUPS:
                d, p = rows.get("decode", {}).get(setup, {}), rows.get("prefill", {}).get(setup, {})
                note = ""
                if setup == "tileops" and "host_s" in d:
                    note = (f"host {_ms(d['host_s']).strip()} = TileOPs call path {_ms(d['tileops_call_path_s']).strip()}"
                            f" + HF code {_ms(d['hf_code_s']).strip()} (launch calls {_ms(d['launch_host_s']).strip()});"
                            f" kernels {_ms(d.get('kernels_gpu_s')).strip()} GPU, {d.get('kernels_per_step')} a step")
                lines.append(f"{b:>3s} {setup:9s} {_ms(d.get('step_s'))} {_ms(p.get('prefill_s'))}  {note}")
                for name, k in (d.get("kernels_by_name") or {}).items():
                    lines.append(f"{'':14s}{k['us']:9.1f} us a step in {k['launches']:3d} launches  {name}")
            c = rows.get("captured", {})
            for mode in ("static_eager", "cuda_graph", "reduce_overhead"):
                if f"{mode}_step_s" in c or f"{mode}_error" in c:
                    extra = c.get(f"{mode}_error") or (
                        "" if mode == "static_eager" else
                        f"equal to eager: {c.get(f'{mode}_equal_to_eager')} (max diff {c.get(f'{mode}_max_abs_diff')})")
                    if mode == "cuda_graph" and "speedup_vs_hf_fla_eager" in c:
                        extra += f"; {c['speedup_vs_hf_fla_eager']:.1f}x faster than hf_fla eager"
                    lines.append(f"{b:>3s} {'tileops ' + mode:24s} {_ms(c.get(f'{mode}_step_s'))}  {extra}")
        if "logits" in v:
            lg = v["logits"]
            lines.append(f"logits vs fp32 CPU (max |logit| {lg['max_abs_logit_fp32']:.3g}, tolerance "
                         f"{lg['tolerance']:.3g}): " + ", ".join(
                             f"{n} {lg[f'{n}_max_abs_dlogits']:.3g} (tokens equal {lg[f'{n}_tokens_equal_fp32']})"
                             for n in ("tileops", "tileops_static", "hf_torch"))
                         + f"; within tolerance: {lg['tileops_within_tolerance']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> Any:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, few repetitions")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--variants", nargs="+", default=["dense"], choices=VARIANTS, help="default: dense")
    p.add_argument("--every-module", action="store_true",
                   help="the Qwen3-Next variants with every module on TileOPs too (qwen3_5_moe always is)")
    p.add_argument("--batches", type=int, nargs="+", default=None, help="default: 1 32 (--smoke: 1 2)")
    p.add_argument("--prefill-batches", type=int, nargs="+", default=None, help="default: 1")
    p.add_argument("--no-prefill", action="store_true", help="skip (c), the prefill timings")
    p.add_argument("--setups", nargs="+", default=list(SETUPS), choices=SETUPS,
                   help="which setups to time (default: all three; the logits check always runs tileops and hf_torch)")
    p.add_argument("--prompt-len", type=int, default=None, help="tokens before the timed decode steps")
    p.add_argument("--prefill-len", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--prefill-reps", type=int, default=None)
    p.add_argument("--check-steps", type=int, default=4, help="decode steps compared (replay vs eager, logits)")
    p.add_argument("--compile", action="store_true", help="also time capture='reduce_overhead'")
    a = p.parse_args(argv)
    defaults = dict(batches=[1, 2], prompt_len=8, prefill_len=32, reps=3, warmup=1, prefill_reps=1) if a.smoke else \
        dict(batches=[1, 32], prompt_len=64, prefill_len=4096, reps=10, warmup=2, prefill_reps=2)
    for key, value in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.prefill_batches = [] if a.no_prefill else a.prefill_batches or a.batches[:1]
    return a


def run(a: Any) -> dict[str, Any]:
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    clock = Clock(device)
    path = os.path.join(a.out, "hf_gpu_decode.json")
    os.makedirs(a.out, exist_ok=True)
    import transformers

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "dtype": str(dtype),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "sizes": "tiny (--smoke)" if a.smoke else "hidden 2048, NK=16, NV=32, DK=DV=128, 4 layers, vocab 4096",
        "args": vars(a), "hf_implementations": hf_implementations(), "variants": {}}
    with setup_context("hf_torch"):
        result["hf_torch_implementations"] = hf_implementations()

    def save() -> None:
        with open(path, "w") as f:
            json.dump(result, f, indent=1, default=str)

    def attempt(where: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
        try:
            where[key] = fn()
        except Exception as exc:  # one failing measurement is recorded; the others still run
            traceback.print_exc(limit=-4)
            where[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        save()
        print(f"  {key}: {where[key]}", flush=True)

    for variant in a.variants:
        models = Models(variant, a.smoke, device, dtype, every_module=a.every_module)
        report = models.report
        v: dict[str, Any] = {"report": str(report), "model_report": report.module_table(),
                             "unserved_modules": report.unserved_modules(), "build_kernels_s": models.build_kernels_s,
                             "build_failures": models.build_failures,
                             "hf_implementations": hf_implementations(models.modeling), "batches": {}}
        result["variants"][variant] = v
        save()
        print(f"[{variant}] {report}\nper module:\n" + "\n".join(v["model_report"]) +
              f"\nmodules not served by a TileOPs op: {v['unserved_modules'] or 'none'}; kernels built in "
              f"{models.build_kernels_s:.1f} s ({len(models.build_failures)} failed)", flush=True)
        for batch in a.batches:  # the captured step first (after the eager step it is compared with)
            rows: dict[str, Any] = {"decode": {}, "prefill": {}}
            v["batches"][str(batch)] = rows
            if "hf_fla" in a.setups:
                attempt(rows["decode"], "hf_fla", lambda: eager_decode(models, "hf_fla", batch, a, clock))
            fla = rows["decode"].get("hf_fla", {}).get("step_s")
            if "tileops" in a.setups:
                attempt(rows, "captured", lambda: captured_decode(models, batch, a, clock, fla))
            for setup in ("tileops", "hf_torch"):
                if setup in a.setups:
                    attempt(rows["decode"], setup, lambda: eager_decode(models, setup, batch, a, clock))
        attempt(v, "logits", lambda: logits_check(models, a))
        for batch in a.prefill_batches:
            rows = v["batches"].setdefault(str(batch), {"decode": {}, "prefill": {}})
            for setup in a.setups:
                attempt(rows["prefill"], setup, lambda: prefill(models, setup, batch, a, clock))
        del models
        if device.type == "cuda":
            torch.cuda.empty_cache()
    save()
    return result


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    result = run(a)
    print(format_table(result))
    print(f"\nJSON: {os.path.join(a.out, 'hf_gpu_decode.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
