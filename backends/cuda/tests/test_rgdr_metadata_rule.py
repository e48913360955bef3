"""The RGDR TileLang kernel's metadata logic, emulated step by step in Python, follows the rule
every backend follows (``tileops_cpu_ref.rgdr.clipped_bounds``), on the CPU.

The model below transcribes ``rgdr_pieces``: ``sequence_span`` (per-thread partials over a
strided loop, a warp xor butterfly, one partial per warp in shared memory, then the warps
folded, saturating at T for lengths and a maximum for prefix sums, every operand clipped in
the metadata's own dtype before the int32 cast), ``sequence_first_slot``, ``stage_slot``'s
validity and skip rule, and ``zero_uncovered``. Every int32 intermediate is checked to fit.
Hypothesis then checks, for any metadata: each output row is written exactly once (by its
sequence or zeroed), only tokens inside ``[0, T)`` are read, only slots inside ``[0, S)``
named by a covered token are read or written, and spans, first slots and each slot's final
writer are the reference rule's. The GPU fuzz test checks the kernel itself.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tileops_cpu_ref.rgdr import clipped_accepted, clipped_bounds
from tileops_cuda.kernels import rgdr

I32_MAX = 2**31 - 1
HUGE = st.sampled_from([2**32, 2**32 + 1, -(2**32) + 1, 2**31, 2**63 - 1, -(2**63)])


def i32(x: int) -> int:
    """An int32 intermediate of the kernel: it must fit (else the kernel would wrap)."""
    assert -I32_MAX - 1 <= x <= I32_MAX, x
    return x


class KernelModel:
    """The kernel's metadata steps for one call, one program (``by``) at a time."""

    def __init__(self, style: str, meta: list[int], slots: list[int], accepted: list[int] | None, T: int, S: int,
                 threads: int) -> None:
        self.style, self.meta, self.slots, self.accepted, self.T, self.S = style, meta, slots, accepted, T, S
        self.threads = threads
        self.B = len(meta) - (style == "cu_seqlens")
        self.tokens_read: set[int] = set()

    def clip_tokens(self, x: int, lo: int = 0) -> int:
        """``clip_tokens``: clipped in the metadata dtype (exact here), then cast to int32."""
        return i32(min(max(x, lo), self.T))

    def slot_or_padding(self, i: int) -> int:
        assert 0 <= i < self.T, i  # the index a kernel reads slots at
        s = self.slots[i]
        return i32(s) if 0 <= s < self.S else -1

    def span(self, by: int) -> tuple[int, int, int]:
        """``sequence_span``: (start, L, accepted count) of program ``by``."""
        T, threads, lengths_style = self.T, self.threads, self.style == "lengths"
        L = self.clip_tokens(self.meta[by] if lengths_style else self.meta[by + 1])
        acc_n = self.clip_tokens(self.accepted[by], 1) if self.accepted is not None else 1
        start = 0 if lengths_style else self.clip_tokens(self.meta[by])
        if by > 0:  # sequence 0 skips the reduction
            part = [0] * threads
            for it in range(-(-by // threads)):
                for tid in range(threads):
                    i = it * threads + tid
                    if i < by:
                        x = self.clip_tokens(self.meta[i])
                        part[tid] = i32(min(i32(part[tid] + x), T)) if lengths_style else max(part[tid], x)
            for off in (16, 8, 4, 2, 1):  # shfl_xor within each warp of 32 lanes
                other = [part[t ^ off] for t in range(threads)]
                part = [i32(min(i32(a + b), T)) if lengths_style else max(a, b) for a, b in zip(part, other)]
            for w in range(threads // 32):  # one partial per warp in shared memory, folded
                start = i32(min(i32(start + part[w * 32]), T)) if lengths_style else max(start, part[w * 32])
        L = i32(min(i32(start + L), T) - start) if lengths_style else max(i32(L - start), 0)
        return start, L, min(acc_n, L)

    def run(self) -> tuple[Counter[int], list[tuple[int, int, int]], dict[int, tuple[int, int, int]]]:
        """(how often each output row is written, the state writes (sequence, token, slot),
        each program's (start, L, slot0))."""
        rows: Counter[int] = Counter()
        writes: list[tuple[int, int, int]] = []
        spans = {}
        for by in range(self.B):
            start, L, acc_n = self.span(by)
            slot0 = self.slot_or_padding(max(min(start + acc_n - 1, self.T - 1), 0)) if self.T else -1
            spans[by] = (start, L, slot0)
            for tt in range(start, start + L):  # stage_chunk / token_step
                self.tokens_read.add(tt)
                rows[tt] += 1
                sl = self.slot_or_padding(tt)
                nxt = -1 if tt + 1 >= start + L else self.slot_or_padding(min(tt + 1, self.T - 1))
                if sl >= 0 and sl != nxt:
                    writes.append((by, tt, sl))
            if by == 0:  # zero_uncovered: the head
                rows.update(range(0, start))
            if by == self.B - 1:  # and the tail
                rows.update(range(start + L, self.T))
        return rows, writes, spans


@st.composite
def some_huge(draw: st.DrawFn, values: list[int]) -> list[int]:
    """``values`` with, in one list of three, up to three elements replaced by values past int32."""
    if values and draw(st.integers(0, 2)) == 0:
        for _ in range(draw(st.integers(1, 3))):
            values[draw(st.integers(0, len(values) - 1))] = draw(HUGE)
    return values


@st.composite
def any_metadata(draw: st.DrawFn) -> dict:
    T = draw(st.integers(0, 8) | st.integers(0, 400))
    B = draw(st.integers(1, 8) | st.integers(129, 160))  # a few sequences, or past one pass of the block
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    pool = draw(st.integers(1, 40))
    width = B + (style == "cu_seqlens")
    small = st.integers(-3, max(2 * T // B, 2) + 3) if style == "lengths" else st.integers(-3, T + 3)
    meta = draw(st.lists(small, min_size=width, max_size=width))
    if style == "cu_seqlens" and draw(st.booleans()):
        meta.sort()  # mostly plausible prefix sums, some not starting at 0 or past T
    meta = draw(some_huge(meta))
    slots = draw(some_huge(draw(st.lists(st.integers(-3, pool + 2), min_size=T, max_size=T))))
    accepted = draw(st.none() | some_huge(draw(st.lists(st.integers(-2, 9), min_size=B, max_size=B))))
    return {"T": T, "S": pool, "style": style, "meta": meta, "slots": slots, "accepted": accepted,
            "threads": draw(st.sampled_from([128, 64]))}


@settings(max_examples=150, deadline=None)
@given(m=any_metadata())
def test_the_kernels_metadata_steps_follow_the_reference_rule_for_any_metadata(m: dict) -> None:
    model = KernelModel(m["style"], m["meta"], m["slots"], m["accepted"], m["T"], m["S"], m["threads"])
    rows, writes, spans = model.run()
    T, S = m["T"], m["S"]
    starts, lengths = clipped_bounds(m["meta"], m["style"], T)
    accepted = None if m["accepted"] is None else clipped_accepted(m["accepted"], lengths)

    assert rows == Counter(range(T)), "an output row written twice or never"
    assert model.tokens_read <= set(range(T))
    for b, (start, L, slot0) in spans.items():
        assert (start, L) == (starts[b], lengths[b])
        if L > 0:
            first = m["slots"][start + (accepted[b] if accepted is not None else 1) - 1]
            assert slot0 == (first if 0 <= first < S else -1)
    # Each slot's final writer within each sequence: the reference writes every covered token's
    # slot in [0, S) (the kernel skips a write the same sequence's next token repeats).
    expected = {}
    for b, (start, n) in enumerate(zip(starts, lengths)):
        for t in range(start, start + n):
            if 0 <= m["slots"][t] < S:
                expected[(b, m["slots"][t])] = t
    assert {(b, sl): t for b, t, sl in writes} == expected


class SpeculativeModel(KernelModel):
    """A speculative program (``RGDRTiling.speculate``): before the span it reads token
    ``by``'s slot (index clamped into ``[0, T)``), stages token ``by`` when ``by < T`` and loads
    the guessed slot's state; it keeps the guess iff the span is ``(by, 1)``, else it runs the
    general path from the span's first slot."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state_reads: set[int] = set()  # pool slots whose state a program loads
        self.hits = 0

    def run(self):
        rows, writes, spans = super().run()
        for by, (start, L, slot0) in spans.items():
            if not self.T:
                continue  # the launcher never launches T = 0
            guess = self.slot_or_padding(min(by, self.T - 1))
            if by < self.T:
                self.tokens_read.add(by)  # the guessed token's inputs, staged before the span
            if guess >= 0:
                self.state_reads.add(guess)
            if start == by and L == 1:  # a hit: the guessed token, slot and state are used
                self.hits += 1
                assert guess == slot0, "a hit whose guessed slot is not the sequence's first slot"
            elif L > 0 and slot0 >= 0:
                self.state_reads.add(slot0)
        return rows, writes, spans


@st.composite
def decode_metadata(draw: st.DrawFn) -> dict:
    """A decode step's metadata (T = B, one token a sequence), perturbed in up to two places,
    so speculative programs hit, miss, or see a layout that only looks like decode."""
    B = draw(st.integers(1, 8) | st.integers(129, 140))
    style = draw(st.sampled_from(["lengths", "cu_seqlens"]))
    meta = [1] * B if style == "lengths" else list(range(B + 1))
    for _ in range(draw(st.integers(0, 2))):
        meta[draw(st.integers(0, len(meta) - 1))] = draw(st.integers(-2, B + 2) | HUGE)
    pool = draw(st.integers(1, B + 4))
    slots = draw(st.lists(st.integers(-2, pool + 1), min_size=B, max_size=B))
    accepted = draw(st.none() | st.lists(st.integers(-2, 3) | HUGE, min_size=B, max_size=B))
    return {"T": B, "S": pool, "style": style, "meta": meta, "slots": slots, "accepted": accepted,
            "threads": draw(st.sampled_from([128, 64]))}


@settings(max_examples=150, deadline=None)
@given(m=decode_metadata() | any_metadata())
def test_a_speculative_program_keeps_its_guess_only_where_the_general_path_would_use_it(m: dict) -> None:
    """On any metadata a speculative program covers the same spans, first slots, output rows and
    slot writes as the general one (a hit's guessed slot is the sequence's first slot whatever
    the accepted count says), reads only tokens inside ``[0, T)`` and loads the state only of
    pool slots some token names."""
    args = (m["style"], m["meta"], m["slots"], m["accepted"], m["T"], m["S"], m["threads"])
    general, spec = KernelModel(*args), SpeculativeModel(*args)
    assert spec.run() == general.run()
    assert spec.tokens_read <= set(range(m["T"]))
    assert spec.state_reads <= {s for s in m["slots"] if 0 <= s < m["S"]}


def test_an_unperturbed_decode_step_is_all_hits() -> None:
    for style, meta in (("lengths", [1] * 9), ("cu_seqlens", list(range(10)))):
        model = SpeculativeModel(style, meta, [3, -1, 0, 7, 2, 1, 4, 6, 5], [2] * 9, 9, 8, 128)
        model.run()
        assert model.hits == 9


def test_saturating_prefix_sums_stay_inside_int32_at_the_largest_lengths() -> None:
    """Lengths of 2**63 - 1 each, over more sequences than one pass of the block: the sum
    saturates at T on every add, so no int32 intermediate passes 2T (the launcher refuses
    T >= 2**30)."""
    T, B = 2**30 - 1, 300
    model = KernelModel("lengths", [2**63 - 1] * B, [0] * 8, None, T, 4, 128)
    assert model.span(0)[:2] == (0, T) and model.span(B - 1)[:2] == (T, 0)


def _launch_path(style: str):
    """The launcher's ``run`` for a small key, its compiled functions stood in for by one that
    must not be called (the cases below never reach a launch)."""

    def unused(*args):
        raise AssertionError("the kernel was launched")

    key = rgdr.RGDRBuildKey("bfloat16", "float32", 2, 4, 128, 32, style)
    schedule = rgdr.default_schedule(key)
    return rgdr._make_run(key, schedule, {t: unused for t in schedule.tilings()}, 4)


def test_zero_sequences_give_every_token_zeros_without_a_launch() -> None:
    run = _launch_path("cu_seqlens")
    T = 3
    q, v = torch.randn(T, 2, 128), torch.randn(T, 4, 32)
    out = torch.full_like(v, float("nan"))
    run(q, q, v, torch.rand(T, 4), torch.randn(5, 4, 32, 128), torch.tensor([2]), torch.arange(T),
        torch.rand(T, 4), out=out)
    assert torch.equal(out, torch.zeros_like(v))


def test_a_call_past_the_int32_token_arithmetic_is_refused_before_launch() -> None:
    limit = rgdr.MAX_TOKENS
    run = _launch_path("lengths")
    q = torch.empty(limit, 2, 128, device="meta")
    v = torch.empty(limit, 4, 32, device="meta")
    with pytest.raises(ValueError, match=f"RGDR TileLang kernel: T={limit} tokens; its int32 token"):
        run(q, q, v, None, None, torch.tensor([limit]), None, None, out=v)


def test_each_call_runs_the_tiling_the_schedule_picks_for_its_counts_repeated_or_not() -> None:
    # The launcher remembers its choice per (sequences, tokens): alternating counts must still
    # each get the schedule's own tiling and split count, every time.
    key = rgdr.RGDRBuildKey("bfloat16", "float32", 2, 4, 128, 128, "lengths")
    schedule = rgdr.default_schedule(key)
    launched: list[tuple[rgdr.RGDRTiling, int]] = []

    def recorder(t: rgdr.RGDRTiling):
        return lambda *args: launched.append((t, args[-1]))

    run = rgdr._make_run(key, schedule, {t: recorder(t) for t in schedule.tilings()}, 4)
    many = schedule.short_from_seqs
    counts = [(1, 1), (schedule.large_from_seqs, schedule.large_from_seqs), (many, many), (many, 3 * many), (1, 1)]
    pool = torch.empty(1, 4, 128, 128, device="meta")
    for B, T in counts + counts:
        q, v = torch.empty(T, 2, 128, device="meta"), torch.empty(T, 4, 128, device="meta")
        run(q, q, v, None, pool, torch.ones(B, dtype=torch.int32), None, None, out=v)
    picked = [schedule.pick(B, T) for B, T in counts + counts]
    assert [t for t, _ in launched] == picked and len(set(picked)) >= 3
    splits = [s for _, s in launched]
    assert splits[:len(counts)] == splits[len(counts):] and all(s >= 1 for s in splits)


def test_a_speculating_schedule_runs_the_speculative_twin_exactly_on_decode_steps() -> None:
    # Calls with as many tokens as sequences run the speculative twin of the size rule's
    # tiling (same split count); any other call runs the tiling itself.
    from dataclasses import replace

    key = rgdr.RGDRBuildKey("bfloat16", "float32", 2, 4, 128, 128, "lengths")
    base = replace(rgdr.default_schedule(key), speculating=frozenset())
    schedule = replace(base, speculating=frozenset({"small", "large", "short"}))
    assert set(schedule.tilings()) == set(base.tilings()) | {replace(t, speculate=True) for t in base.tilings()}
    launched: list[tuple[rgdr.RGDRTiling, int]] = []

    def recorder(t: rgdr.RGDRTiling):
        return lambda *args: launched.append((t, args[-1]))

    run = rgdr._make_run(key, schedule, {t: recorder(t) for t in schedule.tilings()}, 4)
    plain = rgdr._make_run(key, base, {t: recorder(t) for t in base.tilings()}, 4)
    many = base.short_from_seqs
    pool = torch.empty(1, 4, 128, 128, device="meta")
    for B, T in [(1, 1), (1, 2), (many, many), (many, 2 * many), (base.large_from_seqs, base.large_from_seqs)]:
        q, v = torch.empty(T, 2, 128, device="meta"), torch.empty(T, 4, 128, device="meta")
        for r in (run, plain):
            r(q, q, v, None, pool, torch.ones(B, dtype=torch.int32), None, None, out=v)
        (spec, spec_splits), (tiling, splits) = launched[-2:]
        assert spec == replace(tiling, speculate=(T == B)) and spec_splits == splits
        assert not tiling.speculate


@pytest.mark.parametrize("state", ["float32", "bfloat16"])
def test_the_default_schedule_speculates_only_in_the_roles_its_table_lists(state: str) -> None:
    # The H200 measured the speculative twin faster for every fp32 tiling and bf16's small and short
    # ones (bf16's large serves only T_b > 4; NOTES.md): a decode step runs the twin exactly where the
    # role speculates, an MTP step (two tokens a sequence) never does.
    key = rgdr.RGDRBuildKey("bfloat16", state, 16, 32, 128, 128, "lengths")
    schedule = rgdr.default_schedule(key)
    listed = {"float32": {"small", "large", "short"}, "bfloat16": {"small", "short"}}[state]
    assert schedule.speculating == listed
    for B in (1, 2, schedule.large_from_seqs, schedule.short_from_seqs, 256):
        role = schedule.select(B, B, "small", "large", "short")
        decode, mtp = schedule.pick(B, B), schedule.pick(B, 2 * B)
        assert decode.speculate == (role in listed) and not mtp.speculate
        assert decode in schedule.tilings()
