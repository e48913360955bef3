"""The MoE permute's launch function on the CPU: which programs a call runs (the one-launch program up to
``MoEPermuteBuildKey.one_launch_copies`` copies, the three kernels past it or without it) and the views the
one-launch program is handed, its semantics stood in for by the reference kernel; and that program's
lowering for sm_90a where tilelang is installed (its H200 test is in test_model_ops_gpu.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tileops_cpu_ref.moe import moe_permute  # noqa: E402
from tileops_cuda.kernels import moe_permute as permute  # noqa: E402

H, K, E = 16, 2, 8


def _programs(calls: list[str]) -> tuple[Any, ...]:
    def kernel(name: str) -> Any:
        return lambda *args: calls.append(name)

    def one(hidden_rows, ids, permuted, expert_offsets, permuted_index):
        calls.append("one")
        assert ids.dim() == 1 and permuted_index.dim() == 1 and hidden_rows.shape[1] == H
        want = moe_permute(hidden_rows, ids.view(-1, K), E)
        for out, w in zip((permuted, expert_offsets, permuted_index), want):
            out.copy_(w.view(out.shape))

    return kernel("rank"), kernel("offsets"), kernel("scatter"), one


@pytest.mark.parametrize("one_launch", [0, 6, 20])
@pytest.mark.parametrize("tokens", [1, 3, 10])
def test_a_call_runs_the_one_launch_program_up_to_the_keys_copies_and_the_three_kernels_past_them(one_launch, tokens):
    calls: list[str] = []
    key = permute.MoEPermuteBuildKey("float32", "int64", H, K, E, one_launch_copies=one_launch)
    rank, offsets, scatter, one = _programs(calls)
    run = permute._make_run(key, rank, offsets, scatter, one if one_launch else None)
    x, ids = torch.randn(tokens, H), torch.randint(0, E, (tokens, K))
    got = run(x, ids, E)
    if tokens * K <= one_launch:
        assert calls == ["one"]
        for g, w in zip(got, moe_permute(x, ids, E)):
            assert torch.equal(g, w)
    else:
        assert calls == ["rank", "offsets", "scatter"]


def test_one_launch_copies_past_a_program_are_refused_with_the_fix():
    reason = permute.moe_permute_refusal(permute.MoEPermuteBuildKey("bfloat16", "int64", 2048, 10, 512,
                                                                    one_launch_copies=permute.CHUNK + 1))
    assert reason is not None and "one_launch_copies" in reason and "use 0" in reason


@pytest.mark.parametrize("experts,top_k,copies", [(512, 10, 128), (256, 8, 128), (8, 2, 16)])
def test_the_one_launch_permute_lowers_with_the_ids_in_shared_memory_and_the_block_scan(experts, top_k, copies):
    from lowered_source import lowered_source

    key = permute.MoEPermuteBuildKey("bfloat16", "int64", 2048, top_k, experts, one_launch_copies=copies)
    body = lowered_source(permute._one_launch_program, key)
    assert "moe_permute_one_launch_kernel" in body and "tl::CumSum1D" in body
    assert "expert_offsets[0] = 0;" in body and "permuted_index[" in body and "*(uint4*)(permuted + " in body


#: The test of an int64 id against E = 256 in its own dtype, as the CUDA prints it.
_WIDE_ID_TEST = re.compile(r"\(int64_t\)0 <= condval_\d+\)+ && \(condval_\d+ < \(int64_t\)256\)")


@pytest.mark.parametrize("program", ["_rank_program", "_scatter_program", "_one_launch_program"])
def test_a_64_bit_id_is_tested_against_the_experts_in_its_own_dtype_before_it_becomes_int32(program):
    """Made int32 first, an unchecked id ``2**32 + e`` would place its copy under expert ``e`` (moving the
    rows of every copy after it); tested in int64, it is out of range and left unplaced. An int32 id keeps
    its one compare, the same code."""
    from lowered_source import lowered_source

    def source(ids_dtype: str) -> str:
        key = permute.MoEPermuteBuildKey("bfloat16", ids_dtype, 2048, 8, 256, one_launch_copies=128)
        return lowered_source(getattr(permute, program), key)

    assert len(_WIDE_ID_TEST.findall(source("int64"))) == 1
    assert "< (int64_t)256" not in source("int32")
