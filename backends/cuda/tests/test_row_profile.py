"""``row_profile.py`` without a GPU: a row's NVTX range names its laid-over block-shape fields, every range of a set
is distinct and ncu-safe, and ``laid_over`` serves the row from the registered entries with those fields over them,
then puts the table back (the profile of one form must not leak into the next row's key)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tileops_core.kernels import CallSpec
from tileops_cuda.kernels import block_shapes
from tileops_cuda.registered_model import TileLangMoETopKRouting
from bench_scripts import bench_script


def _row_profile():
    return bench_script("row_profile")


def _next_4k() -> CallSpec:
    return CallSpec("MoETopKRoutingFwdOp", "moe_topk_routing", "cuda", "sm_90a",
                    {"router_logits": "bfloat16", "topk_weights": "bfloat16", "topk_ids": "int64"},
                    {"T": 4096, "E": 512, "top_k": 10}, {"renormalize": True})


def test_every_range_of_a_set_is_distinct_and_names_its_laid_over_fields():
    rp = _row_profile()
    for rows in rp.ROW_SETS.values():
        names = [rp.range_name(row) for row in rows]
        assert len(set(names)) == len(names)
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in names)
    assert [rp.range_name(row) for row in rp.ROW_SETS["routingforms"]] == [
        "qwen3-next-80b-prefill-4k", "qwen3-next-80b-prefill-4k.late_refill-1",
        "qwen3-next-80b-prefill-4k.long_heads-8"]


def test_a_laid_over_field_serves_the_row_from_the_registered_entry_and_the_table_is_restored():
    rp = _row_profile()
    registered = TileLangMoETopKRouting.key(_next_4k())
    table = block_shapes.BLOCK_SHAPES["TileLangMoETopKRouting"]
    with rp.laid_over({"TileLangMoETopKRouting": {"late_refill": True}}):
        assert TileLangMoETopKRouting.key(_next_4k()) == dataclasses.replace(registered, late_refill=True)
    assert block_shapes.BLOCK_SHAPES["TileLangMoETopKRouting"] is table
    with pytest.raises(RuntimeError), rp.laid_over({"TileLangMoETopKRouting": {"long_heads": 8}}):
        assert TileLangMoETopKRouting.key(_next_4k()) == dataclasses.replace(registered, long_heads=8)
        raise RuntimeError("a failing profile")
    assert block_shapes.BLOCK_SHAPES["TileLangMoETopKRouting"] is table
