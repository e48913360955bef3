"""Tiny random-init Qwen3-Next / Qwen3.5 / Qwen3.5-MoE models (the demo, the tests, the bench).

Built from configs in code; nothing is downloaded. Every layer kind appears (three
GatedDeltaNet layers, then a full-attention one), the MoE models have dense and sparse MLPs,
and DK != DV so a transposed state layout cannot pass unnoticed.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from typing import Any, Iterator

import torch

__all__ = ["GPU_HEAD_SIZES", "HF_GDN_FUNCTIONS", "TINY_MODEL_TYPES", "hf_torch_path", "tiny_model"]

TINY_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")
#: What the GPU tests pass :func:`tiny_model` on top: the gated-delta-net head sizes the CUDA kernels are
#: written for (the tiny defaults, 16 and 8, are below them); the rest stays tiny.
GPU_HEAD_SIZES: dict[str, Any] = dict(linear_key_head_dim=128, linear_value_head_dim=128)

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
        # (``sizes`` override the MoE defaults too: found in review, num_experts=8 was a TypeError)
        config: Any = hf.Qwen3NextConfig(**{**_MOE, "decoder_sparse_step": 2, **common})
        cls: Any = hf.Qwen3NextForCausalLM
    elif model_type == "qwen3_5":
        config, cls = hf.Qwen3_5TextConfig(**common), hf.Qwen3_5ForCausalLM
    elif model_type == "qwen3_5_moe":
        moe = {k: v for k, v in common.items() if k != "intermediate_size"}
        config, cls = hf.Qwen3_5MoeTextConfig(**{**_MOE, **moe}), hf.Qwen3_5MoeForCausalLM
    else:
        raise ValueError(f"tiny_model builds {', '.join(TINY_MODEL_TYPES)}, not {model_type!r}")
    return cls(config).to(dtype).eval()


#: HF's GatedDeltaNet functions that transformers may bind, at import, to an installed package's kernels.
HF_GDN_FUNCTIONS = ("causal_conv1d_update", "causal_conv1d_fn", "torch_chunk_gated_delta_rule",
                    "torch_recurrent_gated_delta_rule")


@contextlib.contextmanager
def hf_torch_path() -> Iterator[None]:
    """HF's models call their own torch functions for the GatedDeltaNet while this lasts.

    transformers binds these functions once, at import, to flash-linear-attention's or
    causal-conv1d's kernels when those packages are importable; those kernels take CUDA tensors
    only, so a float32 CPU reference run (and the bench's "HF torch" setup) needs the torch code
    the wrappers fall back to. The modeling modules' names are restored afterwards.
    """
    saved: list[tuple[Any, str, Any]] = []
    try:
        for model_type in TINY_MODEL_TYPES:
            modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
            for name in HF_GDN_FUNCTIONS:
                fn = getattr(modeling, name, None)
                if fn is not None:
                    saved.append((modeling, name, fn))
                    setattr(modeling, name, inspect.unwrap(fn))
        yield
    finally:
        for modeling, name, fn in saved:
            setattr(modeling, name, fn)
