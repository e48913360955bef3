"""A call the transformers integration refuses is refused before any layer of its forward runs, so the
caller's cache is left as it was. Found in review: generate's chunked prefill with left padding longer than
the first chunk was refused at the first attention layer of the second chunk, after the GatedDeltaNet layers
before it had advanced their conv and recurrent states; the other refusals had the same shape.

Each test snapshots every state a forward may write (the GatedDeltaNet pools and their flag, the attention
layers' store, HF's view of it and its count) in a forward pre-hook on the model, so the last snapshot is
the cache as the refused forward found it.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache, StaticCache  # noqa: E402

from tileops_core.integrations.transformers import apply_tileops  # noqa: E402
from tileops_core.integrations.transformers._tiny import tiny_model  # noqa: E402

#: a refused call's setup: the model -> (the cache, the call that is refused)
Scenario = Callable[[Any], tuple[Any, Callable[[Any], Any]]]
#: the tiny models' layers are three GatedDeltaNet ones, then attention; this order puts attention first
ATTENTION_FIRST = dict(layer_types=["full_attention", "linear_attention", "linear_attention", "linear_attention"])


def _patched(model_type: str = "qwen3_5", **sizes: Any) -> Any:
    model = tiny_model(model_type, seed=1, **sizes)
    apply_tileops(model)
    return model


def _snapshot(cache: Any) -> list[tuple[str, Any]]:
    """Every state of ``cache`` a forward may write, layer by layer (tensors cloned; HF's key view by identity,
    which the attention adapter follows)."""
    def copied(x: Any) -> Any:
        return x.clone() if isinstance(x, torch.Tensor) else x

    items: list[tuple[str, Any]] = []
    for i, layer in enumerate(cache.layers):
        for name in ("conv_states", "recurrent_states", "has_previous_state"):
            if hasattr(layer, name):
                items.append((f"{i}.{name}", copied(getattr(layer, name)[0])))
        if hasattr(layer, "keys"):
            items += [(f"{i}.keys view", layer.keys), (f"{i}.values", copied(layer.values)),
                      (f"{i}.seq_length", layer.get_seq_length())]
        store = getattr(layer, "_tileops_kv", None)
        if store is not None:
            items += [(f"{i}.store.{name}", copied(getattr(store, name)))
                      for name in ("keys", "values", "lengths", "longest")]
    return items


def _assert_unchanged(before: list[tuple[str, Any]], after: list[tuple[str, Any]]) -> None:
    assert [name for name, _ in after] == [name for name, _ in before]
    for (name, a), (_, b) in zip(before, after):
        if name.endswith("keys view"):
            assert b is a, name
        elif isinstance(a, torch.Tensor):
            assert torch.equal(a, b), name
        else:
            assert a == b, name


def _snapshots_of_forwards(model: Any, cache: Any) -> list[list[tuple[str, Any]]]:
    """A list that gets a snapshot of ``cache`` as each forward of ``model`` is given it."""
    taken: list[list[tuple[str, Any]]] = []

    def take(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        assert kwargs["cache"] is cache  # the caller's own cache, not one generate made
        taken.append(_snapshot(cache))

    model.register_forward_pre_hook(take, with_kwargs=True)
    return taken


def _left_padded(pads: list[int], tokens: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 256, (len(pads), tokens), generator=g)
    mask = torch.ones_like(ids)
    for row, k in enumerate(pads):
        ids[row, :k], mask[row, :k] = 0, 0
    return ids, mask


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5"])
def test_left_padding_longer_than_the_first_prefill_chunk_is_refused_before_the_second_chunk_changes_the_cache(
        model_type: str) -> None:
    model = _patched(model_type)
    ids, mask = _left_padded([6, 0])  # row 0: the first chunk of 4 is all padding, and so is half the second
    cache = DynamicCache(config=model.config)
    snapshots = _snapshots_of_forwards(model, cache)
    message = ("the mask pads tokens of a call after the first one (rows [0]: padding after the prompt, or left "
               "padding longer than the first prefill chunk); the TileOPs attention adapter drops padding only in "
               "the first call of a cache: generate with a prefill_chunk_size at least as long as the longest left "
               "padding, or without one")
    with torch.no_grad(), pytest.raises(NotImplementedError, match=f"^{re.escape(message)}$"):
        model.generate(ids, attention_mask=mask, cache=cache, prefill_chunk_size=4, max_new_tokens=2,
                       do_sample=False)
    assert len(snapshots) == 2  # the first chunk ran; the second was refused
    _assert_unchanged(snapshots[-1], _snapshot(cache))


def test_left_padding_as_long_as_the_prefill_chunk_gives_hf_tokens() -> None:
    """What the refusal advises: a first chunk that is all padding for a row leaves nothing for later chunks."""
    ref = tiny_model("qwen3_5", seed=1)
    patched = copy.deepcopy(ref)
    apply_tileops(patched)
    ids, mask = _left_padded([4, 0])
    kw = dict(attention_mask=mask, prefill_chunk_size=4, max_new_tokens=3, do_sample=False, output_logits=True,
              return_dict_in_generate=True)
    with torch.no_grad():
        a, b = ref.generate(ids, **kw), patched.generate(ids, **kw)
    assert torch.equal(a.sequences, b.sequences)
    assert max((x - y).abs().max().item() for x, y in zip(a.logits, b.logits)) <= 1e-4


def _static_cache(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = StaticCache(config=model.config, max_cache_len=32)
    ids, mask = _left_padded([3, 0])
    return cache, lambda m: m(input_ids=ids, attention_mask=mask, cache=cache)


def _right_padding(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])
    return cache, lambda m: m(input_ids=ids, attention_mask=mask.flip(1), cache=cache)


def _padding_after_the_prompt(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, cache=cache)
    late = torch.cat([mask, torch.tensor([[0], [1]])], 1)
    return cache, lambda m: m(input_ids=ids[:, -1:], attention_mask=late, cache=cache)


def _attention_weights(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    model.set_attn_implementation("eager")  # (with sdpa HF itself returns no weights, and warns)
    cache = DynamicCache(config=model.config)
    ids, _ = _left_padded([0, 0])
    return cache, lambda m: m(input_ids=ids, cache=cache, output_attentions=True)


def _beam_search(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])
    return cache, lambda m: m.generate(ids, attention_mask=mask, cache=cache, num_beams=2, max_new_tokens=3,
                                       do_sample=False)


def _gradients_with_frozen_norms_and_embeddings(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    """The norms' own checks never saw a weight requiring grad here: an op refused, after the first layer."""
    for name, p in model.named_parameters():
        p.requires_grad_("embed" not in name and "norm" not in name)
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])
    return cache, lambda m: m(input_ids=ids, attention_mask=mask, cache=cache)


