"""Reference kernels of the sparse MoE block (``manifest/moe.yaml``), float32 accumulation.

Written the way the fast torch version is written: no Python loop over tokens. Routing is one
softmax and one stable sort per call; permuting is one stable argsort and one row gather; the
routed experts are two ``torch._grouped_mm`` calls over the permuted rows where torch takes the
operands (on the CPU: float32, bfloat16 and float16 with 16-byte-aligned strides; it rounds each
group's float32 accumulator once, exactly like ``F.linear``), else a loop over the experts that
have rows;
un-permuting is a loop over the K copies of every token (K <= a few dozen), each a row gather and
a fused multiply-add into a float32 accumulator.

Rounding follows HF's Qwen3-Next modules where the spec says so: the router's float32 softmax,
top-k and renormalisation are HF's own operations, so its weights have HF's bits; every GEMM
output is rounded to the input dtype as ``F.linear`` rounds it, and the SiLU product (and the
shared expert's sigmoid gate) are formed in float32 and rounded once each.

Index contents (expert ids, offsets, the inverse map) are read on the host before anything is
written; a value outside its range raises ``ValueError`` and writes nothing. Meta tensors have
no contents: on them the kernels that read indices return outputs of the inferred shapes and
compute nothing, as a torch meta kernel does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "moe_topk_routing", "moe_permute", "moe_grouped_experts", "grouped_linear_by_loop", "grouped_mm_takes",
    "moe_shared_expert", "moe_unpermute",
]

_ACC = torch.float32


def moe_topk_routing(router_logits: torch.Tensor, top_k: int, renormalize: bool,
                     ids_dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights, topk_ids)``: the ``top_k`` largest of ``softmax(router_logits)`` per row.

    A stable descending sort puts tied probabilities in ascending expert id (``torch.topk`` leaves
    their order unspecified); the values are the same float32 numbers ``torch.topk`` returns.
    """
    probs = torch.softmax(router_logits.to(_ACC), dim=-1)
    values, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    values, ids = values[:, :top_k], ids[:, :top_k]
    if renormalize:
        values = values / values.sum(dim=-1, keepdim=True)
    return values.to(router_logits.dtype), ids.to(ids_dtype)


def _check_range(name: str, values: torch.Tensor, high: int) -> None:
    if values.numel() and (int(values.min()) < 0 or int(values.max()) >= high):
        bad = values[(values < 0) | (values >= high)][:8].tolist()
        raise ValueError(f"{name} {bad} lie outside [0, {high}); nothing was written")


