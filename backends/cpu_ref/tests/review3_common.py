"""What the review-3 reference tests share: tolerances, the float64 relative error, and the specs' rule for
unchecked sequence metadata written out (``test_review3_reference*.py``)."""

from __future__ import annotations

import torch

__all__ = ["TOL", "rel", "spans_of"]

TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def rel(got: torch.Tensor, expected: torch.Tensor) -> float:
    den = float(expected.double().norm())
    return float((got.double() - expected.double()).norm()) / (den or 1.0)


def spans_of(meta: list[int], style: str, T: int) -> list[tuple[int, int]]:
    """The spec's rule for unchecked metadata (manifest/linear_attention.yaml, which the conv ops'
    specs refer to), written out: with clip(x) = min(max(x, 0), T), lengths lie end to end (a
    negative one counts as 0); cu_seqlens span [clip(max(cu[0..b])), max(start, clip(cu[b + 1])))."""
    clip = lambda v: min(max(v, 0), T)  # noqa: E731
    spans = []
    if style == "lengths":
        s = 0
        for n in meta:
            n = max(n, 0)
            spans.append((clip(s), clip(s + n) - clip(s)))
            s += n
    else:
        for b in range(len(meta) - 1):
            start = clip(max(meta[: b + 1]))
            end = max(start, clip(meta[b + 1]))
            spans.append((start, end - start))
    return spans