def _another_batch_size(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, cache=cache)
    return cache, lambda m: m(input_ids=ids[:1, :1], attention_mask=torch.ones(1, 13, dtype=torch.long), cache=cache)


def _assisted_decoding_cache(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    cache = DynamicCache(config=model.config)
    for layer in cache.layers:
        if hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()  # as assisted generation does, to roll back rejected tokens
    ids, mask = _left_padded([3, 0])
    return cache, lambda m: m(input_ids=ids, attention_mask=mask, cache=cache)


def _packing_keywords(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    """HF's varlen keywords (DataCollatorWithFlattening's), which the layers receive through their kwargs."""
    cache = DynamicCache(config=model.config)
    ids, _ = _left_padded([0])
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    return cache, lambda m: m(input_ids=ids, cache=cache, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=7,
                              max_length_k=7)


def _autocast(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    """A float32 model under CPU bfloat16 autocast: HF's Linear ran in bfloat16, the first op met a float32 weight
    beside bfloat16 activations, after the layers before it had run."""
    cache = DynamicCache(config=model.config)
    ids, mask = _left_padded([3, 0])

    def call(m: Any) -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(input_ids=ids, attention_mask=mask, cache=cache)
    return cache, call


@pytest.mark.parametrize("layers", [{}, ATTENTION_FIRST], ids=["gated-delta-net-first", "attention-first"])
@pytest.mark.parametrize("call, error, message", [
    (_static_cache, NotImplementedError, r"layer \d: a Static cache layer \(StaticLayer\)"),
    (_right_padding, NotImplementedError, "the attention mask is not causal with left padding"),
    (_padding_after_the_prompt, NotImplementedError, re.escape("the mask pads tokens of a call after the first one "
                                                               "(rows [0]")),
    (_attention_weights, NotImplementedError, "^output_attentions: the TileOPs attention ops form no attention"),
    (_beam_search, NotImplementedError, r"layer \d: HF rearranged the attention cache \(beam search or cropping\)"),
    (_gradients_with_frozen_norms_and_embeddings, NotImplementedError,
     r"^model\.layers\.0\.[\w.]+ requires grad: TileOPs ops record no gradients"),
    (_another_batch_size, ValueError,
     r"^layer 0: the cache holds (conv state \(2, .* not TileOPs' pool \(1, |2 rows, and this call 1: )"),
    (_assisted_decoding_cache, NotImplementedError, r"^layer \d: the cache records past conv states"),
    (_packing_keywords, NotImplementedError, "^cu_seq_lens_q and cu_seq_lens_k given: packed sequences;"),
    (_autocast, NotImplementedError, re.escape("torch.autocast('cpu', dtype=torch.bfloat16) is on: TileOPs ops do not "
                                               "follow autocast's casts")),
], ids=["static-cache", "right-padding", "padding-after-the-prompt", "attention-weights", "beam-search",
        "gradients-with-frozen-norms-and-embeddings", "another-batch-size", "assisted-decoding-cache",
        "packing-keywords", "autocast"])
def test_a_refused_call_leaves_every_layer_of_the_cache_as_it_was(call: Scenario, error: type[Exception], message: str,
                                                                    layers: dict[str, Any]) -> None:
    model = _patched(**layers)
    cache, refused = call(model)
    snapshots = _snapshots_of_forwards(model, cache)
    with torch.set_grad_enabled(call is _gradients_with_frozen_norms_and_embeddings), \
            pytest.raises(error, match=message):
        refused(model)
    _assert_unchanged(snapshots[-1], _snapshot(cache))


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5"])
def test_positions_hf_reads_as_packed_sequences_are_refused_and_served_where_it_reads_one_sequence(
        model_type: str) -> None:
    """Without a mask and a cache, HF's masks read positions that do not run on by one as packed sequences and
    keep them apart, which the TileOPs layers cannot: refused. Positions that run on from an offset, and any
    positions with a cache, HF reads as one sequence a row: served, equal to HF's logits."""
    hf = tiny_model(model_type, seed=1)
    model = _patched(model_type)
    ids, _ = _left_padded([0, 0], tokens=6)
    restarting = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 2]])
    with torch.no_grad():
        with pytest.raises(NotImplementedError, match=re.escape(
                "position_ids that do not run on by one within rows [1], no attention mask and no cache: packed "
                "sequences; the TileOPs layers run one sequence a row")):
            model(input_ids=ids, position_ids=restarting, use_cache=False)
        for positions, use_cache in ((torch.arange(3, 9).expand(2, 6), False), (restarting, True)):
            expected = hf(input_ids=ids, position_ids=positions, use_cache=use_cache).logits
            got = model(input_ids=ids, position_ids=positions, use_cache=use_cache).logits
            assert (got - expected).abs().max().item() <= 1e-4, use_cache


