"""The attention ops through their public API: KV-cache metadata checks, padding, cache slots no
one writes, poisoned cache contents, and HF's bits for the norm, rotary and gate.

Contents checking is on in the test suite (TILEOPS_CHECK_CONTENTS=1); each check fails before
anything is written and names the declaration it guards. The conformance suite
(test_catalogue.py) compares every workload row with the float64 references.
"""

from __future__ import annotations

import os

import pytest
import torch

from tileops_core import CheckError
from tileops_core.ops.attention import (
    AttentionDecodeFwdOp, AttentionPrefillFwdOp, QKNormRopeFwdOp, SigmoidGateMulFwdOp,
)

NQ, NKV, D = 4, 2, 8


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


def _decode_args(lengths, *, rows=None, capacity=8, block_size=None, rng=None):
    """A decode step; paged with ``block_size``: each sequence owns consecutive table entries of
    distinct random blocks, two spare blocks."""
    rng = rng or _rng()
    B = len(lengths)
    args = dict(query=torch.randn(B, NQ, D, generator=rng), key=torch.randn(B, NKV, D, generator=rng),
                value=torch.randn(B, NKV, D, generator=rng), cache_seqlens=torch.tensor(lengths))
    if block_size is None:
        N, L = rows or B + 1, capacity
    else:
        M = -(-capacity // block_size)
        N, L = B * M + 2, block_size
        args["block_table"] = torch.randperm(N, generator=rng)[: B * M].view(B, M)
    args["key_cache"] = torch.randn(N, L, NKV, D, generator=rng)
    args["value_cache"] = torch.randn(N, L, NKV, D, generator=rng)
    return args


def _prefill_args(lengths, *, block_size=None, rng=None):
    rng = rng or _rng()
    T = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    args = dict(query=torch.randn(T, NQ, D, generator=rng), key=torch.randn(T, NKV, D, generator=rng),
                value=torch.randn(T, NKV, D, generator=rng), cu_seqlens=cu)
    if block_size is None:
        N, L = len(lengths) + 1, max(lengths) + 2
    else:
        N, L = T + 3, block_size  # one slot a token, at random, the rest spare
        args["slot_mapping"] = torch.randperm(N * L, generator=rng)[:T]
    args["key_cache"] = torch.randn(N, L, NKV, D, generator=rng)
    args["value_cache"] = torch.randn(N, L, NKV, D, generator=rng)
    return args


def _refused(op, args, message: str) -> None:
    before = (args["key_cache"].clone(), args["value_cache"].clone())
    with pytest.raises(CheckError, match=message):
        op(**args)
    assert torch.equal(args["key_cache"], before[0]) and torch.equal(args["value_cache"], before[1])


def _sdpa64(q, k, v, causal):
    """float64 attention of one sequence: ``[S, NQ, D]`` over ``[S', NKV, D]``."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    o = torch.nn.functional.scaled_dot_product_attention(q.double().transpose(0, 1), k.double().transpose(0, 1),
                                                         v.double().transpose(0, 1), is_causal=causal)
    return o.transpose(0, 1)


# -- decode ------------------------------------------------------------------------------------


def test_decode_length_past_the_contiguous_capacity_is_refused():
    args = _decode_args([3, 8], capacity=8)
    _refused(AttentionDecodeFwdOp(), args,
             r"AttentionDecodeFwdOp: cache_seqlens\[1\]=8 is outside \[-1, 8\).*\(manifest/attention.yaml:\d+")


def test_decode_contiguous_cache_with_fewer_rows_than_sequences_is_refused():
    args = _decode_args([1, 2, 3], rows=2)
    with pytest.raises(CheckError, match=r"present\(block_table\) or N >= B"):
        AttentionDecodeFwdOp()(**args)


def test_decode_block_a_sequence_reads_outside_the_cache_is_refused():
    args = _decode_args([5, 1], capacity=8, block_size=2)
    N = args["key_cache"].shape[0]
    args["block_table"][0, 1] = N
    _refused(AttentionDecodeFwdOp(), args, rf"block_table\[0, 1\]={N} is outside \[0, {N}\) but sequence 0 reads it")


@pytest.mark.parametrize("entry", [-1, "N"])
def test_decode_without_contents_checks_refuses_a_read_block_outside_the_cache_before_writing(entry):
    """The kernel's own check covers every block a step reads, not only the one it writes (found in review:
    -1 read block N - 1 silently, N raised after the new key was written)."""
    from tileops_core.errors import KernelError

    args = _decode_args([5, 1], capacity=8, block_size=2)
    N = args["key_cache"].shape[0]
    args["block_table"][0, 0] = N if entry == "N" else -1  # a block sequence 0 reads; it writes block 2
    before = (args["key_cache"].clone(), args["value_cache"].clone())
    with pytest.raises(KernelError, match=rf"outside \[0, {N}\) among those the step reads; nothing was written"):
        AttentionDecodeFwdOp(check_contents=False)(**args)
    assert torch.equal(args["key_cache"], before[0]) and torch.equal(args["value_cache"], before[1])


def test_decode_block_table_entries_past_the_last_block_are_never_read():
    args = _decode_args([3, 0], capacity=8, block_size=2)
    garbage = {k: v.clone() for k, v in args.items()}
    garbage["block_table"][0, 2:] = -1
    garbage["block_table"][1, 1:] = 10 ** 6
    out = AttentionDecodeFwdOp()(**garbage)
    torch.testing.assert_close(out, AttentionDecodeFwdOp()(**args), rtol=0, atol=0)
    assert torch.equal(garbage["key_cache"], args["key_cache"])


def test_decode_two_sequences_writing_one_cache_slot_are_refused():
    args = _decode_args([2, 2], capacity=4, block_size=2)
    args["block_table"][1, 1] = args["block_table"][0, 1]
    slot = int(args["block_table"][0, 1]) * 2
    _refused(AttentionDecodeFwdOp(), args, rf"sequences 0 and 1 both write cache slot {slot}")


def test_decode_padding_row_writes_nothing_and_returns_zeros():
    args = _decode_args([2, -1, 4], capacity=6)
    before = args["key_cache"].clone()
    out = AttentionDecodeFwdOp()(**args)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.equal(args["key_cache"][1], before[1])


@pytest.mark.parametrize("block_size", [None, 3])
def test_decode_writes_exactly_the_new_positions_and_leaves_every_other_slot(block_size):
    lengths = [4, 0, 7]
    args = _decode_args(lengths, capacity=9, block_size=block_size)
    before = (args["key_cache"].clone(), args["value_cache"].clone())
    AttentionDecodeFwdOp()(**args)
    for b, n in enumerate(lengths):
        row, at = (b, n) if block_size is None else (int(args["block_table"][b, n // block_size]), n % block_size)
        before[0][row, at], before[1][row, at] = args["key"][b], args["value"][b]
    assert torch.equal(args["key_cache"], before[0]) and torch.equal(args["value_cache"], before[1])


@pytest.mark.parametrize("poison", [(float("nan"), float("inf")), (float("inf"), float("-inf")), (1e30, -1e30)],
                         ids=["nan-keys-inf-values", "inf-keys-and-values", "huge-finite"])
@pytest.mark.parametrize("block_size", [None, 2])
def test_decode_positions_past_a_sequence_hold_poison_that_never_reaches_the_output(block_size, poison):
    lengths = [1, 3]
    args = _decode_args(lengths, capacity=6, block_size=block_size)
    clean = {k: v.clone() for k, v in args.items()}
    for b, n in enumerate(lengths):
        for p in range(n + 1, 6):
            row, at = (b, p) if block_size is None else (int(args["block_table"][b, p // block_size]), p % block_size)
            args["key_cache"][row, at], args["value_cache"][row, at] = poison
    torch.testing.assert_close(AttentionDecodeFwdOp()(**args), AttentionDecodeFwdOp()(**clean), rtol=0, atol=0)


def test_decode_paged_and_contiguous_layouts_of_one_cache_agree():
    rng = _rng()
    lengths, L = [5, 2], 2
    contiguous = _decode_args(lengths, capacity=6, rng=rng)
    paged = _decode_args(lengths, capacity=6, block_size=L, rng=rng)
    for name in ("query", "key", "value"):
        paged[name] = contiguous[name]
    for b in range(2):
        for p in range(6):
            row = int(paged["block_table"][b, p // L])
            paged["key_cache"][row, p % L] = contiguous["key_cache"][b, p]
            paged["value_cache"][row, p % L] = contiguous["value_cache"][b, p]
    torch.testing.assert_close(AttentionDecodeFwdOp()(**paged), AttentionDecodeFwdOp()(**contiguous))


# -- prefill -----------------------------------------------------------------------------------


def test_prefill_cu_seqlens_that_do_not_tile_t_are_refused():
    args = _prefill_args([2, 3])
    args["cu_seqlens"] = torch.tensor([0, 2, 4])
    _refused(AttentionPrefillFwdOp(), args, r"AttentionPrefillFwdOp: cu_seqlens sums to 4 tokens, but T=5")


@pytest.mark.parametrize("cu, message", [
    ([0, 4, 2], r"cu_seqlens gives negative sequence lengths \[4, -2\]"),
    ([1, 2, 5], r"cu_seqlens must start at 0, got \[1\]"),
])
def test_prefill_cu_seqlens_refusals_name_cu_seqlens(cu, message):
    """Found in review: the shared metadata check named prefill's input ``actual_seq_lengths``."""
    args = _prefill_args([2, 3])
    args["cu_seqlens"] = torch.tensor(cu)
    _refused(AttentionPrefillFwdOp(), args, f"AttentionPrefillFwdOp: {message}")


