"""The general reference kernels: PyTorch ops with float32 accumulation, on any device.

Each class implements one core interface, declares ``general = True`` (it serves every
call; specialised kernels beat it) and ``devices = ("*",)`` (PyTorch runs it wherever the
tensors are). ``KERNELS`` is what the plugin registers.

Each kernel has two forms, and :meth:`_Reference.entry_for` picks one per call spec, once
(the plan caches it), never per call:

``fn``, the portable form
    Half-precision inputs are computed in float32 and rounded once at the end, whatever
    the device's own half kernels do.
``direct``, the plain torch call
    What a user would write, with no conversions. It serves calls with no half-precision
    tensor (there it is the same computation as ``fn``), and on the CPU the half dtypes
    listed in ``cpu_half_in_float32``: those whose CPU torch kernel already computes in
    float32 and rounds once, so the conversions of ``fn`` would only cost time (softmax,
    sum, reciprocal and RMSNorm give the same bits; the matmul family and group norm
    differ only in the order of their float32 sums). ``tests/test_reference_forms.py``
    checks both claims. SiluAndMul is the one exception: on the CPU its plain torch call
    serves half precision too, although it rounds twice (after silu, after the product),
    because there the reference stands in for a model's own ``F.silu(gate) * up`` and must
    compute what that computes (see :meth:`RefSiluAndMul.direct_serves`).

Reciprocal has a third form, for integer inputs: promoted to float32 in the same pass.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, ClassVar, overload

import torch
import torch.nn.functional as F

from tileops_core.kernels import CallSpec, KernelEntry
from tileops_core.ops.activation import SiluAndMulKernel
from tileops_core.ops.attention import (
    AttentionDecodeKernel, AttentionPrefillKernel, QKNormRopeKernel, SigmoidGateMulKernel,
)
from tileops_core.ops.conv import CausalConv1dUpdateKernel, CausalConv1dVarlenKernel
from tileops_core.ops.elementwise import ReciprocalKernel
from tileops_core.ops.gated_delta_prefill import ChunkGDRKernel
from tileops_core.ops.gated_delta_net import (
    FusedAddZeroCentredRMSNormKernel, GatedRMSNormKernel, GDNGatingKernel, ZeroCentredRMSNormKernel,
)
from tileops_core.ops.gemm import BmmKernel, GemmKernel, LinearKernel
from tileops_core.ops.linear_attention import RGDRKernel
from tileops_core.ops.mamba import SSDDecodeKernel
from tileops_core.ops.moe import (
    MoEGroupedExpertsKernel, MoEPermuteKernel, MoESharedExpertKernel, MoETopKRoutingKernel, MoEUnpermuteKernel,
)
from tileops_core.ops.normalization import GroupNormKernel, RMSNormKernel
from tileops_core.ops.reduction import SoftmaxKernel, SumKernel

from .attention import attention_decode, attention_prefill, qk_norm_rope, sigmoid_gate_mul
from .conv import causal_conv1d_update, causal_conv1d_varlen
from .chunk_gdr import chunk_gated_delta_rule
from .gated_delta_net import (fused_add_zero_centred_rms_norm, gated_rms_norm, gdn_decay, gdn_gating,
                              zero_centred_rms_norm)
from .moe import moe_grouped_experts, moe_permute, moe_shared_expert, moe_topk_routing, moe_unpermute
from .rgdr import recurrent_gated_delta_rule
from .ssd import ssd_decode

__all__ = ["KERNELS"]

_LOW = (torch.float16, torch.bfloat16)
_HALF_NAMES = frozenset({"float16", "bfloat16"})


@overload
def _acc(t: torch.Tensor) -> torch.Tensor: ...
@overload
def _acc(t: None) -> None: ...
@overload
def _acc(t: torch.Tensor | None) -> torch.Tensor | None: ...


def _acc(t: torch.Tensor | None) -> torch.Tensor | None:
    """Upcast half precision to float32 for accumulation (None stays None)."""
    return t.float() if t is not None and t.dtype in _LOW else t


class _Reference:
    """Declarations shared by every reference kernel, and the choice of its form."""

    devices: ClassVar[tuple[str, ...]] = ("*",)
    supported_archs: ClassVar[tuple[str, ...]] = ("*",)
    general: ClassVar[bool] = True
    #: Each form is a function of its arguments alone: a direct launch records no current call for it.
    reads_current_call: ClassVar[bool] = False

    #: The portable form: half precision computed in float32, rounded once.
    fn: Callable[..., Any]
    #: The plain torch call, for the calls :meth:`direct_serves` (None: always ``fn``).
    direct: Callable[..., Any] | None = None
    #: Half dtypes whose CPU torch kernel computes in float32 and rounds once.
    cpu_half_in_float32: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def launchers(cls) -> dict[str, Callable[..., Any]]:
        """Both forms: each is checked against the interface's launch signature at registration."""
        forms = {"fn": cls.fn, "direct": cls.direct}
        return {name: form for name, form in forms.items() if form is not None}

    @classmethod
    def direct_serves(cls, call: CallSpec) -> bool:
        """Whether the plain torch call serves ``call``: where it computes what the portable form does."""
        halves = _HALF_NAMES.intersection(call.dtypes.values())
        return not halves or (call.device_type == "cpu" and halves <= cls.cpu_half_in_float32)

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        # One build identity per form (PyTorch needs no compilation).
        if cls.direct is not None and cls.direct_serves(call):
            direct = cls.direct
            return KernelEntry(("torch", cls.__name__, "direct"), lambda: direct)
        return KernelEntry(("torch", cls.__name__), lambda: cls.fn)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
              eps: float | None) -> torch.Tensor:
    if eps is None:
        eps = torch.finfo(x.dtype).eps  # PyTorch's default: the input dtype's epsilon
    return F.rms_norm(_acc(x), normalized_shape, _acc(weight), eps).to(x.dtype)


