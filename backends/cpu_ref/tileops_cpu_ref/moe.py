"""Reference kernels of the sparse MoE block (``manifest/moe.yaml``), float32 accumulation.

Written the way the fast torch version is written: no Python loop over tokens, and at decode
sizes as few torch calls as the math needs (each costs about a microsecond there). Routing is one
softmax and one stable sort per call; permuting is one stable sort, one row gather and the
experts' offsets by one ``searchsorted``; the routed experts are two ``torch._grouped_mm`` calls
over the permuted rows where torch takes the operands (on the CPU: float32, bfloat16 and float16
with 16-byte-aligned strides; it rounds each group's float32 accumulator once, exactly like
``F.linear``), else a loop over the experts that have rows; un-permuting gathers every copy at
once and sums the weighted copies in float32, or for large calls loops over the K copies of every
token (K <= a few dozen), each a row gather and a multiply-add into a float32 accumulator.

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

import operator

import torch
import torch.nn.functional as F

__all__ = [
    "moe_topk_routing", "moe_permute", "moe_grouped_experts", "grouped_linear_by_loop", "grouped_mm_takes",
    "moe_shared_expert", "moe_unpermute",
]

_ACC = torch.float32
#: Un-permuting gathers all ``T · K`` rows at once (one float32 ``[T, K, H]`` temporary) up to this
#: many elements; larger calls loop over ``k`` with a ``[T, H]`` temporary.
_GATHER_ALL = 1 << 20


def moe_topk_routing(router_logits: torch.Tensor, top_k: int, renormalize: bool,
                     ids_dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights, topk_ids)``: the ``top_k`` largest of ``softmax(router_logits)`` per row.

    A stable descending sort puts tied probabilities in ascending expert id (``torch.topk`` leaves
    their order unspecified); the values are the same float32 numbers ``torch.topk`` returns.
    """
    probs = torch.softmax(router_logits, dim=-1, dtype=_ACC)
    values, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    values, ids = values[:, :top_k], ids[:, :top_k]
    if renormalize:
        values = values.div_(values.sum(dim=-1, keepdim=True))  # a slice of sort's fresh result
    # Packed, as every backend writes its outputs (found in review: the slices' strides broke Inductor, whose
    # fake of the op is packed).
    return values.to(router_logits.dtype).contiguous(), ids.to(ids_dtype).contiguous()