def test_prefill_prompt_longer_than_the_contiguous_cache_is_refused():
    args = _prefill_args([2, 3])
    args["key_cache"], args["value_cache"] = args["key_cache"][:, :2], args["value_cache"][:, :2]
    _refused(AttentionPrefillFwdOp(), args, r"sequence 1 has 3 tokens, more than the contiguous cache's L=2")


def test_prefill_slot_outside_the_cache_is_refused():
    args = _prefill_args([2, 3], block_size=2)
    slots = args["key_cache"].shape[0] * 2
    args["slot_mapping"][4] = slots
    _refused(AttentionPrefillFwdOp(), args, rf"slot_mapping \[{slots}\] lie outside \[-1, {slots}\)")


def test_prefill_two_tokens_writing_one_slot_are_refused():
    args = _prefill_args([2, 3], block_size=2)
    args["slot_mapping"][3] = args["slot_mapping"][1]
    _refused(AttentionPrefillFwdOp(), args, rf"tokens 1 and 3 both write cache slot {int(args['slot_mapping'][1])}")


def test_prefill_padding_slots_write_nothing_but_their_tokens_still_attend():
    args = _prefill_args([3, 2], block_size=2)
    args["slot_mapping"][:3] = -1
    before = args["key_cache"].clone()
    out = AttentionPrefillFwdOp()(**args)
    written = args["slot_mapping"][3:]
    before.view(-1, NKV, D)[written] = args["key"][3:]
    assert torch.equal(args["key_cache"], before)
    expected = _sdpa64(args["query"][:3], args["key"][:3], args["value"][:3], True)
    torch.testing.assert_close(out[:3].double(), expected, rtol=2e-5, atol=2e-6)


