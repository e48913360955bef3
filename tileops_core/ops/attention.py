"""Full attention of a hybrid model: the q/k norm and rotary embedding, attention over a KV cache
(decode) and over packed prompts (prefill), the sigmoid-gated output; their kernel interfaces,
contents checks and workload generators.

The specs, the cache layouts (vLLM's ``[N, L, NKV, D]``, contiguous or paged) and the rounding
order are in ``manifest/attention.yaml``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ..errors import fail
from ..kernels.interface import KernelInterface, launch_signature
from ..op.base import Op
from ..workloads.generators import Generated, register_generator
from .packed_metadata import PackedMetadataChecks

__all__ = [
    "QKNormRopeKernel", "QKNormRopeFwdOp", "AttentionDecodeKernel", "AttentionDecodeFwdOp",
    "AttentionPrefillKernel", "AttentionPrefillFwdOp", "SigmoidGateMulKernel", "SigmoidGateMulFwdOp",
    "rope_positions_workload", "attention_decode_workload", "attention_prefill_workload",
]


class QKNormRopeKernel(KernelInterface):
    """``kernel(query, key, q_weight, k_weight, positions, rotary_dim, theta, eps, rope_style,
    mrope_section) -> (query_out, key_out)``. Kernels specialise on head counts and size."""

    op = "QKNormRopeFwdOp"
    specialise_on = ("NQ", "NKV", "D")

    @launch_signature
    def launch(query: torch.Tensor, key: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
               positions: torch.Tensor, rotary_dim: int, theta: float, eps: float, rope_style: str,
               mrope_section: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # a declaration: kernels implement it


class QKNormRopeFwdOp(Op):
    """Per-head zero-centred RMSNorm of q and k, then partial rotary embedding (NeoX or Qwen3.5's
    interleaved MRoPE); returns ``(query_out, key_out)``."""

    interfaces = (QKNormRopeKernel,)
    rotary_dim: int  # params: set from the checked values at construction
    theta: float
    eps: float
    rope_style: str
    mrope_section: tuple[int, int, int]

    def __init__(self, rotary_dim: int, theta: float = 10000.0, eps: float = 1e-06, rope_style: str = "neox",
                 mrope_section: tuple[int, int, int] = (11, 11, 10), **options: Any) -> None:
        # a tuple from here on (a list would be shared with the caller), so forward passes it as it is
        # and the call skips forward (one launch of its arguments: tileops_core.op.one_launch)
        super().__init__(rotary_dim=rotary_dim, theta=theta, eps=eps, rope_style=rope_style,
                         mrope_section=tuple(mrope_section) if isinstance(mrope_section, list) else mrope_section,
                         **options)

    def forward(self, query: Any, key: Any, q_weight: Any, k_weight: Any, positions: Any) -> Any:
        return self.launch(QKNormRopeKernel, query, key, q_weight, k_weight, positions, self.rotary_dim, self.theta,
                           self.eps, self.rope_style, self.mrope_section)


class AttentionDecodeKernel(KernelInterface):
    """``kernel(query, key, value, key_cache, value_cache, cache_seqlens, block_table, scale) -> out``;
    writes one key/value per live sequence into the caches (mutated). Kernels specialise on head
    counts and size, never on B or the context."""

    op = "AttentionDecodeFwdOp"
    specialise_on = ("NQ", "NKV", "D")

    @launch_signature
    def launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
               value_cache: torch.Tensor, cache_seqlens: torch.Tensor, block_table: torch.Tensor | None,
               scale: float | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class _KVCacheAttentionOp(Op):
    """The param both attention ops over a KV cache take: the softmax scale (None: ``D ** -0.5``)."""

    abstract = True
    scale: float | None  # a param: set from the checked value at construction

    def __init__(self, scale: float | None = None, **options: Any) -> None:
        super().__init__(scale=scale, **options)


class AttentionDecodeFwdOp(_KVCacheAttentionOp):
    """A GQA decode step over a contiguous or paged KV cache; optionally checks metadata contents."""

    interfaces = (AttentionDecodeKernel,)

    def forward(self, query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cache_seqlens: Any,
                block_table: Any = None) -> Any:
        return self.launch(AttentionDecodeKernel, query, key, value, key_cache, value_cache, cache_seqlens,
                           block_table, self.scale)

    def check_contents(self, **tensors: Any) -> None:
        """Lengths in ``[-1, capacity)``, the blocks a sequence reads inside the cache, and no
        cache slot written by two sequences."""
        seqlens, cache = tensors.get("cache_seqlens"), tensors.get("key_cache")
        if seqlens is None or cache is None:
            return
        op, inputs = type(self).__name__, self.op_spec().inputs
        N, L = cache.shape[0], cache.shape[1]
        lengths = seqlens.to("cpu", torch.int64)
        table = tensors.get("block_table")
        capacity = L if table is None else table.shape[1] * L
        bad = (lengths < -1) | (lengths >= capacity)
        if bool(bad.any()):
            b = int(torch.nonzero(bad)[0])
            fail(op, f"cache_seqlens[{b}]={int(lengths[b])} is outside [-1, {capacity}): the step writes position "
                 "cache_seqlens[b], which must fit the sequence's cache", inputs["cache_seqlens"].loc)
        live = torch.nonzero(lengths >= 0).flatten()
        if table is None:
            return
        table = table.to("cpu", torch.int64)
        needed = torch.arange(table.shape[1]).unsqueeze(0) <= (lengths.clamp(min=0) // L).unsqueeze(1)
        needed[lengths < 0] = False
        outside = needed & ((table < 0) | (table >= N))
        if bool(outside.any()):
            b, j = (int(i) for i in torch.nonzero(outside)[0])
            fail(op, f"block_table[{b}, {j}]={int(table[b, j])} is outside [0, {N}) but sequence {b} reads it",
                 inputs["block_table"].loc)
        slots = table[live, lengths[live] // L] * L + lengths[live] % L
        _one_token_per_slot(op, "sequences", slots, live, inputs["block_table"].loc)


class AttentionPrefillKernel(KernelInterface):
    """``kernel(query, key, value, key_cache, value_cache, cu_seqlens, slot_mapping, scale) -> out``;
    writes every covered token's key/value into the caches (mutated). Kernels specialise on head
    counts and size, never on B or T."""

    op = "AttentionPrefillFwdOp"
    specialise_on = ("NQ", "NKV", "D")

    @launch_signature
    def launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
               value_cache: torch.Tensor, cu_seqlens: torch.Tensor, slot_mapping: torch.Tensor | None,
               scale: float | None) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class AttentionPrefillFwdOp(PackedMetadataChecks, _KVCacheAttentionOp):
    """Varlen causal GQA attention over packed prompts, filling a contiguous or paged KV cache."""

    interfaces = (AttentionPrefillKernel,)
    seq_lens_style = "cu_seqlens"  # what PackedMetadataChecks reads: the metadata is always prefix sums

    def forward(self, query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cu_seqlens: Any,
                slot_mapping: Any = None) -> Any:
        return self.launch(AttentionPrefillKernel, query, key, value, key_cache, value_cache, cu_seqlens,
                           slot_mapping, self.scale)

    def check_contents(self, **tensors: Any) -> None:
        """Prefix sums that tile T; contiguous: every prompt fits its row; paged: slots in
        ``[-1, N · L)``, no slot written by two tokens."""
        meta, query, cache = tensors.get("cu_seqlens"), tensors.get("query"), tensors.get("key_cache")
        if meta is None or query is None or cache is None:
            return
        op, inputs = type(self).__name__, self.op_spec().inputs
        N, L = cache.shape[0], cache.shape[1]
        lengths = self.sequence_lengths(op, meta, query.shape[0], inputs["cu_seqlens"].loc, "cu_seqlens")
        slot_mapping = tensors.get("slot_mapping")
        if slot_mapping is None:
            long = torch.nonzero(lengths > L).flatten()
            if long.numel():
                b = int(long[0])
                fail(op, f"sequence {b} has {int(lengths[b])} tokens, more than the contiguous cache's L={L}",
                     inputs["cu_seqlens"].loc)
            return
        slots = slot_mapping.to("cpu", torch.int64)
        self.slots_in_pool(op, "slot_mapping", slots, N * L, inputs["slot_mapping"].loc)
        written = torch.nonzero(slots >= 0).flatten()
        _one_token_per_slot(op, "tokens", slots[written], written, inputs["slot_mapping"].loc)


def _one_token_per_slot(op: str, what: str, slots: torch.Tensor, owner: torch.Tensor, loc: Any) -> None:
    """Two writers of one cache slot would leave it to the kernel's schedule which one wins."""
    order = torch.argsort(slots, stable=True)
    slots, owner = slots[order], owner[order]
    clash = torch.nonzero(slots[1:] == slots[:-1]).flatten()
    if clash.numel():
        i = int(clash[0])
        fail(op, f"{what} {int(owner[i])} and {int(owner[i + 1])} both write cache slot {int(slots[i])}", loc)


