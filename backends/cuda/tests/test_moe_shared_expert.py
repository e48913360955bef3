"""The shared expert's TileLang kernel without a GPU: its build key and refusals, its selection
for the spec's rows on a simulated sm_90, and its launch function run with the compiled kernels
stood in for by torch code of their semantics on exactly the views the launch hands them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tileops_core.kernels import CallSpec, select_kernel  # noqa: E402
from tileops_core.ops.moe import MoESharedExpertFwdOp, MoESharedExpertKernel  # noqa: E402
from tileops_cpu_ref.moe import moe_shared_expert  # noqa: E402
from tileops_cuda import registered_model  # noqa: E402
from tileops_cuda.kernels import moe_shared_expert as shared  # noqa: E402
from tileops_cuda.kernels.moe_skinny import SHARED_SKINNY_TILING, SKINNY_ROWS  # noqa: E402
from tileops_cuda.launch_policy import with_dependent_launch  # noqa: E402

Key = shared.MoESharedExpertBuildKey
QWEN_H, QWEN_I = 2048, 512


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("gated", [True, False])
def test_the_qwen_shared_expert_sizes_are_served(dtype, gated):
    assert shared.moe_shared_expert_refusal(Key(dtype, QWEN_H, QWEN_I, gated, "sm_90")) is None


def test_float32_is_refused_naming_tf32_and_the_reference():
    assert shared.moe_shared_expert_refusal(Key("float32", QWEN_H, QWEN_I, True)) == (
        "MoESharedExpert TileLang kernel: dtype float32 is not one of ('float16', 'bfloat16') (float32 operands "
        "would be rounded to TF32 on the tensor cores); use the reference")


@pytest.mark.parametrize("hidden,intermediate", [(2044, 512), (2048, 36)])
def test_sizes_off_sixteen_byte_rows_are_refused(hidden, intermediate):
    assert shared.moe_shared_expert_refusal(Key("bfloat16", hidden, intermediate, False)) == (
        f"MoESharedExpert TileLang kernel: H={hidden} and I={intermediate} must be multiples of 8 (16-byte rows "
        "for the bulk copies); use the reference")


def test_archs_without_wgmma_are_refused():
    assert shared.moe_shared_expert_refusal(Key("bfloat16", QWEN_H, QWEN_I, True, "sm_80")) == (
        "MoESharedExpert TileLang kernel: arch sm_80 is not supported (written for sm_90, sm_90a); use the reference")


def test_the_build_raises_the_refusal_before_importing_tilelang():
    with pytest.raises(ValueError, match="dtype float32 is not one of"):
        shared.build_moe_shared_expert(Key("float32", QWEN_H, QWEN_I, False))


def _cuda_call(x_dtype: torch.dtype, gated: bool, arch: str = "sm_90", H: int = QWEN_H, I: int = QWEN_I) -> CallSpec:
    """The call spec the op plans on meta tensors, re-addressed to a simulated CUDA device."""
    meta = {"device": "meta", "dtype": x_dtype}
    args = [torch.empty(4, H, **meta), torch.empty(I, H, **meta), torch.empty(I, H, **meta), torch.empty(H, I, **meta),
            torch.empty(1, H, **meta) if gated else None]
    call = MoESharedExpertFwdOp().plan_for(*args).call_specs[MoESharedExpertKernel]
    return CallSpec(call.op, call.interface, "cuda", arch, call.dtypes, call.dims, call.flags)


@pytest.mark.parametrize("gated", [True, False])
def test_a_bf16_call_on_sm_90_selects_the_tilelang_kernel_keyed_on_the_gates_presence(gated):
    call = _cuda_call(torch.bfloat16, gated)
    assert select_kernel(MoESharedExpertKernel, call).chosen is registered_model.TileLangMoESharedExpert
    assert registered_model.TileLangMoESharedExpert.key(call) == with_dependent_launch(
        Key("bfloat16", QWEN_H, QWEN_I, gated, "sm_90", skinny_rows=SKINNY_ROWS, skinny_tiling=SHARED_SKINNY_TILING), True)


def test_a_float32_call_falls_back_to_the_reference_with_the_kernels_reason():
    selection = select_kernel(MoESharedExpertKernel, _cuda_call(torch.float32, True))
    assert selection.chosen_backend == "cpu_ref"
    assert "refused: MoESharedExpert TileLang kernel: dtype float32" in selection.report()


def _stand_ins(calls: list[tuple[str, tuple[Any, ...]]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Decode and prefill kernels (gate_up, down, gate_logit) computing the programs' semantics in
    float32 on the views they are given, recording ``(tiling/program, args)``."""

    def gate_up(tiling):
        def run(x, gate_proj, up_proj, act):
            calls.append((f"{tiling}/gate_up", (x, gate_proj, up_proj, act)))
            g, u = F.linear(x, gate_proj[0]).to(x.dtype), F.linear(x, up_proj[0]).to(x.dtype)
            act.copy_(F.silu(g.float()) * u.float())
        return run

    def down(tiling):
        def run(act, down_proj, *rest):
            calls.append((f"{tiling}/down", (act, down_proj, *rest)))
            *logit, out = rest
            o = F.linear(act, down_proj[0]).to(act.dtype).float()
            out.copy_(o * torch.sigmoid(logit[0].float())[:, None] if logit else o)
        return run

    def gate_logit(x, expert_gate, logit):
        calls.append(("gate_logit", (x, expert_gate, logit)))
        logit.copy_(F.linear(x, expert_gate)[:, 0])

    return (gate_up("decode"), down("decode"), gate_logit), (gate_up("prefill"), down("prefill"))


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("shape,tiling", [((2, 3), "decode"), ((), "decode"), ((shared.PREFILL_ROWS,), "prefill")])
def test_the_launch_hands_the_kernels_rows_and_one_expert_views_and_writes_the_cores_output(gated, shape, tiling):
    H, I = 16, 24
    calls: list[tuple[str, tuple[Any, ...]]] = []
    run = shared._make_run(Key("float32", H, I, gated), *_stand_ins(calls))
    x, gate_proj, up_proj, down_proj = torch.randn(*shape, H), torch.randn(I, H), torch.randn(I, H), torch.randn(H, I)
    expert_gate = torch.randn(1, H) if gated else None
    out = torch.full((*shape, H), float("nan"))
    assert run(x, gate_proj, up_proj, down_proj, expert_gate, out) is out
    torch.testing.assert_close(out, moe_shared_expert(x, gate_proj, up_proj, down_proj, expert_gate))
    rows = x.numel() // H
    names = [name for name, _ in calls]
    assert names == ([f"{tiling}/gate_up", "gate_logit", f"{tiling}/down"] if gated
                     else [f"{tiling}/gate_up", f"{tiling}/down"])
    _, (x_rows, w_gate, w_up, act) = calls[0]
    assert x_rows.shape == (rows, H) and w_gate.shape == w_up.shape == (1, I, H) and act.shape == (rows, I)
    assert calls[-1][1][1].shape == (1, H, I) and calls[-1][1][-1].shape == (rows, H)