def test_prefill_contiguous_fills_each_row_from_position_zero_and_nothing_else():
    args = _prefill_args([3, 1, 2])
    before = args["value_cache"].clone()
    AttentionPrefillFwdOp()(**args)
    before[0, :3], before[1, :1], before[2, :2] = args["value"][:3], args["value"][3:4], args["value"][4:]
    assert torch.equal(args["value_cache"], before)


def test_prefill_then_decode_equals_causal_attention_over_the_whole_prompt():
    rng = _rng()
    n = 6
    whole = _prefill_args([n + 1], block_size=4, rng=rng)
    prompt = {k: (v[:n] if k in ("query", "key", "value", "slot_mapping") else v) for k, v in whole.items()}
    prompt["cu_seqlens"] = torch.tensor([0, n])
    prompt["slot_mapping"] = torch.arange(n)  # blocks 0 and 1, in order
    AttentionPrefillFwdOp()(**prompt)
    step = AttentionDecodeFwdOp()(query=whole["query"][n:], key=whole["key"][n:], value=whole["value"][n:],
                                  key_cache=whole["key_cache"], value_cache=whole["value_cache"],
                                  cache_seqlens=torch.tensor([n]), block_table=torch.tensor([[0, 1]]))
    expected = _sdpa64(whole["query"], whole["key"], whole["value"], True)[n:]
    torch.testing.assert_close(step.double(), expected, rtol=2e-5, atol=2e-6)


# -- norm + rotary and the gate: HF's bits -------------------------------------------------------


