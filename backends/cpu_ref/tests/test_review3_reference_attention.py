"""Review 3, attention: the reference kernels of attention decode and prefill against float64 loops written
here from the specs (``manifest/attention.yaml``), on the edges a serving system produces: padding, ragged
lengths, paged caches, unchecked ``cu_seqlens``. The rules of ``test_review3_reference.py`` hold: fresh random
inputs, poisoned out buffers, untouched cache rows keep their bits.
"""

from __future__ import annotations

import pytest
import torch

from cpu_ref_rows import fresh_rng
from review3_common import TOL, rel, spans_of


# -- attention decode and prefill -----------------------------------------------------------------


def _attend(q, keys, values, scale):
    """One query row ``[NQ, D]`` over ``keys``/``values`` ``[n, NKV, D]``, float64, GQA by h // grp."""
    NQ, D = q.shape
    grp = NQ // keys.shape[1]
    scale = D**-0.5 if scale is None else scale
    out = torch.zeros(NQ, D, dtype=torch.float64)
    for h in range(NQ):
        kh, vh = keys[:, h // grp].double(), values[:, h // grp].double()
        w = torch.softmax((kh @ q[h].double()) * scale, dim=0)
        out[h] = w @ vh
    return out


def _decode_oracle(q, k, v, kc, vc, lens, table, scale):
    kc, vc = kc.clone(), vc.clone()
    L = kc.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b, n in enumerate(lens):
        if n < 0:
            continue
        where = (b, n) if table is None else (table[b][n // L], n % L)
        kc[where], vc[where] = k[b], v[b]
        pos = [(b, p) if table is None else (table[b][p // L], p % L) for p in range(n + 1)]
        keys = torch.stack([kc[r, o] for r, o in pos])
        vals = torch.stack([vc[r, o] for r, o in pos])
        out[b] = _attend(q[b], keys, vals, scale)
    return out, kc, vc


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("one_at_a_time", [False, True], ids=["one-gather", "a-gather-a-sequence"])
def test_attention_decode_padding_and_ragged_lengths_match_the_loop(dtype, paged, one_at_a_time, monkeypatch):
    """Padding rows (-1) write nothing and give zeros; positions past a sequence's length (NaN here)
    and block-table entries past its last block (garbage here) are never read. The same when the
    sequences' keys and values are gathered a sequence at a time (what a large batch gets: ``_GATHERED``)."""
    from tileops_cpu_ref import attention
    from tileops_cpu_ref.attention import attention_decode

    if one_at_a_time:
        monkeypatch.setattr(attention, "_GATHERED", 1)

    gen = fresh_rng()
    B, NQ, NKV, D, L = 5, 8, 2, 4, 3 if paged else 9
    lens = [0, -1, 7, 2, 8]
    N = 16 if paged else B
    kc = torch.full((N, L, NKV, D), float("nan"), dtype=dtype)
    vc = kc.clone()
    table = None
    if paged:
        blocks = torch.randperm(N, generator=gen).tolist()
        table = [[blocks[3 * b + j] if j * L <= max(n, 0) else 10**6 for j in range(3)] for b, n in enumerate(lens)]
        table[1] = [-5, -5, -5]
    for b, n in enumerate(lens):  # the cached tokens, fresh random values
        for p in range(max(n, 0)):
            r, o = (b, p) if table is None else (table[b][p // L], p % L)
            kc[r, o], vc[r, o] = torch.randn(NKV, D, generator=gen), torch.randn(NKV, D, generator=gen)
    q = torch.randn(B, NQ, D, generator=gen).to(dtype)
    k, v = torch.randn(B, NKV, D, generator=gen).to(dtype), torch.randn(B, NKV, D, generator=gen).to(dtype)
    want, want_k, want_v = _decode_oracle(q, k, v, kc, vc, lens, table, None)
    kc2, vc2 = kc.clone(), vc.clone()
    got = attention_decode(q, k, v, kc2, vc2, torch.tensor(lens), None if table is None else torch.tensor(table), None)
    assert not got.isnan().any()
    assert torch.equal(got[1], torch.zeros_like(got[1]))
    assert rel(got, want) <= TOL[dtype]
    assert torch.equal(kc2.isnan(), want_k.isnan()) and torch.equal(kc2.nan_to_num(), want_k.nan_to_num())
    assert torch.equal(vc2.nan_to_num(), want_v.nan_to_num())


@pytest.mark.parametrize("B", [0, 1])
def test_attention_decode_empty_batch_and_one_sequence(B):
    from tileops_cpu_ref.attention import attention_decode

    gen = fresh_rng()
    kc, vc = torch.randn(2, 6, 1, 4, generator=gen), torch.randn(2, 6, 1, 4, generator=gen)
    q, k, v = torch.randn(B, 4, 4, generator=gen), torch.randn(B, 1, 4, generator=gen), torch.randn(B, 1, 4, generator=gen)
    lens = [5] * B
    want, want_k, want_v = _decode_oracle(q, k, v, kc, vc, lens, None, 0.3)
    got = attention_decode(q, k, v, kc, vc, torch.tensor(lens, dtype=torch.int64), None, 0.3)
    assert rel(got, want) <= 2e-5 and torch.equal(kc, want_k) and torch.equal(vc, want_v)


def _prefill_oracle(q, k, v, kc, vc, cu, slots, scale):
    kc, vc = kc.clone(), vc.clone()
    L = kc.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for b in range(len(cu) - 1):
        s, n = cu[b], cu[b + 1] - cu[b]
        for j in range(n):
            t = s + j
            if slots is None:
                kc[b, j], vc[b, j] = k[t], v[t]
            elif slots[t] >= 0:
                kc[slots[t] // L, slots[t] % L], vc[slots[t] // L, slots[t] % L] = k[t], v[t]
            out[t] = _attend(q[t], k[s : t + 1], v[s : t + 1], scale)
    return out, kc, vc


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("paged", [False, True])
def test_attention_prefill_ragged_padding_and_uncovered_tail_match_the_loop(dtype, paged):
    from tileops_cpu_ref.attention import attention_prefill

    gen = fresh_rng()
    lengths = [4, 0, 1, 6, 4, 4]
    cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    T = cu[-1] + 2  # two tokens past cu_seqlens[B]: zeros, no write
    NQ, NKV, D, L = 6, 3, 4, 4
    N = 12 if paged else len(lengths)
    kc = torch.randn(N, 8 if not paged else L, NKV, D, generator=gen).to(dtype)
    vc = torch.randn(kc.shape, generator=gen).to(dtype)
    slots = None
    if paged:
        slots = torch.randperm(N * L, generator=gen)[:T].tolist()
        slots[2] = slots[-1] = -1
    q, k, v = (torch.randn(T, h, D, generator=gen).to(dtype) for h in (NQ, NKV, NKV))
    want, want_k, want_v = _prefill_oracle(q, k, v, kc, vc, cu, slots, None)
    kc2, vc2 = kc.clone(), vc.clone()
    got = attention_prefill(q, k, v, kc2, vc2, torch.tensor(cu), None if slots is None else torch.tensor(slots), None)
    assert not got.isnan().any()
    assert rel(got, want) <= TOL[dtype]
    assert torch.equal(got[-2:], torch.zeros_like(got[-2:]))
    assert torch.equal(kc2, want_k) and torch.equal(vc2, want_v)


#: Unchecked cu_seqlens for T = 8 tokens: past T, decreasing, negative, a head before the first prompt.
UNCHECKED_CU = {"past-T": [0, 3, 10], "far-past-T": [0, 2, 30, 31], "decreasing": [0, 5, 3, 8],
                "decreasing-below-a-start": [2, 2, 7, 1, 8], "negative-first": [-3, 4, 6],
                "all-negative": [-2, -5, -1], "head-and-tail": [3, 4, 6]}


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("cu", list(UNCHECKED_CU.values()), ids=list(UNCHECKED_CU))
def test_attention_prefill_with_unchecked_cu_seqlens_follows_the_rgdr_rule(cu, paged):
    """cu_seqlens past T, negative or decreasing (contents checks off, as in serving) are clipped
    as RGDR clips them (the spec's text, written out in ``_spans``): each prompt attends over and
    writes the tokens of its clipped span, the tokens no prompt covers are zeros and write
    nothing, and the call never raises (it raised a bare ValueError)."""
    from tileops_cpu_ref.attention import attention_prefill

    gen = fresh_rng()
    T, NQ, NKV, D, L = 8, 4, 2, 8, 4
    spans = spans_of(cu, "cu_seqlens", T)
    clipped = [spans[0][0], *(s + n for s, n in spans)]  # the spans as valid prefix sums, for the loop
    N = 6 if paged else len(spans)
    kc = torch.randn(N, L if paged else T, NKV, D, generator=gen)
    vc = torch.randn(kc.shape, generator=gen)
    slots = None
    if paged:
        slots = torch.randperm(N * L, generator=gen)[:T].tolist()
        slots[1] = -1
    q, k, v = (torch.randn(T, h, D, generator=gen) for h in (NQ, NKV, NKV))
    want, want_k, want_v = _prefill_oracle(q, k, v, kc, vc, clipped, slots, 0.4)
    got = attention_prefill(q, k, v, kc, vc, torch.tensor(cu, dtype=torch.int32),
                            None if slots is None else torch.tensor(slots), 0.4)
    assert not got.isnan().any()
    assert rel(got, want) <= TOL[torch.float32]
    uncovered = [t for t in range(T) if not any(s <= t < s + n for s, n in spans)]
    assert torch.equal(got[uncovered], torch.zeros_like(got[uncovered]))
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)


def test_attention_prefill_clipped_spans_are_the_rgdr_rule_s():
    """The reference's prompts are ``clipped_bounds``'s for every cu_seqlens above (one rule)."""
    from tileops_cpu_ref.attention import _bounds
    from tileops_cpu_ref.rgdr import clipped_bounds

    for cu in UNCHECKED_CU.values():
        starts, lengths = _bounds(torch.tensor(cu), 8)
        assert list(zip(starts, lengths)) == spans_of(cu, "cu_seqlens", 8) == list(zip(*clipped_bounds(cu, "cu_seqlens",
                                                                                                       8)))


def test_attention_prefill_op_without_contents_checks_serves_decreasing_cu_seqlens(monkeypatch):
    """Through the op, contents checks off (serving): no error; prompt 1 (cu 5 -> 3) is empty and
    prompt 2 spans the clipped [5, 8); with checks on the same call is refused by name."""
    from tileops_core.errors import CheckError
    from tileops_core.ops.attention import AttentionPrefillFwdOp

    monkeypatch.delenv("TILEOPS_CHECK_CONTENTS", raising=False)
    gen = fresh_rng()
    T, NQ, NKV, D = 8, 4, 2, 8
    q, k, v = (torch.randn(T, h, D, generator=gen) for h in (NQ, NKV, NKV))
    kc, vc = torch.randn(3, T, NKV, D, generator=gen), torch.randn(3, T, NKV, D, generator=gen)
    cu = torch.tensor([0, 5, 3, 8], dtype=torch.int32)
    want, want_k, want_v = _prefill_oracle(q, k, v, kc, vc, [0, 5, 5, 8], None, None)
    got = AttentionPrefillFwdOp(check_contents=False)(q, k, v, kc, vc, cu)
    assert rel(got, want) <= TOL[torch.float32] and torch.equal(kc, want_k) and torch.equal(vc, want_v)
    with pytest.raises(CheckError, match=r"^AttentionPrefillFwdOp: .* gives negative sequence lengths \[5, -2, 5\] "
                                         r"\(manifest/attention.yaml:\d+\)$"):
        AttentionPrefillFwdOp(check_contents=True)(q, k, v, kc, vc, cu)


@pytest.mark.parametrize("lens", [[3, 0, 7, 1], [5, 5, 5, 5]], ids=["ragged", "equal"])
@pytest.mark.parametrize("group", [None, 1, 2], ids=["one-group", "a-row-a-group", "two-rows-a-group"])
def test_attention_decode_contiguous_all_live_never_reads_past_a_length(lens, group, monkeypatch):
    """The all-live contiguous path (slices, no gather), whole and in groups of rows (what a large
    batch gets: ``_GATHERED``), the last group short; NaN past every length is never read."""
    from tileops_cpu_ref import attention
    from tileops_cpu_ref.attention import attention_decode

    if group is not None:
        monkeypatch.setattr(attention, "_GATHERED", group * (max(lens) + 1) * 2 * 4)
    gen = fresh_rng()
    B, NQ, NKV, D, L = 4, 4, 2, 4, 8
    kc = torch.full((B + 1, L, NKV, D), float("nan"))
    vc = kc.clone()
    for b, n in enumerate(lens):
        kc[b, :n], vc[b, :n] = torch.randn(n, NKV, D, generator=gen), torch.randn(n, NKV, D, generator=gen)
    q, k, v = torch.randn(B, NQ, D, generator=gen), torch.randn(B, NKV, D, generator=gen), torch.randn(B, NKV, D, generator=gen)
    want, want_k, _ = _decode_oracle(q, k, v, kc, vc, lens, None, None)
    got = attention_decode(q, k, v, kc, vc, torch.tensor(lens, dtype=torch.int32), None, None)
    assert not got.isnan().any() and rel(got, want) <= 2e-5
    assert torch.equal(kc.nan_to_num(), want_k.nan_to_num())
    if group is not None:
        whole = attention_decode(q, k, v, kc.clone(), vc.clone(), torch.tensor(lens, dtype=torch.int32), None, None)
        monkeypatch.setattr(attention, "_GATHERED", 1 << 26)
        assert torch.equal(whole, attention_decode(q, k, v, kc.clone(), vc.clone(), torch.tensor(lens), None, None))


def test_attention_prefill_many_prompts_on_a_contiguous_cache():
    """More prompts than the sliced-write path takes (the index path), empty ones among them."""
    from tileops_cpu_ref.attention import attention_prefill

    gen = fresh_rng()
    lengths = [2, 0, 3, 1, 1, 4, 0, 2, 5, 1, 3]
    cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    T, NQ, NKV, D = cu[-1], 4, 4, 4
    kc, vc = torch.randn(len(lengths), 6, NKV, D, generator=gen), torch.randn(len(lengths), 6, NKV, D, generator=gen)
    q, k, v = (torch.randn(T, h, D, generator=gen) for h in (NQ, NKV, NKV))
    want, want_k, want_v = _prefill_oracle(q, k, v, kc, vc, cu, None, 0.7)
    got = attention_prefill(q, k, v, kc, vc, torch.tensor(cu), None, 0.7)
    assert rel(got, want) <= 2e-5 and torch.equal(kc, want_k) and torch.equal(vc, want_v)