def test_the_launch_allocates_without_an_output_and_does_nothing_for_no_rows():
    calls: list[tuple[str, tuple[Any, ...]]] = []
    run = shared._make_run(Key("float32", 8, 8, True), *_stand_ins(calls))
    weights = (torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8), torch.randn(1, 8))
    assert run(torch.randn(0, 8), *weights).shape == (0, 8) and calls == []
    x = torch.randn(3, 8)
    torch.testing.assert_close(run(x, *weights), moe_shared_expert(x, *weights))



def _skinny_stand_ins(calls: list[tuple[str, tuple[Any, ...]]], fused_logit: bool = False) -> tuple[Any, Any]:
    """The skinny programs' semantics on the ``[I, H]`` / ``[H, I]`` weights they take (with
    ``fused_logit``, the gate/up program writes the gate logit too)."""

    def gate_up(x, gate_proj, up_proj, *rest):
        calls.append(("skinny/gate_up", (x, gate_proj, up_proj, *rest)))
        g, u = F.linear(x, gate_proj).to(x.dtype), F.linear(x, up_proj).to(x.dtype)
        if fused_logit:
            expert_gate, act, logit = rest
            logit.copy_(F.linear(x, expert_gate)[:, 0])
        else:
            (act,) = rest
        act.copy_(F.silu(g.float()) * u.float())

    def down(act, down_proj, *rest):
        calls.append(("skinny/down", (act, down_proj, *rest)))
        *logit, out = rest
        o = F.linear(act, down_proj).to(act.dtype).float()
        out.copy_(o * torch.sigmoid(logit[0].float())[:, None] if logit else o)

    return gate_up, down


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("rows", [1, 3, 4])
def test_a_call_of_at_most_skinny_rows_runs_the_skinny_programs_on_the_weights_as_they_are(gated, rows):
    H, I, skinny = 16, 24, 3
    calls: list[tuple[str, tuple[Any, ...]]] = []
    decode, prefill = _stand_ins(calls)
    decode = (*decode[:3 if gated else 2], *_skinny_stand_ins(calls))
    run = shared._make_run(Key("float32", H, I, gated, skinny_rows=skinny), decode, prefill)
    x, gate_proj, up_proj, down_proj = torch.randn(rows, H), torch.randn(I, H), torch.randn(I, H), torch.randn(H, I)
    expert_gate = torch.randn(1, H) if gated else None
    out = run(x, gate_proj, up_proj, down_proj, expert_gate)
    torch.testing.assert_close(out, moe_shared_expert(x, gate_proj, up_proj, down_proj, expert_gate))
    program = "skinny" if rows <= skinny else "decode"
    names = [name for name, _ in calls]
    assert names == ([f"{program}/gate_up", "gate_logit", f"{program}/down"] if gated
                     else [f"{program}/gate_up", f"{program}/down"])
    if program == "skinny":
        assert calls[0][1][1].shape == (I, H) and calls[-1][1][1].shape == (H, I)


