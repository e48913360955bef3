"""apply_tileops on tiny random-init Qwen3-Next / Qwen3.5 / Qwen3.5-MoE models (nothing downloaded).

The patched model is compared with an unpatched copy of the same weights: batch 2 with left
padding, a prefill and decode steps, fp32 logits within 1e-4 and equal greedy tokens.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from tileops_core.integrations.transformers import apply_tileops, cache_kwargs, cache_of  # noqa: E402
from tileops_core.integrations.transformers._tiny import TINY_MODEL_TYPES, tiny_model  # noqa: E402
from tileops_core.kernels.targets import use_target  # noqa: E402

DECODE_STEPS = 4
TOL = 1e-4


def _pair(model_type: str, seed: int = 0, every_module: bool = False):
    ref = tiny_model(model_type, seed=seed)
    patched = copy.deepcopy(ref)
    return ref, patched, apply_tileops(patched, every_module=every_module)


def _left_padded_batch(vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    ids[0, :4], mask[0, :4] = 0, 0  # row 0: 5 real tokens after 4 pads; row 1: 9 real tokens
    return ids, mask


@pytest.mark.parametrize("every_module", [False, True])
@pytest.mark.parametrize("model_type", TINY_MODEL_TYPES)
def test_patched_logits_match_hf_over_prefill_and_decode_steps(model_type: str, every_module: bool) -> None:
    ref, patched, _ = _pair(model_type, every_module=every_module)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=1)
    caches: dict[str, object] = {"ref": None, "patched": None}
    with torch.no_grad():
        for step in range(1 + DECODE_STEPS):
            outs = {}
            for name, model in (("ref", ref), ("patched", patched)):
                outs[name] = model(input_ids=ids, attention_mask=mask, use_cache=True,
                                   **cache_kwargs(model, caches[name]))
                caches[name] = cache_of(outs[name])
            a, b = outs["ref"].logits[:, -1], outs["patched"].logits[:, -1]
            if step == 0:  # the prefill: every real position of both rows
                real = mask.bool()
                a, b = outs["ref"].logits[real], outs["patched"].logits[real]
            assert (a - b).abs().max().item() <= TOL, f"step {step}"
            next_ids = outs["ref"].logits[:, -1].argmax(-1, keepdim=True)
            assert torch.equal(next_ids, outs["patched"].logits[:, -1].argmax(-1, keepdim=True)), f"step {step}"
            ids, mask = next_ids, torch.cat([mask, torch.ones_like(next_ids)], dim=1)


@pytest.mark.parametrize("model_type", TINY_MODEL_TYPES)
def test_greedy_generate_gives_hf_tokens(model_type: str) -> None:
    ref, patched, _ = _pair(model_type, seed=2)
    _assert_greedy_generate_equal(ref, patched, *_left_padded_batch(ref.config.vocab_size, seed=3))


def _assert_greedy_generate_equal(ref, patched, ids: torch.Tensor, mask: torch.Tensor) -> None:
    kw = dict(attention_mask=mask, max_new_tokens=DECODE_STEPS + 1, do_sample=False, output_logits=True,
              return_dict_in_generate=True)
    with torch.no_grad():
        a, b = ref.generate(ids, **kw), patched.generate(ids, **kw)
    assert torch.equal(a.sequences, b.sequences)
    assert max((x - y).abs().max().item() for x, y in zip(a.logits, b.logits)) <= TOL


@pytest.mark.parametrize("pads", [[4], [2, 5]], ids=["one-padded-row", "every-row-padded"])
def test_greedy_generate_gives_hf_tokens_where_no_row_fills_the_prompt(pads: list[int]) -> None:
    """A padded batch-1 prompt, or a batch padded to a fixed length: HF's cache length counts the padding,
    which is longer than any row's real tokens (found in review: the second step was refused)."""
    ref, patched, _ = _pair("qwen3_5", seed=8)
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(1, ref.config.vocab_size, (len(pads), 12), generator=g)
    mask = torch.ones_like(ids)
    for row, k in enumerate(pads):
        ids[row, :k], mask[row, :k] = 0, 0
    _assert_greedy_generate_equal(ref, patched, ids, mask)


