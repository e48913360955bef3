"""Selection on a simulated 310P: this kernel where it applies, the reference with this kernel's reason where not.

No NPU and no torch_npu here: the op plans each call on the CPU and the call spec is
re-addressed to npu/ascend310p (``simulated_calls``), which is all selection reads.
"""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from simulated_calls import meta_instance, simulated, simulated_call
from tileops_ascend.kernel import BUILD, AscendRGDR310P
from tileops_core.cli.main import main
from tileops_core.kernels.select import kernel_for, select_kernel
from tileops_core.ops.linear_attention import RGDRKernel
from tileops_core.plugins import ensure_plugins_loaded
from tileops_cpu_ref.kernels import RefRGDR

OURS = "tileops_ascend.kernel:AscendRGDR310P"
REF = "tileops_cpu_ref.kernels:RefRGDR"
BF16_REASON = "; ".join(
    [f"{name} is bfloat16, not float16: the 310P kernel is built only as RGDR<half, half>"
     for name in ("query", "key", "value", "beta")]
    + ["state is bfloat16, not float16: the 310P kernel reads and writes the state pool as fp16"]
)


@pytest.fixture(autouse=True)
def _installed_backends(fresh_registry):
    ensure_plugins_loaded()


def _lines(selection):
    # Kernels of other installed backends for other devices (e.g. cuda) are not this test's subject.
    return [c.line() for c in selection.candidates if c.backend in ("ascend", "cpu_ref")]


@pytest.mark.parametrize("label", ["tiny-fp16-scalar-gk", "qwen3.5-b1-t1-fp32state", "qwen3.5-b32-t4-mtp"])
def test_an_fp16_call_on_a_310p_selects_this_kernel(label):
    call = simulated_call(meta_instance(label, fp16=True))
    selection = select_kernel(RGDRKernel, call)
    assert selection.chosen is AscendRGDR310P
    assert _lines(selection) == [
        f"kept    {OURS} [ascend]: specialised and applicable",
        f"dropped {REF} [cpu_ref]: general; a specialised implementation applies",
    ]


def test_a_bf16_call_on_a_310p_falls_to_the_reference_with_this_kernels_reason():
    call = simulated_call(meta_instance("qwen3.5-b8-t2-bf16state"))
    selection = select_kernel(RGDRKernel, call)
    assert selection.chosen is RefRGDR
    assert _lines(selection) == [f"dropped {OURS} [ascend]: refused: {BF16_REASON}", f"kept    {REF} [cpu_ref]: general"]
    assert f"  dropped {OURS} [ascend]: refused: {BF16_REASON}" in selection.report().splitlines()


def test_in_kernel_l2_normalisation_is_refused_even_in_fp16():
    call = simulated_call(meta_instance("tiny-gates-mtp", fp16=True))
    selection = select_kernel(RGDRKernel, call)
    assert selection.chosen is RefRGDR
    assert _lines(selection)[0] == (
        f"dropped {OURS} [ascend]: refused: use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 "
        "normalisation (normalise before the call)"
    )


def test_the_fallback_warns_once_with_the_reason_and_builds_the_reference_without_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # any import of torch_npu would raise
    call = simulated_call(meta_instance("qwen3.5-b8-t2-bf16state"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = kernel_for(RGDRKernel, call)
    assert kernel is RefRGDR.fn
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages == [
        f"RecurrentGatedDeltaRuleFwdOp: falling back to the general {REF} on npu ({OURS}: refused: {BF16_REASON}); "
        "tileops_core.dispatch_report() counts every fallback of this process (TILEOPS_DISPATCH_REPORT=1 prints it "
        "at exit)"
    ]


def test_other_devices_and_archs_do_not_get_this_kernel():
    call = simulated_call(meta_instance("tiny-fp16-scalar-gk", fp16=True))
    on_cpu = select_kernel(RGDRKernel, simulated(call, "cpu", "cpu"))
    assert on_cpu.chosen is RefRGDR
    assert _lines(on_cpu)[0] == f"dropped {OURS} [ascend]: runs on npu, the call is on cpu"
    on_910b = select_kernel(RGDRKernel, simulated(call, "npu", "ascend910b"))
    assert on_910b.chosen is RefRGDR
    assert _lines(on_910b)[0] == f"dropped {OURS} [ascend]: supports archs ascend310p, the device is ascend910b"


def test_every_accepted_call_shares_the_one_build_identity():
    calls = [simulated_call(meta_instance(label, fp16=True))
             for label in ("tiny-fp16-scalar-gk", "qwen3.5-b32-t4-mtp", "qwen3.5-tp2-b256-t8-bf16state")]
    assert len({(c.dims["NK"], c.dims["DV"], c.flags["has_gk"]) for c in calls}) == 3  # really different calls
    assert all(AscendRGDR310P.refusal(c) is None for c in calls)
    assert {AscendRGDR310P.entry_for(c).build_key for c in calls} == {BUILD}
    assert (BUILD.arch, BUILD.tiling_key, BUILD.instantiation) == ("ascend310p", 0, "RGDR<half, half>")
    assert str(BUILD) == "tileops_ascend::recurrent_gated_delta_rule RGDR<half, half> tiling key 0 for ascend310p"


def test_explain_shows_the_refusal_on_a_simulated_310p(capsys):
    rc = main(["explain", "RecurrentGatedDeltaRuleFwdOp", "--workload", "qwen3.5-b8-t2-bf16state", "--device", "npu",
               "--arch", "ascend310p"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert "device: npu (simulated, arch ascend310p; planned on meta tensors)" in lines
    assert "  input state: bfloat16[32, 32, 128, 128] on meta" in lines
    assert f"  dropped {OURS} [ascend]: refused: {BF16_REASON}" in lines
    assert lines[-1] == f"chosen: {REF} (backend cpu_ref)"


def test_explain_json_picks_this_kernel_for_an_fp16_row(capsys):
    rc = main(["explain", "RecurrentGatedDeltaRuleFwdOp", "--workload", "tiny-fp16-scalar-gk", "--device", "npu",
               "--arch", "ascend310p", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    (interface,) = data["interfaces"]
    assert (interface["call"]["device_type"], interface["call"]["arch"]) == ("npu", "ascend310p")
    assert interface["call"]["dims"] == {"NK": 2, "NV": 4, "DK": 16, "DV": 16, "G": []}
    assert (interface["chosen"], interface["chosen_backend"]) == (OURS, "ascend")


def test_explain_simulation_needs_a_device_type(capsys):
    assert main(["explain", "RecurrentGatedDeltaRuleFwdOp", "--arch", "ascend310p"]) != 0
    assert "--arch ascend310p simulates a device: name its type with --device (e.g. --device npu)" in (
        capsys.readouterr().err
    )
