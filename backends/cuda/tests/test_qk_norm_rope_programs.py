"""QKNormRope's two TileLang programs without a GPU: the rows program's block covers whole tokens
(or part of one) of both tensors, a block shape it cannot lay out falls back to the first program
instead of a refusal, bad block shapes are refused with the fix, and the rows program lowers for
sm_90a reading and writing its rows in 16-byte vectors with only the cos/sin table in shared memory
(where tilelang is installed). Numerics run on the GPU (``test_spec_rows_gpu.py``, the sweep's checks)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels import block_shapes
from tileops_cuda.kernels.qk_norm_rope import (
    QKNormRopeBuildKey, _rows_plan, qk_norm_rope_refusal, with_fitting_program,
)
from tileops_cuda.registered_model import TileLangQKNormRope

_QWEN = QKNormRopeBuildKey("bfloat16", "int64", 16, 2, 256, "sm_90a")


def _call(nq: int, nkv: int, d: int) -> CallSpec:
    return CallSpec("QKNormRopeFwdOp", "qk_norm_rope", "cuda", "sm_90a", {"query": "bfloat16", "positions": "int64"},
                    {"NQ": nq, "NKV": nkv, "D": d}, {})


@pytest.mark.parametrize("heads", [(16, 2), (32, 4), (4, 2), (2, 1), (40, 8), (12, 3), (28, 4)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_rows_program_holds_whole_tokens_or_part_of_one_of_each_tensor(heads, dtype):
    threads, padded, rows = _rows_plan(QKNormRopeBuildKey(dtype, "int64", *heads, 256, "sm_90a"))
    for n in heads:
        assert rows % n == 0 or n % rows == 0, (rows, n)
    vec = 16 // (2 if dtype == "bfloat16" else 4)
    assert padded % ((threads // rows) * vec) == 0 and rows * padded // threads <= 32


def test_the_qwen_rows_program_holds_one_token_of_q_or_eight_of_k_in_8_kb():
    assert _rows_plan(_QWEN) == (256, 256, 16)


def test_the_registered_key_takes_its_program_from_the_block_shapes_table(monkeypatch):
    # The first program until the H200 sweep has checked and timed the rows program.
    assert TileLangQKNormRope.key(_call(16, 2, 256)).program == "token_heads"
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope",
                        ((None, {"program": "rows", "rows": 0, "threads": 0, "early_partners": False, "registers": 0}),))
    assert TileLangQKNormRope.key(_call(16, 2, 256)) == dataclasses.replace(_QWEN, early_partners=False)


def test_a_row_count_that_fits_neither_head_count_falls_back_to_the_first_program(monkeypatch):
    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope", ((None, {"rows": 16}),))
    key = TileLangQKNormRope.key(_call(12, 3, 128))  # 16 rows: neither a multiple nor a divisor of 12
    assert key.program == "token_heads" and TileLangQKNormRope.reason(None, key) is None
    assert with_fitting_program(dataclasses.replace(_QWEN, rows=16)).program == "rows"


@pytest.mark.parametrize("fields,reason", [
    ({"program": "pairs"}, "program='pairs' is not one of ('rows', 'token_heads')"),
    ({"registers": -1}, "registers=-1 must be at least 0"),
    ({"rows": 64}, "no rows=64 x threads=any block holds D=256 rows of 16 and 2 heads"),
], ids=["program", "registers", "rows"])
def test_the_kernel_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in qk_norm_rope_refusal(dataclasses.replace(_QWEN, **fields))


@pytest.mark.parametrize("early", [True, False], ids=["early-partners", "late-partners"])
def test_the_rows_program_lowers_with_16_byte_rows_and_only_the_table_in_shared_memory(early):
    tilelang = pytest.importorskip("tilelang")
    from tileops_cuda.kernels import qk_norm_rope

    key = QKNormRopeBuildKey("bfloat16", "int32", 4, 2, 64, "sm_90a", early_partners=early)
    target = {"kind": "cuda", "arch": "sm_90a"}
    with tilelang.tvm.target.Target(target):
        source = tilelang.lower(qk_norm_rope._program(key), target=target).kernel_source
    for rows in ("query", "key"):
        assert f"*(uint4*)({rows} + " in source
        assert f"*(uint4*)({rows}_out + " in source
    assert set(re.findall(r"void\* (\w+) = \(\(void\*\)\(\(char\*\)buf_dyn_shmem", source)) == {"cs", "sn"}
    assert source.count("cosf(") == source.count("sinf(") == 2  # once per (token, f), in each tensor's branch
