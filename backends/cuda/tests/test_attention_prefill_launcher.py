"""The prefill launcher hands its programs the prompts as the spec reads ``cu_seqlens``, on the CPU
with the compiled functions stood in for.

Unchecked ``cu_seqlens`` (negative, decreasing, past T) must reach the cache write and the attention
as ``cummax(clip(cu_seqlens, 0, T))`` (RGDR's ``clipped_bounds``): a raw decreasing pair would give a
token two prompts and an output row two writers. With ``tile_counts="torch"`` the launcher clips;
with ``"kernel"`` the tile-count program does (its output checked on the GPU by
``test_attention_prefill_gpu.py``), launched before the programs that read it.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tileops_cpu_ref.rgdr import clipped_bounds  # noqa: E402
from tileops_cuda.kernels import attention_prefill  # noqa: E402
from tileops_cuda.kernels.attention_prefill import PrefillBuildKey, default_tiling  # noqa: E402

_CU = {"valid": [0, 5, 5, 140, 200], "decreasing": [0, 150, 100, 200], "negative-first": [-50, 130, 200],
       "past-T": [0, 70, 400, 90], "all-negative": [-5, -9, -1]}
_T = 200


def _prompts(cu: list[int]) -> list[int]:
    starts, spans = clipped_bounds(cu, "cu_seqlens", _T)
    return [starts[0], *(s + n for s, n in zip(starts, spans))]


def _launch(cu: list[int], tile_counts: str, cache_write: str) -> list[tuple[str, Any]]:
    """Run the launcher on CPU tensors with recorders for the programs; the calls in order."""
    calls: list[tuple[str, Any]] = []
    key = PrefillBuildKey("bfloat16", 4, 2, 64, tile_counts=tile_counts, cache_write=cache_write)

    def tiles(cu_seqlens: Any, tile_cu: Any, prompt_cu: Any, tokens: int) -> None:
        calls.append(("tiles", (cu_seqlens.tolist(), tokens)))
        prompt_cu.copy_(torch.tensor(_prompts(cu_seqlens.tolist()), dtype=prompt_cu.dtype))
        tile_cu.fill_(0)

    def cache(k: Any, v: Any, cu_arg: Any, *rest: Any) -> None:
        calls.append(("cache", cu_arg.tolist()))

    def attention(q: Any, k: Any, v: Any, cu_arg: Any, tile_cu: Any, *rest: Any) -> None:
        calls.append(("attention", (cu_arg.tolist(), tile_cu.tolist())))

    run = attention_prefill._make_run(key, attention, cache if cache_write == "launch" else None,
                                      tiles if tile_counts == "kernel" else None)
    q = torch.randn(_T, 4, 64).bfloat16()
    kv = torch.randn(_T, 2, 64).bfloat16()
    key_cache = torch.zeros(max(len(cu) - 1, 1), _T, 2, 64, dtype=torch.bfloat16)
    run(q, kv, kv.clone(), key_cache, key_cache.clone(), torch.tensor(cu, dtype=torch.int64), None, None)
    return calls


@pytest.mark.parametrize("cache_write", ["launch", "attention"])
@pytest.mark.parametrize("cu", list(_CU.values()), ids=list(_CU))
def test_the_torch_tile_counts_hand_the_programs_the_clipped_prompts(cu, cache_write):
    calls = _launch(cu, "torch", cache_write)
    prompts = _prompts(cu)
    block_m = default_tiling(PrefillBuildKey("bfloat16", 4, 2, 64)).block_m
    tiles = [0, *itertools.accumulate(-(-(e - s) // block_m) for s, e in zip(prompts, prompts[1:]))]
    want = ([("cache", prompts)] if cache_write == "launch" else []) + [("attention", (prompts, tiles))]
    assert calls == want
    if cu == _CU["valid"]:
        assert prompts == cu


@pytest.mark.parametrize("cache_write", ["launch", "attention"])
@pytest.mark.parametrize("cu", list(_CU.values()), ids=list(_CU))
def test_the_tile_count_program_runs_first_and_its_prompts_are_what_the_programs_read(cu, cache_write):
    calls = _launch(cu, "kernel", cache_write)
    prompts = _prompts(cu)
    assert calls[0] == ("tiles", (cu, _T))
    assert [c[0] for c in calls[1:]] == (["cache"] if cache_write == "launch" else []) + ["attention"]
    assert all((c[1] if c[0] == "cache" else c[1][0]) == prompts for c in calls[1:])


def test_no_prompt_launches_the_zeroing_alone_whatever_the_one_entry_says():
    assert _launch([37], "kernel", "launch") == [("cache", [37])]
    assert _launch([37], "torch", "attention") == []


def _choices(upto: int, T: int, cu: list[int]) -> list[str]:
    """Which of the two runs a key with ``attention_writes_upto=upto`` calls for T tokens and ``cu``."""
    calls: list[str] = []
    run = attention_prefill._choose_by_prompt_length(upto, lambda *a: calls.append("short"),
                                                     lambda *a: calls.append("long"))
    run(torch.empty(T, 4, 64), None, None, None, None, torch.tensor(cu), None, None)
    return calls


@pytest.mark.parametrize("T,cu,want", [
    (4096, [0, 4096], "short"),  # a mean prompt of exactly the bound
    (4097, [0, 4097], "long"),
    (4096, [0, 1024, 2048, 3072, 4096], "short"),
    (16384, [0, 4096, 8192, 12288, 16384], "short"),
    (16385, [0, 4096, 8192, 12288, 16385], "long"),
    (16384, [0, 16384], "long"),
    (300, [7], "long"),  # no prompt: the launched cache write zeroes every output
])
def test_the_mean_prompt_length_picks_who_writes_the_caches(T, cu, want):
    assert _choices(4096, T, cu) == [want]


def test_the_short_prompt_key_writes_the_caches_and_chooses_nothing_itself():
    key = PrefillBuildKey("bfloat16", 16, 2, 256, attention_writes_upto=4096)
    assert attention_prefill.short_prompt_key(key) == PrefillBuildKey("bfloat16", 16, 2, 256,
                                                                      cache_write="attention")
    assert attention_prefill.short_prompt_key(PrefillBuildKey("bfloat16", 16, 2, 256)) is None


@pytest.mark.parametrize("fields", [{"cache_write": "attention"}, {"program": "pipelined"}, {}])
def test_a_key_refuses_a_bound_it_cannot_serve(fields):
    upto = -1 if not fields else 4096
    with pytest.raises(ValueError, match="attention_writes_upto"):
        PrefillBuildKey("bfloat16", 16, 2, 256, attention_writes_upto=upto, **fields)


def test_the_ops_prefill_rows_select_the_key_with_the_registered_bound():
    """Every spec row of the prefill op that TileLang serves on Hopper (float32 rows stay on the reference) runs the
    overlap program choosing who writes the caches per call (``REGISTERED_ATTENTION_WRITES_UPTO``)."""
    from tileops_core.kernels import select_kernel
    from tileops_cuda.spec_rows import cuda_calls

    chosen = [(select_kernel(interface, call).chosen, call)
              for _, _, interface, call in cuda_calls(("AttentionPrefillFwdOp",), "sm_90a")]
    keys = [impl.entry_for(call).build_key[1] for impl, call in chosen if hasattr(impl, "program_key")]
    assert len(keys) >= len(chosen) // 2 and all(isinstance(k, PrefillBuildKey) for k in keys)
    assert {(k.program, k.cache_write, k.attention_writes_upto) for k in keys} == {
        ("overlap", "launch", attention_prefill.REGISTERED_ATTENTION_WRITES_UPTO)}
    assert all(attention_prefill.short_prompt_key(k) is not None for k in keys)
