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
bound when it was made. Per call it does only what depends on the call: a packed copy of an
input the program reads in 16-byte vectors where it is not contiguous or not 16-byte aligned
(the interfaces that declare contiguity get the core's copy only of a non-contiguous input;
``kernels._row_views`` says why the test is in line), a 2-D view where the kernel's tensor
rank differs from the call's. Called without the outputs (a core that allocates nothing) it
allocates them itself, so it serves either contract.

The launch functions take their interface's declared launch signature (``RGDRKernel.launch``,
...) by its names, then the outputs with defaults. Being closures over a build key, they are
checked against it when built (``tileops_core.kernels.contract.check_built``), not at
registration; ``tests/test_cuda_launch_contract.py`` makes each one on the CPU with the compiled
functions stood in for. Call specs are read through the interfaces' typed views where the
core offers one (``RMSNormCall``, ``RGDRCall``).

Nothing here imports tilelang: ``build()`` does, the first time a call needs the kernel.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from tileops_core.kernels import CallSpec
from tileops_core.ops.activation import SiluAndMulKernel
from tileops_core.ops.conv import CausalConv1dUpdateKernel, CausalConv1dVarlenKernel
from tileops_core.ops.gated_delta_net import (
    FusedAddZeroCentredRMSNormKernel, GatedRMSNormKernel, GDNGatingKernel, ZeroCentredRMSNormKernel,
)
from tileops_core.ops.gemm import BmmKernel, GemmKernel, LinearKernel
from tileops_core.ops.linear_attention import RGDRCall, RGDRKernel
from tileops_core.ops.normalization import GroupNormKernel, RMSNormCall, RMSNormKernel
from tileops_core.ops.reduction import SoftmaxKernel, SumKernel

from ._tilelang_impl import TileLangImpl, rows_of
from .kernels.conv1d import (ConvUpdateBuildKey, ConvVarlenBuildKey, build_conv_update, build_conv_varlen, conv_refusal,
                             fitted_to_width, with_start_order, with_tanh_silu)
from .kernels._common import ELEM_BYTES, GRID_YZ_MAX
from .kernels._row_views import head_view, packed, row_view
from .kernels.block_shapes import with_block_shape
from .kernels.gated_rmsnorm import GatedRMSNormBuildKey, build_gated_rmsnorm, gated_rmsnorm_refusal
from .kernels.gdn_gating import GDNGatingBuildKey, build_gdn_gating, gdn_gating_refusal
from .kernels.gemm import GemmBuildKey, build_gemm, gemm_refusal
from .kernels.group_norm import GroupNormBuildKey, build_group_norm, group_norm_refusal
from .kernels.reduce_sum import sum_launch, sum_refusal
from .kernels.rgdr import RGDRBuildKey, build_rgdr, rgdr_refusal
from .kernels.rmsnorm import RMSNormBuildKey, build_rmsnorm, rmsnorm_refusal
from .kernels.linear import DECODE_GEMM_ROWS, build_linear_kernels
from .kernels.silu_and_mul import SiluAndMulBuildKey, build_silu_and_mul, silu_and_mul_refusal
from .kernels.softmax import SoftmaxBuildKey, build_softmax, softmax_refusal
from .kernels.zero_centred_rmsnorm import (
    ZeroCentredRMSNormBuildKey, build_zero_centred_rmsnorm, zero_centred_rmsnorm_refusal,
)

from .registered_model import (
    TileLangAttentionDecode, TileLangAttentionPrefill, TileLangChunkGDR, TileLangMoEGroupedExperts, TileLangMoEPermute,
    TileLangMoESharedExpert, TileLangMoETopKRouting, TileLangMoEUnpermute, TileLangQKNormRope, TileLangSigmoidGateMul,
)

__all__ = ["KERNELS"]


