"""The TileLang kernels as implementations of the core's kernel interfaces.

Each class maps a call spec onto its kernel's build key (what gets compiled: dtypes, head
and feature sizes, presence flags, the arch; never batch or token counts), refuses what
its kernel was not written for with the kernel's own reason, and builds the launch
function on first use.

Every class declares ``writes_outputs``: the core calls the built function as
``launch(*launch_args, *outs)`` with the op's fresh outputs allocated (contiguous, planned
shape and dtype), and the function writes them. The function is the one launch layer: it
calls the compiled TVM-FFI function directly (:func:`~.kernels._common.direct_entry`), with
everything that depends only on the build (the kernel, defaults, the compiled signature)
bound when it was made. Per call it does only what depends on the call: a contiguity copy
where the interface does not guarantee one (a no-op when already contiguous), a 2-D view
where the kernel's tensor rank differs from the call's. Called without the outputs (a core
that allocates nothing) it allocates them itself, so it serves either contract.

The launch functions take their interface's declared launch signature (``RGDRKernel.launch``,
...) by its names, then the outputs with defaults. Being closures over a build key, they are
checked against it when built (``tileops_core.kernels.contract.check_built``), not at
registration; ``tests/test_cuda_launch_contract.py`` makes each one on the CPU with the compiled
functions stood in for. Call specs are read through the interfaces' typed views where the
core offers one (``RMSNormCall``, ``RGDRCall``).

Nothing here imports tilelang: ``build()`` does, the first time a call needs the kernel.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar

from tileops_core.kernels import CallSpec, KernelEntry
from tileops_core.ops.activation import SiluAndMulKernel
from tileops_core.ops.attention import AttentionDecodeKernel, AttentionPrefillKernel
from tileops_core.ops.conv import CausalConv1dUpdateKernel, CausalConv1dVarlenKernel
from tileops_core.ops.gated_delta_net import (
    FusedAddZeroCentredRMSNormKernel, GatedRMSNormKernel, GDNGatingKernel, ZeroCentredRMSNormKernel,
)
from tileops_core.ops.gemm import BmmKernel, GemmKernel, LinearKernel
from tileops_core.ops.linear_attention import RGDRCall, RGDRKernel
from tileops_core.ops.normalization import GroupNormKernel, RMSNormCall, RMSNormKernel
from tileops_core.ops.reduction import SoftmaxKernel, SumKernel

from .kernels._common import SUPPORTED_ARCHS
from .kernels.attention_decode import DecodeBuildKey, build_attention_decode, decode_refusal
from .kernels.attention_prefill import PrefillBuildKey, build_attention_prefill, prefill_refusal
from .kernels.conv1d import ConvUpdateBuildKey, ConvVarlenBuildKey, build_conv_update, build_conv_varlen, conv_refusal
from .kernels._row_views import head_view, row_view
from .kernels.gated_rmsnorm import GatedRMSNormBuildKey, build_gated_rmsnorm, gated_rmsnorm_refusal
from .kernels.gdn_gating import GDNGatingBuildKey, build_gdn_gating, gdn_gating_refusal
from .kernels.gemm import GemmBuildKey, build_gemm, gemm_refusal
from .kernels.group_norm import GroupNormBuildKey, build_group_norm, group_norm, group_norm_refusal
from .kernels.reduce_sum import reduce_sum, sum_refusal
from .kernels.rgdr import RGDRBuildKey, build_rgdr, rgdr_refusal
from .kernels.rmsnorm import RMSNormBuildKey, build_rmsnorm, rmsnorm_refusal
from .kernels.silu_and_mul import SiluAndMulBuildKey, build_silu_and_mul, silu_and_mul_refusal
from .kernels.softmax import SoftmaxBuildKey, build_softmax, softmax_refusal
from .kernels.zero_centred_rmsnorm import (
    ZeroCentredRMSNormBuildKey, build_zero_centred_rmsnorm, zero_centred_rmsnorm_refusal,
)

__all__ = ["KERNELS"]


class _TileLang:
    """Declarations shared by every TileLang kernel: CUDA devices, the archs written for."""

    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    supported_archs: ClassVar[tuple[str, ...]] = SUPPORTED_ARCHS
    general: ClassVar[bool] = False
    #: The launch functions write the outputs the core allocates (see the module docstring).
    writes_outputs: ClassVar[bool] = True

    @classmethod
    def key(cls, call: CallSpec) -> Any:
        raise NotImplementedError

    @classmethod
    def reason(cls, call: CallSpec, key: Any) -> str | None:
        raise NotImplementedError

    @classmethod
    def launcher(cls, key: Any) -> Callable[..., Any]:
        """Compile (tilelang is imported here) and return the interface-shaped kernel."""
        raise NotImplementedError

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        try:
            key = cls.key(call)
        except ValueError as exc:  # a build key that cannot even be formed names why
            return str(exc)
        return cls.reason(call, key)

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        key = cls.key(call)
        return KernelEntry((cls.__name__, key), lambda: cls.launcher(key))


def _contiguous(t: Any) -> Any:
    return None if t is None else t.contiguous()


def _rows(t: Any, width: int) -> Any:
    """``t`` as ``[rows, width]`` (a view; ``t`` itself when it already is 2-D that way)."""
    return t if t.dim() == 2 and t.shape[1] == width else t.view(-1, width)


class TileLangRMSNorm(_TileLang, RMSNormKernel):
    """RMSNorm over the flattened normalised axes (they are trailing and contiguous)."""

    @classmethod
    def key(cls, call: CallSpec) -> RMSNormBuildKey:
        view = RMSNormCall.of(call)
        return RMSNormBuildKey(view.x_dtype, math.prod(view.normalized_shape), bool(view.has_weight), view.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: RMSNormBuildKey) -> str | None:
        return rmsnorm_refusal(key)

    @classmethod
    def launcher(cls, key: RMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_rmsnorm(key).fn
        eps_default = torch.finfo(getattr(torch, key.dtype)).eps
        hidden = key.hidden
        empty_like = torch.empty_like

        if key.has_weight:

            def rms_norm(x: Any, weight: Any, normalized_shape: Any, eps: float | None, out: Any = None) -> Any:
                x = x.contiguous()
                if out is None:
                    out = empty_like(x)
                w = weight.contiguous()
                fn(_rows(x, hidden), w if w.dim() == 1 else w.view(-1), _rows(out, hidden),
                   eps_default if eps is None else float(eps))  # fmt: skip
                return out

        else:

            def rms_norm(x: Any, weight: Any, normalized_shape: Any, eps: float | None, out: Any = None) -> Any:
                x = x.contiguous()
                if out is None:
                    out = empty_like(x)
                fn(_rows(x, hidden), _rows(out, hidden), eps_default if eps is None else float(eps))
                return out

        return rms_norm


class TileLangSoftmax(_TileLang, SoftmaxKernel):
    """Softmax over the last axis, in the input dtype (fp32 math inside)."""

    @classmethod
    def key(cls, call: CallSpec) -> SoftmaxBuildKey:
        return SoftmaxBuildKey(call.dtypes["input"], int(call.dims["N"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: SoftmaxBuildKey) -> str | None:
        if call.dims["dim"] != -1:
            return (f"Softmax TileLang kernel: dim={call.dims['dim']} is not written as -1 (it serves the last, "
                    "contiguous axis only)")
        if call.flags.get("has_dtype") and call.dtypes["output"] != key.dtype:
            return "Softmax TileLang kernel: dtype= casts the input, which this kernel does not do"
        return softmax_refusal(key)

    @classmethod
    def launcher(cls, key: SoftmaxBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_softmax(key).fn
        length = key.length
        empty_like = torch.empty_like

        def softmax(input: Any, dim: int, dtype: Any, out: Any = None) -> Any:
            input = input.contiguous()
            if out is None:
                out = empty_like(input)
            fn(_rows(input, length), _rows(out, length))
            return out

        return softmax


class TileLangSiluAndMul(_TileLang, SiluAndMulKernel):
    """``silu(x[..., :N]) * x[..., N:]``."""

    @classmethod
    def key(cls, call: CallSpec) -> SiluAndMulBuildKey:
        return SiluAndMulBuildKey(call.dtypes["x"], int(call.dims["N"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: SiluAndMulBuildKey) -> str | None:
        return silu_and_mul_refusal(key)

    @classmethod
    def launcher(cls, key: SiluAndMulBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_silu_and_mul(key).fn
        width = key.width

        def silu_and_mul(x: Any, out: Any = None) -> Any:
            x = x.contiguous()
            if out is None:
                out = torch.empty((*x.shape[:-1], width), dtype=x.dtype, device=x.device)
            fn(_rows(x, 2 * width), _rows(out, width))
            return out

        return silu_and_mul


class TileLangSum(_TileLang, SumKernel):
    """Sums over one run of adjacent axes (or everything), accumulating in float32."""

    @classmethod
    def key(cls, call: CallSpec) -> tuple[str, str, str]:
        return (call.dtypes["input"], call.dtypes["output"], call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: tuple[str, str, str]) -> str | None:
        if not call.dims.get("adjacent", True):
            return "Sum TileLang kernel: the reduced axes are not adjacent; reduce them one run at a time"
        dtype, out_dtype, arch = key
        return sum_refusal(dtype, None, 1, True, arch, out_dtype)

    @classmethod
    def launcher(cls, key: tuple[str, str, str]) -> Callable[..., Any]:
        arch = key[2]

        def total(input: Any, dim: Any, keepdim: bool, dtype: Any, out: Any = None) -> Any:
            dims = None if dim is None else (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,))
            return reduce_sum(input.contiguous(), dims or None, keepdim, dtype, arch, out)

        return total


class TileLangGroupNorm(_TileLang, GroupNormKernel):
    """GroupNorm over ``[N, C, *]``; one build per (channels, groups, spatial size)."""

    @classmethod
    def key(cls, call: CallSpec) -> GroupNormBuildKey:
        return GroupNormBuildKey(call.dtypes["x"], int(call.dims["num_groups"]), int(call.dims["C"]),
                                 int(call.dims["spatial"]), bool(call.flags["has_weight"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GroupNormBuildKey) -> str | None:
        return group_norm_refusal(key)

    @classmethod
    def launcher(cls, key: GroupNormBuildKey) -> Callable[..., Any]:
        build_group_norm(key)  # compile now; the call below finds it cached

        def run(x: Any, weight: Any, bias: Any, num_groups: int, eps: float, out: Any = None) -> Any:
            return group_norm(x.contiguous(), num_groups, _contiguous(weight), _contiguous(bias), eps, key.arch, out)

        return run


def _gemm_key(dtype: str, n: int, k: int, trans_a: bool, trans_b: bool, batched: bool, arch: str) -> GemmBuildKey:
    return GemmBuildKey(dtype, int(n), int(k), bool(trans_a), bool(trans_b), batched, arch)


class TileLangGemm(_TileLang, GemmKernel):
    """fp16/bf16 GEMM with both transpose flags (a wgmma pipeline for sm_90)."""

    @classmethod
    def key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["a"], call.dims["N"], call.dims["K"], call.flags["trans_a"],
                         call.flags["trans_b"], False, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GemmBuildKey) -> str | None:
        return gemm_refusal(key)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gemm(key).fn
        n = key.n

        def gemm(a: Any, b: Any, trans_a: bool, trans_b: bool, out: Any = None) -> Any:
            a, b = a.contiguous(), b.contiguous()
            if out is None:
                out = torch.empty((a.shape[1] if trans_a else a.shape[0], n), dtype=a.dtype, device=a.device)
            fn(a, b, out)
            return out

        return gemm


class TileLangBmm(_TileLang, BmmKernel):
    """The GEMM kernel with a leading batch axis."""

    @classmethod
    def key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["a"], call.dims["N"], call.dims["K"], False, False, True, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GemmBuildKey) -> str | None:
        return gemm_refusal(key)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gemm(key).fn
        n = key.n

        def bmm(a: Any, b: Any, out: Any = None) -> Any:
            a, b = a.contiguous(), b.contiguous()
            if out is None:
                out = torch.empty((a.shape[0], a.shape[1], n), dtype=a.dtype, device=a.device)
            fn(a, b, out)
            return out

        return bmm


class TileLangLinear(_TileLang, LinearKernel):
    """``input @ weight.T`` on the GEMM kernel (weight read transposed); bias added after."""

    @classmethod
    def key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["input"], call.dims["out_features"], call.dims["in_features"], False, True,
                         False, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GemmBuildKey) -> str | None:
        return gemm_refusal(key)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gemm(key).fn
        n, k = key.n, key.k

        def linear(input: Any, weight: Any, bias: Any, out: Any = None) -> Any:
            if out is None:
                out = torch.empty((*input.shape[:-1], n), dtype=input.dtype, device=input.device)
            out2d = _rows(out, n)
            fn(_rows(input.contiguous(), k), weight.contiguous(), out2d)
            if bias is not None:
                out2d += bias
            return out

        return linear


class TileLangRGDR(_TileLang, RGDRKernel):
    """The RGDR decode kernel: one build per dtypes, head sizes and presence flags."""

    @classmethod
    def key(cls, call: CallSpec) -> RGDRBuildKey:
        view = RGDRCall.of(call)
        gk_form = None
        if view.has_gk:
            gk_form = "scalar" if view.gk_tail == () else "vector"
        return RGDRBuildKey(
            input_dtype=view.query_dtype, state_dtype=view.state_dtype, num_k_heads=int(view.num_k_heads),
            num_v_heads=int(view.num_v_heads), head_k_dim=int(view.head_k_dim), head_v_dim=int(view.head_v_dim),
            seq_lens_style=view.seq_lens_style, seq_lens_dtype=view.seq_lens_dtype, slot_dtype=view.slot_dtype,
            accepted_dtype=view.accepted_dtype, has_g=bool(view.has_g), gk_form=gk_form,
            use_qk_l2norm=bool(view.use_qk_l2norm_in_kernel), arch=view.arch,
        )

    @classmethod
    def reason(cls, call: CallSpec, key: RGDRBuildKey) -> str | None:
        return rgdr_refusal(key)

    @classmethod
    def launcher(cls, key: RGDRBuildKey) -> Callable[..., Any]:
        # The launcher's `run` takes exactly this interface's arguments, then `out`; the
        # interface's needs_contiguous means the core already made every tensor contiguous.
        return build_rgdr(key).run


class TileLangCausalConv1dUpdate(_TileLang, CausalConv1dUpdateKernel):
    """The causal conv1d decode kernel: reads a strided ``x`` and the pool in place (see kernels.conv1d)."""

    @classmethod
    def key(cls, call: CallSpec) -> ConvUpdateBuildKey:
        d, f = call.dtypes, call.flags
        return ConvUpdateBuildKey(d["x"], int(call.dims["D"]), int(call.dims["W"]), f["activation"] == "silu",
                                  bool(f["has_bias"]), f["seq_lens_style"], d["actual_seq_lengths"],
                                  d["conv_state_indices"], d.get("num_accepted_tokens"), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: ConvUpdateBuildKey) -> str | None:
        return conv_refusal(key)

    @classmethod
    def launcher(cls, key: ConvUpdateBuildKey) -> Callable[..., Any]:
        return build_conv_update(key).run


class TileLangCausalConv1dVarlen(_TileLang, CausalConv1dVarlenKernel):
    """The causal conv1d prefill kernels (outputs, then final windows)."""

    @classmethod
    def key(cls, call: CallSpec) -> ConvVarlenBuildKey:
        d, f = call.dtypes, call.flags
        # lengths-style metadata reaches the kernels as int64 prefix sums made on the device
        cu_dtype = d["actual_seq_lengths"] if f["seq_lens_style"] == "cu_seqlens" else "int64"
        return ConvVarlenBuildKey(d["x"], int(call.dims["D"]), int(call.dims["W"]), f["activation"] == "silu",
                                  bool(f["has_bias"]), bool(f["has_has_initial_state"]), cu_dtype,
                                  d["conv_state_indices"], call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: ConvVarlenBuildKey) -> str | None:
        return conv_refusal(key)

    @classmethod
    def launcher(cls, key: ConvVarlenBuildKey) -> Callable[..., Any]:
        return build_conv_varlen(key).run
class TileLangZeroCentredRMSNorm(_TileLang, ZeroCentredRMSNormKernel):
    """Zero-centred RMSNorm over the last axis; x is read in place as strided rows where it can be."""

    @classmethod
    def key(cls, call: CallSpec) -> ZeroCentredRMSNormBuildKey:
        return ZeroCentredRMSNormBuildKey(call.dtypes["x"], int(call.dims["N"]), False, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: ZeroCentredRMSNormBuildKey) -> str | None:
        return zero_centred_rmsnorm_refusal(key)

    @classmethod
    def launcher(cls, key: ZeroCentredRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_zero_centred_rmsnorm(key).fn
        hidden = key.hidden

        def zero_centred_rms_norm(x: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            fn(row_view(x, hidden)[0], weight.contiguous(), _rows(out, hidden), float(eps))
            return out

        return zero_centred_rms_norm


class TileLangFusedAddZeroCentredRMSNorm(_TileLang, FusedAddZeroCentredRMSNormKernel):
    """The residual add fused into the zero-centred norm; the residual is written in place (a view
    the kernel cannot read in place is written through a copy, then copied back)."""

    @classmethod
    def key(cls, call: CallSpec) -> ZeroCentredRMSNormBuildKey:
        return ZeroCentredRMSNormBuildKey(call.dtypes["x"], int(call.dims["N"]), True, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: ZeroCentredRMSNormBuildKey) -> str | None:
        return zero_centred_rmsnorm_refusal(key)

    @classmethod
    def launcher(cls, key: ZeroCentredRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_zero_centred_rmsnorm(key).fn
        hidden = key.hidden

        def fused_add_zero_centred_rms_norm(x: Any, residual: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            rows, copied = row_view(residual, hidden)
            fn(row_view(x, hidden)[0], rows, weight.contiguous(), _rows(out, hidden), float(eps))
            if copied:
                residual.copy_(rows.view(residual.shape))
            return out

        return fused_add_zero_centred_rms_norm


class TileLangGatedRMSNorm(_TileLang, GatedRMSNormKernel):
    """RMSNorm per head, weight, SiLU gate; x and the gate are read in place as [outer, heads, D]."""

    @classmethod
    def key(cls, call: CallSpec) -> GatedRMSNormBuildKey:
        return GatedRMSNormBuildKey(call.dtypes["x"], int(call.dims["D"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GatedRMSNormBuildKey) -> str | None:
        return gated_rmsnorm_refusal(key)

    @classmethod
    def launcher(cls, key: GatedRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gated_rmsnorm(key).fn
        width = key.width

        def gated_rms_norm(x: Any, gate: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            x3 = head_view(x, width)[0]
            fn(x3, head_view(gate, width)[0], weight.contiguous(), out.view(x3.shape), float(eps))
            return out

        return gated_rms_norm


class TileLangGDNGating(_TileLang, GDNGatingKernel):
    """g and beta from the a/b projections; a and b are read in place as strided rows."""

    @classmethod
    def key(cls, call: CallSpec) -> GDNGatingBuildKey:
        d = call.dtypes
        return GDNGatingBuildKey(d["a"], d["A_log"], d["dt_bias"], int(call.dims["NV"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: GDNGatingBuildKey) -> str | None:
        return gdn_gating_refusal(key)

    @classmethod
    def launcher(cls, key: GDNGatingBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gdn_gating(key).fn
        heads = key.heads

        def gdn_gating(a: Any, b: Any, A_log: Any, dt_bias: Any, g: Any = None, beta: Any = None) -> Any:
            if g is None:
                g = torch.empty(a.shape, dtype=torch.float32, device=a.device)
            if beta is None:
                beta = torch.empty(b.shape, dtype=b.dtype, device=b.device)
            fn(row_view(a, heads)[0], row_view(b, heads)[0], A_log.contiguous(), dt_bias.contiguous(),
               _rows(g, heads), _rows(beta, heads))
            return g, beta

        return gdn_gating


class TileLangAttentionDecode(_TileLang, AttentionDecodeKernel):
    """GQA decode over a contiguous or paged KV cache: split across programs, then combined."""

    @classmethod
    def key(cls, call: CallSpec) -> DecodeBuildKey:
        d, paged = call.dtypes, bool(call.flags.get("has_block_table"))
        return DecodeBuildKey(d["query"], int(call.dims["NQ"]), int(call.dims["NKV"]), int(call.dims["D"]), paged,
                              d["cache_seqlens"], d["block_table"] if paged else None, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: DecodeBuildKey) -> str | None:
        return decode_refusal(key)

    @classmethod
    def launcher(cls, key: DecodeBuildKey) -> Callable[..., Any]:
        return build_attention_decode(key).run


class TileLangAttentionPrefill(_TileLang, AttentionPrefillKernel):
    """Causal varlen GQA prefill (flash attention forward) writing a contiguous or paged KV cache."""

    @classmethod
    def key(cls, call: CallSpec) -> PrefillBuildKey:
        d, paged = call.dtypes, bool(call.flags.get("has_slot_mapping"))
        return PrefillBuildKey(d["query"], int(call.dims["NQ"]), int(call.dims["NKV"]), int(call.dims["D"]), paged,
                               d["cu_seqlens"], d["slot_mapping"] if paged else None, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: PrefillBuildKey) -> str | None:
        return prefill_refusal(key)

    @classmethod
    def launcher(cls, key: PrefillBuildKey) -> Callable[..., Any]:
        return build_attention_prefill(key).run


KERNELS = (
    TileLangRMSNorm, TileLangSoftmax, TileLangSiluAndMul, TileLangSum, TileLangGroupNorm, TileLangGemm, TileLangBmm,
    TileLangLinear, TileLangRGDR, TileLangCausalConv1dUpdate, TileLangCausalConv1dVarlen,
    TileLangZeroCentredRMSNorm, TileLangFusedAddZeroCentredRMSNorm,
    TileLangGatedRMSNorm, TileLangGDNGating,
    TileLangAttentionDecode, TileLangAttentionPrefill,
)