def _rms_norm_direct(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
                     eps: float | None) -> torch.Tensor:
    if eps is None:  # explicit: given None, F.rms_norm on a half input takes float32's epsilon
        eps = torch.finfo(x.dtype).eps
    return F.rms_norm(x, normalized_shape, weight, eps)


class RefRMSNorm(_Reference, RMSNormKernel):
    traceable = True  # plain torch: a compiled graph may inline it (TILEOPS_COMPILE_DECOMPOSE)
    fn = staticmethod(_rms_norm)
    direct = staticmethod(_rms_norm_direct)
    cpu_half_in_float32 = _HALF_NAMES


def _group_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
                eps: float) -> torch.Tensor:
    return F.group_norm(_acc(x), num_groups, _acc(weight), _acc(bias), eps).to(x.dtype)


def _group_norm_direct(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
                       eps: float) -> torch.Tensor:
    return F.group_norm(x, num_groups, weight, bias, eps)


class RefGroupNorm(_Reference, GroupNormKernel):
    fn = staticmethod(_group_norm)
    direct = staticmethod(_group_norm_direct)
    # float16 is left out: its CPU group norm also computes in float32, but slower than
    # converting to float32 first (measured by benchmarks/cpu_fallback.py).
    cpu_half_in_float32 = frozenset({"bfloat16"})


def _softmax(input: torch.Tensor, dim: int, dtype: str | None) -> torch.Tensor:
    dtype = None if dtype is None else getattr(torch, dtype)
    out_dtype = dtype or input.dtype
    src = input.to(out_dtype) if dtype is not None else input
    return torch.softmax(_acc(src), dim).to(out_dtype)


def _softmax_direct(input: torch.Tensor, dim: int, dtype: str | None) -> torch.Tensor:
    """torch's own call (like the portable form, it casts to ``dtype`` first). Its CPU kernel computes a
    16-bit softmax in float32 and rounds once over the last axis only; over another it rounds its
    intermediates (up to 1.4 ulp, found in review), so the portable form serves those."""
    to = None if dtype is None else getattr(torch, dtype)
    if (to or input.dtype) in _LOW and input.dim() and dim % input.dim() != input.dim() - 1:
        return _softmax(input, dim, dtype)
    return torch.softmax(input, dim, dtype=to)


