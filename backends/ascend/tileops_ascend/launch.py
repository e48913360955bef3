"""Launching the 310P RGDR kernel through its PyTorch binding (cannot run on these machines).

Which binding, and why. The launch goes through the custom operator's own binding,
``torch.ops.tileops_ascend.recurrent_gated_delta_rule`` with :data:`BINDING_SCHEMA`:
the ten kernel inputs in the kernel's order (seed 003 §2), ``Tensor(a!) state``
updated in place (the kernel's ``stateOut`` is the same buffer), then the packed
88-byte tiling struct, the block dim and the workspace size that this package's
tiling computed. The binding library (the AscendC kernel of seed 003 built for
``ascend310p`` plus a thin launcher registering that schema) is produced by the
Ascend kernel package and loaded with ``torch.ops.load_library``; it is not shipped
in this repository.

``torch_npu.npu_recurrent_gated_delta_rule`` (and vllm-ascend's
``torch.ops._C_ascend.npu_recurrent_gated_delta_rule``, same schema) was rejected:
it dispatches through aclnn to an op whose *own* host tiling runs inside CANN (the
built-in op targets Atlas A2/A3; the 310P variant uses the upstream tiling of seed
003). Our tiling would then be dead code and the upstream pitfalls live: prefix sums
read as lengths (``cuSeqlensIsPrefix`` hard-coded 0), a scalar ``gk`` dropped next to
``g``, ``scale`` defaulting to 1.0. Its schema also orders ``state`` before ``beta``
and takes the optionals by keyword, a second argument order to keep in sync.

Why a NamedTuple. Seed 003 §6.1: the kernel entry takes ``query, key, value, beta,
state, cuSeqlens, ssmStateIndices, g, gk, numAcceptedTokens`` but aggregates them
into a struct ordered ``..., g, gk, beta, state, ...``; every pointer has the same
type, so a reorder compiles and silently reads the wrong tensor. Here the inputs
are a :class:`KernelInputs` built by keyword only, and its field order *is* the
kernel order (a test compares it with the seed table and with the schema), so the
positional call ``op(*inputs, ...)`` cannot be written in a wrong order.

``torch_npu`` is imported inside :func:`launch` only.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, NamedTuple

import torch

from tileops_core.errors import TileOpsError

from .platform import ASCEND_310P, AscendPlatform
from .refusal import RgdrCall, contents_refusal_reason, refusal_reason
from .tiling import RgdrTiling, compute_tiling

__all__ = [
    "BINDING_NAMESPACE",
    "BINDING_OP",
    "BINDING_SCHEMA",
    "KERNEL_INPUT_ORDER",
    "KernelInputs",
    "RefusedCall",
    "call_binding",
    "describe_call",
    "launch",
    "prepare_kernel_inputs",
    "recurrent_gated_delta_rule_npu",
    "resolve_binding",
    "tiling_for",
]

BINDING_NAMESPACE = "tileops_ascend"
BINDING_OP = "recurrent_gated_delta_rule"
#: The schema the kernel package registers; inputs in seed 003 §2 order, then the plan.
BINDING_SCHEMA = (
    "recurrent_gated_delta_rule(Tensor query, Tensor key, Tensor value, Tensor beta, Tensor(a!) state, "
    "Tensor actual_seq_lengths, Tensor ssm_state_indices, Tensor? g, Tensor? gk, Tensor? num_accepted_tokens, "
    "Tensor tiling, int block_dim, int workspace_bytes) -> Tensor"
)


class KernelInputs(NamedTuple):
    """The ten kernel inputs, fields in the order of seed 003 §2 (``…_def.cpp:23-72``).

    Build it with keywords (:func:`prepare_kernel_inputs`); unpack it positionally
    only into a callee whose parameters follow the same order.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    beta: torch.Tensor
    state: torch.Tensor
    actual_seq_lengths: torch.Tensor
    ssm_state_indices: torch.Tensor
    g: torch.Tensor | None
    gk: torch.Tensor | None
    num_accepted_tokens: torch.Tensor | None


#: The kernel's input order, for tests and for the binding schema.
KERNEL_INPUT_ORDER: tuple[str, ...] = KernelInputs._fields


class RefusedCall(TileOpsError, ValueError):
    """The 310P kernel refuses this call; raised before anything is written, the message says why. A
    TileOpsError, so that the op's call raises it as it is (found in review: the core wrapped it in a
    KernelError, and ``except RefusedCall`` / ``except ValueError``, as documented, caught nothing)."""