def test_conversions_after_apply_keep_the_packed_mlp_weights_those_of_the_model() -> None:
    """``.to(dtype)`` and a dtype round trip followed by a new state dict convert each Parameter on its
    own; the packed gate/up weight follows them (found in review: a crash, then stale weights)."""
    ref, patched, _ = _pair("qwen3_5", seed=10)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=11)
    with torch.no_grad():
        ref.to(torch.bfloat16), patched.to(torch.bfloat16)
        a, b = ref(input_ids=ids, attention_mask=mask).logits, patched(input_ids=ids, attention_mask=mask).logits
        assert b.dtype == torch.bfloat16 and (a - b)[mask.bool()].abs().max().item() <= 2e-2
        ref.float(), patched.float()
        new = tiny_model("qwen3_5", seed=12).state_dict()
        ref.load_state_dict(new), patched.load_state_dict(new)
        a, b = ref(input_ids=ids, attention_mask=mask).logits, patched(input_ids=ids, attention_mask=mask).logits
        assert (a - b)[mask.bool()].abs().max().item() <= TOL
        # assign=True would replace the Parameters the adapters hold (found in review: mixed weights): refused
        with pytest.raises(RuntimeError, match=r"assign=True\) on a model moved onto TileOPs"):
            patched.load_state_dict(tiny_model("qwen3_5", seed=20).state_dict(), assign=True)
        b = patched(input_ids=ids, attention_mask=mask).logits  # nothing was loaded
    assert (a - b)[mask.bool()].abs().max().item() <= TOL


def test_a_static_cache_and_attention_weights_are_refused_by_name() -> None:
    """Neither has a TileOPs form: each is refused saying what was asked (found in review: a static cache
    was refused as a padding problem, and attention weights came back empty)."""
    _, patched, _ = _pair("qwen3_5", seed=13)
    ids = torch.randint(1, patched.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        with pytest.raises(NotImplementedError, match=r"a Static cache layer \(Static"):
            patched.generate(ids, cache_implementation="static", max_new_tokens=2, do_sample=False)
        patched.set_attn_implementation("eager")  # (with sdpa HF itself returns no weights, and warns)
        with pytest.raises(NotImplementedError, match="output_attentions"):
            patched(input_ids=ids, output_attentions=True)


def test_a_patched_model_refuses_a_deep_copy_and_says_how_to_copy_it() -> None:
    """Its forwards close over its own modules: a copy would run on the original's weights (found in
    review), so copying is refused for the model and for each patched module."""
    _, patched, _ = _pair("qwen3_next", seed=15)
    layer = next(m for m in patched.modules() if "forward" in vars(m))
    for obj in (patched, layer):
        with pytest.raises(TypeError, match="copy the model before apply_tileops"):
            copy.deepcopy(obj)


def test_a_call_that_asks_for_gradients_is_refused_with_the_way_to_call_it() -> None:
    """The ops record no gradients: with grad mode on, a call whose input embeddings or a weight of the text
    model require grad is refused, naming it (found in review: a misleading write check, or a silently
    missing gradient); with every parameter frozen it runs."""
    _, patched, _ = _pair("qwen3_5", seed=16)
    ids = torch.randint(1, patched.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(17))
    with pytest.raises(NotImplementedError, match=r"model.embed_tokens.weight requires grad: .* torch.no_grad\(\)"):
        patched(input_ids=ids)
    patched.requires_grad_(False)
    patched.model.norm.weight.requires_grad_(True)  # fine-tuning the final norm alone
    with pytest.raises(NotImplementedError, match="model.norm.weight requires grad: TileOPs ops record no gradients"):
        patched(input_ids=ids)
    patched.model.norm.weight.requires_grad_(False)
    assert patched(input_ids=ids).logits.shape == (1, 6, patched.config.vocab_size)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe"])
def test_router_logits_and_the_load_balancing_loss_are_hf_s(model_type: str) -> None:
    """HF records router logits with a hook on the router module, which the patched block does not call:
    the block runs the router's hooks itself (found in review: none were recorded and the loss failed)."""
    ref, patched, _ = _pair(model_type, seed=18)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=19)
    with torch.no_grad():
        a, b = (m(input_ids=ids, attention_mask=mask, output_router_logits=True) for m in (ref, patched))
    assert len(a.router_logits) == len(b.router_logits) > 0
    assert max((x - y).abs().max().item() for x, y in zip(a.router_logits, b.router_logits)) <= TOL
    assert abs(a.aux_loss.item() - b.aux_loss.item()) <= TOL


