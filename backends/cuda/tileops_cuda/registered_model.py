"""The TileLang kernels of the model's other layers as implementations of the core's interfaces:
RoPE with the q/k norms, the sigmoid gate, MoE routing, permutation, the routed experts and the
unpermute, attention decode and prefill, and the chunked gated-delta-rule prefill. The launch
contract is :mod:`.registered`'s; ``registered.KERNELS`` lists these with the rest.
"""

from __future__ import annotations

from typing import Any, Callable

from tileops_core.kernels import CallSpec
from tileops_core.ops.attention import AttentionDecodeKernel, AttentionPrefillKernel, QKNormRopeKernel, SigmoidGateMulKernel
from tileops_core.ops.gated_delta_prefill import ChunkGDRKernel
from tileops_core.ops.moe import (
    MoEGroupedExpertsKernel, MoEPermuteKernel, MoESharedExpertKernel, MoETopKRoutingKernel, MoEUnpermuteKernel,
)

from ._tilelang_impl import TileLangImpl
from .kernels._common import ELEM_BYTES
from .kernels.attention_decode import DecodeBuildKey, build_attention_decode, decode_refusal
from .kernels.attention_prefill import (
    REGISTERED_ATTENTION_WRITES_UPTO, PrefillBuildKey, build_attention_prefill, prefill_refusal)
from .kernels.chunk_gdr import ChunkGDRBuildKey, build_chunk_gdr, chunk_gdr_refusal
from .kernels.moe_grouped_experts import (
    MoEGroupedExpertsBuildKey, build_moe_grouped_experts, moe_grouped_experts_refusal, skinny_max_rows,
)
from .kernels.moe_permute import (
    REGISTERED_ONE_LAUNCH_COPIES, MoEPermuteBuildKey, build_moe_permute, moe_permute_refusal,
)
from .kernels.moe_shared_expert import MoESharedExpertBuildKey, build_moe_shared_expert, moe_shared_expert_refusal
from .kernels.moe_skinny import SHARED_SKINNY_TILING, SKINNY_ROWS, routed_skinny_tiling
from .kernels.moe_topk_routing import (
    MoETopKRoutingBuildKey, build_moe_topk_routing, moe_topk_routing_refusal, with_fitting_routing_program,
)
from .kernels.moe_unpermute import MoEUnpermuteBuildKey, build_moe_unpermute, moe_unpermute_refusal
from .kernels.block_shapes import with_block_shape
from .kernels.qk_norm_rope import QKNormRopeBuildKey, build_qk_norm_rope, qk_norm_rope_refusal, with_fitting_program
from .kernels.sigmoid_gate_mul import SigmoidGateMulBuildKey, build_sigmoid_gate_mul, sigmoid_gate_mul_refusal

__all__ = [
    "TileLangQKNormRope", "TileLangSigmoidGateMul", "TileLangMoETopKRouting", "TileLangMoEUnpermute",
    "TileLangMoEPermute", "TileLangMoEGroupedExperts", "TileLangMoESharedExpert", "TileLangChunkGDR",
    "TileLangAttentionDecode", "TileLangAttentionPrefill",
]


class TileLangQKNormRope(TileLangImpl, QKNormRopeKernel):
    """Per-head zero-centred RMSNorm of q and k and their rotary embedding in one pass; q and k are
    read in place as strided heads; rotary_dim, theta, eps and the MRoPE sections are runtime values.
    The block shape comes from ``block_shapes.BLOCK_SHAPES`` by head width (D bytes)."""

    @classmethod
    def program_key(cls, call: CallSpec) -> QKNormRopeBuildKey:
        d = call.dtypes
        key = QKNormRopeBuildKey(d["query"], d["positions"], int(call.dims["NQ"]), int(call.dims["NKV"]),
                                 int(call.dims["D"]), call.arch)
        return with_fitting_program(with_block_shape(cls.__name__, key, key.head_dim * ELEM_BYTES.get(key.dtype, 0)))

    @classmethod
    def reason(cls, call: CallSpec, key: QKNormRopeBuildKey) -> str | None:
        return qk_norm_rope_refusal(key)

    @classmethod
    def launcher(cls, key: QKNormRopeBuildKey) -> Callable[..., Any]:
        return build_qk_norm_rope(key).run


