"""apply_tileops on the vision-language Qwen3.5 models (``qwen3_5`` / ``qwen3_5_moe``: what the published
checkpoints load as), random-init and tiny. Their text decoder is routed as the causal models' is, from the
config's ``text_config``; the vision tower stays HF's. Found in review: the walk read the top-level config,
which has no ``rms_norm_eps``, and raised AttributeError."""

from __future__ import annotations

import copy

import pytest
import torch

hf = pytest.importorskip("transformers")

from tileops_core.integrations.transformers import apply_tileops, static_decode_session  # noqa: E402

TOL = 1e-4
_TEXT = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
             linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=256)
_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
               num_position_embeddings=16)
_TOKENS = dict(image_token_id=120, video_token_id=121, vision_start_token_id=122, vision_end_token_id=123)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)


def _vision_language_model(model_type: str):
    torch.manual_seed(0)
    if model_type == "qwen3_5":
        return hf.Qwen3_5ForConditionalGeneration(hf.Qwen3_5Config(text_config=_TEXT, vision_config=_VISION,
                                                                   **_TOKENS)).eval()
    text = {**{k: v for k, v in _TEXT.items() if k != "intermediate_size"}, **_MOE}
    return hf.Qwen3_5MoeForConditionalGeneration(hf.Qwen3_5MoeConfig(text_config=text, vision_config=_VISION,
                                                                      **_TOKENS)).eval()


def _prompt_with_an_image() -> dict[str, torch.Tensor]:
    """Text, one 4x4-patch image (2x2 tokens after the merge: three distinct MRoPE rows), more text."""
    g = torch.Generator().manual_seed(3)
    text = torch.randint(1, 120, (1, 12), generator=g)
    ids = torch.cat([text[:, :3], torch.tensor([[122, 120, 120, 120, 120, 123]]), text[:, 3:]], 1)
    return dict(input_ids=ids, pixel_values=torch.randn(16, 3 * 2 * 4 * 4, generator=g),
                image_grid_thw=torch.tensor([[1, 4, 4]]), mm_token_type_ids=(ids == 120).int())


@pytest.mark.parametrize("model_type", ["qwen3_5", "qwen3_5_moe"])
def test_a_vision_language_model_generates_hf_tokens_from_a_prompt_with_an_image(model_type: str) -> None:
    ref = _vision_language_model(model_type)
    patched = copy.deepcopy(ref)
    report = apply_tileops(patched)
    assert model_type == patched.config.model_type
    served = {r.op for r in report.routes if r.served}
    assert {"FusedAddZeroCentredRMSNormFwdOp", "RecurrentGatedDeltaRuleFwdOp", "QKNormRopeFwdOp"} <= served
    inputs = _prompt_with_an_image()
    kw = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        want, got = ref.generate(**inputs, **kw), patched.generate(**inputs, **kw)
    assert torch.equal(want.sequences, got.sequences)
    assert max((a - b).abs().max().item() for a, b in zip(want.logits, got.logits)) < TOL


def test_static_decode_session_refuses_a_vision_language_model_by_name() -> None:
    patched = _vision_language_model("qwen3_5")
    apply_tileops(patched)
    with pytest.raises(ValueError, match="serves the text models .*Qwen3_5ForConditionalGeneration"):
        static_decode_session(patched, max_batch=1, max_len=16)