def test_sampling_generate_gives_hf_tokens_for_the_same_seed() -> None:
    ref, patched, _ = _pair("qwen3_next", seed=4)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=5)
    kw = dict(attention_mask=mask, max_new_tokens=DECODE_STEPS + 1, do_sample=True, top_k=0, temperature=1.0)
    with torch.no_grad():
        torch.manual_seed(6)
        a = ref.generate(ids, **kw)
        torch.manual_seed(6)
        b = patched.generate(ids, **kw)
    assert torch.equal(a, b)


def test_gdn_state_lives_in_the_cache_in_pool_layout_without_reallocation() -> None:
    _, patched, _ = _pair("qwen3_next")
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=7)
    layer = next(m for m in patched.modules() if type(m).__name__ == "Qwen3NextGatedDeltaNet")
    with torch.no_grad():
        out = patched(input_ids=ids, attention_mask=mask, use_cache=True)
        cache_layer = cache_of(out).layers[layer.layer_idx]
        ssm, conv = cache_layer.recurrent_states[0], cache_layer.conv_states[0]
        assert ssm.shape == (2, layer.num_v_heads, layer.head_v_dim, layer.head_k_dim)  # [S, NV, DV, DK]; DV != DK
        assert conv.shape == (2, layer.conv_dim, layer.conv_kernel_size - 1)  # [S, D, W - 1]
        before = ssm.clone()
        patched(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1), use_cache=True,
                **cache_kwargs(patched, cache_of(out)))
    assert cache_layer.recurrent_states[0] is ssm and cache_layer.conv_states[0] is conv  # written in place
    assert not torch.equal(ssm, before)


def test_report_names_the_kernel_serving_each_piece_on_this_device() -> None:
    _, _, report = _pair("qwen3_next")
    decode = [r for r in report.routes if r.piece == "recurrent decode"]
    assert len(decode) == 3 and all(r.op == "RecurrentGatedDeltaRuleFwdOp" for r in decode)
    assert all(r.kernel == "RefRGDR [cpu_ref]" for r in decode)
    assert "RecurrentGatedDeltaRuleFwdOp: RefRGDR [cpu_ref]" in str(report)
    pieces = {r.piece: r for r in report.routes if r.kind == "Qwen3NextAttention"}
    assert pieces["attention decode"].kernel == "RefAttentionDecode [cpu_ref]"
    assert pieces["q/k norm + rotary"].op == "QKNormRopeFwdOp" and pieces["output gate"].served
    assert "AttentionPrefillFwdOp: RefAttentionPrefill [cpu_ref]" in str(report)


@pytest.mark.parametrize("model_type", TINY_MODEL_TYPES)
def test_attention_cache_holds_each_rows_real_tokens_left_aligned_behind_hfs_view(model_type: str) -> None:
    _, patched, _ = _pair(model_type)
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=8)
    layer = next(m for m in patched.modules() if type(m).__name__.endswith("Attention"))
    with torch.no_grad():
        out = patched(input_ids=ids, attention_mask=mask, use_cache=True)
        cache_layer = cache_of(out).layers[layer.layer_idx]
        store = cache_layer._tileops_kv
        assert store.lengths.tolist() == [5, 9]  # row 0's four pads are dropped
        assert cache_of(out).get_seq_length() == 9 and cache_layer.keys.shape[-2] == 9  # HF's count keeps the pads
        patched(input_ids=ids[:, -1:], attention_mask=torch.cat([mask, mask[:, -1:]], 1), use_cache=True,
                **cache_kwargs(patched, cache_of(out)))
    assert store.lengths.tolist() == [6, 10] and cache_of(out).get_seq_length() == 10
    assert cache_layer.keys.shape == (2, layer.config.num_key_value_heads, 10, layer.head_dim)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5"])
def test_a_continued_prompt_runs_as_decode_steps_and_matches_hf(model_type: str) -> None:
    ref, patched, _ = _pair(model_type, seed=9)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=9)
    more = torch.randint(1, ref.config.vocab_size, (2, 3), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        logits = []
        for model in (ref, patched):
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
            logits.append(model(input_ids=more, attention_mask=torch.cat([mask, torch.ones_like(more)], 1),
                                use_cache=True, **cache_kwargs(model, cache_of(out))).logits)
    assert (logits[0] - logits[1]).abs().max().item() <= TOL


def test_padding_after_the_prompt_is_refused_by_the_attention_adapter() -> None:
    _, patched, _ = _pair("qwen3_5")
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=14)
    with torch.no_grad():
        out = patched(input_ids=ids, attention_mask=mask, use_cache=True)
        late = torch.cat([mask, torch.tensor([[0], [1]])], 1)
        with pytest.raises(NotImplementedError, match="the mask pads tokens of a call after the first one"):
            patched(input_ids=ids[:, -1:], attention_mask=late, use_cache=True,
                    **cache_kwargs(patched, cache_of(out)))