class RefSoftmax(_Reference, SoftmaxKernel):
    fn = staticmethod(_softmax)
    direct = staticmethod(_softmax_direct)
    cpu_half_in_float32 = _HALF_NAMES


def _sum(input: torch.Tensor, dim: Any, keepdim: bool, dtype: str | None) -> torch.Tensor:
    out_dtype = input.dtype if dtype is None else getattr(torch, dtype)
    acc = torch.float64 if out_dtype == torch.float64 else torch.float32
    if dim is None:
        result = torch.sum(input, dtype=acc)
        if keepdim:
            result = result.reshape((1,) * input.dim())
    else:
        result = torch.sum(input, dim=dim, keepdim=keepdim, dtype=acc)
    return result.to(out_dtype)


def _sum_direct(input: torch.Tensor, dim: Any, keepdim: bool, dtype: str | None) -> torch.Tensor:
    to = None if dtype is None else getattr(torch, dtype)
    if dim is None:
        result = torch.sum(input, dtype=to)
        return result.reshape((1,) * input.dim()) if keepdim else result
    return torch.sum(input, dim=dim, keepdim=keepdim, dtype=to)


class RefSum(_Reference, SumKernel):
    fn = staticmethod(_sum)
    direct = staticmethod(_sum_direct)
    cpu_half_in_float32 = _HALF_NAMES

    @classmethod
    def direct_serves(cls, call: CallSpec) -> bool:
        # torch.sum(x, dtype=half) rounds x to half before summing; the portable form does not.
        narrowing = call.dtypes["output"] in _HALF_NAMES and call.dtypes["output"] != call.dtypes["input"]
        return not narrowing and super().direct_serves(call)


