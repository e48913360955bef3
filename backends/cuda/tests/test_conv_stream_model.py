"""The streamed varlen conv program's token logic, modelled step by step in Python, gives the
reference's outputs and pool on the CPU (no GPU needed; ``test_conv_gpu.py`` checks the kernel).

The model below transcribes ``conv_varlen_program``: per chunk of ``C`` tokens (and its
``W - 2`` tokens past the end), the binary search over cu_seqlens as the program reads them
(each entry clipped into ``[0, T]``, then their running maximum: the spec's rule) and the token codes (``-2``
zero, ``-1`` another program's, ``0`` computed, ``b + 1`` sequence ``b`` starts here), the group
flags that send a group to the slow path, the rows loaded per group (zeros past ``T``; past the
chunk only where the token is computed here), the rolling window restarted from the pool at a
sequence's first token, and the final window written there. Every index the program reads is
checked to lie inside its buffer, and every output row to be written exactly once, also under
metadata no caller should pass, which is read as the reference reads it.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate

import pytest
import torch

from tileops_cpu_ref.conv import causal_conv1d_varlen


class StreamModel:
    """One launch of the streamed program over float64 copies of its inputs."""

    def __init__(self, x, pool, weight, bias, cu: list[int], slots: list[int], has_init: list[int] | None,
                 chunk: int, tokens: int) -> None:
        self.x, self.pool, self.weight, self.bias = x.double(), pool.double().clone(), weight.double(), bias
        self.C, self.G = chunk, tokens
        self.T, self.D = x.shape
        # What the search reads: the program's running maximum of its first `threads` clipped entries, the
        # launcher's of the rest (valid prefix sums: themselves).
        self.cu = list(accumulate((min(max(v, 0), self.T) for v in cu), max))
        self.slots, self.has_init = slots, has_init
        self.W1 = weight.shape[1] - 1
        self.out = torch.full((self.T, self.D), float("nan"), dtype=torch.float64)
        self.writes: Counter[int] = Counter()

    def row(self, t: int) -> torch.Tensor:
        assert 0 <= t < self.T, t
        return self.x[t]

    def roles(self, t0: int) -> tuple[list[int], list[int], set[int]]:
        """``(code, ends, groups holding a first token)`` of the chunk at ``t0``: the search phase."""
        C, E, NB, T = self.C, self.W1 - 1, len(self.cu) - 1, self.T
        top = 1 << (NB.bit_length() - 1) if NB > 0 else 0
        code, ends, flagged = [], [], set()
        for jj in range(C + E):
            t, pos, step = t0 + jj, 0, top
            for _ in range(top.bit_length()):
                if pos + step < NB and self.cu[pos + step] <= t:
                    pos += step
                step //= 2
            lo, hi = self.cu[min(pos, NB)], self.cu[min(pos + 1, NB)]
            own = NB > 0 and t < T and lo <= t < hi and lo >= 0
            if not own:
                code.append(-2 if jj < C and t < T else -1)
            elif t - lo >= self.W1:
                code.append(0 if jj < C else -1)
            else:
                code.append((pos + 1 if lo == t else 0) if t0 <= lo < t0 + C else -1)
            ends.append(min(hi, T))
            if own and lo == t:
                flagged.add(jj // self.G)
        return code, ends, flagged

    def first_token(self, b: int, t: int, end: int) -> torch.Tensor:
        """Sequence ``b`` starts at ``t``: its initial window (returned), its final window written."""
        assert 0 <= b < len(self.slots)
        slot, S, W1 = self.slots[b], self.pool.shape[0], self.W1
        valid = 0 <= slot < S
        init_on = self.has_init is not None and valid and self.has_init[b] != 0
        init = self.pool[slot].clone() if init_on else torch.zeros(self.D, W1, dtype=torch.float64)
        if valid:
            final = torch.empty(self.D, W1, dtype=torch.float64)
            for k in range(W1):
                u = end - W1 + k
                if u >= t:
                    final[:, k] = self.row(u)
                else:  # shorter than W - 1: the initial window's tail, read before the write below
                    assert 0 <= W1 + u - t < W1
                    final[:, k] = self.pool[slot, :, W1 + u - t] if init_on else 0
            self.pool[slot] = final
        return init.T.clone()  # tap-major, like the program's window

    def token(self, xw: torch.Tensor, row: torch.Tensor, c: int, t: int, silu: bool) -> torch.Tensor:
        if c >= 0:
            acc = (xw * self.weight[:, : self.W1].T).sum(0) + self.weight[:, self.W1] * row
            if self.bias is not None:
                acc = acc + self.bias.double()
            self.out[t] = acc * torch.sigmoid(acc) if silu else acc
            self.writes[t] += 1
        elif c == -2:
            self.out[t] = 0
            self.writes[t] += 1
        return torch.cat([xw[1:], row[None]])

    def run(self, silu: bool) -> None:
        C, G, E, W1, T = self.C, self.G, self.W1 - 1, self.W1, self.T
        zero = torch.zeros(self.D, dtype=torch.float64)
        for t0 in range(0, T, C):
            code, ends, flagged = self.roles(t0)
            xw = torch.stack([self.row(t0 - W1 + k) if t0 - W1 + k >= 0 else zero for k in range(W1)])
            for g in range(C // G + 1):
                for i in range(G):
                    j, t = g * G + i, t0 + g * G + i
                    c = code[j] if j < C + E else -1
                    if g in flagged:  # the slow path: rows re-read, first tokens handled
                        row = self.row(t) if t < T else zero
                        if c > 0:
                            xw = self.first_token(c - 1, t, ends[j])
                    elif j < C:
                        row = self.row(t) if t < T else zero
                    else:  # past the chunk: only the rows of tokens computed here are loaded
                        row = self.row(t) if i < E and c >= 0 else zero
                    xw = self.token(xw, row, c, t, silu)


def _launch(lengths: list[int], slots: list[int], init: list[int] | None, W: int, chunk: int, tokens: int,
            seed: int, bias: bool = True):
    gen = torch.Generator().manual_seed(seed)
    T, D = sum(lengths), 5
    x, weight = torch.randn(T, D, generator=gen), torch.randn(D, W, generator=gen)
    pool = torch.randn(max(slots) + 2, D, W - 1, generator=gen)
    b = torch.randn(D, generator=gen) if bias else None
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    model = StreamModel(x, pool, weight, b, cu, slots, init, chunk, tokens)
    model.run(silu=True)
    ref_pool = pool.clone()
    ref_out = causal_conv1d_varlen(x, ref_pool, weight, torch.tensor(lengths), torch.tensor(slots),
                                   None if init is None else torch.tensor(init, dtype=torch.bool), b,
                                   activation="silu")
    return model, ref_out, ref_pool


SHAPES = [(4, 6, 3), (4, 8, 4), (4, 3, 3), (2, 4, 1), (5, 8, 4), (3, 12, 4)]  # (W, chunk, tokens)


@pytest.mark.parametrize("W,chunk,tokens", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_short_empty_and_padding_sequences_across_chunks_match_the_reference(W, chunk, tokens, seed):
    gen = torch.Generator().manual_seed(100 + seed)
    lengths = [1, 0, 2, 7, 3, 1, 1, 9, 0, 4, 2, 13, 1, 5]
    order = torch.randperm(len(lengths), generator=gen).tolist()
    lengths = [lengths[i] for i in order]
    slots = torch.randperm(len(lengths) + 3, generator=gen)[: len(lengths)].tolist()
    slots[3] = -1
    init = (torch.rand(len(lengths), generator=gen) < 0.6).int().tolist()
    model, ref_out, ref_pool = _launch(lengths, slots, init, W, chunk, tokens, seed)
    assert all(model.writes[t] == 1 for t in range(model.T))
    assert torch.allclose(model.out, ref_out.double(), rtol=1e-5, atol=1e-5)
    assert torch.equal(model.pool, ref_pool.double())


def test_without_initial_states_the_windows_start_from_zeros():
    model, ref_out, ref_pool = _launch([2, 5, 1, 11], [2, 0, 4, 1], None, 4, 8, 4, 3, bias=False)
    assert torch.allclose(model.out, ref_out.double(), rtol=1e-5, atol=1e-5)
    assert torch.equal(model.pool, ref_pool.double())


#: Prefix sums out of order, negative, past T (over T = 12 tokens).
UNCHECKED_CU = [[0, 2, 2, 5, 6], [3, 1, 9, 4, 40], [-5, 2, 30, -1], [7, 7, 7], [0, 100], [5], [0, 7, 3, 10],
                [2, 2, 9, 1, 11], [-4, 5, 12]]


def _unchecked_model(cu: list[int]) -> tuple[StreamModel, dict]:
    gen = torch.Generator()
    gen.seed()  # fresh data every run
    T, D, W = 12, 3, 4
    B = len(cu) - 1
    inputs = dict(x=torch.randn(T, D, generator=gen), pool=torch.randn(B + 1, D, W - 1, generator=gen),
                  weight=torch.randn(D, W, generator=gen), slots=torch.randperm(B + 1, generator=gen)[:B].tolist(),
                  init=(torch.rand(B, generator=gen) < 0.7).int().tolist())
    model = StreamModel(inputs["x"], inputs["pool"], inputs["weight"], None, cu, inputs["slots"], inputs["init"], 6, 3)
    model.run(silu=True)
    return model, inputs


@pytest.mark.parametrize("cu", UNCHECKED_CU)
def test_unchecked_metadata_writes_every_output_row_once_and_reads_in_bounds(cu):
    """Each row still written once (zero if uncovered)."""
    model, _ = _unchecked_model(cu)
    assert [model.writes[t] for t in range(model.T)] == [1] * model.T
    assert torch.isfinite(model.out).all()


@pytest.mark.parametrize("cu", UNCHECKED_CU)
def test_unchecked_metadata_is_read_as_the_reference_reads_it(cu):
    """The spec's rule (``tileops_cpu_ref.rgdr.clipped_bounds``): a sequence starts at
    ``clip(max(cu[0..b]))``, so a decreasing or negative entry never moves one below an earlier one."""
    model, i = _unchecked_model(cu)
    ref_pool = i["pool"].clone()
    ref_out = causal_conv1d_varlen(i["x"], ref_pool, i["weight"], torch.tensor(cu), torch.tensor(i["slots"]),
                                   torch.tensor(i["init"], dtype=torch.bool), activation="silu",
                                   seq_lens_style="cu_seqlens")
    assert torch.allclose(model.out, ref_out.double(), rtol=1e-5, atol=1e-5)
    assert torch.equal(model.pool, ref_pool.double())


def _searched_prefix_sums(cu: list[int], scan: int, T: int, threads: int, meta_lengths: bool) -> list[int]:
    """What ``conv_varlen_program``'s search reads, as in ``[0, T]`` (a value past ``T`` covers no token):
    its first ``threads`` entries from shared memory (the clipped lengths' sums where ``scan``, else the
    clipped entries, through their running maximum in a cu_seqlens program), the rest clipped as read."""
    def clip(v: int) -> int:
        return min(max(v, 0), T)

    if scan:
        return [clip(v) for v in accumulate((clip(v) for v in cu), initial=0)]
    shared = [clip(v) for v in cu[:threads]]
    if not meta_lengths:
        shared = list(accumulate(shared, max))
    return shared + [clip(v) for v in cu[threads:]]


@pytest.mark.parametrize("B", [10, 70], ids=["in-kernel", "past-threads"])
@pytest.mark.parametrize("meta_lengths", [False, True])
@pytest.mark.parametrize("style", ["lengths", "cu_seqlens"])
def test_the_launcher_and_the_program_search_the_prefix_sums_the_spec_reads(style, meta_lengths, B):
    """The launcher's metadata (on the CPU, the compiled program stood in for) as the program reads
    it: ``cummax(clip(cu))``, the bounds of ``tileops_cpu_ref.rgdr.clipped_bounds``, whichever of the
    launcher (a cummax past the program's threads, clamped lengths' sums) and the program (its scans)
    does the work; 64-bit entries past int32, negative and decreasing ones included."""
    from tileops_cpu_ref.rgdr import clipped_bounds
    from tileops_cuda.kernels import conv1d

    gen = torch.Generator()
    gen.seed()
    T, D, W, threads = 50, 64, 4, 32
    if style == "lengths":
        meta = torch.randint(-1, 3, (B,), generator=gen)
        meta[3], meta[B - 5] = -2**33, 2**33 + 5
    else:
        meta = torch.randint(0, T + 1, (B + 1,), generator=gen).sort().values
        meta[5], meta[8], meta[B - 2], meta[B] = -2**33, meta[8] - 9, 2**33 + 5, T - 3
        meta[B // 2] -= 12  # decreasing past the first 32 entries where B = 70
    key = conv1d.ConvVarlenBuildKey("float32", D, W, True, False, False, "int64", "int32", meta_lengths,
                                    threads=threads)
    seen = []
    run = conv1d._make_varlen_run(key, lambda *args: seen.append(args))
    run(torch.randn(T, D), torch.randn(B, D, W - 1), torch.randn(D, W), meta, torch.arange(B, dtype=torch.int32),
        None, None, "silu", style, torch.empty(T, D))
    cu, scan = seen[0][4].tolist(), seen[0][-1]
    starts, lengths = clipped_bounds(meta.tolist(), style, T)
    assert _searched_prefix_sums(cu, scan, T, threads, meta_lengths) == [*starts, starts[-1] + lengths[-1]]