def moe_permute(hidden_states: torch.Tensor, topk_ids: torch.Tensor,
                num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(permuted, expert_offsets, permuted_index)``: copy ``t * K + k`` of token ``t`` goes to row
    ``permuted_index[t, k]``, rows grouped by ascending expert id, stable within an expert."""
    T, K = topk_ids.shape
    if topk_ids.is_meta:
        return (hidden_states.new_empty((T * K, hidden_states.shape[1])),
                topk_ids.new_empty(num_experts + 1, dtype=torch.int32), topk_ids.new_empty((T, K), dtype=torch.int32))
    flat = topk_ids.reshape(-1).to(torch.int64)
    _check_range("topk_ids", flat, num_experts)
    order = torch.argsort(flat, stable=True)  # row r of permuted holds copy order[r]
    permuted = hidden_states.index_select(0, order // K) if K else hidden_states.new_empty((0, hidden_states.shape[1]))
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32, device=topk_ids.device)
    offsets[1:] = torch.cumsum(torch.bincount(flat, minlength=num_experts), 0)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return permuted, offsets, inverse.view(T, K).to(torch.int32)


def _host_offsets(expert_offsets: torch.Tensor, rows: int, experts: int) -> torch.Tensor:
    """``expert_offsets`` as int64 on the host, checked: ``E + 1`` entries from 0 to ``rows``, never decreasing."""
    offs = expert_offsets.to("cpu", torch.int64)
    if offs.numel() != experts + 1 or int(offs[0]) != 0 or int(offs[-1]) != rows or bool((offs.diff() < 0).any()):
        raise ValueError(f"expert_offsets must rise from 0 to {rows} over {experts + 1} entries, got "
                         f"{offs[:8].tolist()}{' ...' if offs.numel() > 8 else ''}; nothing was written")
    return offs


def grouped_linear_by_loop(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    """``x[rows of e] @ weight[e].T`` for every expert ``e`` with rows (``offs``: host int64 offsets),
    each rounded once to x's dtype, into ``out`` (fresh when None): the path for devices without
    ``torch._grouped_mm``. The offsets cover every row, so every row of ``out`` is written."""
    if out is None:
        out = x.new_empty((x.shape[0], weight.shape[1]))
    for e in torch.nonzero(offs.diff() > 0).flatten().tolist():
        lo, hi = int(offs[e]), int(offs[e + 1])
        out[lo:hi] = F.linear(x[lo:hi].to(_ACC), weight[e].to(_ACC)).to(x.dtype)
    return out


def grouped_mm_takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` runs ``x`` against ``weight[e].T`` here: on the CPU, with
    every row stride, the output row and both base addresses a multiple of 16 bytes (it
    refuses anything else, e.g. H = 7)."""
    size = x.element_size()
    strides = (x.stride(0), weight.stride(0), weight.stride(1), weight.shape[1])
    return (x.device.type == "cpu" and hasattr(torch, "_grouped_mm") and all(s * size % 16 == 0 for s in strides)
            and x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0)


def _grouped_linear(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``grouped_linear_by_loop``'s result, through ``torch._grouped_mm`` where it takes the operands
    (same bits: one float32 accumulator per output, rounded once)."""
    if grouped_mm_takes(x, weight):
        ends = offs[1:].to(device=x.device, dtype=torch.int32)
        return torch._grouped_mm(x, weight.transpose(1, 2), offs=ends)
    return grouped_linear_by_loop(x, weight, offs)


def _silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` in float32 from the (rounded) GEMM outputs, rounded once."""
    return (F.silu(gate.to(_ACC)) * up.to(_ACC)).to(gate.dtype)


def moe_grouped_experts(hidden_states: torch.Tensor, expert_offsets: torch.Tensor, gate_up_proj: torch.Tensor,
                        down_proj: torch.Tensor) -> torch.Tensor:
    """Each expert's SwiGLU MLP over its rows of the permuted ``hidden_states``."""
    if expert_offsets.is_meta:
        return torch.empty_like(hidden_states)
    offs = _host_offsets(expert_offsets, hidden_states.shape[0], gate_up_proj.shape[0])
    x = hidden_states.contiguous()
    act = _silu_and_mul(*_grouped_linear(x, gate_up_proj, offs).chunk(2, dim=-1))
    return _grouped_linear(act, down_proj, offs)


def moe_shared_expert(x: torch.Tensor, gate_proj: torch.Tensor, up_proj: torch.Tensor, down_proj: torch.Tensor,
                      expert_gate: torch.Tensor | None) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))``, times ``sigmoid(expert_gate(x))`` when it is given."""
    act = _silu_and_mul(F.linear(x, gate_proj), F.linear(x, up_proj))
    out = F.linear(act, down_proj)
    if expert_gate is None:
        return out
    gate = torch.sigmoid(F.linear(x, expert_gate).to(_ACC))
    return (out.to(_ACC) * gate).to(x.dtype)


def moe_unpermute(expert_output: torch.Tensor, permuted_index: torch.Tensor, topk_weights: torch.Tensor,
                  shared_output: torch.Tensor | None) -> torch.Tensor:
    """``shared_output[t] + sum_k topk_weights[t, k] * expert_output[permuted_index[t, k]]`` in float32,
    in k order, rounded once."""
    T, K = permuted_index.shape
    if permuted_index.is_meta:
        return expert_output.new_empty((T, expert_output.shape[1]))
    index = permuted_index.to(device=expert_output.device, dtype=torch.int64)
    _check_range("permuted_index", index, expert_output.shape[0])
    H = expert_output.shape[1]
    acc = (torch.zeros((T, H), dtype=_ACC, device=expert_output.device) if shared_output is None
           else shared_output.to(_ACC, copy=True))
    weights = topk_weights.to(device=expert_output.device, dtype=_ACC)
    for k in range(K):
        acc.addcmul_(expert_output.index_select(0, index[:, k]).to(_ACC), weights[:, k : k + 1])
    return acc.to(expert_output.dtype)