class SigmoidGateMulKernel(KernelInterface):
    """``kernel(attn, gate) -> output`` with ``output = attn · sigmoid(gate)``."""

    op = "SigmoidGateMulFwdOp"
    specialise_on = ("N",)

    @launch_signature
    def launch(attn: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # a declaration: kernels implement it


class SigmoidGateMulFwdOp(Op):
    """The gated attention output ``attn · sigmoid(gate)`` (Qwen3-Next / Qwen3.5), per channel."""

    interfaces = (SigmoidGateMulKernel,)

    def forward(self, attn: Any, gate: Any) -> Any:
        return self.launch(SigmoidGateMulKernel, attn, gate)


# -- workload generators -------------------------------------------------------------------------


def _index_dtype(row: Mapping[str, Any], name: str) -> torch.dtype:
    dtype: torch.dtype = getattr(torch, str(row.get(f"{name}_dtype", "int32")))
    return dtype


@register_generator("rope_positions")
def rope_positions_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """Positions in ``[0, max_position)``: one row (NeoX) or three (MRoPE: temporal, height, width
    drawn independently; ``text_only`` makes them equal, as a text prompt's are)."""
    T, top = int(row["T"]), int(row.get("max_position", 4096))
    rows = 3 if row.get("rope_style", "neox") == "mrope_interleaved" else 1
    positions = torch.randint(top, (rows, T), generator=rng)
    if row.get("text_only"):
        positions = positions[:1].expand(rows, T)
    positions = positions[0] if rows == 1 else positions
    return Generated({}, {"positions": positions.contiguous().to(_index_dtype(row, "positions"))})


@register_generator("attention_decode")
def attention_decode_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A decode batch of ``B`` sequences with room for ``context`` tokens each.

    Each sequence holds ``context - 1`` cached tokens (``full``) or a random count below that;
    the rows in ``padding_rows`` are padding (-1). Contiguous (no ``block_size``): one cache row
    a sequence plus two spare rows. Paged: ``M = ceil(context / block_size)`` distinct blocks a
    sequence drawn from a pool with four spare blocks; table entries past a sequence's last
    block are -1, so a kernel that reads them fails loudly.
    """
    B, context = int(row["B"]), int(row["context"])
    if row.get("full"):
        lengths = torch.full((B,), context - 1, dtype=torch.int64)
    else:
        lengths = torch.randint(context, (B,), generator=rng)
        lengths[0] = context - 1  # one sequence at capacity, so the last position is exercised
    for b in row.get("padding_rows", ()):
        lengths[int(b)] = -1
    tensors: dict[str, Any] = {"cache_seqlens": lengths.to(_index_dtype(row, "cache_seqlens"))}
    if "block_size" not in row:
        return Generated({"B": B, "N": B + 2, "L": context}, tensors)
    L = int(row["block_size"])
    M = -(-context // L)
    N = B * M + 4
    table = torch.randperm(N, generator=rng)[: B * M].view(B, M).clone()
    used = torch.arange(M).unsqueeze(0) <= (lengths.clamp(min=0) // L).unsqueeze(1)
    table[~used] = -1
    tensors["block_table"] = table.to(_index_dtype(row, "block_table"))
    return Generated({"B": B, "N": N, "L": L, "M": M}, tensors)


@register_generator("attention_prefill")
def attention_prefill_workload(row: Mapping[str, Any], rng: torch.Generator) -> Generated:
    """A prefill batch: the ``lengths`` list, or ``tokens`` split evenly over ``B`` prompts.

    Contiguous (no ``block_size``): one cache row a prompt, capacity the longest prompt plus
    three, two spare rows. Paged: each prompt gets its own randomly drawn blocks out of a pool
    with four spare blocks, its tokens the consecutive slots of those blocks; the prompts in
    ``pad_sequences`` get slot -1 for every token.
    """
    if "lengths" in row:
        lengths = [int(n) for n in row["lengths"]]
    else:
        B, tokens = int(row["B"]), int(row["tokens"])
        lengths = [tokens // B + (1 if b < tokens % B else 0) for b in range(B)]
    B, T = len(lengths), sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int64)
    tensors: dict[str, Any] = {"cu_seqlens": cu.to(_index_dtype(row, "cu_seqlens"))}
    if "block_size" not in row:
        return Generated({"B": B, "T": T, "N": B + 2, "L": max(lengths, default=0) + 3}, tensors)
    L = int(row["block_size"])
    blocks_of = [-(-n // L) for n in lengths]
    N = sum(blocks_of) + 4
    pool = torch.randperm(N, generator=rng).tolist()
    slots: list[int] = []
    for b, n in enumerate(lengths):
        mine, pool = pool[: blocks_of[b]], pool[blocks_of[b]:]
        pad = b in set(int(p) for p in row.get("pad_sequences", ()))
        slots.extend(-1 if pad else mine[j // L] * L + j % L for j in range(n))
    tensors["slot_mapping"] = torch.tensor(slots, dtype=torch.int64).to(_index_dtype(row, "slot_mapping"))
    return Generated({"B": B, "T": T, "N": N, "L": L}, tensors)
