"""QKNormRope's two TileLang programs without a GPU: the lanes program lays a row's vectors on the
lanes of one warp and its cos/sin table covers every token its rows reach, a row too wide for a warp
falls back to the first program instead of a refusal, bad block shapes are refused with the fix,
and the lanes program lowers for sm_90a with 16-byte rows, its table loads issued before its one
barrier (where tilelang is installed). Numerics run on the GPU (``test_spec_rows_gpu.py``, the
sweep's checks)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels import block_shapes
from tileops_cuda.kernels.qk_norm_rope import (
    QKNormRopeBuildKey, _lanes_plan, _table_tokens, qk_norm_rope_refusal, with_fitting_program,
)
from tileops_cuda.registered_model import TileLangQKNormRope

_QWEN = QKNormRopeBuildKey("bfloat16", "int64", 16, 2, 256, "sm_90a")


def _call(nq: int, nkv: int, d: int) -> CallSpec:
    return CallSpec("QKNormRopeFwdOp", "qk_norm_rope", "cuda", "sm_90a", {"query": "bfloat16", "positions": "int64"},
                    {"NQ": nq, "NKV": nkv, "D": d}, {})


@pytest.mark.parametrize("dtype,d,lanes", [("bfloat16", 256, 32), ("bfloat16", 128, 16), ("float16", 80, 16),
                                           ("float32", 32, 8), ("float32", 16, 4), ("float32", 128, 32)])
def test_a_lanes_row_is_the_power_of_two_of_lanes_that_holds_its_vectors(dtype, d, lanes):
    assert _lanes_plan(QKNormRopeBuildKey(dtype, "int64", 4, 2, d, "sm_90a")) == (256, lanes, 2)


@pytest.mark.parametrize("heads", [1, 2, 3, 12, 16, 40])
@pytest.mark.parametrize("rows", [4, 8, 16, 24, 32, 64])
def test_the_table_covers_every_token_a_program_of_consecutive_rows_reaches(heads, rows):
    for p in range(3 * heads):
        tok0 = p * rows // heads
        assert (p * rows + rows - 1) // heads - tok0 < _table_tokens(heads, rows), (p, heads, rows)


def test_the_qwen_lanes_program_holds_one_token_of_q_or_eight_of_k_in_8_kb():
    threads, lanes, rows = _lanes_plan(_QWEN)
    assert threads // lanes * rows == 16 and _table_tokens(16, 16) == 1 and _table_tokens(2, 16) == 8


def test_the_registered_key_takes_its_program_from_the_block_shapes_table(monkeypatch):
    # The lanes program at 40 registers, the H200 sweep's winner on every prefill row.
    assert TileLangQKNormRope.key(_call(16, 2, 256)) == dataclasses.replace(_QWEN, registers=40)
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope", ((None, {"program": "token_heads"}),))
    assert TileLangQKNormRope.key(_call(16, 2, 256)).program == "token_heads"


def test_a_row_wider_than_a_warp_of_vectors_falls_back_to_the_first_program(monkeypatch):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope", ((None, {"program": "lanes"}),))
    key = TileLangQKNormRope.key(_call(8, 1, 512))  # 64 vectors a row
    assert key.program == "token_heads" and TileLangQKNormRope.reason(None, key) is None
    assert with_fitting_program(_QWEN).program == "lanes"


@pytest.mark.parametrize("fields,reason", [
    ({"program": "rows"}, "program='rows' is not one of ('lanes', 'token_heads')"),
    ({"registers": -1}, "registers=-1 must be at least 0"),
    ({"threads": 48}, "threads=48 x rows=0 does not lay out D=256 in bfloat16"),
    ({"rows": 16}, "threads=0 x rows=16 does not lay out D=256 in bfloat16"),
    ({"threads": 512, "rows": 8}, "threads=512 x rows=8 does not lay out D=256 in bfloat16"),  # 128 KB shared
], ids=["program", "registers", "threads", "rows", "shared"])
def test_the_kernel_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in qk_norm_rope_refusal(dataclasses.replace(_QWEN, **fields))


def test_the_lanes_program_lowers_with_16_byte_rows_and_one_round_trip_before_its_one_barrier():
    tilelang = pytest.importorskip("tilelang")
    from tileops_cuda.kernels import qk_norm_rope

    key = QKNormRopeBuildKey("bfloat16", "int32", 4, 2, 64, "sm_90a")
    target = {"kind": "cuda", "arch": "sm_90a"}
    with tilelang.tvm.target.Target(target):
        source = tilelang.lower(qk_norm_rope._program(key), target=target).kernel_source
    q_branch, k_branch = _branches(source)
    for rows, branch in (("query", q_branch), ("key", k_branch)):
        assert f"*(uint4*)({rows} + " in branch and f"*(uint4*)({rows}_out + " in branch
        assert branch.count("__syncthreads()") == 1
        barrier = branch.index("__syncthreads()")
        # Every global load (rows, weight, the table's positions) before the barrier; after it
        # the rotary lanes read cos, sin (16-byte vectors) and partners from shared memory only.
        assert branch.index("positions[") < barrier and "positions[" not in branch[barrier:]
        assert re.search(r"\*\(uint4\*\)\(cl \+ 0\) = \*\(uint4\*\)\(\(\(bfloat16_t\*\)cs\)", branch[barrier:])
        assert "__shfl_xor_sync" in branch[:barrier]


def _branches(source: str) -> tuple[str, str]:
    """The kernel's q and k branches (``if (blockIdx.x < QP) {...} else {...}``)."""
    body = source[source.index("if (((int)blockIdx.x) <"):]
    depth, i = 0, body.index("{")
    for i in range(i, len(body)):
        depth += {"{": 1, "}": -1}.get(body[i], 0)
        if depth == 0:
            break
    return body[:i], body[i:]
