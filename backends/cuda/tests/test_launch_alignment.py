"""Every launcher hands the programs that read an input in 16-byte vectors (or through tensor maps) that
input at a 16-byte aligned start, on the CPU with the compiled programs stood in for by recorders.

``t.contiguous()`` returns a contiguous ``t`` as it is, misaligned start and all (found in review: a
one-token slice of a fused projection at an odd offset, ``buf[1:1 + 4096].view(1, 4096)``, reached the
programs' 16-byte loads as it was: a misaligned-address fault or wrong data on the GPU), and the
interfaces that declare contiguity get the core's copy only of a non-contiguous input. So each case
calls one launcher twice: with one input replaced by a contiguous copy of it one element past a 16-byte
boundary, whose program gets the same values at an aligned start, and with that input aligned, whose
program gets its memory (no copy: the hot path's common call). An input the program writes (a state
pool, a KV cache) at a misaligned start is written through its aligned copy and copied back.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from tileops_cuda import registered  # noqa: E402
from tileops_cuda.kernels import (  # noqa: E402
    attention_decode, attention_prefill, chunk_gdr, conv1d, gated_rmsnorm, gemm, group_norm, linear,
    moe_grouped_experts, moe_shared_expert, moe_topk_routing, moe_unpermute, qk_norm_rope, reduce_sum, rgdr, rmsnorm,
    silu_and_mul, softmax, zero_centred_rmsnorm,
)
from tileops_cuda.kernels.moe_skinny import SHARED_SKINNY_TILING  # noqa: E402

#: A launcher's call with its programs stood in for: ``run(**inputs)`` gives, per input name, the
#: tensor a program received for it; ``inputs`` are a call's fresh random tensors.
Launch = tuple[Callable[..., dict[str, Any]], dict[str, Any]]


def _rand(*shape: int, dtype: Any = torch.bfloat16) -> Any:
    return torch.randn(*shape).to(dtype)


def _misaligned(t: Any) -> Any:
    """``t``'s values in a contiguous tensor one element past a 16-byte boundary (the CPU allocator
    aligns to 64 bytes, so ``base[1:]`` starts ``t.element_size()`` bytes past one)."""
    base = torch.empty(t.numel() + 1, dtype=t.dtype)
    view = base[1:].view(t.shape).copy_(t)
    assert view.is_contiguous() and view.data_ptr() % 16
    return view


def _recorder(calls: list[tuple[Any, ...]], written: tuple[int, ...] = ()) -> Callable[..., None]:
    """A stand-in program: records its arguments and negates those at ``written`` (what it writes)."""

    def program(*args: Any) -> None:
        calls.append(args)
        for i in written:
            args[i].neg_()

    return program


def _built(monkeypatch: pytest.MonkeyPatch, build: str, calls: list[tuple[Any, ...]]) -> None:
    """``registered.<build>`` stood in for by a build whose compiled function records into ``calls``."""
    monkeypatch.setattr(registered, build, lambda *key: SimpleNamespace(fn=_recorder(calls)))


def _rmsnorm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_rmsnorm", calls)
    launch = registered.TileLangRMSNorm.launcher(rmsnorm.RMSNormBuildKey("bfloat16", 64, True, "sm_90"))

    def run(x: Any, weight: Any) -> dict[str, Any]:
        launch(x, weight, (64,), 1e-6)
        return {"x": calls[-1][0], "weight": calls[-1][1]}

    return run, {"x": _rand(3, 64), "weight": _rand(64)}


def _softmax(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_softmax", calls)
    launch = registered.TileLangSoftmax.launcher(softmax.SoftmaxBuildKey("bfloat16", 64, "sm_90"))

    def run(input: Any) -> dict[str, Any]:
        launch(input, -1, None)
        return {"input": calls[-1][0]}

    return run, {"input": _rand(3, 64)}


def _silu_and_mul(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_silu_and_mul", calls)
    launch = registered.TileLangSiluAndMul.launcher(silu_and_mul.SiluAndMulBuildKey("bfloat16", 64, "sm_90"))

    def run(x: Any) -> dict[str, Any]:
        launch(x)
        return {"x": calls[-1][0]}

    return run, {"x": _rand(3, 128)}


def _sum(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(reduce_sum, "build_sum", lambda key: SimpleNamespace(fn=_recorder(calls)))
    launch = registered.TileLangSum.launcher(("bfloat16", "float32", "sm_90"))

    def run(input: Any) -> dict[str, Any]:
        calls.clear()
        launch(input, (-1,), False, None)
        return {"input": calls[0][0]}  # the first pass's rows (the second folds its partials)

    return run, {"input": _rand(4, 64)}


def _group_norm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_group_norm", calls)
    launch = registered.TileLangGroupNorm.launcher(group_norm.GroupNormBuildKey("bfloat16", 2, 8, 8, True, "sm_90"))

    def run(x: Any, weight: Any, bias: Any) -> dict[str, Any]:
        launch(x, weight, bias, 2, 1e-5)
        return {"x": calls[-1][0]}  # (weight and bias are read an element at a time)

    return run, {"x": _rand(2, 8, 8), "weight": _rand(8), "bias": _rand(8)}


def _gemm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_gemm", calls)
    launch = registered.TileLangGemm.launcher(gemm.GemmBuildKey("bfloat16", 32, 64, False, False, False, "sm_90"))

    def run(a: Any, b: Any) -> dict[str, Any]:
        launch(a, b, False, False)
        return {"a": calls[-1][0], "b": calls[-1][1]}

    return run, {"a": _rand(16, 64), "b": _rand(64, 32)}


def _bmm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_gemm", calls)
    launch = registered.TileLangBmm.launcher(gemm.GemmBuildKey("bfloat16", 32, 64, False, False, True, "sm_90"))

    def run(a: Any, b: Any) -> dict[str, Any]:
        launch(a, b)
        return {"a": calls[-1][0], "b": calls[-1][1]}

    return run, {"a": _rand(2, 16, 64), "b": _rand(2, 64, 32)}


def _linear(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    program = SimpleNamespace(fn=_recorder(calls))
    programs = linear.LinearPrograms(program, program, program, 4)  # (as built: any of the three a call's rows pick)
    monkeypatch.setattr(registered, "build_linear_kernels", lambda key: programs)
    launch = registered.TileLangLinear.launcher(gemm.GemmBuildKey("bfloat16", 32, 64, False, True, False, "sm_90"))

    def run(input: Any, weight: Any) -> dict[str, Any]:
        launch(input, weight, None)
        return {"input": calls[-1][0], "weight": calls[-1][1]}

    return run, {"input": _rand(1, 64), "weight": _rand(32, 64)}


def _zero_centred_rmsnorm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_zero_centred_rmsnorm", calls)
    key = zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("bfloat16", 64)
    launch = registered.TileLangZeroCentredRMSNorm.launcher(key)

    def run(x: Any, weight: Any) -> dict[str, Any]:
        launch(x, weight, 1e-6)
        return {"weight": calls[-1][1]}

    return run, {"x": _rand(3, 64), "weight": _rand(64)}


def _fused_add_zero_centred_rmsnorm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_zero_centred_rmsnorm", calls)
    key = zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("bfloat16", 64, True)
    launch = registered.TileLangFusedAddZeroCentredRMSNorm.launcher(key)

    def run(x: Any, residual: Any, weight: Any) -> dict[str, Any]:
        launch(x, residual, weight, 1e-6)
        return {"weight": calls[-1][2]}

    return run, {"x": _rand(3, 64), "residual": _rand(3, 64), "weight": _rand(64)}


def _gated_rmsnorm(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    _built(monkeypatch, "build_gated_rmsnorm", calls)
    launch = registered.TileLangGatedRMSNorm.launcher(gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 64))

    def run(x: Any, gate: Any, weight: Any) -> dict[str, Any]:
        launch(x, gate, weight, 1e-6)
        return {"weight": calls[-1][2]}

    return run, {"x": _rand(3, 4, 64), "gate": _rand(3, 4, 64), "weight": _rand(64)}


def _qk_norm_rope(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    launch = qk_norm_rope._make_run(qk_norm_rope.QKNormRopeBuildKey("bfloat16", "int64", 4, 2, 64), _recorder(calls))

    def run(query: Any, key: Any, q_weight: Any, k_weight: Any, positions: Any) -> dict[str, Any]:
        launch(query, key, q_weight, k_weight, positions, 64, 1e4, 1e-6, "neox", (0, 0, 0))
        return {"q_weight": calls[-1][2], "k_weight": calls[-1][3]}

    return run, {"query": _rand(3, 4, 64), "key": _rand(3, 2, 64), "q_weight": _rand(64), "k_weight": _rand(64),
                 "positions": torch.arange(3)}


def _moe_topk_routing(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    key = moe_topk_routing.MoETopKRoutingBuildKey("bfloat16", "int64", 64, 4)
    launch = moe_topk_routing._make_run(key, _recorder(calls))

    def run(router_logits: Any) -> dict[str, Any]:
        launch(router_logits, 4, True, torch.int64)
        return {"router_logits": calls[-1][0]}

    return run, {"router_logits": _rand(3, 64)}


def _moe_unpermute(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    key = moe_unpermute.MoEUnpermuteBuildKey("bfloat16", "int32", "bfloat16", 64, 2)
    launch = moe_unpermute._make_run(key, _recorder(calls))

    def run(expert_output: Any, permuted_index: Any, topk_weights: Any, shared_output: Any) -> dict[str, Any]:
        launch(expert_output, permuted_index, topk_weights, shared_output)
        return {"expert_output": calls[-1][0], "shared_output": calls[-1][3]}

    return run, {"expert_output": _rand(6, 64), "permuted_index": torch.randperm(6, dtype=torch.int32).view(3, 2),
                 "topk_weights": _rand(3, 2), "shared_output": _rand(3, 64)}


def _moe_grouped_experts(rows: int) -> Callable[[pytest.MonkeyPatch, bool], Launch]:
    """A call of ``rows`` rows: one runs the skinny programs (the banks viewed flat), three the decode tiling's."""

    def make(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
        calls: list[tuple[Any, ...]] = []
        key = moe_grouped_experts.MoEGroupedExpertsBuildKey("bfloat16", 2, 64, 32, skinny_max_rows=1)
        programs = tuple(_recorder(calls) for _ in range(6))
        launch = moe_grouped_experts._make_run(key, programs, programs[:3])

        def run(hidden_states: Any, expert_offsets: Any, gate_up_proj: Any, down_proj: Any) -> dict[str, Any]:
            calls.clear()
            launch(hidden_states, expert_offsets, gate_up_proj, down_proj)
            _, gate_up, down = calls  # the tile map, then gate/up, then down
            return {"hidden_states": gate_up[0], "gate_up_proj": gate_up[2], "down_proj": down[2]}

        return run, {"hidden_states": _rand(rows, 64),
                     "expert_offsets": torch.tensor([0, 1, rows], dtype=torch.int32),
                     "gate_up_proj": _rand(2, 64, 64), "down_proj": _rand(2, 64, 32)}

    return make


def _moe_shared_expert(rows: int) -> Callable[[pytest.MonkeyPatch, bool], Launch]:
    """A call of ``rows`` rows: one runs the skinny programs (the gate logit fused), three the decode tiling's."""

    def make(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
        calls: list[tuple[Any, ...]] = []
        key = moe_shared_expert.MoESharedExpertBuildKey("bfloat16", 64, 32, True, skinny_rows=1,
                                                        skinny_tiling=SHARED_SKINNY_TILING)
        decode = tuple(_recorder(calls) for _ in range(5))  # gate/up, down, the gate logit, then the skinny two
        launch = moe_shared_expert._make_run(key, decode, decode[:2])

        def run(x: Any, gate_proj: Any, up_proj: Any, down_proj: Any, expert_gate: Any) -> dict[str, Any]:
            calls.clear()
            launch(x, gate_proj, up_proj, down_proj, expert_gate)
            if rows == 1:  # the registered skinny gate/up writes the gate logit too (fused_logit)
                (x_, g, u, gate, *_), (_, d, *_) = calls
            else:
                (x_, g, u, _), (_, gate, _), (_, d, *_) = calls
            return {"x": x_, "gate_proj": g, "up_proj": u, "down_proj": d, "expert_gate": gate}

        return run, {"x": _rand(rows, 64), "gate_proj": _rand(32, 64), "up_proj": _rand(32, 64),
                     "down_proj": _rand(64, 32), "expert_gate": _rand(1, 64)}

    return make


def _attention_decode(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    split = _recorder(calls, (3, 4) if written else ())  # the new rows are written into both caches
    key = attention_decode.DecodeBuildKey("bfloat16", 4, 2, 16, schedule=attention_decode.DecodeSchedule(splits=1))
    launch = attention_decode._make_run(key, lambda block_size, schedule: split, lambda kind: _recorder([]))

    def run(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cache_seqlens: Any) -> dict[str, Any]:
        launch(query, key, value, key_cache, value_cache, cache_seqlens, None, None)
        return dict(zip(("query", "key", "value", "key_cache", "value_cache"), calls[-1]))

    return run, {"query": _rand(2, 4, 16), "key": _rand(2, 2, 16), "value": _rand(2, 2, 16),
                 "key_cache": _rand(2, 8, 2, 16), "value_cache": _rand(2, 8, 2, 16),
                 "cache_seqlens": torch.tensor([3, 5], dtype=torch.int32)}


def _attention_prefill(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    writes: list[tuple[Any, ...]] = []
    key = attention_prefill.PrefillBuildKey("bfloat16", 4, 2, 16)
    cache_write = _recorder(writes, (4, 5) if written else ())  # the prompt's rows into both caches
    launch = attention_prefill._make_run(key, _recorder(calls), cache_write, _recorder([]))

    def run(query: Any, key: Any, value: Any, key_cache: Any, value_cache: Any, cu_seqlens: Any) -> dict[str, Any]:
        launch(query, key, value, key_cache, value_cache, cu_seqlens, None, None)
        q, k, v = calls[-1][:3]
        return {"query": q, "key": k, "value": v, "key_cache": writes[-1][4], "value_cache": writes[-1][5]}

    return run, {"query": _rand(5, 4, 16), "key": _rand(5, 2, 16), "value": _rand(5, 2, 16),
                 "key_cache": _rand(2, 8, 2, 16), "value_cache": _rand(2, 8, 2, 16),
                 "cu_seqlens": torch.tensor([0, 2, 5], dtype=torch.int32)}


def _rgdr(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    calls: list[tuple[Any, ...]] = []
    key = rgdr.RGDRBuildKey("bfloat16", "float32", 2, 4, 64, 64, gk_form="vector")
    schedule = rgdr.default_schedule(key)
    program = _recorder(calls, (4,) if written else ())  # the state pool
    launch = rgdr._make_run(key, schedule, {t: program for t in schedule.tilings()}, 4)

    def run(query: Any, key: Any, value: Any, beta: Any, state: Any, actual_seq_lengths: Any,
            ssm_state_indices: Any, g: Any, gk: Any) -> dict[str, Any]:
        launch(query, key, value, beta, state, actual_seq_lengths, ssm_state_indices, g, gk)
        q, k, v, _, pool, _, _, _, gk_ = calls[-1][:9]
        return {"query": q, "key": k, "value": v, "state": pool, "gk": gk_}

    return run, {"query": _rand(2, 2, 64), "key": _rand(2, 2, 64), "value": _rand(2, 4, 64), "beta": _rand(2, 4),
                 "state": torch.randn(3, 4, 64, 64), "actual_seq_lengths": torch.ones(2, dtype=torch.int32),
                 "ssm_state_indices": torch.tensor([0, 2], dtype=torch.int32), "g": -torch.rand(2, 4),
                 "gk": -torch.rand(2, 4, 64)}


def _chunk_gdr(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
    wy: list[tuple[Any, ...]] = []
    walk: list[tuple[Any, ...]] = []
    out: list[tuple[Any, ...]] = []
    launch = chunk_gdr._make_run(chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 2, 4, 64, 64), _recorder([]),
                                 _recorder(wy), _recorder(walk, (8,) if written else ()), _recorder(out))

    def run(query: Any, key: Any, value: Any, g: Any, beta: Any, state: Any, cu_seqlens: Any,
            ssm_state_indices: Any) -> dict[str, Any]:
        launch(query, key, value, g, beta, state, cu_seqlens, ssm_state_indices)
        # W/U reads the keys and values, the state walk the pool, the outputs the queries
        return {"query": out[-1][0], "key": wy[-1][0], "value": wy[-1][1], "state": walk[-1][8]}

    return run, {"query": _rand(5, 2, 64), "key": _rand(5, 2, 64), "value": _rand(5, 4, 64), "g": -torch.rand(5, 4),
                 "beta": _rand(5, 4), "state": torch.randn(3, 4, 64, 64),
                 "cu_seqlens": torch.tensor([0, 2, 5], dtype=torch.int32),
                 "ssm_state_indices": torch.tensor([0, 2], dtype=torch.int32)}


def _conv(varlen: bool) -> Callable[[pytest.MonkeyPatch, bool], Launch]:
    def make(monkeypatch: pytest.MonkeyPatch, written: bool) -> Launch:
        calls: list[tuple[Any, ...]] = []
        if varlen:
            key = conv1d.ConvVarlenBuildKey("bfloat16", 64, 4, True, False, False, "int32", "int32")
            launch = conv1d._make_varlen_run(key, _recorder(calls))
        else:
            key = conv1d.ConvUpdateBuildKey("bfloat16", 64, 4, True, False, "lengths", "int32", "int32")
            launch = conv1d._make_update_run(key, _recorder(calls))

        def run(x: Any, conv_state: Any, weight: Any) -> dict[str, Any]:
            launch(x, conv_state, weight, torch.ones(2, dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32),
                   None, None, "silu", "lengths")
            return {"weight": calls[-1][2]}

        return run, {"x": _rand(2, 64), "conv_state": _rand(2, 64, 3), "weight": _rand(64, 4)}

    return make


#: launcher -> how to call it (``written``: the stand-ins write what their programs write).
LAUNCHERS: dict[str, Callable[[pytest.MonkeyPatch, bool], Launch]] = {
    "rmsnorm": _rmsnorm, "softmax": _softmax, "silu_and_mul": _silu_and_mul, "sum": _sum, "group_norm": _group_norm,
    "gemm": _gemm, "bmm": _bmm, "linear": _linear, "zero_centred_rmsnorm": _zero_centred_rmsnorm,
    "fused_add_zero_centred_rmsnorm": _fused_add_zero_centred_rmsnorm, "gated_rmsnorm": _gated_rmsnorm,
    "qk_norm_rope": _qk_norm_rope, "moe_topk_routing": _moe_topk_routing, "moe_unpermute": _moe_unpermute,
    "moe_grouped_experts-skinny": _moe_grouped_experts(1), "moe_grouped_experts-decode": _moe_grouped_experts(3),
    "moe_shared_expert-skinny": _moe_shared_expert(1), "moe_shared_expert-decode": _moe_shared_expert(3),
    "attention_decode": _attention_decode, "attention_prefill": _attention_prefill, "rgdr": _rgdr,
    "chunk_gdr": _chunk_gdr, "conv_update": _conv(False), "conv_varlen": _conv(True),
}
#: launcher -> the inputs its programs read in 16-byte vectors or through tensor maps.
VECTOR_INPUTS = {
    "rmsnorm": ("x", "weight"), "softmax": ("input",), "silu_and_mul": ("x",), "sum": ("input",), "group_norm": ("x",),
    "gemm": ("a", "b"), "bmm": ("a", "b"), "linear": ("input", "weight"), "zero_centred_rmsnorm": ("weight",),
    "fused_add_zero_centred_rmsnorm": ("weight",), "gated_rmsnorm": ("weight",),
    "qk_norm_rope": ("q_weight", "k_weight"), "moe_topk_routing": ("router_logits",),
    "moe_unpermute": ("expert_output", "shared_output"),
    **{f"moe_grouped_experts-{rows}": ("hidden_states", "gate_up_proj", "down_proj") for rows in ("skinny", "decode")},
    **{f"moe_shared_expert-{rows}": ("x", "gate_proj", "up_proj", "down_proj", "expert_gate")
       for rows in ("skinny", "decode")},
    "attention_decode": ("query", "key", "value", "key_cache", "value_cache"),
    "attention_prefill": ("query", "key", "value", "key_cache", "value_cache"),
    "rgdr": ("query", "key", "value", "state", "gk"), "chunk_gdr": ("query", "key", "value", "state"),
    "conv_update": ("weight",), "conv_varlen": ("weight",),
}
#: launcher -> the inputs its programs write.
WRITTEN_INPUTS = {"attention_decode": ("key_cache", "value_cache"),
                  "attention_prefill": ("key_cache", "value_cache"), "rgdr": ("state",), "chunk_gdr": ("state",)}


@pytest.mark.parametrize("launcher,name", [(launcher, name) for launcher, names in VECTOR_INPUTS.items()
                                           for name in names])
def test_a_contiguous_input_at_a_misaligned_start_reaches_its_program_copied_and_an_aligned_one_as_it_is(
        monkeypatch: pytest.MonkeyPatch, launcher: str, name: str) -> None:
    run, inputs = LAUNCHERS[launcher](monkeypatch, False)
    aligned = inputs[name]
    assert aligned.is_contiguous() and aligned.data_ptr() % 16 == 0
    assert run(**inputs)[name].data_ptr() == aligned.data_ptr(), f"{launcher}: an aligned contiguous {name} was copied"
    run, inputs = LAUNCHERS[launcher](monkeypatch, False)
    misaligned = inputs[name] = _misaligned(inputs[name])
    got = run(**inputs)[name]
    assert got.data_ptr() % 16 == 0, f"{launcher}: {name} reached its program {got.data_ptr() % 16} bytes off 16"
    assert torch.equal(got.reshape(-1), misaligned.reshape(-1))


@pytest.mark.parametrize("launcher,name", [(launcher, name) for launcher, names in WRITTEN_INPUTS.items()
                                           for name in names])
def test_a_written_input_at_a_misaligned_start_is_written_through_an_aligned_copy_and_copied_back(
        monkeypatch: pytest.MonkeyPatch, launcher: str, name: str) -> None:
    run, inputs = LAUNCHERS[launcher](monkeypatch, True)
    before = inputs[name].clone()
    misaligned = inputs[name] = _misaligned(inputs[name])
    got = run(**inputs)[name]
    assert got.data_ptr() % 16 == 0 and got is not misaligned
    assert torch.equal(misaligned, -before), f"{launcher}: what the program wrote into {name} was not copied back"