def _hf_norm_rope(model_type: str, dtype: torch.dtype):
    transformers = pytest.importorskip("transformers")
    from tileops_core.integrations.transformers._tiny import tiny_model

    model = tiny_model(model_type, seed=0)
    attn = next(m for m in model.modules() if type(m).__name__.endswith("Attention"))
    # Only the norms take the dtype: the rotary module keeps its float32 inv_freq, as a model
    # loaded in half precision does (model.to(dtype) would round that buffer).
    attn.q_norm.to(dtype), attn.k_norm.to(dtype)
    rotary = next(m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding"))
    module = __import__(type(attn).__module__, fromlist=["apply_rotary_pos_emb"])
    with torch.no_grad():
        attn.q_norm.weight.normal_(generator=_rng())
        attn.k_norm.weight.normal_(generator=_rng())
    return transformers, attn, rotary, module.apply_rotary_pos_emb


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5"])
def test_norm_and_rotary_give_hf_bits(model_type, dtype):
    _, attn, rotary, apply_rotary_pos_emb = _hf_norm_rope(model_type, dtype)
    cfg = rotary.config
    T, hd = 7, attn.head_dim
    nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    rng = _rng()
    q, k = torch.randn(1, T, nq, hd, generator=rng).to(dtype), torch.randn(1, T, nkv, hd, generator=rng).to(dtype)
    mrope = model_type == "qwen3_5"
    positions = torch.randint(0, 3000, (3, 1, T) if mrope else (1, T), generator=rng)
    with torch.no_grad():
        cos, sin = rotary(q, positions)
        hf_q, hf_k = apply_rotary_pos_emb(attn.q_norm(q).transpose(1, 2), attn.k_norm(k).transpose(1, 2), cos, sin)
    rope = cfg.rope_parameters
    op = QKNormRopeFwdOp(rotary_dim=cos.shape[-1], theta=float(rope["rope_theta"]), eps=attn.q_norm.eps,
                         rope_style="mrope_interleaved" if mrope else "neox",
                         mrope_section=tuple(rope.get("mrope_section", (11, 11, 10))))
    got_q, got_k = op(q[0], k[0], attn.q_norm.weight, attn.k_norm.weight, positions[:, 0] if mrope else positions[0])
    assert torch.equal(got_q, hf_q.transpose(1, 2)[0]) and torch.equal(got_k, hf_k.transpose(1, 2)[0])


def test_norm_and_rotary_read_a_strided_query_half_of_a_projection():
    rng = _rng()
    proj = torch.randn(5, NQ, 2 * D, generator=rng)
    q, k, w = proj[..., :D], torch.randn(5, NKV, D, generator=rng), torch.randn(D, generator=rng)
    positions = torch.arange(5)
    op = QKNormRopeFwdOp(rotary_dim=4)
    got = op(q, k, w, w, positions)
    torch.testing.assert_close(got[0], op(q.contiguous(), k, w, w, positions)[0], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sigmoid_gate_mul_gives_hf_bits_on_a_strided_gate(dtype):
    rng = _rng()
    proj = torch.randn(3, 4, 2 * 16, generator=rng).to(dtype)
    attn, gate = torch.randn(3, 4, 16, generator=rng).to(dtype), proj[..., 16:]
    assert torch.equal(SigmoidGateMulFwdOp()(attn, gate), attn * torch.sigmoid(gate))


@pytest.mark.parametrize("lengths", [[3, 1, 2], [2, 1, 3, 1, 2, 1, 1, 2, 3]], ids=["sliced-writes", "indexed-writes"])
def test_the_reference_prefill_writes_and_attends_each_prompt_on_both_write_roads(lengths):
    """Up to eight prompts on a contiguous cache the reference writes each as two slice copies, past
    that through index tensors: either way each row holds its prompt from position zero and each
    prompt attends causally within itself (float64), one prompt alone as slices, equal ones batched."""
    from tileops_cpu_ref.attention import attention_prefill

    args = _prefill_args(lengths)
    before = args["key_cache"].clone()
    out = attention_prefill(args["query"], args["key"], args["value"], args["key_cache"], args["value_cache"],
                            args["cu_seqlens"], None, None)
    start = 0
    for b, n in enumerate(lengths):
        before[b, :n] = args["key"][start : start + n]
        expected = _sdpa64(*(args[x][start : start + n] for x in ("query", "key", "value")), True)
        torch.testing.assert_close(out[start : start + n].double(), expected, rtol=2e-5, atol=2e-6)
        start += n
    assert torch.equal(args["key_cache"], before)


def test_the_reference_prefill_leaves_tokens_no_prompt_covers_zero_and_refuses_a_cache_too_short():
    from tileops_cpu_ref.attention import attention_prefill

    args = _prefill_args([2, 3])
    out = attention_prefill(args["query"], args["key"], args["value"], args["key_cache"], args["value_cache"],
                            torch.tensor([0, 2, 4]), None, None)  # token 4 in no prompt (the op's check is off here)
    assert torch.equal(out[4], torch.zeros_like(out[4])) and torch.isfinite(out).all()
    short = args["key_cache"][:, :2].clone()
    before = short.clone()
    with pytest.raises(IndexError, match=r"sequence lengths \[2, 3\] do not fit a contiguous cache of 3 rows of 2"):
        attention_prefill(args["query"], args["key"], args["value"], short, short.clone(), args["cu_seqlens"], None, None)
    assert torch.equal(short, before)