def test_skinny_rows_past_what_the_programs_stage_are_refused():
    reason = shared.moe_shared_expert_refusal(Key("bfloat16", QWEN_H, QWEN_I, True, skinny_rows=5))
    assert reason is not None and "skinny_rows=5" in reason
    assert shared.moe_shared_expert_refusal(Key("bfloat16", QWEN_H, QWEN_I, True, skinny_rows=4)) is None


@pytest.mark.parametrize("intermediate,features,fits", [(512, 1, True), (512, 4, True), (512, 8, False),
                                                        (1024, 2, True), (1024, 4, False), (4096, 1, True),
                                                        (512, 0, False)])
def test_down_features_a_lane_cannot_hold_in_flight_are_refused_by_both_skinny_keys(intermediate, features, fits):
    from tileops_cuda.kernels import moe_grouped_experts as routed
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling

    tiling = MoESkinnyTiling(down_features=features)
    reasons = [shared.moe_shared_expert_refusal(Key("bfloat16", QWEN_H, intermediate, True, skinny_rows=4,
                                                    skinny_tiling=tiling)),
               routed.moe_grouped_experts_refusal(routed.MoEGroupedExpertsBuildKey(
                   "bfloat16", 8, QWEN_H, intermediate, skinny_max_rows=4, skinny_tiling=tiling))]
    for reason in reasons:
        assert (reason is None) == fits, reason
        if not fits:
            assert f"down_features={features}" in reason and "use down_features=1" in reason
    # a key without the skinny programs never reads their tiling
    assert shared.moe_shared_expert_refusal(Key("bfloat16", QWEN_H, intermediate, True, skinny_tiling=tiling)) is None


@pytest.mark.parametrize("rows", [1, 4, 5])
def test_a_fused_logit_skinny_call_launches_no_gate_logit_program(rows):
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling

    H, I = 16, 24
    calls: list[tuple[str, tuple[Any, ...]]] = []
    decode, prefill = _stand_ins(calls)
    decode = (*decode[:3], *_skinny_stand_ins(calls, fused_logit=True))
    key = Key("float32", H, I, True, skinny_rows=4, skinny_tiling=MoESkinnyTiling(fused_logit=True))
    run = shared._make_run(key, decode, prefill)
    x, gate_proj, up_proj, down_proj = torch.randn(rows, H), torch.randn(I, H), torch.randn(I, H), torch.randn(H, I)
    expert_gate = torch.randn(1, H)
    out = run(x, gate_proj, up_proj, down_proj, expert_gate)
    torch.testing.assert_close(out, moe_shared_expert(x, gate_proj, up_proj, down_proj, expert_gate))
    names = [name for name, _ in calls]
    # five rows: the decode tiling and its own logit program, as without the fused logit
    assert names == (["skinny/gate_up", "skinny/down"] if rows <= 4 else ["decode/gate_up", "gate_logit", "decode/down"])
    if rows <= 4:
        (_, (_, _, _, gate, act, logit)), (_, (_, _, logit_read, _)) = calls
        assert gate.shape == (1, H) and act.shape == (rows, I) and logit is logit_read
