"""The routed experts' launch function with the warp-per-feature programs (``MoEGroupedExpertsBuildKey.skinny_max_rows``)
on the CPU: the compiled kernels stood in for by torch code of their semantics on exactly the views
the launch hands them (a tile map of ``SKINNY_ROWS``-row tiles, the banks flat), against the
reference kernel; above ``skinny_max_rows`` rows (or with 0) the decode tiling's programs and
``[E, ·, ·]`` banks."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tileops_cpu_ref.moe import moe_grouped_experts  # noqa: E402
from tileops_cuda.kernels import moe_grouped_experts as routed  # noqa: E402
from tileops_cuda.kernels.moe_skinny import SKINNY_ROWS  # noqa: E402

Key = routed.MoEGroupedExpertsBuildKey


def _programs(name: str, block_m: int, E: int, H: int, I: int, calls: list[tuple[str, Any]]) -> tuple[Any, ...]:
    """``(tiles, gate_up, down)`` stand-ins for valid offsets: the tile map of ``block_m``-row tiles
    (expert, first row, row bound), then each mapped tile's rows through its expert's weights
    (``[E, ·, ·]`` banks or flat ones)."""

    def tiles(offsets, tile_expert, tile_row, tile_end, out):
        calls.append((f"{name}/tiles", tile_expert.shape))
        tile_expert.fill_(-1)
        slot = 0
        for e in range(E):
            for r0 in range(int(offsets[e]), int(offsets[e + 1]), block_m):
                tile_expert[slot], tile_row[slot], tile_end[slot] = e, r0, int(offsets[e + 1])
                slot += 1

    def tiles_of(tile_expert, tile_row, tile_end):
        for e, r0, end in zip(tile_expert.tolist(), tile_row.tolist(), tile_end.tolist()):
            if e >= 0:
                yield e, slice(r0, min(r0 + block_m, end))

    def gate_up(x, tile_end, bank, tile_expert, tile_row, act):
        calls.append((f"{name}/gate_up", bank.shape))
        bank = bank.view(E, 2 * I, H)
        for e, rows in tiles_of(tile_expert, tile_row, tile_end):
            g, u = F.linear(x[rows], bank[e, :I]), F.linear(x[rows], bank[e, I:])
            act[rows] = F.silu(g) * u

    def down(act, tile_end, bank, tile_expert, tile_row, out):
        calls.append((f"{name}/down", bank.shape))
        bank = bank.view(E, H, I)
        for e, rows in tiles_of(tile_expert, tile_row, tile_end):
            out[rows] = F.linear(act[rows], bank[e])

    return tiles, gate_up, down


@pytest.mark.parametrize("max_rows", [0, 4, 15, 100])
@pytest.mark.parametrize("counts", [[1, 0, 2, 0, 1], [0, 7, 1, 0, 0], [3, 3, 3, 3, 3]])
def test_a_decode_call_runs_the_skinny_programs_on_flat_banks_up_to_the_keys_rows(max_rows, counts):
    E, H, I = len(counts), 16, 8
    calls: list[tuple[str, Any]] = []
    decode = _programs("decode", routed.DECODE_TILING.block_m, E, H, I, calls)
    if max_rows:
        decode += _programs("skinny", SKINNY_ROWS, E, H, I, calls)
    prefill = _programs("prefill", routed.PREFILL_TILING.block_m, E, H, I, calls)
    run = routed._make_run(Key("float32", E, H, I, skinny_max_rows=max_rows), decode, prefill)
    N = sum(counts)
    skinny = N <= max_rows
    offsets = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)
    x, gate_up_proj, down_proj = torch.randn(N, H), torch.randn(E, 2 * I, H), torch.randn(E, H, I)
    out = run(x, offsets, gate_up_proj, down_proj)
    # float32 sums over other row groupings than the reference's (the BLAS's order varies with the rows)
    torch.testing.assert_close(out, moe_grouped_experts(x, offsets, gate_up_proj, down_proj), rtol=1e-4, atol=1e-4)
    name = "skinny" if skinny else "decode"
    assert [c for c, _ in calls] == [f"{name}/tiles", f"{name}/gate_up", f"{name}/down"]
    shapes = dict(calls)
    assert shapes[f"{name}/tiles"] == (routed.tile_slots(N, E, SKINNY_ROWS if skinny else 64),)
    flat = skinny
    assert shapes[f"{name}/gate_up"] == ((E * 2 * I, H) if flat else (E, 2 * I, H))
    assert shapes[f"{name}/down"] == ((E * H, I) if flat else (E, H, I))


@pytest.mark.parametrize("intermediate,features", [(512, 2), (1024, 2), (1536, 1), (4096, 1)])
def test_the_registered_key_takes_two_down_features_a_warp_where_they_fit_and_never_refuses_for_them(
        intermediate, features):
    """The routed experts' registered key (two down features a warp and the gate/up split,
    ``ROUTED_SKINNY_TILING``) falls back to
    one where a down row takes more than half a lane's loads in flight (bf16 I > 1024), instead of a key the
    kernel refuses; its skinny bound is a row an expert."""
    from tileops_core.kernels import CallSpec
    from tileops_cuda.registered_model import TileLangMoEGroupedExperts

    call = CallSpec("MoEGroupedExpertsFwdOp", "moe_grouped_experts", "cuda", "sm_90a",
                    {"hidden_states": "bfloat16", "expert_offsets": "int32"},
                    {"E": 256, "H": 2048, "I": intermediate, "T": 8}, {})
    key = TileLangMoEGroupedExperts.key(call)
    assert key.skinny_tiling.down_features == features and key.skinny_max_rows == 256
    assert key.skinny_tiling.gate_up_split  # gate/up rows are H long whatever I is
    assert TileLangMoEGroupedExperts.reason(call, key) is None