def test_attention_weights_the_config_asks_for_are_refused_as_the_keyword_is() -> None:
    """HF's output capture reads ``output_attentions`` from the config where the call does not pass it (found in
    review: with the eager implementation, such a call returned no attention weights, silently)."""
    model = _patched()
    model.set_attn_implementation("eager")
    model.config.output_attentions = True
    ids, _ = _left_padded([0])
    with torch.no_grad(), pytest.raises(NotImplementedError, match="^output_attentions: the TileOPs attention ops"):
        model(input_ids=ids)


@pytest.mark.parametrize("tokens,fails_at", [(1, 0), (3, 0), (3, 2)])
def test_a_decode_step_that_raises_leaves_the_stores_longest_count_equal_to_its_rows(tokens, fails_at):
    """Found in review: the host's longest count rose by the call's tokens before the first step ran, so
    a step refused by its op left it past every row's count (and HF's view of the cache one too long)."""
    from tileops_core.integrations.transformers._attention import _KVStore, _decode_steps

    class Ops:
        calls = 0

        def decode(self, q, k, v, keys, values, lengths):
            Ops.calls += 1
            if Ops.calls > fails_at:
                raise RuntimeError("refused by the op")
            return q.clone()

    store = _KVStore(2, 4, 1, 8, torch.float32, torch.device("cpu"))
    store.lengths.fill_(3)
    store.longest = 3
    q = torch.randn(2 * tokens, 2, 8)
    with pytest.raises(RuntimeError, match="refused by the op"):
        _decode_steps(Ops(), store, q, torch.randn(2 * tokens, 1, 8), torch.randn(2 * tokens, 1, 8), 2, tokens)
    assert store.longest == int(store.lengths.max()) == 3 + fails_at
