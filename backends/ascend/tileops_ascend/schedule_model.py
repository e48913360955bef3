"""A CPU model of the 310P RGDR kernel's schedule, driven by the packed tiling alone.

The kernel cannot run here, so this is how the tiling decisions are tested: the model
reads only what the kernel reads (the 22 struct fields and the ten inputs) and walks
the same plan as ``RGDR<half, half>::Process`` in ``recurrent_gated_delta_rule.h``:

* ``workBlockDim = min(B·NV, vectorCoreNum)`` cores; core ``c`` takes work items
  ``(b, h)`` with ``(b·NV + h) % workBlockDim == c``, sequences in order;
* per sequence: ``[seq0, seq1)`` from lengths (running sum) or prefix sums, by the
  ``cuSeqlensIsPrefix`` bit; the initial slot is that of token ``seq0 + accepted - 1``
  when ``num_accepted_tokens[b]`` is in ``[1, L]``, else of ``seq0`` (the kernel's
  fallback); index tensors read as int32 or int64 by the tiling's bits;
* per work item: DV walked in ``vStep``-row slices (``repeat`` passes); each slice of
  the fp16 state is loaded to fp32, then every token of the sequence updates it:
  ``S *= exp(g)``, ``S *= exp(gk)`` (scalar or per column), ``d = (v - S k)·beta``,
  ``S += d kᵀ``, ``out = S (scale·q)``, and the slice is written back to the token's
  slot as fp16 (rows of S are independent, which is what makes slicing exact);
* inputs are fp16, arithmetic fp32 (``q`` is scaled after its fp32 cast, as the kernel
  does), ``out`` fp16.

Running-state precision. RGDR.md specifies that the running state is re-quantised
to fp16 after every token and the output taken from it; that is the default here
(``requantize_running_state=True``). The public kernel source read for this port
keeps the slice in fp32 UB across the tokens of one call and casts only the copy it
writes back (and takes ``out`` from the fp32 slice); ``requantize_running_state=False``
models that. With one token per sequence per call (plain decode) both write the same
fp16 state; only ``out`` differs, by the rounding of the state it is read from.

Where the kernel would go silently wrong (a sequence longer than ``MAX_MTP``: it
returns; a negative slot; index dtypes that disagree with the tiling bits) the
model raises :class:`ScheduleError` instead, naming what the kernel would do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .launch import KernelInputs
from .platform import ASCEND_310P, AscendPlatform
from .tiling import v_slices
from .tiling_struct import RecurrentGatedDeltaRuleTilingData

__all__ = ["ScheduleError", "ScheduleStep", "run_schedule", "work_block_dim"]


class ScheduleError(RuntimeError):
    """The kernel would misbehave silently on these inputs; the message says how."""


@dataclass(frozen=True)
class ScheduleStep:
    """One pass of one work item: core, sequence, head, DV rows ``[v_start, v_start + rows)``, tokens."""

    core: int
    b: int
    h: int
    v_start: int
    rows: int
    tokens: tuple[int, ...]


def work_block_dim(tiling: RecurrentGatedDeltaRuleTilingData) -> int:
    """The kernel's own ``workBlockDim_``: ``min(b·nv, vectorCoreNum)``, 0 → 1."""
    task_units = tiling.b * tiling.nv
    block_dim = task_units if task_units < tiling.vector_core_num else tiling.vector_core_num
    return 1 if block_dim == 0 else block_dim


def _check_index_dtype(name: str, tensor: torch.Tensor, is_int64: int) -> None:
    expected = torch.int64 if is_int64 else torch.int32
    if tensor.dtype != expected:
        raise ScheduleError(
            f"{name} is {tensor.dtype} but the tiling says {expected}: the kernel would read its memory with the "
            "wrong element width"
        )


def _sequence_bounds(cu: list[int], b: int, prefix: bool) -> tuple[int, int]:
    """``(seq0, seq1)`` of sequence ``b`` as ``Process`` computes them (int32 arithmetic)."""
    if prefix:
        return cu[b], cu[b + 1]
    seq0 = sum(cu[:b])
    return seq0, seq0 + cu[b]


