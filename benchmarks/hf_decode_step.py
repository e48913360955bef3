"""A tiny model's decode step and prefill on the CPU: HF's own model beside the same model on TileOPs.

Run: ``python benchmarks/hf_decode_step.py`` (``--quick`` for a short run). Needs
``tileops[transformers]``. Issue 23's last point: with the transformers integration on the
CPU, the decode step must be no slower than the unpatched model, measured in the same run.

Two copies of one random-init tiny model (``--model``: Qwen3-Next by default;
``tileops_core.integrations.transformers``'s ``tiny_model``: 3 GatedDeltaNet layers and 1
attention layer), one moved onto TileOPs by ``apply_tileops``. Each prefills the same
left-padded batch once; then a sample is ``--steps`` decode steps (``model(next_ids,
cache=...)``, one token per row), and the two models' samples alternate round after round (the
order shuffled), so both run under the same load; then as many prefills of that 24-token batch
into a fresh cache each, alternating the same way. The figure is the median over ``--rounds`` samples of ms per step
(``time.perf_counter``, or with ``--clock cpu`` this thread's CPU time, which on a shared
machine leaves out the time the process waits for a core); the ratio is HF / TileOPs (above
1: TileOPs faster). Contents checks are off (``TILEOPS_CHECK_CONTENTS`` unset), as in serving.
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time
from typing import Any

import torch

from tileops_core.integrations.transformers import cache_kwargs, cache_of


def _prompt(model: Any, batch: int, prompt: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, model.config.vocab_size, (batch, prompt), generator=g)
    mask = torch.ones_like(ids)
    mask[1:, : prompt // 3] = 0  # left padding on every row but the first
    return ids, mask


def _prefilled(model: Any, batch: int, prompt: int, seed: int) -> tuple[Any, torch.Tensor, torch.Tensor]:
    ids, mask = _prompt(model, batch, prompt, seed)
    out = model(input_ids=ids, attention_mask=mask, use_cache=True)
    return cache_of(out), out.logits[:, -1:].argmax(-1), mask


def _prefill_sample(model: Any, prompt: tuple[torch.Tensor, torch.Tensor]) -> float:
    """ms of one prefill of ``prompt`` into a fresh cache."""
    ids, mask = prompt
    start = clock()
    model(input_ids=ids, attention_mask=mask, use_cache=True)
    return (clock() - start) * 1e3


#: ``wall``: ``time.perf_counter``; ``cpu``: this thread's CPU time (all the work with one torch thread).
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter


def _sample(model: Any, state: list[Any], steps: int) -> float:
    cache, ids, mask = state
    start = clock()
    for _ in range(steps):
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, **cache_kwargs(model, cache))
        ids = out.logits[:, -1:].argmax(-1)
    elapsed = clock() - start
    state[1], state[2] = ids, mask
    return elapsed / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3_next", choices=("qwen3_next", "qwen3_5", "qwen3_5_moe"),
                        help="which tiny random-init model (default: qwen3_next)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=8, help="decode steps per sample")
    parser.add_argument("--quick", action="store_true", help="5 rounds of 4 steps")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: time.perf_counter (default); cpu: this thread's CPU time (for a busy machine)")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.quick:
        args.rounds, args.steps = 5, 4
    import transformers

    from tileops_core.integrations.transformers import apply_tileops
    from tileops_core.integrations.transformers._tiny import tiny_model

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    hf = tiny_model(args.model)
    ours = copy.deepcopy(hf)
    apply_tileops(ours)
    print(f"tiny {args.model} decode step and 24-token prefill, CPU, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, 1 thread, {args.clock} clock; median of {args.rounds} samples of "
          f"{args.steps} steps, of {args.rounds} prefills")
    print(f"{'B':>4} {'HF ms/step':>11} {'TileOPs ms/step':>16} {'HF/TileOPs':>11} {'HF ms/prefill':>14} "
          f"{'TileOPs ms/prefill':>19} {'HF/TileOPs':>11}")
    with torch.no_grad():
        for batch in args.batch:
            states = {name: list(_prefilled(m, batch, 24, seed=batch)) for name, m in (("hf", hf), ("ours", ours))}
            models = {"hf": hf, "ours": ours}
            for name in models:  # warm-up: plans, kernel selection, allocator
                _sample(models[name], states[name], 2)
            times: dict[str, list[float]] = {"hf": [], "ours": []}
            for _ in range(args.rounds):
                order = list(models)
                random.shuffle(order)
                for name in order:
                    times[name].append(_sample(models[name], states[name], args.steps))
            prompt = _prompt(hf, batch, 24, seed=batch)
            prefills: dict[str, list[float]] = {"hf": [], "ours": []}
            for _ in range(args.rounds):
                order = list(models)
                random.shuffle(order)
                for name in order:
                    prefills[name].append(_prefill_sample(models[name], prompt))
            h, o = statistics.median(times["hf"]), statistics.median(times["ours"])
            hp, op = statistics.median(prefills["hf"]), statistics.median(prefills["ours"])
            print(f"{batch:>4} {h:>11.3f} {o:>16.3f} {h / o:>11.2f} {hp:>14.3f} {op:>19.3f} {hp / op:>11.2f}")


if __name__ == "__main__":
    main()