def prepare_kernel_inputs(
    *,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    actual_seq_lengths: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    g: torch.Tensor | None = None,
    gk: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    seq_lens_style: str = "lengths",
) -> KernelInputs:
    """Gather the inputs, keyword-only, into the layout the kernel reads.

    Read-only inputs are made contiguous (the kernel addresses GM by dense strides).
    ``state`` must already be contiguous: a copy would receive the in-place update
    instead of the caller's pool. ``num_accepted_tokens`` is cast to int32 because
    the kernel reads it through an ``int32_t`` pointer whatever its dtype (an int64
    tensor would be read as pairs of 32-bit halves).
    """
    if not state.is_contiguous():
        raise ValueError(
            "state must be contiguous: the 310P kernel updates it in place through dense [S, NV, DV, DK] strides, "
            "and a contiguous copy would receive the update instead of the caller's pool"
        )
    accepted = None if num_accepted_tokens is None else _clipped_accepted(num_accepted_tokens, actual_seq_lengths,
                                                                             seq_lens_style)
    return KernelInputs(
        query=query.contiguous(),
        key=key.contiguous(),
        value=value.contiguous(),
        beta=beta.contiguous(),
        state=state,
        actual_seq_lengths=actual_seq_lengths.contiguous(),
        ssm_state_indices=ssm_state_indices.contiguous(),
        g=None if g is None else g.contiguous(),
        gk=None if gk is None else gk.contiguous(),
        num_accepted_tokens=accepted,
    )


def _clipped_accepted(accepted: torch.Tensor, meta: torch.Tensor, seq_lens_style: str) -> torch.Tensor:
    """Each accepted count clipped to ``[1, L_b]`` on the device (no sync), as every backend follows it
    (``tileops_cpu_ref.rgdr.clipped_accepted``; a sequence without tokens keeps its count): the 310P kernel
    instead reads the first token's slot for a count past ``L_b`` (found in review: outputs 0.56 off the
    other backends'). int32: the kernel reads it through an ``int32_t`` pointer whatever its dtype."""
    lengths = (meta[1:] - meta[:-1]) if seq_lens_style == "cu_seqlens" else meta
    lengths = lengths.to(torch.int32)
    counts = accepted.to(torch.int32)
    return torch.where(lengths > 0, torch.minimum(counts.clamp(min=1), lengths), counts).contiguous()


def describe_call(
    inputs: KernelInputs, *, seq_lens_style: str = "lengths", use_qk_l2norm_in_kernel: bool = False
) -> RgdrCall:
    """The plain-value description of a call that :func:`refusal_reason` and the tiling read."""
    q, v, state = inputs.query, inputs.value, inputs.state
    return RgdrCall(
        query_dtype=str(q.dtype),
        key_dtype=str(inputs.key.dtype),
        value_dtype=str(v.dtype),
        beta_dtype=str(inputs.beta.dtype),
        state_dtype=str(state.dtype),
        g_dtype=None if inputs.g is None else str(inputs.g.dtype),
        gk_dtype=None if inputs.gk is None else str(inputs.gk.dtype),
        seq_lens_dtype=str(inputs.actual_seq_lengths.dtype),
        ssm_state_indices_dtype=str(inputs.ssm_state_indices.dtype),
        num_accepted_tokens_dtype=None if inputs.num_accepted_tokens is None else str(inputs.num_accepted_tokens.dtype),
        t=q.shape[0],
        nk=q.shape[1],
        dk=q.shape[2],
        nv=v.shape[1],
        dv=v.shape[2],
        state_slots=state.shape[0],
        seq_lens_len=inputs.actual_seq_lengths.shape[0],
        seq_lens_style=seq_lens_style,
        gk_shape=None if inputs.gk is None else tuple(inputs.gk.shape),
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )


def tiling_for(
    inputs: KernelInputs,
    *,
    scale: float | None = None,
    seq_lens_style: str = "lengths",
    platform: AscendPlatform = ASCEND_310P,
) -> RgdrTiling:
    """The seed-003 tiling for these inputs (shapes and dtypes only; no device access)."""
    call = describe_call(inputs, seq_lens_style=seq_lens_style)
    return compute_tiling(**call.tiling_arguments(), scale=scale, platform=platform)


def call_binding(op: Callable[..., torch.Tensor], inputs: KernelInputs, tiling: RgdrTiling) -> torch.Tensor:
    """Call a binding with :data:`BINDING_SCHEMA`: the ten inputs positionally, then the plan.

    Separate from :func:`launch` so tests can pass a CPU stand-in registered with the
    same schema and check, end to end, that each tensor lands in its slot.
    """
    packed = torch.frombuffer(bytearray(tiling.packed), dtype=torch.uint8)
    return op(*inputs, packed, tiling.block_dim, tiling.workspace_bytes)