def run_schedule(
    inputs: KernelInputs,
    tiling: RecurrentGatedDeltaRuleTilingData,
    *,
    requantize_running_state: bool = True,
    platform: AscendPlatform = ASCEND_310P,
    trace: list[ScheduleStep] | None = None,
) -> torch.Tensor:
    """Execute the kernel's plan on CPU: update ``inputs.state`` in place, return ``out`` (fp16).

    Rows of ``out`` no work item writes stay NaN, so a plan that misses work is visible.
    ``trace``, if given, receives one :class:`ScheduleStep` per pass, in core order.
    """
    td = tiling
    q_all, k_all, v_all, beta_all, state = inputs.query, inputs.key, inputs.value, inputs.beta, inputs.state
    if td.dv == 0:
        return torch.empty_like(v_all)
    _check_index_dtype("actual_seq_lengths", inputs.actual_seq_lengths, td.cu_seqlens_is_int64)
    _check_index_dtype("ssm_state_indices", inputs.ssm_state_indices, td.ssm_state_indices_is_int64)
    if td.has_accepted_tokens:
        if inputs.num_accepted_tokens is None:
            raise ScheduleError("the tiling says num_accepted_tokens is present but it is None")
        _check_index_dtype("num_accepted_tokens", inputs.num_accepted_tokens, 0)
    if (td.has_gama and inputs.g is None) or (td.has_gama_k and inputs.gk is None):
        raise ScheduleError("the tiling says g/gk is present but the tensor is None")
    cu = [int(x) for x in inputs.actual_seq_lengths.tolist()]
    slots = [int(x) for x in inputs.ssm_state_indices.tolist()]
    accepted = ([int(x) for x in inputs.num_accepted_tokens.tolist()]
                if td.has_accepted_tokens and inputs.num_accepted_tokens is not None else [])
    g_flat = inputs.g.reshape(-1) if td.has_gama and inputs.g is not None else None
    gk_flat = inputs.gk.reshape(-1) if td.has_gama_k and inputs.gk is not None else None

    nv, nk, dk = td.nv, td.nk, td.dk
    group = nv // nk
    scale = td.scale  # already float32-rounded, like the kernel's float scale_
    out = torch.full(v_all.shape, math.nan, dtype=v_all.dtype)
    block_dim = work_block_dim(td)
    slices = v_slices(td.dv, td.v_step)

    for core in range(block_dim):
        for b in range(td.b):
            seq0, seq1 = _sequence_bounds(cu, b, bool(td.cu_seqlens_is_prefix))
            length = seq1 - seq0
            if length <= 0:
                continue
            if length > platform.max_mtp:
                raise ScheduleError(
                    f"sequence {b} has {length} tokens > MAX_MTP={platform.max_mtp}: the kernel returns here, "
                    f"leaving core {core}'s remaining work uncomputed"
                )
            if seq0 < 0 or seq1 > td.t:
                raise ScheduleError(f"sequence {b} spans tokens [{seq0}, {seq1}) outside [0, T={td.t}): the kernel returns")
            state_token = seq0
            if td.has_accepted_tokens and 0 < accepted[b] <= length:
                state_token = seq0 + accepted[b] - 1
            tokens = tuple(range(seq0, seq1))
            for t in (state_token, *tokens):
                if slots[t] < 0:
                    raise ScheduleError(
                        f"ssm_state_indices[{t}] = {slots[t]} is negative: the kernel would address outside the pool"
                    )
            for h in range(nv):
                if (b * nv + h) % block_dim != core:
                    continue
                _process_head(
                    out, state, slices, core, b, h, tokens, slots[state_token], slots,
                    q=q_all[seq0:seq1, h // group].float() * scale,
                    k=k_all[seq0:seq1, h // group].float(),
                    v=v_all[seq0:seq1, h].float(),
                    beta=beta_all[seq0:seq1, h].float(),
                    gama=None if g_flat is None else torch.exp(g_flat[[t * nv + h for t in tokens]].float()),
                    gama_k=_gama_k(gk_flat, td, tokens, h, nv, dk),
                    requantize=requantize_running_state,
                    trace=trace,
                )
    return out


def _gama_k(
    gk_flat: torch.Tensor | None,
    td: RecurrentGatedDeltaRuleTilingData,
    tokens: tuple[int, ...],
    h: int,
    nv: int,
    dk: int,
) -> torch.Tensor | None:
    """``exp(gk)`` per token, read at the kernel's flat offsets: ``[L]`` if scalar, ``[L, DK]`` if per column."""
    if gk_flat is None:
        return None
    if td.gama_k_scalar:
        return torch.exp(gk_flat[[t * nv + h for t in tokens]].float())
    rows = [gk_flat[(t * nv + h) * dk : (t * nv + h + 1) * dk] for t in tokens]
    return torch.exp(torch.stack(rows).float())


def _process_head(
    out: torch.Tensor,
    state: torch.Tensor,
    slices: list[tuple[int, int]],
    core: int,
    b: int,
    h: int,
    tokens: tuple[int, ...],
    read_slot: int,
    slots: list[int],
    *,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    gama: torch.Tensor | None,
    gama_k: torch.Tensor | None,
    requantize: bool,
    trace: list[ScheduleStep] | None,
) -> None:
    """``ProcessHead`` + ``ProcessSequenceChunk`` for one work item, all its DV slices."""
    for v_start, rows in slices:
        if trace is not None:
            trace.append(ScheduleStep(core, b, h, v_start, rows, tokens))
        rows_sl = slice(v_start, v_start + rows)
        S = state[read_slot, h, rows_sl, :].float()  # PrefetchState + LoadPrefetchedState
        for i, t in enumerate(tokens):
            if gama is not None:
                S = S * gama[i]
            if gama_k is not None:
                S = S * (gama_k[i] if gama_k.dim() == 1 else gama_k[i].unsqueeze(0))
            memory = S @ k[i]
            delta = (v[i, rows_sl] - memory) * beta[i]
            S = S + delta.unsqueeze(1) * k[i].unsqueeze(0)
            written = S.to(state.dtype)
            if requantize:
                S = written.float()
            out[t, h, rows_sl] = (S @ q[i]).to(out.dtype)
            state[slots[t], h, rows_sl, :] = written
