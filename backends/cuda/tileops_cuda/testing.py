"""Test seams shared by the GPU tests and the benchmark: random RGDR calls and their checks.

Everything here draws fresh random data (never zeros), poisons outputs with NaN, and
compares against ``tileops_cpu_ref.rgdr.recurrent_gated_delta_rule`` run in float64 (the
reference) and in float32 (the drift that re-quantising a 16-bit state costs anyway).
torch is imported inside the functions so the package stays importable without it.
"""

from __future__ import annotations

import math
from typing import Any

from .kernels.rgdr import RGDRBuildKey

__all__ = ["rgdr_case", "check_rgdr", "rgdr_reference", "rel_err"]


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def rel_err(a: Any, b: Any) -> float:
    """``||a - b|| / ||b||`` in float64 (NaN if either has a NaN)."""
    a64, b64 = a.double(), b.double()
    den = float(b64.norm())
    num = float((a64 - b64).norm())
    return num / den if den > 0 else num


def rgdr_case(
    key: RGDRBuildKey,
    lengths: list[int],
    *,
    device: Any,
    generator: Any = None,
    padding: float = 0.0,
    pad_first_of: int | None = None,
    repeat_slots_of: int | None = None,
    extra_slots: int = 3,
    scale: float | None = None,
) -> dict[str, Any]:
    """A random RGDR call for ``key`` with sequence ``lengths``.

    Each token gets its own slot of a pool of ``T + extra_slots`` (a random permutation,
    so unwritten slots exist); a fraction ``padding`` of tokens gets slot -1, sequence
    ``pad_first_of`` gets a padding first (accepted) slot, and every token of sequence
    ``repeat_slots_of`` writes one slot (the decode pattern that skips repeated writes).
    """
    import torch
    import torch.nn.functional as F

    gen = generator
    # Draw directly on the target device (a workload row's pool is gigabytes); the
    # generator, if given, must live on that device.
    rnd = dict(device=device, generator=gen)
    T = int(sum(lengths))
    B = len(lengths)
    NK, NV, DK, DV = key.num_k_heads, key.num_v_heads, key.head_k_dim, key.head_v_dim
    idt = _torch_dtype(key.input_dtype)
    sdt = _torch_dtype(key.state_dtype)

    q = torch.randn(T, NK, DK, **rnd)
    k = torch.randn(T, NK, DK, **rnd)
    if not key.use_qk_l2norm:
        # Keep the recurrence contractive without in-kernel normalisation (|k| ~ 1).
        k = k / math.sqrt(DK)
    v = torch.randn(T, NV, DV, **rnd)
    beta = torch.rand(T, NV, **rnd)
    state = torch.randn(T + extra_slots, NV, DV, DK, **rnd).to(sdt)
    g = F.logsigmoid(torch.randn(T, NV, **rnd) + 3.0) if key.has_g else None
    if key.gk_form == "scalar":
        gk = F.logsigmoid(torch.randn(T, NV, **rnd) + 3.0)
    elif key.gk_form == "vector":
        gk = F.logsigmoid(torch.randn(T, NV, DK, **rnd) + 3.0)
    else:
        gk = None

    starts = [sum(lengths[:b]) for b in range(B)]
    perm = torch.randperm(T + extra_slots, **rnd).cpu()
    slots = perm[:T].clone()
    if padding > 0 and T:
        pad = torch.rand(T, **rnd).cpu() < padding
        slots[pad] = -1
    accepted = None
    if key.accepted_dtype is not None:
        u = torch.rand(B, **rnd).cpu()
        accepted = torch.tensor([1 + int(u[b] * L) if L > 0 else 1 for b, L in enumerate(lengths)], dtype=torch.int64)
    if repeat_slots_of is not None and lengths[repeat_slots_of] > 0:
        s, L = starts[repeat_slots_of], lengths[repeat_slots_of]
        slots[s : s + L] = slots[s] if slots[s] >= 0 else perm[s]
    if pad_first_of is not None and lengths[pad_first_of] > 0:
        first = starts[pad_first_of] + (int(accepted[pad_first_of]) - 1 if accepted is not None else 0)
        slots[first] = -1

    if key.seq_lens_style == "cu_seqlens":
        meta = torch.tensor([0] + [sum(lengths[: b + 1]) for b in range(B)], dtype=torch.int64)
    else:
        meta = torch.tensor(lengths, dtype=torch.int64)

    def dev(t: Any, dtype: Any = None) -> Any:
        if t is None:
            return None
        return t.to(device=device, dtype=dtype if dtype is not None else t.dtype).contiguous()

    return dict(
        query=dev(q, idt),
        key=dev(k, idt),
        value=dev(v, idt),
        beta=dev(beta, idt),
        state=dev(state, sdt),
        actual_seq_lengths=dev(meta, _torch_dtype(key.seq_lens_dtype)),
        ssm_state_indices=dev(slots, _torch_dtype(key.slot_dtype)),
        g=dev(g, torch.float32),
        gk=dev(gk, torch.float32),
        num_accepted_tokens=None if accepted is None else dev(accepted, _torch_dtype(key.accepted_dtype or "int32")),
        scale=scale,
    )