class TileLangSigmoidGateMul(TileLangImpl, SigmoidGateMulKernel):
    """``attn · sigmoid(gate)`` streamed over rows; a strided gate is read in place."""

    @classmethod
    def program_key(cls, call: CallSpec) -> SigmoidGateMulBuildKey:
        return SigmoidGateMulBuildKey(call.dtypes["attn"], int(call.dims["N"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: SigmoidGateMulBuildKey) -> str | None:
        return sigmoid_gate_mul_refusal(key)

    @classmethod
    def launcher(cls, key: SigmoidGateMulBuildKey) -> Callable[..., Any]:
        return build_sigmoid_gate_mul(key).run


class TileLangMoETopKRouting(TileLangImpl, MoETopKRoutingKernel):
    """Softmax, top-k (ties to the lower id) and renormalisation of router logits, a warp per token.
    The program and its block shape come from ``block_shapes.BLOCK_SHAPES`` by row width (E bytes)."""

    @classmethod
    def program_key(cls, call: CallSpec) -> MoETopKRoutingBuildKey:
        d = call.dtypes
        key = MoETopKRoutingBuildKey(d["router_logits"], d["topk_ids"], int(call.dims["E"]), int(call.dims["top_k"]),
                                     bool(call.flags["renormalize"]), call.arch)
        row_bytes = key.experts * ELEM_BYTES.get(key.dtype, 0)
        return with_fitting_routing_program(with_block_shape(cls.__name__, key, row_bytes))

    @classmethod
    def reason(cls, call: CallSpec, key: MoETopKRoutingBuildKey) -> str | None:
        return moe_topk_routing_refusal(key)

    @classmethod
    def launcher(cls, key: MoETopKRoutingBuildKey) -> Callable[..., Any]:
        return build_moe_topk_routing(key).run


class TileLangMoEUnpermute(TileLangImpl, MoEUnpermuteKernel):
    """The weighted combine of each token's expert rows (plus the shared output), a gather per token."""

    @classmethod
    def program_key(cls, call: CallSpec) -> MoEUnpermuteBuildKey:
        d = call.dtypes
        return MoEUnpermuteBuildKey(d["expert_output"], d["permuted_index"], d["topk_weights"], int(call.dims["H"]),
                                    int(call.dims["K"]), bool(call.flags["has_shared_output"]), call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: MoEUnpermuteBuildKey) -> str | None:
        return moe_unpermute_refusal(key)

    @classmethod
    def launcher(cls, key: MoEUnpermuteBuildKey) -> Callable[..., Any]:
        return build_moe_unpermute(key).run


class TileLangMoEPermute(TileLangImpl, MoEPermuteKernel):
    """Token copies grouped by expert (stable), the offsets and the inverse map, no host sync: one launch for a
    decode step's copies (up to ``REGISTERED_ONE_LAUNCH_COPIES``), three kernels past it."""

    @classmethod
    def program_key(cls, call: CallSpec) -> MoEPermuteBuildKey:
        d = call.dtypes
        return MoEPermuteBuildKey(d["hidden_states"], d["topk_ids"], int(call.dims["H"]), int(call.dims["K"]),
                                  int(call.dims["num_experts"]), call.arch,
                                  one_launch_copies=REGISTERED_ONE_LAUNCH_COPIES)

    @classmethod
    def reason(cls, call: CallSpec, key: MoEPermuteBuildKey) -> str | None:
        return moe_permute_refusal(key)

    @classmethod
    def launcher(cls, key: MoEPermuteBuildKey) -> Callable[..., Any]:
        return build_moe_permute(key).run


class TileLangMoEGroupedExperts(TileLangImpl, MoEGroupedExpertsKernel):
    """Each expert's SwiGLU MLP over its permuted rows on wgmma: a device-made tile map, then the
    gate/up GEMMs with SiLU-and-multiply fused, then the down GEMM; no host sync."""

    @classmethod
    def program_key(cls, call: CallSpec) -> MoEGroupedExpertsBuildKey:
        E, I = int(call.dims["E"]), int(call.dims["I"])
        return MoEGroupedExpertsBuildKey(call.dtypes["hidden_states"], E, int(call.dims["H"]), I,
                                         call.dtypes["expert_offsets"], call.arch, skinny_max_rows(E),
                                         skinny_tiling=routed_skinny_tiling(I, call.dtypes["hidden_states"]))

    @classmethod
    def reason(cls, call: CallSpec, key: MoEGroupedExpertsBuildKey) -> str | None:
        return moe_grouped_experts_refusal(key)

    @classmethod
    def launcher(cls, key: MoEGroupedExpertsBuildKey) -> Callable[..., Any]:
        return build_moe_grouped_experts(key).run


class TileLangMoESharedExpert(TileLangImpl, MoESharedExpertKernel):
    """The shared expert's SwiGLU MLP over all rows on the routed experts' wgmma programs (a static
    tile map): gate/up with SiLU-and-multiply fused, the gate logit when the sigmoid gate is
    given, then down with the gate's scaling fused; no host sync. ``x`` may be ``[*S, H]``: the
    launch views it (contiguous) as rows."""

    refuse_key = staticmethod(moe_shared_expert_refusal)

    @classmethod
    def program_key(cls, call: CallSpec) -> MoESharedExpertBuildKey:
        return MoESharedExpertBuildKey(call.dtypes["x"], int(call.dims["H"]), int(call.dims["I"]),
                                       bool(call.flags["has_expert_gate"]), call.arch, SKINNY_ROWS,
                                       skinny_tiling=SHARED_SKINNY_TILING)

    @classmethod
    def launcher(cls, key: MoESharedExpertBuildKey) -> Callable[..., Any]:
        return build_moe_shared_expert(key).run


class TileLangChunkGDR(TileLangImpl, ChunkGDRKernel):
    """The chunked gated delta rule (four kernels: metadata, W/U per chunk, the state walk, the outputs); the
    l2 norm and ``has_initial_state`` are runtime flags, so one build serves every call of a head shape."""

    @classmethod
    def program_key(cls, call: CallSpec) -> ChunkGDRBuildKey:
        d, dims = call.dtypes, call.dims
        return ChunkGDRBuildKey(d["query"], d["state"], int(dims["NK"]), int(dims["NV"]), int(dims["DK"]),
                                int(dims["DV"]), call.arch, cu_dtype=d["cu_seqlens"], slot_dtype=d["ssm_state_indices"])

    @classmethod
    def reason(cls, call: CallSpec, key: ChunkGDRBuildKey) -> str | None:
        return chunk_gdr_refusal(key)

    @classmethod
    def launcher(cls, key: ChunkGDRBuildKey) -> Callable[..., Any]:
        # `run` takes the interface's arguments, then `out`; the interface's needs_contiguous
        # means the core already made every tensor contiguous (`run` packs one the programs read
        # in vectors where its start is not 16-byte aligned).
        return build_chunk_gdr(key).run


class TileLangAttentionDecode(TileLangImpl, AttentionDecodeKernel):
    """GQA decode over a contiguous or paged KV cache: split across programs, then combined."""

    @classmethod
    def program_key(cls, call: CallSpec) -> DecodeBuildKey:
        d, paged = call.dtypes, bool(call.flags.get("has_block_table"))
        return DecodeBuildKey(d["query"], int(call.dims["NQ"]), int(call.dims["NKV"]), int(call.dims["D"]), paged,
                              d["cache_seqlens"], d["block_table"] if paged else None, call.arch)

    @classmethod
    def reason(cls, call: CallSpec, key: DecodeBuildKey) -> str | None:
        return decode_refusal(key)

    @classmethod
    def launcher(cls, key: DecodeBuildKey) -> Callable[..., Any]:
        return build_attention_decode(key).run


class TileLangAttentionPrefill(TileLangImpl, AttentionPrefillKernel):
    """Causal varlen GQA prefill (flash attention forward) writing a contiguous or paged KV cache."""

    @classmethod
    def program_key(cls, call: CallSpec) -> PrefillBuildKey:
        d, paged = call.dtypes, bool(call.flags.get("has_slot_mapping"))
        return PrefillBuildKey(d["query"], int(call.dims["NQ"]), int(call.dims["NKV"]), int(call.dims["D"]), paged,
                               d["cu_seqlens"], d["slot_mapping"] if paged else None, call.arch,
                               attention_writes_upto=REGISTERED_ATTENTION_WRITES_UPTO)

    @classmethod
    def reason(cls, call: CallSpec, key: PrefillBuildKey) -> str | None:
        return prefill_refusal(key)

    @classmethod
    def launcher(cls, key: PrefillBuildKey) -> Callable[..., Any]:
        return build_attention_prefill(key).run