def _check_range(name: str, values: torch.Tensor, high: int) -> None:
    if not values.numel():
        return
    low, top = (int(v) for v in torch.aminmax(values))
    if low < 0 or top >= high:
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
    flat = topk_ids.reshape(-1)
    _check_range("topk_ids", flat, num_experts)
    ids, order = torch.sort(flat, stable=True)  # row r of permuted holds copy order[r]
    permuted = hidden_states.index_select(0, order // K) if K else hidden_states.new_empty((0, hidden_states.shape[1]))
    # expert e's rows start where the sorted ids first reach e
    offsets = torch.searchsorted(ids, torch.arange(num_experts + 1, dtype=ids.dtype, device=ids.device),
                                 out_int32=True)
    n = order.numel()
    inverse = torch.empty(n, dtype=torch.int32, device=order.device)
    inverse.index_copy_(0, order, torch.arange(n, dtype=torch.int32, device=order.device))
    return permuted, offsets, inverse.view(T, K)


def _host_offsets(expert_offsets: torch.Tensor, rows: int, experts: int) -> list[int]:
    """``expert_offsets`` read on the host, checked: ``E + 1`` entries from 0 to ``rows``, never decreasing."""
    offs = expert_offsets.tolist()
    if len(offs) != experts + 1 or offs[0] != 0 or offs[-1] != rows or any(map(operator.gt, offs, offs[1:])):
        raise ValueError(f"expert_offsets must rise from 0 to {rows} over {experts + 1} entries, got "
                         f"{offs[:8]}{' ...' if len(offs) > 8 else ''}; nothing was written")
    return offs


def grouped_linear_by_loop(x: torch.Tensor, weight: torch.Tensor, offs: list[int],
                           out: torch.Tensor | None = None) -> torch.Tensor:
    """``x[rows of e] @ weight[e].T`` for every expert ``e`` with rows (``offs``: the offsets read on
    the host), each rounded once to x's dtype, into ``out`` (fresh when None): the path for devices
    without ``torch._grouped_mm``. The offsets cover every row, so every row of ``out`` is written."""
    if out is None:
        out = x.new_empty((x.shape[0], weight.shape[1]))
    for e, (lo, hi) in enumerate(zip(offs, offs[1:])):
        if hi > lo:
            out[lo:hi] = F.linear(x[lo:hi].to(_ACC), weight[e].to(_ACC)).to(x.dtype)
    return out


def grouped_mm_takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` runs ``x`` against ``weight[e].T`` here: on the CPU, with rows
    of unit-stride elements, every row stride, the output row and both base addresses a multiple of
    16 bytes (it refuses anything else, e.g. H = 7 or a strided view of every other element)."""
    size = x.element_size()
    strides = (x.stride(0), weight.stride(0), weight.stride(1), weight.shape[1])
    return (x.device.type == "cpu" and hasattr(torch, "_grouped_mm") and x.stride(1) == 1 and weight.stride(2) == 1
            and all(s * size % 16 == 0 for s in strides) and x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0)


def _grouped_linear(x: torch.Tensor, weight: torch.Tensor, offs: list[int], ends: torch.Tensor) -> torch.Tensor:
    """``grouped_linear_by_loop``'s result, through ``torch._grouped_mm`` where it takes the operands
    (one float32 accumulator per output, rounded once: float32 gives the same bits, bfloat16 sums in
    another order, so an element may round to the neighbour); ``ends``: int32 ``offs[1:]`` on x's device."""
    if grouped_mm_takes(x, weight):
        return torch._grouped_mm(x, weight.transpose(1, 2), offs=ends)
    return grouped_linear_by_loop(x, weight, offs)


def _silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` in float32 from the (rounded) GEMM outputs, rounded once (float32 and
    float64 need no conversion)."""
    if gate.dtype in (torch.float32, torch.float64):
        return F.silu(gate) * up
    return F.silu(gate.to(_ACC)).mul_(up).to(gate.dtype)


def moe_grouped_experts(hidden_states: torch.Tensor, expert_offsets: torch.Tensor, gate_up_proj: torch.Tensor,
                        down_proj: torch.Tensor) -> torch.Tensor:
    """Each expert's SwiGLU MLP over its rows of the permuted ``hidden_states``."""
    if expert_offsets.is_meta:
        return torch.empty_like(hidden_states)
    offs = _host_offsets(expert_offsets, hidden_states.shape[0], gate_up_proj.shape[0])
    ends = expert_offsets[1:].to(device=hidden_states.device, dtype=torch.int32)
    x = hidden_states.contiguous()
    act = _silu_and_mul(*_grouped_linear(x, gate_up_proj, offs, ends).chunk(2, dim=-1))
    return _grouped_linear(act, down_proj, offs, ends)


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
    index = permuted_index.to(expert_output.device).reshape(-1)
    _check_range("permuted_index", index, expert_output.shape[0])
    H = expert_output.shape[1]
    weights = topk_weights.to(device=expert_output.device, dtype=_ACC)
    if T * K * H <= _GATHER_ALL:  # every copy gathered at once, weighted and summed over k
        acc = (expert_output.index_select(0, index).view(T, K, H) * weights.unsqueeze(-1)).sum(1)
        if shared_output is not None:
            acc = acc.add_(shared_output)
        return acc.to(expert_output.dtype)
    acc = (torch.zeros((T, H), dtype=_ACC, device=expert_output.device) if shared_output is None
           else shared_output.to(_ACC, copy=True))
    index = index.view(T, K)
    for k in range(K):  # large calls: one [T, H] float32 copy at a time
        acc.addcmul_(expert_output.index_select(0, index[:, k]).to(_ACC), weights[:, k : k + 1])
    return acc.to(expert_output.dtype)
