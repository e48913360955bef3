"""QKNormRope's two TileLang programs without a GPU: the lanes program lays a row's vectors on the
lanes of one warp and its cos/sin table covers every token its rows reach, a row too wide for a warp
falls back to the first program instead of a refusal, bad block shapes are refused with the fix,
and the lanes program lowers for sm_90a with 16-byte rows, its table loads issued before its one
barrier (where tilelang is installed). Numerics run on the GPU (``test_spec_rows_gpu.py``, the
sweep's checks)."""

from __future__ import annotations

import dataclasses
import math
import re
import shutil

import numpy as np

import pytest

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels import block_shapes
from tileops_cuda.kernels.qk_norm_rope import (
    _INV_2PI, _TWO_PI_HI, _TWO_PI_LO, QKNormRopeBuildKey, _lanes_plan, _table_tokens, qk_norm_rope_refusal,
    with_fitting_program,
)
from tileops_cuda.registered_model import TileLangQKNormRope
from lowered_source import lowered_source

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
    # The lanes program at 40 registers with the warp's table, reduced sincos, vector partners and the 16-bit
    # rotation: the H200 sweep's winner on every prefill row.
    assert TileLangQKNormRope.key(_call(16, 2, 256)) == dataclasses.replace(
        _QWEN, registers=40, table="warp", sincos="reduced", partners="vectors", rotation="native",
        dependent_launch=True)  # the registered keys launch as dependents (tileops_cuda.launch_policy)
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
    ({"table": "tokens"}, "table='tokens' is not one of ('channels', 'pairs', 'warp')"),
    ({"sincos": "fast"}, "sincos='fast' is not one of ('accurate', 'reduced')"),
    ({"partners": "shuffle"}, "partners='shuffle' is not one of ('elements', 'vectors')"),
    ({"rotation": "float16"}, "rotation='float16' is not one of ('float32', 'native')"),
], ids=["program", "registers", "threads", "rows", "shared", "table", "sincos", "partners", "rotation"])
def test_the_kernel_refuses_block_shapes_it_has_no_program_for(fields, reason):
    assert reason in qk_norm_rope_refusal(dataclasses.replace(_QWEN, **fields))


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


@pytest.mark.parametrize("theta", [1e4, 1e6, 1e7])
def test_the_reduced_angle_is_within_2_to_the_minus_22_of_the_exact_remainder_by_2_pi(theta):
    # The kernel's two FMAs (each one rounding of the exact value, as float64 holds every product
    # here exactly) against the float64 remainder of the same float32 angle, HF's angles at every
    # position below 2^17 and every frequency of rotary_dim 64.
    positions = np.arange(1 << 17, dtype=np.float64)
    inv_freq = _f32(1.0 / theta ** (np.arange(0, 64, 2) / 64.0))
    x = _f32(positions[:, None].astype(np.float32) * inv_freq[None, :]).astype(np.float64)
    k = np.floor(_f32(_f32(x * np.float32(_INV_2PI)) + np.float32(0.5)).astype(np.float64))
    r = _f32(x - k * _TWO_PI_HI).astype(np.float64)
    r = _f32(r - k * _TWO_PI_LO).astype(np.float64)
    exact = x - k * (2 * math.pi)
    assert np.max(np.abs(r - exact)) <= 2.0 ** -22
    assert np.max(np.abs(r)) <= math.pi + 2e-3  # where the hardware sin and cos keep their 2^-21.41
    # So the sine and cosine are within 1e-6 of the exact ones of HF's angle.
    assert np.max(np.abs(np.sin(r) - np.sin(x))) <= 2.0 ** -22 + 1e-9


def _lowered(key: QKNormRopeBuildKey) -> str:
    from tileops_cuda.kernels import qk_norm_rope

    return lowered_source(qk_norm_rope._program, key)


def _branches(source: str) -> tuple[str, str]:
    """The kernel's q and k branches (``if (blockIdx.x < QP) {...} else {...}``)."""
    body = source[source.index("if (((int)blockIdx.x) <"):]
    depth, i = 0, body.index("{")
    for i in range(i, len(body)):
        depth += {"{": 1, "}": -1}.get(body[i], 0)
        if depth == 0:
            break
    return body[:i], body[i:]