def test_a_module_no_kernel_serves_is_left_as_it_was_with_the_reason() -> None:
    model = tiny_model("qwen3_5")
    with use_target("cpu@nosuchbackend"):
        report = apply_tileops(model)
    assert not report.served()
    assert all("forward" not in vars(m) for m in model.modules())  # nothing patched
    gdn = [r for r in report.routes if r.kind == "Qwen3_5GatedDeltaNet"]
    assert gdn and all("no kernel serves" in r.reason for r in gdn)


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe"])
def test_the_sparse_moe_blocks_run_the_five_moe_ops_instead_of_their_modules(model_type: str) -> None:
    _, patched, report = _pair(model_type, every_module=True)
    blocks = [r for r in report.routes if "SparseMoeBlock" in r.kind]
    assert {r.piece for r in blocks} == {"shared expert", "router logits", "routing", "experts"}
    assert {r.op for r in blocks} == {"MoESharedExpertFwdOp", "LinearFwdOp", "MoETopKRoutingFwdOp",
                                      "MoEPermuteFwdOp, MoEGroupedExpertsFwdOp, MoEUnpermuteFwdOp"}
    assert all(r.served for r in blocks)
    # the router, the experts and the shared expert are no longer called: the block's routes do their work
    assert not [r for r in report.routes if "Router" in r.kind or "Experts" in r.kind or "shared_expert" in r.module]
    block = next(m for n, m in patched.named_modules() if type(m).__name__.endswith("SparseMoeBlock"))
    assert all("forward" not in vars(m) for m in (block.gate, block.experts, block.shared_expert))
    assert patched.config._experts_implementation != "tileops"  # the experts module is not called


def test_a_block_the_ops_cannot_take_whole_has_its_router_and_experts_routed_one_by_one() -> None:
    ref = tiny_model("qwen3_5_moe", seed=13)
    for block in (m for m in ref.modules() if type(m).__name__ == "Qwen3_5MoeSparseMoeBlock"):
        block.shared_expert_gate.bias = torch.nn.Parameter(torch.randn(1) * 0.1)  # HF adds it; the op has no bias
    patched = copy.deepcopy(ref)
    report = apply_tileops(patched)
    assert {r.reason for r in report.routes if r.kind == "Qwen3_5MoeSparseMoeBlock"} == {
        "the shared expert is not a bias-free SiLU MLP"}
    assert all(r.served for r in report.routes if r.kind in ("Qwen3_5MoeTopKRouter", "Qwen3_5MoeExperts"))
    assert patched.config._experts_implementation == "tileops"
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=14)
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = patched(input_ids=ids, attention_mask=mask).logits
    assert (a - b)[mask.bool()].abs().max().item() <= TOL


def test_a_moe_model_no_kernel_serves_keeps_its_experts_implementation_and_forwards() -> None:
    model = tiny_model("qwen3_5_moe")
    before = model.config._experts_implementation
    with use_target("cpu@nosuchbackend"):
        report = apply_tileops(model)
    assert not report.served() and model.config._experts_implementation == before
    assert all("forward" not in vars(m) and not hasattr(m, "_tileops_experts") for m in model.modules())


def test_a_model_set_to_eager_experts_runs_them_on_the_moe_ops() -> None:
    ref = tiny_model("qwen3_5_moe", seed=8)
    ref.set_experts_implementation("eager")
    patched = copy.deepcopy(ref)
    report = apply_tileops(patched)
    experts = [n for n, m in patched.named_modules() if type(m).__name__ == "Qwen3_5MoeExperts"]
    covering = [r for n in experts for r in report.routes_of(n)[1]]  # each block's "experts" route
    assert len(covering) == len(experts) == 4
    assert all(r.served and r.op.startswith("MoEPermuteFwdOp") for r in covering)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=9)
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = patched(input_ids=ids, attention_mask=mask).logits
    assert (a - b).abs().max().item() <= TOL


