"""Contents checks of packed-sequence metadata, shared by the ops that take it.

RecurrentGatedDeltaRuleFwdOp defined these conventions (RGDR.md, "Contents"): tokens of B
sequences packed along T, ``actual_seq_lengths`` as lengths or cu_seqlens prefix sums, a pool of
state slots where -1 is padding, and no slot written by two sequences. Each check reads tensor
contents on the host (one device sync), so ops run them only with contents checking on.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import fail

__all__ = ["PackedMetadataChecks"]


class PackedMetadataChecks:
    """Mixin of an op with a ``seq_lens_style`` param: the checks, each failing with the op's
    name and the location of the declaration it guards."""

    seq_lens_style: str

    def check_per_token_slots(self, tensors: dict[str, Any], slots_name: str, pool_name: str) -> None:
        """The whole check of an op that writes one pool slot per token (RGDR, conv1d update):
        lengths that tile T, slots in ``[-1, S)`` written by one sequence each, accepted counts in
        ``[1, L_b]``. Absent metadata (a partial call the shape checks already refused) skips it."""
        meta, slots, pool = (tensors.get(n) for n in ("actual_seq_lengths", slots_name, pool_name))
        if meta is None or slots is None or pool is None:
            return
        op, inputs = type(self).__name__, getattr(self, "op_spec")().inputs  # the Op this mixes into
        slots = slots.to("cpu", torch.int64)
        lengths = self.sequence_lengths(op, meta, slots.shape[0], inputs["actual_seq_lengths"].loc)
        self.slots_in_pool(op, slots_name, slots, pool.shape[0], inputs[slots_name].loc)
        owner = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        self.one_writer_per_slot(op, pool_name, slots, owner, inputs[slots_name].loc)
        accepted = tensors.get("num_accepted_tokens")
        if accepted is not None:
            self.accepted_within_lengths(op, accepted, lengths, inputs["num_accepted_tokens"].loc)

    def sequence_lengths(self, op: str, meta: torch.Tensor, T: int, loc: Any,
                         name: str = "actual_seq_lengths") -> torch.Tensor:
        """The ``[B]`` lengths (int64, CPU) from input ``name``; they must be non-negative and sum to
        ``T``. The refusals name the input as the op declares it (found in review: attention
        prefill's ``cu_seqlens`` was refused as ``actual_seq_lengths``)."""
        meta = meta.to("cpu", torch.int64)
        if self.seq_lens_style == "cu_seqlens":
            if meta.numel() == 0 or int(meta[0]) != 0:
                shown = name if name == "cu_seqlens" else f"{name} (cu_seqlens)"
                fail(op, f"{shown} must start at 0, got {meta[:1].tolist()}", loc)
            lengths = meta[1:] - meta[:-1]
        else:
            lengths = meta
        if bool((lengths < 0).any()):
            fail(op, f"{name} gives negative sequence lengths {lengths.tolist()}", loc)
        if int(lengths.sum()) != T:
            fail(op, f"{name} sums to {int(lengths.sum())} tokens, but T={T}", loc)
        return lengths

    @staticmethod
    def slots_in_pool(op: str, name: str, slots: torch.Tensor, pool: int, loc: Any) -> None:
        """Every slot of input ``name`` is -1 (padding) or names one of the pool's ``pool`` slots."""
        bad = (slots < -1) | (slots >= pool)
        if bool(bad.any()):
            fail(op, f"{name} {slots[bad][:8].tolist()} lie outside [-1, {pool})", loc)

    @staticmethod
    def one_writer_per_slot(op: str, pool_name: str, slots: torch.Tensor, owner: torch.Tensor, loc: Any) -> None:
        """Two sequences writing one slot would leave it to the kernel's schedule which one wins."""
        written = slots >= 0
        pairs = torch.unique(torch.stack((slots[written], owner[written]), dim=1), dim=0)
        slot_col = pairs[:, 0]
        clash = torch.nonzero(slot_col[1:] == slot_col[:-1]).flatten()
        if clash.numel():
            i = int(clash[0])
            fail(op, f"sequences {int(pairs[i, 1])} and {int(pairs[i + 1, 1])} both write {pool_name} slot "
                 f"{int(slot_col[i])}", loc)

    @staticmethod
    def accepted_within_lengths(op: str, accepted: torch.Tensor, lengths: torch.Tensor, loc: Any) -> None:
        """Each live sequence accepts between 1 and all of its tokens (speculative decoding)."""
        acc = accepted.to("cpu", torch.int64)
        wrong = (lengths > 0) & ((acc < 1) | (acc > lengths))
        if bool(wrong.any()):
            b = int(torch.nonzero(wrong)[0])
            fail(op, f"num_accepted_tokens[{b}]={int(acc[b])} is outside [1, {int(lengths[b])}]", loc)
