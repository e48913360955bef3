"""CUDA caps a grid's y and z at 65535 programs (x takes 2^31 - 1): a program whose y or z is
a runtime size (rows, a batch) fails to launch past it. The programs over any number of rows
lay their grid out on x; the batched GEMM, whose z is the batch, is launched in pieces
(``test_launchers_cpu``). Lowering only (tilelang; skipped where it is not installed)."""

from __future__ import annotations

import pytest

pytest.importorskip("tilelang")

from lowered_source import grid_extents, lowered_source  # noqa: E402
from tileops_cuda.kernels import group_norm, reduce_sum, silu_and_mul  # noqa: E402

PROGRAMS = {
    "sum rows": (reduce_sum._rows_program, reduce_sum.SumBuildKey("rows", "bfloat16", "float32", 4096, "sm_90a")),
    "sum cols": (reduce_sum._cols_program, reduce_sum.SumBuildKey("cols", "float16", "float32", 24, "sm_90a")),
    "sum fold": (reduce_sum._cols_program, reduce_sum.SumBuildKey("cols", "float32", "bfloat16", 1, "sm_90a")),
    "silu_and_mul": (silu_and_mul._program, silu_and_mul.SiluAndMulBuildKey("bfloat16", 4096, "sm_90a")),
    "group_norm": (group_norm._program, group_norm.GroupNormBuildKey("float32", 8, 64, 256, True, "sm_90a")),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_over_any_number_of_rows_launches_on_grid_x_alone(name):
    program, key = PROGRAMS[name]
    assert set(grid_extents(program(key))) == {"blockIdx.x"}
    assert "blockIdx.y" not in lowered_source(program, key) and "blockIdx.z" not in lowered_source(program, key)