def test_experts_the_moe_ops_do_not_serve_keep_transformers_grouped_mm() -> None:
    from tileops_core.integrations.transformers._moe import register_experts

    model = tiny_model("qwen3_5_moe", seed=10)
    experts = next(m for m in model.modules() if type(m).__name__ == "Qwen3_5MoeExperts")
    ref = copy.deepcopy(experts)
    register_experts()
    model.set_experts_implementation("tileops")  # no module was given ops by apply_tileops
    x = torch.randn(5, model.config.hidden_size)
    ids = torch.randint(0, model.config.num_experts, (5, 2))
    weights = torch.rand(5, 2)
    assert ref.config._experts_implementation == "grouped_mm"  # copied before the switch
    assert torch.equal(experts(x, ids, weights), ref(x, ids, weights))


def test_a_model_of_another_type_is_refused_by_name() -> None:
    import transformers

    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                                                   num_hidden_layers=1, num_attention_heads=2))
    with pytest.raises(ValueError, match="this model is 'llama'"):
        apply_tileops(model)


def test_demo_command_prints_the_kernels_and_the_logit_difference(capsys: pytest.CaptureFixture[str]) -> None:
    from tileops_core.cli.main import main

    assert main(["demo", "--tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert "RecurrentGatedDeltaRuleFwdOp: RefRGDR [cpu_ref]" in out
    assert "max |dlogits| over 3 steps" in out and "tokens equal" in out
    assert "generate(), first call: HF" in out and "generate(), warm (median of 3): HF" in out


def test_qwen3_5_attention_rotates_by_three_distinct_mrope_position_rows_as_hf_does() -> None:
    ref, patched, _ = _pair("qwen3_5", seed=10)
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(1, ref.config.vocab_size, (2, 7), generator=g)
    positions = torch.randint(0, 50, (3, 2, 7), generator=g)  # temporal, height, width rows of an image prompt
    with torch.no_grad():
        a = ref(input_ids=ids, position_ids=positions).logits
        b = patched(input_ids=ids, position_ids=positions).logits
        neox = ref(input_ids=ids, position_ids=positions[0]).logits
    assert (a - b).abs().max().item() <= TOL
    assert (a - neox).abs().max().item() > 100 * TOL  # the rows matter: one row would not pass


def test_right_padding_is_refused_by_the_attention_adapter() -> None:
    _, patched, _ = _pair("qwen3_next")
    ids, mask = _left_padded_batch(patched.config.vocab_size, seed=12)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="not causal with left padding"):
        patched(input_ids=ids, attention_mask=mask.flip(1))


def test_the_layers_share_their_ops_so_a_new_prompt_length_plans_once_per_op_not_per_layer(monkeypatch) -> None:
    """The norms' and the MoE blocks' ops are one instance for every layer of one construction (as the
    GatedDeltaNet's and attention's were): an op plans a call shape once per instance, so with an
    instance a layer each new prompt length planned every layer again (345 plans, about 70 ms of host
    time, at 48 layers)."""
    from tileops_core.integrations.transformers._op_pool import OpPool
    from tileops_core.op.definition import OpDef
    from tileops_core.ops.gated_delta_net import ZeroCentredRMSNormFwdOp

    pool = OpPool()
    assert pool.get(ZeroCentredRMSNormFwdOp, eps=1e-6) is pool.get(ZeroCentredRMSNormFwdOp, eps=1e-6)
    assert pool.get(ZeroCentredRMSNormFwdOp, eps=1e-5) is not pool.get(ZeroCentredRMSNormFwdOp, eps=1e-6)
    assert pool.get(ZeroCentredRMSNormFwdOp, role="q_norm", eps=1e-6) is not pool.get(ZeroCentredRMSNormFwdOp, eps=1e-6)
    assert len(pool) == 3
    planned: list[str] = []
    plan = OpDef.plan

    def counting(self, op, values, **kwargs):
        planned.append(type(op).__name__)
        return plan(self, op, values, **kwargs)

    monkeypatch.setattr(OpDef, "plan", counting)
    counts = {}
    for layers in (4, 8):  # Qwen3.5-MoE: a full attention layer every fourth, a MoE block in every layer
        model = tiny_model("qwen3_5_moe", seed=0, num_hidden_layers=layers)
        apply_tileops(model)
        with torch.no_grad():
            for length in (5, 7):
                ids = torch.randint(1, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
                planned.clear()
                model(input_ids=ids)
        counts[layers] = sorted(planned)  # what the second prompt length planned
    assert counts[4] == counts[8] and "MoESharedExpertFwdOp" in counts[4], counts