def rgdr_reference(case: dict[str, Any], key: RGDRBuildKey, compute_dtype: Any) -> tuple[Any, Any]:
    """(out, state) of the reference on a copy of the case's state (the case is not touched)."""
    import torch
    from tileops_cpu_ref.rgdr import recurrent_gated_delta_rule

    state = case["state"].clone()
    out_dtype = torch.float64 if compute_dtype == torch.float64 else case["value"].dtype
    out = torch.empty(case["value"].shape, dtype=out_dtype, device=case["value"].device)
    recurrent_gated_delta_rule(
        case["query"],
        case["key"],
        case["value"],
        case["beta"],
        state,
        case["actual_seq_lengths"],
        case["ssm_state_indices"],
        case["g"],
        case["gk"],
        case["num_accepted_tokens"],
        scale=case["scale"],
        seq_lens_style=key.seq_lens_style,
        use_qk_l2norm_in_kernel=key.use_qk_l2norm,
        compute_dtype=compute_dtype,
        out=out,
    )
    return out, state


def check_rgdr(launcher: Any, case: dict[str, Any]) -> dict[str, Any]:
    """Run ``launcher`` once on ``case`` and judge it against the references.

    Returns the numbers and an ``ok`` flag with ``why`` listing every failed criterion:
    every output element written (NaN poison), slots no token writes bit-identical,
    fp32 state within 1e-5 of float64, 16-bit state within twice the float32 reference's
    own drift (floor 1e-4), outputs within twice the larger of that drift and the output
    dtype's rounding, plus the state tolerance for a 16-bit state (plus 1e-5).
    """
    import torch

    key: RGDRBuildKey = launcher.key
    before = case["state"].clone()
    out = torch.full(case["value"].shape, float("nan"), dtype=case["value"].dtype, device=case["value"].device)
    state = case["state"].clone()
    launcher(
        case["query"],
        case["key"],
        case["value"],
        case["beta"],
        state,
        case["actual_seq_lengths"],
        case["ssm_state_indices"],
        case["g"],
        case["gk"],
        case["num_accepted_tokens"],
        out,
        case["scale"],
    )
    if state.is_cuda:
        torch.cuda.synchronize()
    out64, st64 = rgdr_reference(case, key, torch.float64)
    out32, st32 = rgdr_reference(case, key, torch.float32)

    slots = case["ssm_state_indices"].long()
    written = torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)
    written[slots[slots >= 0]] = True
    res: dict[str, Any] = {}
    why = []
    res["unwritten_outputs"] = int(torch.isnan(out).sum())
    if res["unwritten_outputs"]:
        why.append(f"{res['unwritten_outputs']} output elements left NaN")
    res["untouched_slots_identical"] = bool(torch.equal(state[~written].view(torch.uint8), before[~written].view(torch.uint8)))
    if not res["untouched_slots_identical"]:
        why.append("a slot no token writes changed")
    if bool(written.any()):
        res["state_err"] = rel_err(state[written], st64[written])
        res["state_err_ref32"] = rel_err(st32[written], st64[written])
    else:
        res["state_err"] = res["state_err_ref32"] = 0.0
    res["out_err"] = rel_err(out, out64)
    res["out_err_ref32"] = rel_err(out32, out64)
    res["out_rounding"] = rel_err(out64.to(out.dtype), out64)
    if key.state_dtype == "float32":
        state_tol = 1e-5
    else:
        state_tol = max(2.0 * res["state_err_ref32"], 1e-4)
    # The output is linear in the state: a 16-bit state's rounding flips (bounded by
    # state_tol) carry into the output at the same relative size.
    out_tol = 2.0 * max(res["out_err_ref32"], res["out_rounding"]) + (state_tol if key.state_dtype != "float32" else 0.0) + 1e-5
    res["state_tol"], res["out_tol"] = state_tol, out_tol
    if not res["state_err"] <= state_tol:
        why.append(f"state error {res['state_err']:.3g} > {state_tol:.3g}")
    if not res["out_err"] <= out_tol:
        why.append(f"output error {res['out_err']:.3g} > {out_tol:.3g}")
    res["ok"] = not why
    res["why"] = "; ".join(why)
    return res
