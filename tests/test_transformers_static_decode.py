"""static_decode_session on tiny random-init models: the static step computes what HF and the dynamic path compute.

Batch 2 with left padding, a prefill and decode steps; fp32 logits within 1e-4 of the unpatched
HF model (and of the patched model's dynamic path), equal greedy tokens, and the static buffers
at the same addresses from the first step to the last.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

pytest.importorskip("transformers")

from tileops_core.integrations.transformers import apply_tileops, static_decode_session  # noqa: E402
from tileops_core.integrations.transformers._tiny import TINY_MODEL_TYPES, tiny_model  # noqa: E402
from test_transformers_integration import _left_padded_batch  # noqa: E402  (row 0: 4 pads, 5 real; row 1: 9 real)

DECODE_STEPS = 4
TOL = 1e-4


def _hf_greedy(model, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> tuple[list[torch.Tensor], list]:
    """Per step, the last position's logits and the greedy tokens, through HF's forward with its cache."""
    logits, tokens, cache = [], [], None
    key = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"  # < 5.2x
    with torch.no_grad():
        for _ in range(1 + steps):
            out = model(input_ids=ids, attention_mask=mask, use_cache=True, **{key: cache})
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            logits.append(out.logits[:, -1])
            ids = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(ids)
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
    return logits, tokens


def _session_greedy(session, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> tuple[list[torch.Tensor], list]:
    logits = [session.prefill(ids, mask).clone()]
    tokens = [logits[-1].argmax(-1, keepdim=True)]
    for _ in range(steps):
        logits.append(session.step(tokens[-1]).clone())
        tokens.append(logits[-1].argmax(-1, keepdim=True))
    return logits, tokens


@pytest.mark.parametrize("every_module", [False, True])
@pytest.mark.parametrize("model_type", TINY_MODEL_TYPES)
def test_static_steps_match_unpatched_hf_logits_and_greedy_tokens(model_type: str, every_module: bool) -> None:
    ref = tiny_model(model_type, seed=20)
    patched = copy.deepcopy(ref)
    apply_tileops(patched, every_module=every_module)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=21)
    want_logits, want_tokens = _hf_greedy(ref, ids, mask, DECODE_STEPS)
    got_logits, got_tokens = _session_greedy(static_decode_session(patched, 4, 32), ids, mask, DECODE_STEPS)
    for step, (a, b) in enumerate(zip(want_logits, got_logits)):
        assert (a - b).abs().max().item() <= TOL, f"step {step}"
    assert all(torch.equal(a, b) for a, b in zip(want_tokens, got_tokens))


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe"])
def test_static_steps_match_the_patched_models_dynamic_path(model_type: str) -> None:
    patched = tiny_model(model_type, seed=22)
    apply_tileops(patched)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=23)
    want, _ = _hf_greedy(patched, ids, mask, DECODE_STEPS)
    got, _ = _session_greedy(static_decode_session(patched, 2, 16), ids, mask, DECODE_STEPS)
    assert max((a - b).abs().max().item() for a, b in zip(want, got)) <= TOL


def test_static_buffers_keep_their_addresses_across_prefills_and_steps() -> None:
    patched = tiny_model("qwen3_next", seed=24)
    apply_tileops(patched)
    session = static_decode_session(patched, 3, 24)
    before = session.addresses()
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=25)
    tokens = session.prefill(ids, mask).argmax(-1)
    for _ in range(DECODE_STEPS):
        tokens = session.step(tokens).argmax(-1)
        assert session.addresses() == before
    session.prefill(ids[:1, 4:], mask[:1, 4:])  # a new batch of another size reuses the same buffers
    session.step(tokens[:1])
    assert session.addresses() == before


def test_a_second_prefill_starts_from_its_own_prompt_not_the_previous_batch() -> None:
    ref = tiny_model("qwen3_5", seed=26)
    patched = copy.deepcopy(ref)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 24)
    first, first_mask = _left_padded_batch(ref.config.vocab_size, seed=27)
    _session_greedy(session, first, first_mask, DECODE_STEPS)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=28)
    want, _ = _hf_greedy(ref, ids, mask, 2)
    got, _ = _session_greedy(session, ids, mask, 2)
    assert max((a - b).abs().max().item() for a, b in zip(want, got)) <= TOL


def test_decode_steps_past_max_len_are_refused() -> None:
    patched = tiny_model("qwen3_next", seed=29)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 11)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=30)  # 9 tokens a row
    tokens = session.prefill(ids, mask).argmax(-1)
    tokens = session.step(tokens).argmax(-1)
    tokens = session.step(tokens).argmax(-1)
    with pytest.raises(ValueError, match="the session's max_len"):
        session.step(tokens)


@pytest.mark.parametrize("wrong", ["fewer rows", "two tokens a row", "float ids"])
def test_step_ids_that_are_not_one_integer_a_row_are_refused_and_the_batch_goes_on(wrong: str) -> None:
    """Found in review: ids for another batch size met a bare reshape error, and float ids were truncated into the
    token buffer silently; the step and its count are left as they were."""
    patched = tiny_model("qwen3_next", seed=33)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 16)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=34)
    tokens = session.prefill(ids, mask).argmax(-1)
    given = {"fewer rows": tokens[:1], "two tokens a row": torch.stack([tokens, tokens], 1),
             "float ids": tokens.float()}[wrong]
    with pytest.raises(ValueError, match=r"^step\(\) takes one token id a row of the prefilled batch, an integer "
                                         r"tensor \[2\] or \[2, 1\], not "):
        session.step(given)
    untouched = static_decode_session(patched, 2, 16)
    untouched.prefill(ids, mask)
    torch.testing.assert_close(session.step(tokens.view(2, 1)), untouched.step(tokens), rtol=0, atol=0)


@pytest.mark.parametrize("wrong", ["one row", "short mask", "short positions"])
def test_prefill_inputs_of_other_shapes_than_the_prompts_are_refused_by_name(wrong: str) -> None:
    """Found in review: a mask a token short was refused as "not causal with left padding", positions a token
    short met a bare expand error, one-dimensional ids a bare unpacking error."""
    patched = tiny_model("qwen3_next", seed=35)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 16)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=36)  # [2, 9]
    call, message = {
        "one row": ((ids[0], None, None), r"^prefill takes input_ids \[B, T\], not \[9\]$"),
        "short mask": ((ids, mask[:, 1:], None),
                       r"^prefill: attention_mask \[2, 8\] is not the prompt's \[B, T\] = \[2, 9\]$"),
        "short positions": ((ids, None, torch.arange(8).expand(2, 8)),
                            r"^prefill: position_ids \[2, 8\] is not the prompt's \[B, T\] = \[2, 9\]$"),
    }[wrong]
    with pytest.raises(ValueError, match=message):
        session.prefill(*call)


def test_an_empty_prompt_is_refused_before_the_running_batch_is_touched() -> None:
    """Found in review: a prompt of no tokens wrote the pools, then raised, and the next step ran on the wiped
    state (logits 0.3 off)."""
    patched = tiny_model("qwen3_next", seed=31)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 16)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=32)
    tokens = session.prefill(ids, mask).argmax(-1)
    lengths = [kv.lengths.clone() for kv in session.pools.kv.values()]
    with pytest.raises(ValueError, match="a prompt of 2 rows x 0 tokens does not fit"):
        session.prefill(ids[:, :0], mask[:, :0])
    assert all(torch.equal(kv.lengths, n) for kv, n in zip(session.pools.kv.values(), lengths))
    session.step(tokens)  # the batch goes on


def test_forward_hooks_the_step_would_skip_are_refused_by_module() -> None:
    """The step calls the layers' pieces and the mixers' forwards itself (found in review: a hook on a mixer
    ran under generate() and was skipped by the session, logits 0.01 off)."""
    patched = tiny_model("qwen3_next", seed=33)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 16)
    handle = patched.model.layers[0].linear_attn.register_forward_hook(lambda m, a, out: out * 0.5)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=34)
    with pytest.raises(ValueError, match="forward hooks on model.layers.0.linear_attn would not run"):
        session.prefill(ids, mask)
    handle.remove()
    session.prefill(ids, mask)


def test_a_model_without_tileops_mixers_is_refused_by_layer() -> None:
    with pytest.raises(ValueError, match=r"apply_tileops\(model\) first.*model.layers.0"):
        static_decode_session(tiny_model("qwen3_next"), 2, 16)


def test_a_captured_session_needs_a_cuda_model() -> None:
    patched = tiny_model("qwen3_next")
    apply_tileops(patched)
    with pytest.raises(ValueError, match="needs a CUDA model"):
        static_decode_session(patched, 2, 16, capture="cuda_graph")


@pytest.mark.parametrize("model_type, every_module", [("qwen3_next", False), ("qwen3_5_moe", True)])
def test_the_step_traces_as_one_graph_and_computes_the_eager_step(model_type: str, every_module: bool) -> None:
    patched = tiny_model(model_type, seed=31)
    apply_tileops(patched, every_module=every_module)
    session = static_decode_session(patched, 2, 16)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=32)
    session.pools.ids[:2].copy_(session.prefill(ids, mask).argmax(-1))
    saved = session.pools.snapshot()
    compiled = torch.compile(session.step_function, backend="eager", fullgraph=True)  # a graph break raises
    with torch.no_grad():
        want = session.step_function(2)
        session.pools.restore(saved)
        got = compiled(2)
    assert torch.equal(want, got)


def test_a_forward_hook_on_a_mixers_out_projection_is_refused_by_module() -> None:
    """The step adds the residual into the mixer's output in place, which is its out projection's (found in
    review: an activation a hook kept on o_proj was the sum, 0.06 off HF's)."""
    patched = tiny_model("qwen3_5", seed=33)
    apply_tileops(patched)
    session = static_decode_session(patched, 2, 16)
    handle = patched.model.layers[3].self_attn.o_proj.register_forward_hook(lambda m, a, out: None)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=34)
    with pytest.raises(ValueError, match="which is the output of model.layers.3.self_attn.o_proj: a forward hook"):
        session.prefill(ids, mask)
    handle.remove()
    session.prefill(ids, mask)