_SMALL = QKNormRopeBuildKey("bfloat16", "int32", 4, 2, 64, "sm_90a")


def test_the_lanes_program_lowers_with_16_byte_rows_and_one_round_trip_before_its_one_barrier():
    q_branch, k_branch = _branches(_lowered(_SMALL))
    for rows, branch in (("query", q_branch), ("key", k_branch)):
        assert f"*(uint4*)({rows} + " in branch and f"*(uint4*)({rows}_out + " in branch
        assert branch.count("__syncthreads()") == 1
        barrier = branch.index("__syncthreads()")
        # Every global load (rows, weight, the table's positions) before the barrier; after it
        # the rotary lanes read cos, sin (16-byte vectors) and partners from shared memory only.
        assert branch.index("positions[") < barrier and "positions[" not in branch[barrier:]
        assert re.search(r"\*\(uint4\*\)\(cl \+ 0\) = \*\(uint4\*\)\(\(\(bfloat16_t\*\)cs\)", branch[barrier:])
        assert "__shfl_xor_sync" in branch[:barrier]


def test_the_pairs_table_computes_one_sine_and_cosine_a_frequency_before_its_one_barrier():
    for branch in _branches(_lowered(dataclasses.replace(_SMALL, table="pairs"))):
        assert branch.count("__syncthreads()") == 1 and branch.count("sinf(") == branch.count("cosf(") == 1
        barrier = branch.index("__syncthreads()")
        assert branch.index("cosf(") < barrier and "positions[" not in branch[barrier:]


def test_the_warp_table_rotates_after_a_warp_sync_with_no_block_barrier():
    for branch in _branches(_lowered(dataclasses.replace(_SMALL, table="warp"))):
        assert "__syncthreads" not in branch and branch.count("__syncwarp()") == 1
        sync = branch.index("__syncwarp()")
        assert branch.index("cosf(") < sync and "positions[" not in branch[sync:]


def test_the_reduced_sincos_is_the_hardware_one_of_the_angle_less_two_fmas_of_2_pi():
    source = _lowered(dataclasses.replace(_SMALL, table="pairs", sincos="reduced"))
    assert " sinf(" not in source and " cosf(" not in source
    assert "__sinf(angle[2])" in source and "__cosf(angle[2])" in source
    # Two separate statements (the simplifier must not fold k·HI + k·LO into one product), in hex.
    assert "0x1.921fb6p+2f" in source and "-0x1.777a5cp-23f" in source


def test_vector_partners_are_one_16_byte_shared_read():
    # One in each branch's loop over its rows; lanes whose vector is not wholly rotary keep element reads.
    for branch in _branches(_lowered(dataclasses.replace(_SMALL, partners="vectors"))):
        assert len(re.findall(r"\*\(uint4\*\)\(ml \+ 0\) = \*\(uint4\*\)\(\(\(bfloat16_t\*\)sw\)", branch)) == 1


def test_the_native_rotation_is_the_16_bit_multiply_and_add_and_changes_nothing_in_float32():
    for branch in _branches(_lowered(dataclasses.replace(_SMALL, partners="vectors", rotation="native"))):
        # Both paths (vector partners, element partners) of the branch's rows loop.
        assert branch.count("__hadd_rn(__hmul_rn(") == 2
    f32 = QKNormRopeBuildKey("float32", "int64", 4, 2, 32, "sm_90a", partners="vectors")
    assert _lowered(dataclasses.replace(f32, rotation="native")) == _lowered(f32)


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc: the launcher's build and ptxas need it")
    return nvcc


@pytest.mark.parametrize("table,barriers,warp_syncs", [("pairs", 2, 0), ("warp", 0, 2)])
def test_the_launcher_compiles_the_candidate_tables_with_only_their_own_barriers(table, barriers, warp_syncs):
    # The pass config that keeps TileLang's sync pass out is honoured by tilelang.compile (what the
    # launcher runs), not by tilelang.lower alone: one block barrier a branch for pairs, none for warp.
    pytest.importorskip("tilelang")
    _nvcc()
    from tileops_cuda.kernels.qk_norm_rope import build_qk_norm_rope

    source = build_qk_norm_rope(dataclasses.replace(_SMALL, table=table)).kernel.get_kernel_source()
    assert source.count("__syncthreads()") == barriers and source.count("__syncwarp()") == warp_syncs

