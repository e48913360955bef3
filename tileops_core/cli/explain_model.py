"""``tileops explain --model TYPE``: the model report, which op and kernel serves each module of a model.

A random-init model of the type is built from its tiny test config (``--set KEY=VALUE``
overrides config fields, e.g. head sizes a GPU kernel takes; nothing is downloaded), moved to
the device in the dtype asked for, and put on TileOPs by ``apply_tileops`` (``--every-module``:
the Linear layers and the embedding lookup too). The report lists every module of the model:
its own routes (op: kernel, or why it was left as it was), the route of the ancestor whose ops
do its work, or ``container``. Exit code 1 when some module is not served by a TileOPs op.
Needs ``tileops[transformers]``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import Any

import torch

from ..errors import TileOpsError, UsageError
from .main import EXIT_FINDINGS, EXIT_OK

__all__ = ["add_model_arguments", "model_report", "parse_settings", "run_model"]

_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")
_DTYPES = ("float32", "bfloat16", "float16")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="TYPE", choices=_MODEL_TYPES,
                        help=f"instead of an op: the model report of a random-init model ({', '.join(_MODEL_TYPES)})")
    parser.add_argument("--every-module", action="store_true",
                        help="with --model: route the Linear layers and the embedding lookup through TileOPs too")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="with --model: a config field of the tiny model (an integer), e.g. "
                             "linear_key_head_dim=128; repeatable")


def parse_settings(texts: list[str]) -> dict[str, int]:
    """``["head_dim=128"]`` as ``{"head_dim": 128}``: sizes and counts, so positive integers."""
    out: dict[str, int] = {}
    for text in texts:
        key, eq, value = text.partition("=")
        if not eq or not key.strip().isidentifier() or not re.fullmatch(r"\d+", value.strip()) or int(value) < 1:
            raise UsageError(f"--set {text!r}: write KEY=VALUE with a positive integer value, e.g. --set head_dim=128")
        out[key.strip()] = int(value)
    return out


def _check_settings(model: Any, settings: dict[str, int]) -> None:
    """Each ``--set`` is a field of the model's config and took its value (found in review: HF configs
    keep any keyword, so a misspelt field passed silently, and the tiny MoE model drops intermediate_size)."""
    known = set(type(model.config)().to_dict())
    for key, value in settings.items():
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UsageError(f"--set {key}: {type(model.config).__name__} has no field {key!r}{hint}")
        if getattr(model.config, key, None) != value:
            raise UsageError(f"--set {key}={value}: the tiny {model.config.model_type} model does not take it "
                             f"(its {key} is {getattr(model.config, key, None)!r})")


def model_report(model_type: str, device: torch.device, dtype: str = "float32", every_module: bool = False,
                 settings: dict[str, int] | None = None) -> Any:
    """``apply_tileops``' report on a random-init ``model_type`` model on ``device`` (nothing is downloaded)."""
    try:
        import transformers

        from ..integrations.transformers import apply_tileops
        from ..integrations.transformers._tiny import tiny_model
    except ImportError as exc:
        raise TileOpsError(f"tileops explain --model needs transformers: pip install 'tileops[transformers]' "
                           f"({exc})") from None
    if dtype not in _DTYPES:
        raise TileOpsError(f"--dtype {dtype!r}: a model's dtype is one of {', '.join(_DTYPES)}")
    transformers.logging.set_verbosity_error()  # the random-init model's notes are expected here
    try:
        model = tiny_model(model_type, dtype=getattr(torch, dtype), **(settings or {})).to(device)
    except (TypeError, ValueError, RuntimeError) as exc:  # (RuntimeError: sizes torch cannot allocate)
        raise UsageError(f"cannot build a {model_type} model with {settings}: {str(exc).splitlines()[0]}") from None
    _check_settings(model, settings or {})
    return apply_tileops(model, every_module=every_module)


def run_model(args: argparse.Namespace, device: torch.device) -> int:
    report = model_report(args.model, device, args.dtype or "float32", args.every_module, parse_settings(args.set))
    unserved = report.unserved_modules()
    if args.format == "json":
        print(json.dumps({
            "model": report.model, "device": report.device,
            "modules": [{"module": name, "kind": kind, "container": name in report.containers,
                         "routes": [vars(r) for r in report.routes_of(name)[0]],
                         "inside": [{"module": r.module, "piece": r.piece, "op": r.op, "kernel": r.kernel}
                                    for r in report.routes_of(name)[1]]}
                        for name, kind in report.modules],
            "unserved": unserved}, indent=2, default=list))
    else:
        print(report)
        print("\nper module:")
        print("\n".join(report.module_table()))
        print(f"\n{len(unserved)} modules not served by a TileOPs op: {', '.join(unserved)}" if unserved else
              "\nevery module is served by a TileOPs op")
    return EXIT_FINDINGS if unserved else EXIT_OK
