"""A patched model used as PyTorch code is used beyond one generate() call: by two threads at once,
under forward hooks that keep or replace a module's output, with a cache of another kind. Each case was
found in review; each test compares with the unpatched model of the same weights, or asks for a refusal."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

pytest.importorskip("transformers")

from tileops_core.integrations.transformers import apply_tileops, cache_kwargs  # noqa: E402
from tileops_core.integrations.transformers._tiny import tiny_model  # noqa: E402

TOL = 1e-4


def _pair(model_type: str, **sizes):
    ref = tiny_model(model_type, **sizes)
    patched = copy.deepcopy(ref)
    apply_tileops(patched)
    return ref, patched


def test_two_threads_sharing_a_model_each_rotate_by_their_own_positions() -> None:
    """Thread A stops at the attention layer, after its rotary module recorded A's positions, while the
    main thread runs a whole forward with other positions; A then goes on and must read its own (one
    model-wide slot gave it B's: logits off by 0.1)."""
    ref, patched = _pair("qwen3_next")  # layers 0-2 GatedDeltaNet, layer 3 attention
    ids = torch.randint(1, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    pos_a = torch.arange(24).expand(2, 24)
    pos_b = pos_a * 3  # not a shift of pos_a (rotary attention sees only differences)
    at_attention, b_done, got = threading.Event(), threading.Event(), {}

    def pause_thread_a(module, args):
        if threading.current_thread().name == "A":
            at_attention.set()
            assert b_done.wait(60)

    patched.model.layers[3].register_forward_pre_hook(pause_thread_a)

    def run_a() -> None:
        with torch.no_grad():
            got["A"] = patched(input_ids=ids, position_ids=pos_a).logits

    a = threading.Thread(target=run_a, name="A")
    a.start()
    assert at_attention.wait(60)
    with torch.no_grad():
        got["B"] = patched(input_ids=ids, position_ids=pos_b).logits
    b_done.set()
    a.join(60)
    with torch.no_grad():
        for name, pos in (("A", pos_a), ("B", pos_b)):
            assert (got[name] - ref(input_ids=ids, position_ids=pos).logits).abs().max() < TOL, name


def _hooked_runs(ref, patched, module_of) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[tuple]]:
    """A forward hook on ``module_of(model)`` keeps its output in one forward of each model; then a hook there
    returns that kept tensor (activation patching) for three more. ``(kept, a copy of it, the runs' logits)``."""
    ids = torch.randint(1, 256, (2, 10), generator=torch.Generator().manual_seed(2))
    kept: dict[str, torch.Tensor] = {}
    stored: dict[str, torch.Tensor] = {}
    for name, model in (("ref", ref), ("patched", patched)):
        module = module_of(model)
        handle = module.register_forward_hook(lambda m, args, out, name=name: kept.setdefault(name, out))
        with torch.no_grad():
            model(input_ids=ids)
        handle.remove()
        stored[name] = kept[name].clone()
        module.register_forward_hook(lambda m, args, out, name=name: stored[name])  # activation patching
    with torch.no_grad():
        runs = [(ref(input_ids=ids).logits, patched(input_ids=ids).logits) for _ in range(3)]
    return kept, stored, runs


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_a_hook_keeping_or_replacing_a_token_mixers_output_sees_hfs_values(model_type: str) -> None:
    """The fused residual add writes its sum in place: not into a tensor a hook kept, nor into one a hook
    returned (found in review: captured outputs became residual + output, patched runs drifted)."""
    kept, stored, runs = _hooked_runs(*_pair(model_type), lambda model: model.model.layers[0].linear_attn)
    assert (kept["patched"] - kept["ref"]).abs().max() < TOL
    assert (kept["patched"] - stored["patched"]).abs().max() == 0  # the kept tensor was not written into
    assert max((want - got).abs().max().item() for want, got in runs) < TOL


def _out_projection(model, layer: int):
    """The last module of a decoder layer's token mixer: its output is the mixer's output."""
    mixer = getattr(model.model.layers[layer], "linear_attn", None) or model.model.layers[layer].self_attn
    return getattr(mixer, "out_proj", None) or mixer.o_proj


@pytest.mark.parametrize("every_module", [False, True])
@pytest.mark.parametrize("layer", [0, 3], ids=["gated-delta-net", "attention"])
@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_a_hook_keeping_or_replacing_the_out_projections_output_sees_hfs_values(model_type: str, layer: int,
                                                                                every_module: bool) -> None:
    """The mixer's output is its out projection's (``o_proj`` / ``out_proj``), which the fused add wrote into
    (found in review: an activation a hook kept there became residual + output, 0.07 off HF's, and a tensor a
    hook returned there was written into, so the runs after it drifted)."""
    ref = tiny_model(model_type)
    patched = copy.deepcopy(ref)
    apply_tileops(patched, every_module=every_module)
    kept, stored, runs = _hooked_runs(ref, patched, lambda model: _out_projection(model, layer))
    assert (kept["patched"] - kept["ref"]).abs().max() < TOL
    assert (kept["patched"] - stored["patched"]).abs().max() == 0  # the kept tensor was not written into
    assert max((want - got).abs().max().item() for want, got in runs) < TOL


def test_a_quantized_cache_is_refused_by_name_not_run_as_fresh_prefills() -> None:
    """HF's quantized layers count tokens only in their own update(): the adapter read 0 tokens seen and ran
    every decode step as a prefill of one token (logits off by 0.4-0.75)."""
    cache_utils = pytest.importorskip("transformers.cache_utils")
    _, patched = _pair("qwen3_5", layer_types=["full_attention"] * 4)
    ids = torch.randint(1, 256, (1, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), pytest.raises(NotImplementedError, match="a Quantized cache layer"):
        patched.generate(ids, **cache_kwargs(patched, cache_utils.QuantizedCache("fp8", patched.config)),
                         max_new_tokens=2, do_sample=False)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe"])
def test_a_conversion_that_replaces_parameters_is_refused_and_applying_again_follows_the_new_ones(model_type):
    """Found in review: after `to("meta")` / `to_empty` / a load, or any conversion under
    set_overwrite_module_params_on_conversion(True), the adapters ran on the Parameters they were made with
    (logits 0.03-1.7 off). The conversion raises, naming the way; apply_tileops again serves the new ones."""
    ref, patched = _pair(model_type)
    with pytest.raises(RuntimeError, match="this conversion replaced the Parameters of a model moved onto TileOPs"):
        patched.to("meta")
    ref, patched = _pair(model_type)
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        with pytest.raises(RuntimeError, match="call apply_tileops\\(model\\) again now"):
            patched.to(torch.float32)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    apply_tileops(patched)
    g = torch.Generator().manual_seed(8)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
             for k, v in ref.state_dict().items()}
    ref.load_state_dict(state)
    patched.load_state_dict(state)  # in place, into the Parameters the second apply_tileops holds
    ids = torch.randint(1, 256, (2, 7), generator=g)
    with torch.no_grad():
        assert (ref(input_ids=ids).logits - patched(input_ids=ids).logits).abs().max() < TOL
