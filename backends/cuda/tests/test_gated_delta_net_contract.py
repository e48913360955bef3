"""What holds for the gated-delta-net kernels without a GPU: refusals, the strided row views,
selection on every workload row, and the launch glue around the compiled function (run here
with a stand-in that computes through the very views the compiled function would be given).
Their light imports are checked with the others' in test_cpu_contract.py."""

from __future__ import annotations

import importlib
import pytest
import torch
import torch.nn.functional as F

from tileops_core import load_manifest
from tileops_core.bench.workloads import instantiate
from tileops_core.kernels import CallSpec, registry, select_kernel
from tileops_core.plugins import ensure_plugins_loaded
from tileops_core.workloads import dtype_cases
from tileops_cuda import registered
from tileops_cuda.kernels import gated_rmsnorm, gdn_gating, zero_centred_rmsnorm
from tileops_cuda.kernels._row_views import head_view, readable, row_view

ensure_plugins_loaded()
OPS = ("ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "GDNGatingFwdOp")


def test_the_qwen_sizes_are_served():
    assert zero_centred_rmsnorm.zero_centred_rmsnorm_refusal(
        zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("bfloat16", 4096, True)) is None
    assert gated_rmsnorm.gated_rmsnorm_refusal(gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 128)) is None
    assert gdn_gating.gdn_gating_refusal(gdn_gating.GDNGatingBuildKey("bfloat16", "float32", "bfloat16", 32)) is None


def test_gating_refuses_heads_that_are_not_whole_vectors_and_names_the_fix():
    reason = gdn_gating.gdn_gating_refusal(gdn_gating.GDNGatingBuildKey("bfloat16", "float32", "float32", 4))
    assert reason == ("GDNGating TileLang kernel: NV=4 must be a multiple of 8 (16-byte vectors of a and b); "
                      "use the reference")


def test_norms_refuse_a_dtype_they_were_not_written_for():
    key = zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("float64", 4096)
    assert "dtype float64 is not one of" in zero_centred_rmsnorm.zero_centred_rmsnorm_refusal(key)
    assert "D=100 must be a multiple of 8" in gated_rmsnorm.gated_rmsnorm_refusal(
        gated_rmsnorm.GatedRMSNormBuildKey("bfloat16", 100))


def test_a_column_slice_of_a_projection_is_read_in_place():
    wide = torch.randn(16, 3 * 256).bfloat16()
    view, copied = row_view(wide[:, 256:512], 256)
    assert not copied and view.data_ptr() == wide[:, 256:512].data_ptr() and view.stride() == (768, 1)


def test_a_gate_sliced_from_qkvz_is_read_in_place_as_outer_heads_rows():
    qkvz = torch.randn(5, 4 * 4 * 32).bfloat16()
    gate = qkvz[:, 3 * 4 * 32:].view(5, 4, 32)
    view, copied = head_view(gate, 32)
    assert not copied and view.shape == (5, 4, 32) and view.stride() == (512, 32, 1)


def test_two_dimensional_rows_are_one_outer_row_of_heads():
    view, copied = head_view(torch.randn(7, 64), 64)
    assert not copied and view.shape == (1, 7, 64)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(64, 64).bfloat16().t(),  # last axis not contiguous
    lambda: torch.randn(64, 72).bfloat16()[:, 1:65],  # start not 16-byte aligned
    lambda: torch.randn(64, 67).bfloat16()[:, :64],  # row stride not a whole 16-byte vector
    lambda: torch.randn(1, 72).bfloat16()[:, 1:65],  # contiguous, start not aligned: .contiguous() returns it as it is
], ids=["transposed", "misaligned-start", "odd-row-stride", "contiguous-misaligned-start"])
def test_views_the_kernels_cannot_read_are_copied_into_rows_they_can(make):
    t = make()
    view, copied = row_view(t, 64)
    assert copied and view.is_contiguous() and readable(view) and torch.equal(view, t)


def _readable_by_the_rule(t) -> bool:
    """The rule readable() states, read off every stride (its fast path must give the same answer)."""
    elems = 16 // t.element_size()
    if t.dim() and t.stride(-1) != 1:
        return False
    strides = [s for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1]
    return t.data_ptr() % 16 == 0 and all(s % elems == 0 for s in strides)


