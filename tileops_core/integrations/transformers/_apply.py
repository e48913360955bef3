"""``apply_tileops``: walk a loaded Qwen3-Next / Qwen3.5 model and route each module it can.

The module classes come from the model's own modeling module (looked up by model type), so
a model is matched by what its modules are, never by names in its printout.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from ...ops.activation import SiluAndMulFwdOp
from ...ops.gemm import LinearFwdOp
from ._attention import AttentionPatcher
from ._gdn import GDNOps, _Metadata, patch_gated_delta_net
from ._mlp import patch_mlp
from ._moe import patch_experts, patch_router, patch_sparse_moe_block, use_tileops_experts
from ._norms import patch_decoder_layer, patch_rms_norm
from ._report import Route, TileOpsReport
from ._serving import serving
from ._state import cache_has_linear_attention_layers

__all__ = ["SUPPORTED_MODEL_TYPES", "apply_tileops"]

#: model_type -> (modeling module, class-name prefix)
_FAMILIES = {
    "qwen3_next": ("qwen3_next", "Qwen3Next"),
    "qwen3_5": ("qwen3_5", "Qwen3_5"),
    "qwen3_5_text": ("qwen3_5", "Qwen3_5"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5Moe"),
    "qwen3_5_moe_text": ("qwen3_5_moe", "Qwen3_5Moe"),
}
SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)


def _classes(model_type: str) -> dict[str, type]:
    module_name, prefix = _FAMILIES[model_type]
    modeling = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    wanted = ("GatedDeltaNet", "MLP", "Experts", "TopKRouter", "SparseMoeBlock", "Attention", "RMSNorm",
              "DecoderLayer", "RotaryEmbedding", "TextRotaryEmbedding")
    return {role: getattr(modeling, prefix + role) for role in wanted if hasattr(modeling, prefix + role)}


def _linear_route(model: nn.Module, device: torch.device) -> Route | None:
    """The Linear layers: routed only where a specialised kernel would win over torch's matmul."""
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    if not linears:
        return None
    w = linears[0].weight
    op = LinearFwdOp(in_features=w.shape[1], out_features=w.shape[0])
    answer = serving(op, torch.empty(1, w.shape[1], dtype=w.dtype, device=device), w)
    why = answer.reason if not answer.ok else (
        f"only the reference kernel ({answer.kernel}) serves LinearFwdOp on {device.type}: torch's own matmul is "
        "kept" if answer.general else f"{answer.kernel} would serve it; Linear routing is not wired yet")
    return Route("*", "Linear", f"matmul ({len(linears)} layers)", "LinearFwdOp", None, why)


def apply_tileops(model: nn.Module) -> TileOpsReport:
    """Move a loaded HF Qwen3-Next / Qwen3.5 / Qwen3.5-MoE model onto TileOPs ops, in place.

    Returns the report of which module went to which op and which kernel serves it on the
    model's device; modules TileOPs cannot serve stay as they were, with the reason.
    """
    config: Any = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _FAMILIES:
        raise ValueError(f"apply_tileops supports model types {', '.join(SUPPORTED_MODEL_TYPES)}; "
                         f"this model is {model_type!r} ({type(model).__name__})")
    device = next(model.parameters()).device
    classes = _classes(model_type)
    report = TileOpsReport(type(model).__name__, str(device))
    gdn_ops, metadata, silu_and_mul = GDNOps(float(config.rms_norm_eps)), _Metadata(), SiluAndMulFwdOp()
    cache_problem = cache_has_linear_attention_layers()
    rotaries = tuple(c for role, c in classes.items() if role.endswith("RotaryEmbedding"))
    patch_attention = AttentionPatcher(model, config, rotaries)
    in_moe_blocks: set[int] = set()  # shared-expert MLPs whose block runs them as MoESharedExpertFwdOp
    for name, m in model.named_modules():
        if isinstance(m, classes.get("GatedDeltaNet", ())):
            report.routes += patch_gated_delta_net(name, m, gdn_ops, metadata, cache_problem)
        elif isinstance(m, classes.get("SparseMoeBlock", ())):
            block_routes = patch_sparse_moe_block(name, m)
            report.routes += block_routes
            if all(r.served for r in block_routes):
                in_moe_blocks.add(id(getattr(m, "shared_expert")))
        elif isinstance(m, classes.get("MLP", ())) and id(m) not in in_moe_blocks:
            report.routes += patch_mlp(name, m, silu_and_mul)
        elif isinstance(m, classes.get("Experts", ())):
            report.routes += patch_experts(name, m)
        elif isinstance(m, classes.get("TopKRouter", ())):
            report.routes += patch_router(name, m)
        elif isinstance(m, classes.get("RMSNorm", ())):
            report.routes += patch_rms_norm(name, m)
        elif isinstance(m, classes.get("DecoderLayer", ())):
            report.routes += patch_decoder_layer(name, m)
        elif isinstance(m, classes.get("Attention", ())):
            report.routes += patch_attention(name, m)
    use_tileops_experts(model)
    linear = _linear_route(model, device)
    if linear is not None:
        report.routes.append(linear)
    return report