class TileLangRMSNorm(TileLangImpl, RMSNormKernel):
    """RMSNorm over the flattened normalised axes (they are trailing; the interface's
    ``needs_contiguous`` has the core pass x and weight contiguous, so a launch copies only one
    at a misaligned start and views them as rows)."""

    refuse_key = staticmethod(rmsnorm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> RMSNormBuildKey:
        view = RMSNormCall.of(call)
        return RMSNormBuildKey(view.x_dtype, math.prod(view.normalized_shape), bool(view.has_weight), view.arch)

    @classmethod
    def launcher(cls, key: RMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_rmsnorm(key).fn
        eps_default = torch.finfo(getattr(torch, key.dtype)).eps  # eps=None: the dtype's epsilon, as torch
        hidden = key.hidden
        empty_like = torch.empty_like

        # eps is the op's param, already a float (params are normalised when the op is made).
        if key.has_weight:

            def rms_norm(x: Any, weight: Any, normalized_shape: Any, eps: float | None, out: Any = None) -> Any:
                if (x.data_ptr() | weight.data_ptr()) % 16:  # (one test for the common call, both aligned)
                    x = x if x.data_ptr() % 16 == 0 else packed(x)
                    weight = weight if weight.data_ptr() % 16 == 0 else packed(weight)
                if out is None:
                    out = empty_like(x)
                rows = x.dim() == 2 and x.shape[1] == hidden  # (a decode step's [M, hidden]: as they are, no view)
                fn(x if rows else rows_of(x, hidden), weight if weight.dim() == 1 else weight.view(-1),
                   out if rows else rows_of(out, hidden), eps_default if eps is None else eps)  # fmt: skip
                return out

        else:

            def rms_norm(x: Any, weight: Any, normalized_shape: Any, eps: float | None, out: Any = None) -> Any:
                if x.data_ptr() % 16:
                    x = packed(x)
                if out is None:
                    out = empty_like(x)
                rows = x.dim() == 2 and x.shape[1] == hidden
                fn(x if rows else rows_of(x, hidden), out if rows else rows_of(out, hidden),
                   eps_default if eps is None else eps)
                return out

        return rms_norm


class TileLangSoftmax(TileLangImpl, SoftmaxKernel):
    """Softmax over the last axis, in the input dtype (fp32 math inside)."""

    @classmethod
    def program_key(cls, call: CallSpec) -> SoftmaxBuildKey:
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
            if not input.is_contiguous() or input.data_ptr() % 16:
                input = packed(input)
            if out is None:
                out = empty_like(input)
            fn(rows_of(input, length), rows_of(out, length))
            return out

        return softmax


class TileLangSiluAndMul(TileLangImpl, SiluAndMulKernel):
    """``silu(x[..., :N]) * x[..., N:]``."""

    refuse_key = staticmethod(silu_and_mul_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> SiluAndMulBuildKey:
        return SiluAndMulBuildKey(call.dtypes["x"], int(call.dims["N"]), call.arch)

    @classmethod
    def launcher(cls, key: SiluAndMulBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_silu_and_mul(key).fn
        width = key.width

        def silu_and_mul(x: Any, out: Any = None) -> Any:
            if not x.is_contiguous() or x.data_ptr() % 16:
                x = packed(x)
            if out is None:
                out = torch.empty((*x.shape[:-1], width), dtype=x.dtype, device=x.device)
            if x.dim() == 2:  # ([M, 2N] by the spec's shapes, out [M, N]: the rows as they are, no view)
                fn(x, out)
            else:
                fn(rows_of(x, 2 * width), rows_of(out, width))
            return out

        return silu_and_mul


class TileLangSum(TileLangImpl, SumKernel):
    """Sums over one run of adjacent axes (or everything), accumulating in float32."""

    @classmethod
    def program_key(cls, call: CallSpec) -> tuple[str, str, str]:
        return (call.dtypes["input"], call.dtypes["output"], call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: tuple[str, str, str]) -> str | None:
        if not call.dims.get("adjacent", True):
            return "Sum TileLang kernel: the reduced axes are not adjacent; reduce them one run at a time"
        dtype, out_dtype, arch = key
        return sum_refusal(dtype, None, 1, True, arch, out_dtype)

    @classmethod
    def launcher(cls, key: tuple[str, str, str]) -> Callable[..., Any]:
        return sum_launch(*key)


class TileLangGroupNorm(TileLangImpl, GroupNormKernel):
    """GroupNorm over ``[N, C, *]``; one build per (channels, groups, spatial size)."""

    refuse_key = staticmethod(group_norm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GroupNormBuildKey:
        return GroupNormBuildKey(call.dtypes["x"], int(call.dims["num_groups"]), int(call.dims["C"]),
                                 int(call.dims["spatial"]), bool(call.flags["has_weight"]), call.arch)

    @classmethod
    def launcher(cls, key: GroupNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_group_norm(key).fn
        groups = key.num_groups
        empty_like = torch.empty_like

        # x is viewed as [N, G, D] (the key fixes G and D); weight and bias come together or not
        # at all (the spec checks it), so the key's affine flag decides the compiled signature.
        # Only x is read in vectors (weight and bias an element at a time): only x needs an aligned start.
        if key.affine:

            def group_norm(x: Any, weight: Any, bias: Any, num_groups: int, eps: float, out: Any = None) -> Any:
                if not x.is_contiguous() or x.data_ptr() % 16:
                    x = packed(x)
                if out is None:
                    out = empty_like(x)
                fn(x.view(x.shape[0], groups, -1), weight.contiguous(), bias.contiguous(),
                   out.view(x.shape[0], groups, -1), eps)  # fmt: skip
                return out

        else:

            def group_norm(x: Any, weight: Any, bias: Any, num_groups: int, eps: float, out: Any = None) -> Any:
                if not x.is_contiguous() or x.data_ptr() % 16:
                    x = packed(x)
                if out is None:
                    out = empty_like(x)
                fn(x.view(x.shape[0], groups, -1), out.view(x.shape[0], groups, -1), eps)
                return out

        return group_norm


def _gemm_key(dtype: str, n: int, k: int, trans_a: bool, trans_b: bool, batched: bool, arch: str) -> GemmBuildKey:
    return GemmBuildKey(dtype, int(n), int(k), bool(trans_a), bool(trans_b), batched, arch)


class TileLangGemm(TileLangImpl, GemmKernel):
    """fp16/bf16 GEMM with both transpose flags (a wgmma pipeline for sm_90)."""

    refuse_key = staticmethod(gemm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["a"], call.dims["N"], call.dims["K"], call.flags["trans_a"],
                         call.flags["trans_b"], False, call.arch)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gemm(key).fn
        n = key.n
        untransposed: list[Callable[..., Any]] = []  # key's program with A untransposed, built on first need

        def gemm(a: Any, b: Any, trans_a: bool, trans_b: bool, out: Any = None) -> Any:
            run = fn
            if trans_a and a.shape[1] % 8:
                # A stored [K, M] with M % 8 != 0: its rows are not whole 16-byte vectors, which the bulk copies
                # need (TileLang refuses the descriptor; found in review). M is no key field, so the refusal
                # cannot see it: the untransposed program reads A packed ([M, K], one copy of A) instead.
                if not untransposed:
                    untransposed.append(build_gemm(dataclasses.replace(key, trans_a=False)).fn)
                run, a = untransposed[0], a.t()
            # (The bulk copies' tensor maps need 16-byte aligned starts.)
            if not a.is_contiguous() or a.data_ptr() % 16:
                a = packed(a)
            if not b.is_contiguous() or b.data_ptr() % 16:
                b = packed(b)
            if out is None:
                out = torch.empty((a.shape[1] if run is fn and trans_a else a.shape[0], n), dtype=a.dtype,
                                  device=a.device)
            run(a, b, out)
            return out

        return gemm


class TileLangBmm(TileLangImpl, BmmKernel):
    """The GEMM kernel with a leading batch axis."""

    refuse_key = staticmethod(gemm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["a"], call.dims["N"], call.dims["K"], False, False, True, call.arch)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gemm(key).fn
        n = key.n

        def bmm(a: Any, b: Any, out: Any = None) -> Any:
            if not a.is_contiguous() or a.data_ptr() % 16:
                a = packed(a)
            if not b.is_contiguous() or b.data_ptr() % 16:
                b = packed(b)
            if out is None:
                out = torch.empty((a.shape[0], a.shape[1], n), dtype=a.dtype, device=a.device)
            if a.shape[0] <= GRID_YZ_MAX:
                fn(a, b, out)
            else:  # the batch is the program's grid z: launched in pieces of at most 65535
                for s in range(0, a.shape[0], GRID_YZ_MAX):
                    fn(a[s:s + GRID_YZ_MAX], b[s:s + GRID_YZ_MAX], out[s:s + GRID_YZ_MAX])
            return out

        return bmm


class TileLangLinear(TileLangImpl, LinearKernel):
    """``input @ weight.T`` on the GEMM kernel (weight read transposed); bias added after."""

    refuse_key = staticmethod(gemm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GemmBuildKey:
        return _gemm_key(call.dtypes["input"], call.dims["out_features"], call.dims["in_features"], False, True,
                         False, call.arch)

    @classmethod
    def launcher(cls, key: GemmBuildKey) -> Callable[..., Any]:
        import torch

        programs = build_linear_kernels(key)
        # A call's rows pick the program (kernels.linear): skinny, the GEMM's decode tiling, the GEMM's.
        few_rows, few = programs.skinny_rows, (programs.skinny or programs.gemm).fn
        some, many = programs.decode_gemm.fn, programs.gemm.fn
        n, k = key.n, key.k

        def linear(input: Any, weight: Any, bias: Any, out: Any = None) -> Any:
            if out is None:
                out = torch.empty((*input.shape[:-1], n), dtype=input.dtype, device=input.device)
            out2d = rows_of(out, n)
            if not input.is_contiguous() or input.data_ptr() % 16:
                input = packed(input)
            if not weight.is_contiguous() or weight.data_ptr() % 16:
                weight = packed(weight)
            a = rows_of(input, k)
            m = a.shape[0]
            (few if m <= few_rows else some if m <= DECODE_GEMM_ROWS else many)(a, weight, out2d)
            if bias is not None:
                out2d += bias
            return out

        return linear


class TileLangRGDR(TileLangImpl, RGDRKernel):
    """The RGDR decode kernel: one build per dtypes, head sizes and presence flags."""

    refuse_key = staticmethod(rgdr_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> RGDRBuildKey:
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
    def launcher(cls, key: RGDRBuildKey) -> Callable[..., Any]:
        # The launcher's `run` takes exactly this interface's arguments, then `out`; the
        # interface's needs_contiguous means the core already made every tensor contiguous
        # (`run` packs one the programs read in vectors where its start is not 16-byte aligned).
        return build_rgdr(key).run


def _row_bytes(dtype: str, width: int) -> int:
    """A row's width in bytes: what the block shapes table is indexed by."""
    return width * ELEM_BYTES[dtype]


class TileLangCausalConv1dUpdate(TileLangImpl, CausalConv1dUpdateKernel):
    """The causal conv1d decode kernel: reads a strided ``x`` and the pool in place (see kernels.conv1d)."""

    refuse_key = staticmethod(conv_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> ConvUpdateBuildKey:
        d, f = call.dtypes, call.flags
        key = ConvUpdateBuildKey(d["x"], int(call.dims["D"]), int(call.dims["W"]), f["activation"] == "silu",
                                 bool(f["has_bias"]), f["seq_lens_style"], d["actual_seq_lengths"],
                                 d["conv_state_indices"], d.get("num_accepted_tokens"), call.arch)
        return with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.dim))

    @classmethod
    def launcher(cls, key: ConvUpdateBuildKey) -> Callable[..., Any]:
        return build_conv_update(key).run


class TileLangCausalConv1dVarlen(TileLangImpl, CausalConv1dVarlenKernel):
    """The causal conv1d prefill kernels (outputs, then final windows)."""

    refuse_key = staticmethod(conv_refusal)
    # Launched plainly: as a programmatic dependent the 4k row of 8 prompts took 49.78 us against 45.58 in
    # one H200 run (session-2026-12-04b, a tie at one prompt), and the sweep's row went from 45.6-47.0 us
    # in every run before the launch policy to 50.0-51.4 in every run after it. A prefill kernel, it is
    # not in the decode step the policy was measured on (launch_policy).
    launches_as_dependent = False

    @classmethod
    def program_key(cls, call: CallSpec) -> ConvVarlenBuildKey:
        d, f = call.dtypes, call.flags
        # lengths-style metadata reaches the kernel as it is (ConvVarlenBuildKey.meta_lengths)
        key = ConvVarlenBuildKey(d["x"], int(call.dims["D"]), int(call.dims["W"]), f["activation"] == "silu",
                                 bool(f["has_bias"]), bool(f["has_has_initial_state"]), d["actual_seq_lengths"],
                                 d["conv_state_indices"], f["seq_lens_style"] != "cu_seqlens", call.arch)
        shaped = fitted_to_width(with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.dim)))
        return with_tanh_silu(with_start_order(shaped))

    @classmethod
    def launcher(cls, key: ConvVarlenBuildKey) -> Callable[..., Any]:
        return build_conv_varlen(key).run


class TileLangZeroCentredRMSNorm(TileLangImpl, ZeroCentredRMSNormKernel):
    """Zero-centred RMSNorm over the last axis; x is read in place as strided rows where it can be."""

    refuse_key = staticmethod(zero_centred_rmsnorm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> ZeroCentredRMSNormBuildKey:
        key = ZeroCentredRMSNormBuildKey(call.dtypes["x"], int(call.dims["N"]), False, call.arch)
        return with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.hidden))

    @classmethod
    def launcher(cls, key: ZeroCentredRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_zero_centred_rmsnorm(key).fn
        hidden = key.hidden

        def zero_centred_rms_norm(x: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if not weight.is_contiguous() or weight.data_ptr() % 16:
                weight = packed(weight)
            fn(row_view(x, hidden)[0], weight, rows_of(out, hidden), eps)
            return out

        return zero_centred_rms_norm


class TileLangFusedAddZeroCentredRMSNorm(TileLangImpl, FusedAddZeroCentredRMSNormKernel):
    """The residual add fused into the zero-centred norm; the residual is written in place (a view
    the kernel cannot read in place is written through a copy, then copied back)."""

    refuse_key = staticmethod(zero_centred_rmsnorm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> ZeroCentredRMSNormBuildKey:
        key = ZeroCentredRMSNormBuildKey(call.dtypes["x"], int(call.dims["N"]), True, call.arch)
        return with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.hidden))

    @classmethod
    def launcher(cls, key: ZeroCentredRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_zero_centred_rmsnorm(key).fn
        hidden = key.hidden

        def fused_add_zero_centred_rms_norm(x: Any, residual: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            rows, copied = row_view(residual, hidden)
            if not weight.is_contiguous() or weight.data_ptr() % 16:
                weight = packed(weight)
            fn(row_view(x, hidden)[0], rows, weight, rows_of(out, hidden), eps)
            if copied:
                residual.copy_(rows.view(residual.shape))
            return out

        return fused_add_zero_centred_rms_norm


class TileLangGatedRMSNorm(TileLangImpl, GatedRMSNormKernel):
    """RMSNorm per head, weight, SiLU gate; x and the gate are read in place as [outer, heads, D]."""

    refuse_key = staticmethod(gated_rmsnorm_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GatedRMSNormBuildKey:
        key = GatedRMSNormBuildKey(call.dtypes["x"], int(call.dims["D"]), call.arch)
        return with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.width))

    @classmethod
    def launcher(cls, key: GatedRMSNormBuildKey) -> Callable[..., Any]:
        import torch

        fn = build_gated_rmsnorm(key).fn
        width = key.width

        def gated_rms_norm(x: Any, gate: Any, weight: Any, eps: float, out: Any = None) -> Any:
            if out is None:
                out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            x3 = head_view(x, width)[0]
            out3 = out if x3 is x else out.view(x3.shape)  # out has x's shape
            if not weight.is_contiguous() or weight.data_ptr() % 16:
                weight = packed(weight)
            fn(x3, head_view(gate, width)[0], weight, out3, eps)
            return out

        return gated_rms_norm


class TileLangGDNGating(TileLangImpl, GDNGatingKernel):
    """g and beta from the a/b projections; a and b are read in place as strided rows."""

    refuse_key = staticmethod(gdn_gating_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> GDNGatingBuildKey:
        d = call.dtypes
        key = GDNGatingBuildKey(d["a"], d["A_log"], d["dt_bias"], int(call.dims["NV"]), call.arch)
        return with_block_shape(cls.__name__, key, _row_bytes(key.dtype, key.heads))

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
            # (A_log and dt_bias are read an element at a time: any contiguous start serves.)
            fn(row_view(a, heads)[0], row_view(b, heads)[0], A_log.contiguous(), dt_bias.contiguous(),
               rows_of(g, heads), rows_of(beta, heads))
            return g, beta

        return gdn_gating


KERNELS = (
    TileLangRMSNorm, TileLangSoftmax, TileLangSiluAndMul, TileLangSum, TileLangGroupNorm, TileLangGemm, TileLangBmm,
    TileLangLinear, TileLangRGDR, TileLangCausalConv1dUpdate, TileLangCausalConv1dVarlen,
    TileLangZeroCentredRMSNorm, TileLangFusedAddZeroCentredRMSNorm,
    TileLangGatedRMSNorm, TileLangGDNGating,
    TileLangQKNormRope, TileLangSigmoidGateMul, TileLangMoETopKRouting, TileLangMoEUnpermute,
    TileLangMoEPermute, TileLangMoEGroupedExperts, TileLangMoESharedExpert,
    TileLangChunkGDR,
    TileLangAttentionDecode, TileLangAttentionPrefill,
)

