"""``tileops demo``: a tiny random-init Qwen3-Next generates on TileOPs beside HF's own model.

Prints which op and kernel served each module on this device (the ``apply_tileops``
report), the tokens both models generated and the max |Δlogits| between them. Exit code 1
when the tokens differ or |Δlogits| exceeds the tolerance. Needs ``tileops[transformers]``.
"""

from __future__ import annotations

import argparse
import json

from ..errors import TileOpsError
from .main import EXIT_FINDINGS, EXIT_OK, positive_int

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "demo"
HELP = "a tiny random-init Qwen3-Next generates through TileOPs; the kernel per module and max |dlogits| vs HF"

#: fp32 logits of the patched model against the unpatched one (tests/test_transformers_integration.py).
TOLERANCE = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="qwen3_next", choices=("qwen3_next", "qwen3_5", "qwen3_5_moe"),
                        help="which tiny random-init model to build (default: qwen3_next)")
    parser.add_argument("--tokens", type=positive_int, default=8, help="tokens to generate per row (default 8)")
    parser.add_argument("--batch", type=positive_int, default=2, help="rows, left-padded (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the prompt")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    try:
        import transformers

        from ..integrations.transformers._demo import WARM_RUNS, run_demo
    except ImportError as exc:
        raise TileOpsError(f"tileops demo needs transformers: pip install 'tileops[transformers]' ({exc})") from None
    # The unpatched model's "falling back to the PyTorch implementation" notes are expected here.
    transformers.logging.set_verbosity_error()
    result = run_demo(args.model, new_tokens=args.tokens, batch=args.batch, seed=args.seed)
    ok = result.tokens_equal and result.max_abs_dlogits <= TOLERANCE
    if args.format == "json":
        print(json.dumps({
            "model": result.report.model, "device": result.report.device,
            "routes": [vars(r) for r in result.report.routes],
            "hf_tokens": result.hf_tokens.tolist(), "tileops_tokens": result.tileops_tokens.tolist(),
            "max_abs_dlogits": result.max_abs_dlogits, "tolerance": TOLERANCE, "ok": ok,
            "hf_seconds": result.hf_seconds, "tileops_seconds": result.tileops_seconds,
            "hf_warm_seconds": result.hf_warm_seconds, "tileops_warm_seconds": result.tileops_warm_seconds,
        }, indent=2))
        return EXIT_OK if ok else EXIT_FINDINGS
    print(result.report)
    print()
    for row, (a, b) in enumerate(zip(result.hf_tokens.tolist(), result.tileops_tokens.tolist())):
        print(f"row {row}: HF      {a}\n       TileOPs {b}")
    print(f"max |dlogits| over {args.tokens} steps: {result.max_abs_dlogits:.3g} (tolerance {TOLERANCE:g}); "
          f"tokens {'equal' if result.tokens_equal else 'DIFFER'}")
    print(f"generate(), first call: HF {result.hf_seconds * 1e3:.1f} ms, TileOPs {result.tileops_seconds * 1e3:.1f} ms "
          "(TileOPs' plans and kernel selection included)")
    print(f"generate(), warm (median of {WARM_RUNS}): HF {result.hf_warm_seconds * 1e3:.1f} ms, "
          f"TileOPs {result.tileops_warm_seconds * 1e3:.1f} ms")
    return EXIT_OK if ok else EXIT_FINDINGS
