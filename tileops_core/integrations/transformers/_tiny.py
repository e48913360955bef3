"""Tiny random-init Qwen3-Next / Qwen3.5 / Qwen3.5-MoE models (the demo, the tests, the bench).

Built from configs in code; nothing is downloaded. Every layer kind appears (three
GatedDeltaNet layers, then a full-attention one), the MoE models have dense and sparse MLPs,
and DK != DV so a transposed state layout cannot pass unnoticed.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TINY_MODEL_TYPES", "tiny_model"]

TINY_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")

_COMMON: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
    linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=256,
)
_MOE: dict[str, Any] = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                            shared_expert_intermediate_size=32)


def tiny_model(model_type: str = "qwen3_next", *, seed: int = 0, dtype: torch.dtype = torch.float32,
               **sizes: Any) -> Any:
    """A random-init ``*ForCausalLM`` of ``model_type`` in eval mode, seeded; ``sizes`` override
    config fields (e.g. head sizes a GPU kernel takes)."""
    import transformers as hf

    torch.manual_seed(seed)
    common = {**_COMMON, **sizes}
    if model_type == "qwen3_next":  # every other layer sparse: dense and MoE MLPs side by side
        config: Any = hf.Qwen3NextConfig(**common, **_MOE, decoder_sparse_step=2)
        cls: Any = hf.Qwen3NextForCausalLM
    elif model_type == "qwen3_5":
        config, cls = hf.Qwen3_5TextConfig(**common), hf.Qwen3_5ForCausalLM
    elif model_type == "qwen3_5_moe":
        moe = {k: v for k, v in common.items() if k != "intermediate_size"}
        config, cls = hf.Qwen3_5MoeTextConfig(**moe, **_MOE), hf.Qwen3_5MoeForCausalLM
    else:
        raise ValueError(f"tiny_model builds {', '.join(TINY_MODEL_TYPES)}, not {model_type!r}")
    return cls(config).to(dtype).eval()
