"""The decode step's kernels as programmatic dependents (``dependent_launch`` on their build keys, a candidate
until the H200 times the step with it, ``bench/dependent_step.py``): each program (the norms, gating,
QKNormRope, SigmoidGateMul, the permute's four, the routed and shared experts' tensor-core ones, the attention
decode's split and combine programs), at its registered block shape, waits for the stream's previous kernel
before its first access to any of its buffers and before it lets the next kernel launch; without the field,
no wait. Lowered for sm_90a without a GPU; skips where tilelang is not installed (CI). The refusal off Hopper
is checked on the CPU everywhere."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tileops_cuda.kernels import attention_decode, gated_rmsnorm, gdn_gating, moe_grouped_experts, moe_permute
from tileops_cuda.kernels import moe_shared_expert, moe_unpermute, qk_norm_rope, sigmoid_gate_mul, zero_centred_rmsnorm
from tileops_cuda.kernels.attention_decode_program import (decode_combine_program, decode_parallel_combine_program,
                                                           decode_split_program)
from tileops_cuda.kernels.block_shapes import with_block_shape

#: (program, the registered key at Qwen3.5 sizes, its refusal)
CASES = {
    "zero-centred": (zero_centred_rmsnorm._program,
                     with_block_shape("TileLangZeroCentredRMSNorm",
                                      zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("bfloat16", 2048), 4096),
                     zero_centred_rmsnorm.zero_centred_rmsnorm_refusal),
    "fused-add": (zero_centred_rmsnorm._program,
                  with_block_shape("TileLangFusedAddZeroCentredRMSNorm",
                                   zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("bfloat16", 2048, True), 4096),
                  zero_centred_rmsnorm.zero_centred_rmsnorm_refusal),
    "gated": (gated_rmsnorm._program,
              with_block_shape("TileLangGatedRMSNorm", gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 128), 256),
              gated_rmsnorm.gated_rmsnorm_refusal),
    "gating": (gdn_gating._program,
               with_block_shape("TileLangGDNGating",
                                gdn_gating.GDNGatingBuildKey("bfloat16", "float32", "bfloat16", 32), 64),
               gdn_gating.gdn_gating_refusal),
    "qk-norm-rope": (qk_norm_rope._program,
                     qk_norm_rope.with_fitting_program(with_block_shape(
                         "TileLangQKNormRope", qk_norm_rope.QKNormRopeBuildKey("bfloat16", "int64", 16, 2, 256), 512)),
                     qk_norm_rope.qk_norm_rope_refusal),
    "sigmoid-gate-mul": (sigmoid_gate_mul._program, sigmoid_gate_mul.SigmoidGateMulBuildKey("bfloat16", 4096),
                         sigmoid_gate_mul.sigmoid_gate_mul_refusal),
    "unpermute": (moe_unpermute._program,
                  moe_unpermute.MoEUnpermuteBuildKey("bfloat16", "int32", "bfloat16", 2048, 10),
                  moe_unpermute.moe_unpermute_refusal),
    **{f"permute-{name}": (program, moe_permute.MoEPermuteBuildKey("bfloat16", "int64", 2048, 10, 512,
                                                                    one_launch_copies=128),
                           moe_permute.moe_permute_refusal)
       for name, program in (("rank", moe_permute._rank_program), ("offsets", moe_permute._offsets_program),
                             ("scatter", moe_permute._scatter_program), ("one-launch", moe_permute._one_launch_program))},
    **{f"experts-{name}": (program, moe_grouped_experts.MoEGroupedExpertsBuildKey("bfloat16", 512, 2048, 512),
                           moe_grouped_experts.moe_grouped_experts_refusal)
       for name, program in (
           ("tiles", lambda key: moe_grouped_experts._tiles_program(key, moe_grouped_experts.DECODE_TILING.block_m)),
           ("gate-up", lambda key: moe_grouped_experts._gate_up_program(key, moe_grouped_experts.DECODE_TILING)),
           ("down", lambda key: moe_grouped_experts._down_program(key, moe_grouped_experts.PREFILL_TILING)))},
    **{f"shared-{name}": (program, moe_shared_expert.MoESharedExpertBuildKey("bfloat16", 2048, 512, True),
                          moe_shared_expert.moe_shared_expert_refusal)
       for name, program in (
           ("gate-up", lambda key: moe_shared_expert.shared_programs(key, moe_shared_expert.SHARED_DECODE_TILING)[0]),
           ("down", lambda key: moe_shared_expert.shared_programs(key, moe_shared_expert.SHARED_DECODE_TILING)[1]),
           ("logit", moe_shared_expert._gate_logit_program))},
    **{f"decode-{name}": (program, attention_decode.DecodeBuildKey("bfloat16", 16, 2, 256),
                          attention_decode.decode_refusal)
       for name, program in (
           ("split", lambda key: decode_split_program(key, attention_decode.default_tiling(key), None)),
           ("split-light", lambda key: decode_split_program(key, attention_decode.LIGHT_TILING, None)),
           ("combine", lambda key: decode_combine_program(key, attention_decode.default_tiling(key))),
           ("parallel-combine", decode_parallel_combine_program))},
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_dependent_decode_kernel_waits_before_its_first_memory_access(name):
    from lowered_source import lowered_source

    program, key, _ = CASES[name]
    source = lowered_source(program, dataclasses.replace(key, dependent_launch=True))
    kernel = source[source.index('extern "C" __global__'):]
    signature, body = kernel[:kernel.index("{")], kernel[kernel.index("{"):]
    pointers = re.findall(r"\*\s*(?:__restrict__\s+)?(\w+)", signature)  # the kernel's global buffers
    assert pointers, signature
    first = min(m.start() for m in re.finditer(rf"\b({'|'.join(pointers)})\b\s*[\[+]", body))
    wait = body.index("cudaGridDependencySynchronize();")
    assert wait < first and wait < body.index("cudaTriggerProgrammaticLaunchCompletion();"), name
    assert "cudaGridDependencySynchronize" not in lowered_source(program, key)


@pytest.mark.parametrize("name", list(CASES))
def test_a_dependent_launch_is_refused_where_the_arch_has_none(name):
    _, key, refusal = CASES[name]
    assert refusal(key) is None and refusal(dataclasses.replace(key, dependent_launch=True)) is None
    reason = refusal(dataclasses.replace(key, dependent_launch=True, arch="sm_80"))
    assert reason is not None and "dependent_launch" in reason and "drop dependent_launch" in reason