@functools.lru_cache(maxsize=256)
def _refusal(call: RgdrCall, platform: AscendPlatform) -> str | None:
    return refusal_reason(call, platform=platform)


@functools.lru_cache(maxsize=256)
def _tiling(call: RgdrCall, scale: float | None, platform: AscendPlatform) -> RgdrTiling:
    return compute_tiling(**call.tiling_arguments(), scale=scale, platform=platform)


def resolve_binding() -> Any:
    """The registered ``torch.ops.tileops_ascend.recurrent_gated_delta_rule``, or a RuntimeError saying how to get it."""
    namespace = getattr(torch.ops, BINDING_NAMESPACE)
    try:
        return getattr(namespace, BINDING_OP)
    except (AttributeError, RuntimeError) as exc:
        raise RuntimeError(
            f"torch.ops.{BINDING_NAMESPACE}.{BINDING_OP} is not registered: build the Ascend 310P RGDR kernel "
            f"package (seed 003 kernel plus a launcher with schema {BINDING_SCHEMA!r}) and load it with "
            "torch.ops.load_library before launching"
        ) from exc


def launch(inputs: KernelInputs, tiling: RgdrTiling) -> torch.Tensor:
    """Launch the kernel on the NPU; returns ``out`` and updates ``inputs.state`` in place.

    Imports ``torch_npu`` (which registers the ``npu`` device) here and nowhere else
    in the package. Never run in this repository's CI: there is no NPU.
    """
    importlib.import_module("torch_npu")
    return call_binding(resolve_binding(), inputs, tiling)


def recurrent_gated_delta_rule_npu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    actual_seq_lengths: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    g: torch.Tensor | None = None,
    gk: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    seq_lens_style: str = "lengths",
    use_qk_l2norm_in_kernel: bool = False,
    check_contents: bool = True,
    platform: AscendPlatform = ASCEND_310P,
    binding: Callable[..., torch.Tensor] | None = None,
) -> torch.Tensor:
    """One RGDR call on a 310P: refuse, guard contents, tile, launch; raises :class:`RefusedCall`.

    ``check_contents`` (default on) reads ``actual_seq_lengths`` and
    ``ssm_state_indices`` back to the host (one device sync) and raises before launch
    if a sequence is longer than ``MAX_MTP``, the sequences do not tile the T tokens, or a
    slot lies outside the pool: the kernel would otherwise stop silently, run past T or
    write outside the state pool. Turn it off only where
    the caller guarantees both (for example vLLM-Ascend's decode metadata).

    ``binding``: an already resolved binding (the built kernel of
    :mod:`tileops_ascend.launcher` resolves it once); None resolves it here through
    :func:`launch`, which imports ``torch_npu``.
    """
    inputs = prepare_kernel_inputs(
        query=query,
        key=key,
        value=value,
        beta=beta,
        state=state,
        actual_seq_lengths=actual_seq_lengths,
        ssm_state_indices=ssm_state_indices,
        g=g,
        gk=gk,
        num_accepted_tokens=num_accepted_tokens,
        seq_lens_style=seq_lens_style,
    )
    call = describe_call(inputs, seq_lens_style=seq_lens_style, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    # Both are pure functions of plain values; a decode loop repeats the same few shapes, so they are cached.
    reason = _refusal(call, platform)
    if reason is not None:
        raise RefusedCall(f"RGDR on {platform.arch} refuses this call: {reason}")
    if call.t == 0:
        # No token: nothing is computed and no slot is written; the kernel is not launched.
        return torch.empty_like(value)
    if check_contents:
        meta = inputs.actual_seq_lengths.reshape(-1)
        values = torch.cat((meta.to(torch.int64), inputs.ssm_state_indices.reshape(-1).to(torch.int64))).tolist()
        reason = contents_refusal_reason(  # (both read in one transfer: one device sync)
            values[: meta.numel()], values[meta.numel():], seq_lens_style=seq_lens_style, platform=platform,
            pool_slots=inputs.state.shape[0], tokens=call.t,
        )
        if reason is not None:
            raise RefusedCall(f"RGDR on {platform.arch} refuses this call: {reason}")
    tiling = _tiling(call, scale, platform)
    if binding is None:
        return launch(inputs, tiling)
    return call_binding(binding, inputs, tiling)