def _reciprocal(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    src = input if input.is_floating_point() else input.to(torch.float32)
    result = torch.reciprocal(_acc(src)).to(src.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out


def _reciprocal_direct(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return torch.reciprocal(input) if out is None else torch.reciprocal(input, out=out)


def _reciprocal_of_integers(input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    # torch promotes integers to its default dtype, the spec to float32: the same while they agree.
    if out is None and torch.get_default_dtype() is torch.float32:
        return torch.reciprocal(input)
    if out is None:
        out = torch.empty(input.shape, dtype=torch.float32, device=input.device)
    return torch.reciprocal(input, out=out)


class RefReciprocal(_Reference, ReciprocalKernel):
    fn = staticmethod(_reciprocal)
    direct = staticmethod(_reciprocal_direct)
    cpu_half_in_float32 = _HALF_NAMES

    @classmethod
    def launchers(cls) -> dict[str, Callable[..., Any]]:
        return {**super().launchers(), "integer form": _reciprocal_of_integers}

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        if call.dtypes["input"] != call.dtypes["output"]:  # an integer input, computed in one pass
            return KernelEntry(("torch", cls.__name__, "integer"), lambda: _reciprocal_of_integers)
        return super().entry_for(call)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) · up`` in float32, rounded once to x's dtype (as the CUDA kernel rounds)."""
    gate, up = x.chunk(2, dim=-1)
    return (F.silu(_acc(gate)) * _acc(up)).to(x.dtype)


def _silu_and_mul_direct(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


class RefSiluAndMul(_Reference, SiluAndMulKernel):
    traceable = True  # plain torch: a compiled graph may inline it (TILEOPS_COMPILE_DECOMPOSE)
    fn = staticmethod(_silu_and_mul)
    direct = staticmethod(_silu_and_mul_direct)

    @classmethod
    def direct_serves(cls, call: CallSpec) -> bool:
        """Every CPU call, half precision included, where the plain call rounds twice.

        On the CPU this kernel stands in for the torch code a model already runs (HF's MLPs
        write ``F.silu(gate) * up`` in the input dtype): computing exactly that keeps a patched
        model bit-equal with the unpatched one, and runs torch's native half kernels, which
        the float32 form only reached at 0.72x (float16) and 0.79x (bfloat16) of the speed.
        Off the CPU, half precision keeps the portable form, rounded once like the CUDA kernel.
        """
        return call.device_type == "cpu" or super().direct_serves(call)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(_acc(a), _acc(b)).to(a.dtype)


def _bmm_direct(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)  # a def, not torch.bmm itself: a C function's signature cannot be checked


class RefBmm(_Reference, BmmKernel):
    fn = staticmethod(_bmm)
    direct = staticmethod(_bmm_direct)
    cpu_half_in_float32 = _HALF_NAMES


def _gemm(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool) -> torch.Tensor:
    lhs = _acc(a.t() if trans_a else a)
    rhs = _acc(b.t() if trans_b else b)
    return torch.matmul(lhs, rhs).to(a.dtype)


def _gemm_direct(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool) -> torch.Tensor:
    return torch.matmul(a.t() if trans_a else a, b.t() if trans_b else b)


class RefGemm(_Reference, GemmKernel):
    fn = staticmethod(_gemm)
    direct = staticmethod(_gemm_direct)
    cpu_half_in_float32 = _HALF_NAMES


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(_acc(input), _acc(weight), _acc(bias)).to(input.dtype)


def _linear_direct(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(input, weight, bias)  # a def: a C function's signature cannot be checked


class RefLinear(_Reference, LinearKernel):
    fn = staticmethod(_linear)
    direct = staticmethod(_linear_direct)
    cpu_half_in_float32 = _HALF_NAMES


def _ssd(A: torch.Tensor, dt: torch.Tensor, x: torch.Tensor, B_in: torch.Tensor, C_in: torch.Tensor,
         state: torch.Tensor) -> torch.Tensor:
    return ssd_decode(A, dt, x, B_in, C_in, state, torch.float32)


class RefSSDDecode(_Reference, SSDDecodeKernel):
    fn = staticmethod(_ssd)


def _rgdr(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor, state: torch.Tensor,
          actual_seq_lengths: torch.Tensor, ssm_state_indices: torch.Tensor, g: torch.Tensor | None,
          gk: torch.Tensor | None, num_accepted_tokens: torch.Tensor | None, scale: float | None,
          seq_lens_style: str, use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
    return recurrent_gated_delta_rule(
        query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk, num_accepted_tokens,
        scale=scale, seq_lens_style=seq_lens_style, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        compute_dtype=torch.float32,
    )


def _shape_only_on_meta(fn: Callable[..., Any], like: int | tuple[int, ...]) -> Callable[..., Any]:
    """``fn`` for references that read metadata contents (lengths, slots, positions), which meta
    tensors do not have: on meta inputs the result is the outputs' shapes and dtypes (those of
    argument ``like``, or of each argument of a tuple ``like``, as the spec infers them), nothing
    is computed and no state is written, as a torch meta kernel behaves. It carries ``fn``'s
    signature (``functools.wraps``), which the launch contract checks."""
    first = like if isinstance(like, int) else like[0]

    @functools.wraps(fn)
    def on_any_device(*args: Any) -> Any:
        if args[first].is_meta:
            if isinstance(like, int):
                return torch.empty_like(args[like])
            return tuple(torch.empty_like(args[i]) for i in like)
        return fn(*args)
    return on_any_device


class RefRGDR(_Reference, RGDRKernel):
    fn = staticmethod(_shape_only_on_meta(_rgdr, 2))


def _conv_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, actual_seq_lengths: torch.Tensor,
                 conv_state_indices: torch.Tensor, bias: torch.Tensor | None, num_accepted_tokens: torch.Tensor | None,
                 activation: str | None, seq_lens_style: str) -> torch.Tensor:
    return causal_conv1d_update(x, conv_state, weight, actual_seq_lengths, conv_state_indices, bias,
                                num_accepted_tokens, activation=activation, seq_lens_style=seq_lens_style)


class RefCausalConv1dUpdate(_Reference, CausalConv1dUpdateKernel):
    fn = staticmethod(_shape_only_on_meta(_conv_update, 0))


def _conv_varlen(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, actual_seq_lengths: torch.Tensor,
                 conv_state_indices: torch.Tensor, has_initial_state: torch.Tensor | None, bias: torch.Tensor | None,
                 activation: str | None, seq_lens_style: str) -> torch.Tensor:
    return causal_conv1d_varlen(x, conv_state, weight, actual_seq_lengths, conv_state_indices, has_initial_state,
                                bias, activation=activation, seq_lens_style=seq_lens_style)


class RefCausalConv1dVarlen(_Reference, CausalConv1dVarlenKernel):
    fn = staticmethod(_shape_only_on_meta(_conv_varlen, 0))


def _chunk_gdr(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor, cu_seqlens: torch.Tensor, ssm_state_indices: torch.Tensor,
               has_initial_state: torch.Tensor | None, scale: float | None,
               use_qk_l2norm_in_kernel: bool) -> torch.Tensor:
    return chunk_gated_delta_rule(query, key, value, g, beta, state, cu_seqlens, ssm_state_indices, has_initial_state,
                                  scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)


class RefChunkGDR(_Reference, ChunkGDRKernel):
    fn = staticmethod(_shape_only_on_meta(_chunk_gdr, 2))


class RefZeroCentredRMSNorm(_Reference, ZeroCentredRMSNormKernel):
    fn = staticmethod(zero_centred_rms_norm)


class RefFusedAddZeroCentredRMSNorm(_Reference, FusedAddZeroCentredRMSNormKernel):
    fn = staticmethod(fused_add_zero_centred_rms_norm)


class RefGatedRMSNorm(_Reference, GatedRMSNormKernel):
    fn = staticmethod(gated_rms_norm)


def _gdn_gating_direct(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor,
                       dt_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return gdn_decay(a, A_log, dt_bias), torch.sigmoid(b)


class RefGDNGating(_Reference, GDNGatingKernel):
    fn = staticmethod(gdn_gating)
    direct = staticmethod(_gdn_gating_direct)
    cpu_half_in_float32 = _HALF_NAMES  # only beta is in b's dtype: torch's CPU sigmoid computes it in float32


class RefQKNormRope(_Reference, QKNormRopeKernel):
    fn = staticmethod(_shape_only_on_meta(qk_norm_rope, (0, 1)))


class RefAttentionDecode(_Reference, AttentionDecodeKernel):
    fn = staticmethod(_shape_only_on_meta(attention_decode, 0))


class RefAttentionPrefill(_Reference, AttentionPrefillKernel):
    fn = staticmethod(_shape_only_on_meta(attention_prefill, 0))


class RefSigmoidGateMul(_Reference, SigmoidGateMulKernel):
    fn = staticmethod(sigmoid_gate_mul)


class RefMoETopKRouting(_Reference, MoETopKRoutingKernel):
    fn = staticmethod(moe_topk_routing)


class RefMoEPermute(_Reference, MoEPermuteKernel):
    fn = staticmethod(moe_permute)


class RefMoEGroupedExperts(_Reference, MoEGroupedExpertsKernel):
    fn = staticmethod(moe_grouped_experts)


class RefMoESharedExpert(_Reference, MoESharedExpertKernel):
    fn = staticmethod(moe_shared_expert)


class RefMoEUnpermute(_Reference, MoEUnpermuteKernel):
    fn = staticmethod(moe_unpermute)


KERNELS = (
    RefRMSNorm, RefGroupNorm, RefSoftmax, RefSum, RefReciprocal, RefSiluAndMul, RefBmm, RefGemm, RefLinear,
    RefSSDDecode, RefRGDR, RefCausalConv1dUpdate, RefCausalConv1dVarlen, RefChunkGDR,
    RefZeroCentredRMSNorm, RefFusedAddZeroCentredRMSNorm, RefGatedRMSNorm, RefGDNGating,
    RefQKNormRope, RefAttentionDecode, RefAttentionPrefill, RefSigmoidGateMul,
    RefMoETopKRouting, RefMoEPermute, RefMoEGroupedExperts, RefMoESharedExpert, RefMoEUnpermute,
)
