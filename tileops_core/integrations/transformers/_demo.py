"""The README's main job: a tiny random-init model generates through TileOPs beside HF's own.

Two copies of one random-init model (nothing downloaded): one left as HF wrote it, one moved
onto TileOPs by ``apply_tileops``. Both generate greedily from the same left-padded batch;
the result holds the report, both token sequences and the max |Δlogits| over every step, and
the wall time of each model's first ``generate`` (TileOPs' plans and kernel selection
included) and of its warm ones (the median of ``WARM_RUNS``, the two models alternating).
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass

import torch

from ._apply import apply_tileops
from ._report import TileOpsReport
from ._tiny import tiny_model

__all__ = ["DemoResult", "WARM_RUNS", "run_demo"]

#: Warm ``generate`` calls a model makes after its first, for the steady-state time.
WARM_RUNS = 3


@dataclass(frozen=True)
class DemoResult:
    report: TileOpsReport
    prompt: torch.Tensor
    hf_tokens: torch.Tensor
    tileops_tokens: torch.Tensor
    max_abs_dlogits: float
    hf_seconds: float
    tileops_seconds: float
    hf_warm_seconds: float
    tileops_warm_seconds: float

    @property
    def tokens_equal(self) -> bool:
        return torch.equal(self.hf_tokens, self.tileops_tokens)


def run_demo(model_type: str = "qwen3_next", *, new_tokens: int = 8, batch: int = 2, prompt_len: int = 12,
             seed: int = 0) -> DemoResult:
    """Generate ``new_tokens`` greedily with the unpatched and the patched copy; compare them."""
    hf = tiny_model(model_type, seed=seed)
    ours = copy.deepcopy(hf)
    report = apply_tileops(ours)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, hf.config.vocab_size, (batch, prompt_len), generator=g)
    mask = torch.ones_like(ids)
    for row in range(1, batch):  # left padding: row b has b * 3 pads (row 0 none)
        pads = min(3 * row, prompt_len - 1)
        ids[row, :pads], mask[row, :pads] = 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
              output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    outs, seconds = [], []
    warm: tuple[list[float], list[float]] = ([], [])
    with torch.no_grad():
        for model in (hf, ours):
            start = time.perf_counter()
            outs.append(model.generate(ids, **kw))
            seconds.append(time.perf_counter() - start)
        for _ in range(WARM_RUNS):
            for times, model in zip(warm, (hf, ours)):
                start = time.perf_counter()
                model.generate(ids, **kw)
                times.append(time.perf_counter() - start)
    delta = max((a - b).abs().max().item() for a, b in zip(outs[0].logits, outs[1].logits))
    return DemoResult(report, ids, outs[0].sequences[:, prompt_len:], outs[1].sequences[:, prompt_len:], delta,
                      seconds[0], seconds[1], statistics.median(warm[0]), statistics.median(warm[1]))
