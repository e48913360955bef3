"""Random RGDR calls for the Ascend tests: fp16 tensors, never zeros, fresh per seed."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def make_case(
    lengths,
    *,
    nk=2,
    nv=4,
    dk=32,
    dv=48,
    g=True,
    gk=None,
    accepted=False,
    seq_lens_style="lengths",
    index_dtype=torch.int32,
    extra_slots=5,
    seed=0,
):
    """Keyword arguments for ``prepare_kernel_inputs`` describing one call.

    q and k are l2-normalised (the 310P kernel does no normalisation; callers do it),
    beta in (0, 1), g and gk negative log-decays, the state pool random fp16, and each
    token writes its own slot of a random permutation, so sequences never share slots.
    """
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    slots = t + extra_slots
    case = dict(
        query=F.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).half(),
        key=F.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1).half(),
        value=torch.randn(t, nv, dv, generator=gen).half(),
        beta=torch.sigmoid(torch.randn(t, nv, generator=gen)).half(),
        state=torch.randn(slots, nv, dv, dk, generator=gen).half(),
        ssm_state_indices=torch.randperm(slots, generator=gen)[:t].to(index_dtype),
        g=-torch.rand(t, nv, generator=gen) * 0.5 - 0.01 if g else None,
        gk=None,
        num_accepted_tokens=None,
    )
    if gk == "scalar":
        case["gk"] = -torch.rand(t, nv, generator=gen) * 0.2 - 0.01
    elif gk == "vector":
        case["gk"] = -torch.rand(t, nv, dk, generator=gen) * 0.2 - 0.01
    if accepted:
        case["num_accepted_tokens"] = torch.tensor(
            [1 + int(torch.randint(max(n, 1), (1,), generator=gen)) for n in lengths], dtype=index_dtype
        )
    if seq_lens_style == "cu_seqlens":
        case["actual_seq_lengths"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=index_dtype)
    else:
        case["actual_seq_lengths"] = torch.tensor(lengths, dtype=index_dtype)
    return case