def test_readable_answers_as_its_rule_on_contiguous_sliced_transposed_and_offset_layouts():
    g = torch.Generator().manual_seed(0)
    cases = []
    for dtype in (torch.bfloat16, torch.float32):
        for shape in ((1, 1, 64), (3, 5, 8), (2, 4, 12), (7, 6), (1, 9), (5,), (4, 1, 16), (0, 8)):
            base = torch.randn(*shape, generator=g).to(dtype)
            cases += [base, base.view(-1)[1:] if base.numel() > 1 else base]
            if base.dim() >= 2:
                cases += [base.transpose(-1, -2), base[..., : max(1, base.shape[-1] // 2)], base[:1]]
        wide = torch.randn(6, 96, generator=g).to(dtype)
        cases += [wide[:, 32:64], wide[:, 8:40], wide[2:3, 5:37], wide.view(6, 12, 8)[:, 1:5]]
    for t in cases:
        assert readable(t) == _readable_by_the_rule(t), (t.shape, t.stride(), t.dtype, t.data_ptr() % 16)


def _simulated_calls(name: str):
    spec = load_manifest()[name]
    cls = getattr(importlib.import_module(spec.source["op"]), name)
    for row in spec.workloads:
        for case in dtype_cases(row):
            inst = instantiate(spec, row, case, meta_only=True)
            args = [None if m is None else torch.empty(m.shape, dtype=m.dtype, device="meta")
                    for m in inst.call_args(spec)]
            for interface, call in cls(**inst.op_kwargs).plan_for(*args).call_specs.items():
                yield inst.name, interface, CallSpec(call.op, call.interface, "cuda", "sm_90", call.dtypes, call.dims,
                                                     call.flags)


@pytest.mark.skipif("cuda" not in registry.backends(), reason="tileops-cuda is not installed")
@pytest.mark.parametrize("name", OPS)
def test_every_workload_row_selects_the_tilelang_kernel_or_names_why_not(name):
    for label, interface, call in _simulated_calls(name):
        selection = select_kernel(interface, call)
        tilelang = next(c.impl for c in selection.candidates if c.backend == "cuda")
        reason = tilelang.refusal(call)
        if reason is None:
            assert selection.chosen is tilelang, f"{label}: {selection.report()}"
        else:
            assert selection.chosen_backend == "cpu_ref" and f"refused: {reason}" in selection.report(), label


class _StandIn:
    """Stands for a compiled kernel: computes through the views it is given (float32 math)."""

    def __init__(self, fn):
        self.fn = fn


def test_fused_add_glue_writes_a_residual_it_had_to_copy_back_into_the_callers_view(monkeypatch):
    def fn(x, residual, weight, out, eps):
        residual.add_(x)
        out.copy_((F.rms_norm(residual.float(), (x.shape[-1],), eps=eps) * (1 + weight.float())).to(out.dtype))

    monkeypatch.setattr(registered, "build_zero_centred_rmsnorm", lambda key: _StandIn(fn))
    key = zero_centred_rmsnorm.ZeroCentredRMSNormBuildKey("float32", 64, True, "sm_90")
    launch = registered.TileLangFusedAddZeroCentredRMSNorm.launcher(key)
    x, w = torch.randn(6, 64), torch.randn(64)
    holder = torch.randn(64, 6)
    residual = holder.t()  # last axis not contiguous: the kernel gets a copy
    expected = residual + x
    out = launch(x, residual, w, 1e-6, torch.empty(6, 64))
    assert torch.equal(holder.t(), expected)
    torch.testing.assert_close(out, (F.rms_norm(expected, (64,), eps=1e-6) * (1 + w)))


def test_gated_glue_gives_the_kernel_matching_views_and_a_view_of_the_output(monkeypatch):
    seen = {}

    def fn(x, gate, weight, out, eps):
        seen["shapes"] = (x.shape, gate.shape, out.shape)
        out.copy_(F.rms_norm(x, (x.shape[-1],), eps=eps) * weight * F.silu(gate))

    monkeypatch.setattr(registered, "build_gated_rmsnorm", lambda key: _StandIn(fn))
    launch = registered.TileLangGatedRMSNorm.launcher(gated_rmsnorm.GatedRMSNormBuildKey("float32", 32, "sm_90"))
    x, w = torch.randn(2, 3, 4, 32), torch.randn(32)
    gate = torch.randn(2, 3, 4, 64)[..., 16:48]  # leading axes collapse: read in place
    out = launch(x, gate, w, 1e-6, torch.empty(2, 3, 4, 32))
    assert seen["shapes"] == ((6, 4, 32),) * 3
    torch.testing.assert_close(out, F.rms_norm(x, (32,), eps=1e-6) * w * F.silu(gate))


def test_gating_glue_writes_both_outputs_through_row_views(monkeypatch):
    def fn(a, b, A_log, dt_bias, g, beta):
        g.copy_(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
        beta.copy_(torch.sigmoid(b.float()).to(beta.dtype))

    monkeypatch.setattr(registered, "build_gdn_gating", lambda key: _StandIn(fn))
    launch = registered.TileLangGDNGating.launcher(gdn_gating.GDNGatingBuildKey("float32", "float32", "float32", 8))
    ba = torch.randn(2, 5, 16)
    b, a = ba[..., :8], ba[..., 8:]
    A_log, dt_bias = torch.randn(8), torch.randn(8)
    g, beta = launch(a, b, A_log, dt_bias, torch.empty(2, 5, 8), torch.empty(2, 5, 8))
    torch.testing.assert_close(g, -torch.exp(A_log) * F.softplus(a + dt_bias))
    torch.testing.assert_close(beta, torch.sigmoid(b))
