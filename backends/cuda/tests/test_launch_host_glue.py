"""What the launch glue decides once (a call shape's plan, an op's tables) or reads once (a tensor's
strides) still says what the per-call code said, on the CPU with the compiled functions stood in for.

The decode step on a GPU host is host-bound, so the launchers hoist what depends only on the build,
the params or the shapes out of the per-call path (``benchmarks/model_host_path.py``). These pin the
behaviour that must survive the hoisting: the alignment rule, one tile map for a MoE call's three
launches, fresh partial workspaces a decode call, each theta's own rotary table, the int32 refusal.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tileops_cuda.kernels import attention_decode, conv1d, moe_grouped_experts, qk_norm_rope  # noqa: E402
from tileops_cuda.kernels._row_views import readable  # noqa: E402


def _rule(t: Any) -> bool:
    """``readable``'s docstring as written: a 16-byte aligned start, and either a contiguous non-empty
    tensor of whole-vector rows, or a unit last stride with every other stepped stride whole vectors."""
    elems = 16 // t.element_size()
    if t.data_ptr() % 16:
        return False
    if t.dim() and t.numel() and t.is_contiguous() and t.shape[-1] % elems == 0:
        return True
    if t.dim() and t.stride(-1) != 1:
        return False
    return all(s % elems == 0 for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.float64])
def test_launch_views_are_readable_in_place_exactly_where_the_alignment_rule_says(dtype):
    rng = random.Random()
    storage = torch.empty(8192, dtype=dtype)
    checked = 0
    while checked < 3000:
        rank = rng.randint(0, 4)
        shape = [rng.choice([0, 1, 1, 2, 3, 4, 8, 16]) for _ in range(rank)]
        strides = [rng.choice([0, 1, 2, 3, 4, 8, 16, 24, 32, 64, 128]) for _ in range(rank)]
        view = storage.as_strided(shape, strides, rng.choice([0, 1, 2, 4, 8, 16]))
        assert readable(view) == _rule(view), (shape, strides, view.storage_offset(), dtype)
        checked += 1


def test_launch_moe_grouped_experts_runs_its_three_programs_on_one_tile_map():
    """The tiles program fills a three-row map (expert, first row, row bound) and zeroes the rows of
    ``out`` no expert covers, so it takes ``out`` too; gate/up and down read the same three rows."""
    key = moe_grouped_experts.MoEGroupedExpertsBuildKey("float32", 4, 64, 32, skinny_max_rows=4)
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def program(name: str) -> Any:
        return lambda *args: calls.append((name, args))

    decode = tuple(program(n) for n in ("tiles", "gate_up", "down") * 2)
    prefill = tuple(program(n) for n in ("tiles", "gate_up", "down"))
    run = moe_grouped_experts._make_run(key, decode, prefill)
    rows = random.choice([1, 2, 3, 4, 9])  # the skinny programs, then the decode tiling's
    out = run(torch.randn(rows, 64), torch.tensor([0, rows, rows, rows, rows], dtype=torch.int32),
              torch.randn(4, 64, 64), torch.randn(4, 64, 32))
    assert out.shape == (rows, 64)
    (_, tiles), (_, gate_up), (_, down) = calls
    _, expert, row, end, tiles_out = tiles
    assert [c[0] for c in calls] == ["tiles", "gate_up", "down"]
    assert tiles_out is out and down[5] is out
    assert expert.dtype == row.dtype == end.dtype == torch.int32
    # the three rows of one map, in that order
    assert row.data_ptr() - expert.data_ptr() == end.data_ptr() - row.data_ptr() == 4 * expert.numel()
    for args in (gate_up, down):
        assert [a.data_ptr() for a in (args[1], args[3], args[4])] == [end.data_ptr(), expert.data_ptr(),
                                                                       row.data_ptr()]
        assert args[1].shape == args[3].shape == args[4].shape == expert.shape


def test_launch_attention_decode_hands_each_call_fresh_partials_of_its_plans_shape():
    key = attention_decode.DecodeBuildKey("bfloat16", 16, 2, 16, schedule=attention_decode.DecodeSchedule(splits=4))
    splits: list[tuple[Any, Any]] = []
    run = attention_decode._make_run(key, lambda block_size, schedule: lambda *a: splits.append((a[7], a[8])),
                                     lambda kind: lambda *a: None)
    batch = random.randint(1, 3)
    cache = torch.randn(batch, 1000, 2, 16)
    q, kv = torch.randn(batch, 16, 16), torch.randn(batch, 2, 16)
    for _ in range(2):
        run(q, kv, kv, cache, cache.clone(), torch.full((batch,), 999, dtype=torch.int32), None, None)
    (o1, lse1), (o2, lse2) = splits
    assert o1.shape == o2.shape == (4, batch, 16, 16) and lse1.shape == lse2.shape == (4, batch, 16)
    assert o1.dtype == lse1.dtype == torch.float32
    # Both calls' partials are alive here: fresh storage each call, never one buffer shared between calls.
    assert len({o1.data_ptr(), o2.data_ptr(), lse1.data_ptr(), lse2.data_ptr()}) == 4


def test_launch_qk_norm_rope_hands_each_theta_its_own_inv_freq_table():
    key = qk_norm_rope.QKNormRopeBuildKey("float32", "int64", 4, 2, 16)
    tables: list[Any] = []
    run = qk_norm_rope._make_run(key, lambda *args: tables.append(args[5]))
    q, k, w = torch.randn(3, 4, 16), torch.randn(3, 2, 16), torch.randn(16)
    positions = torch.arange(3)
    thetas = [random.choice([1e4, 5e5]), 1e6]
    for theta in (*thetas, thetas[0]):
        run(q, k, w, w, positions, 12, theta, 1e-6, "neox", (0, 0, 0))
    for theta, table in zip((*thetas, thetas[0]), tables):
        want = torch.zeros(8)
        want[:6] = 1.0 / (theta ** (torch.arange(0, 12, 2, dtype=torch.float32) / 12))
        torch.testing.assert_close(table, want, rtol=0, atol=0)
    assert tables[2] is tables[0] and tables[1] is not tables[0]


def test_launch_conv_update_refuses_rows_past_int32_indexing_before_any_copy():
    key = conv1d.ConvUpdateBuildKey("float32", 8, 4)
    run = conv1d._make_update_run(key, lambda *args: pytest.fail("launched past int32 indexing"))
    rows = 2**28 + random.randint(1, 7)  # rows x 8 channels > 2^31 - 1; expanded: no memory behind it
    x = torch.zeros(1, 8).expand(rows, 8)
    assert rows * 8 > 2**31 - 1
    with pytest.raises(ValueError, match=f"x of {rows} rows exceeds int32 indexing"):
        run(x, torch.zeros(1, 8, 3), torch.zeros(8, 4), torch.ones(1, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32), out=torch.empty(1, 8))


def _qk_norm_rope_args(positions: Any, section: tuple[int, int, int]) -> list[Any]:
    """What the program got from one mrope_interleaved call over ``positions`` (``[3, T]``)."""
    key = qk_norm_rope.QKNormRopeBuildKey("float32", "int64", 4, 2, 16)
    got: list[Any] = []
    run = qk_norm_rope._make_run(key, lambda *args: got.extend(args))
    T = positions.shape[1]
    w = torch.randn(16)
    run(torch.randn(T, 4, 16), torch.randn(T, 2, 16), w, w, positions, 16, 1e6, 1e-6, "mrope_interleaved", section)
    return got


def test_launch_qk_norm_rope_reads_one_row_of_positions_expanded_to_three_by_the_neox_rule():
    T = random.randint(1, 5)
    row = torch.randint(0, 1000, (T,))
    got = _qk_norm_rope_args(row.expand(3, T), (2, 3, 3))
    rows, section_h, section_w = got[4], got[9], got[10]
    assert rows.shape == (1, T) and rows.is_contiguous() and torch.equal(rows[0], row)
    assert (section_h, section_w) == (0, 0)  # every frequency reads row 0: the same positions as rows 1 and 2


def test_launch_qk_norm_rope_reads_three_distinct_position_rows_by_the_mrope_sections():
    T = random.randint(1, 5)
    positions = torch.randint(0, 1000, (3, T))
    got = _qk_norm_rope_args(positions, (2, 3, 3))
    rows, section_h, section_w = got[4], got[9], got[10]
    assert torch.equal(rows, positions) and rows.is_contiguous() and (section_h, section_w) == (3, 3)
