"""The built kernel: RGDRKernel's call order into the binding, launch-time refusals, per-device platforms, build()."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

import tileops_core.op.base as op_base
from binding_stand_in import SEED_INPUT_ORDER, STAND_IN, reference
from fake_torch_npu import fake_torch_npu
from rgdr_cases import make_case
from tileops_ascend.kernel import AscendRGDR310P
from tileops_ascend.launch import BINDING_SCHEMA, RefusedCall
from tileops_ascend.launcher import DevicePlatforms, Rgdr310PLauncher, build
from tileops_ascend.platform import ASCEND_310P
from tileops_core.ops.linear_attention import RecurrentGatedDeltaRuleFwdOp

TESTS = Path(__file__).resolve().parent
OUT_TOL = dict(rtol=4e-3, atol=1e-3)
STATE_TOL = dict(rtol=2e-3, atol=1e-3)
NOTE = (
    " (decided at launch: kernel selection sees the call spec, which shows neither T, B nor the metadata's values; "
    "to run such calls on the reference, construct the op with target='npu@cpu_ref')"
)


def _launcher(binding=STAND_IN):
    return Rgdr310PLauncher(binding, lambda device: ASCEND_310P)


def _args(case):
    """``case``'s tensors in the kernel's input order (``make_case`` builds its dict in another order)."""
    return [case[name] for name in SEED_INPUT_ORDER]


def _never_called(*args):
    raise AssertionError("the binding was called for a call that must be refused before launch")


def test_launcher_parameters_are_the_seed_inputs_then_the_interface_params():
    names = tuple(inspect.signature(Rgdr310PLauncher.__call__).parameters)[1:]
    assert names == SEED_INPUT_ORDER + ("scale", "seq_lens_style", "use_qk_l2norm_in_kernel")


@pytest.mark.parametrize("seed", [0, 1])
def test_the_op_reaches_the_binding_with_every_tensor_in_its_slot(monkeypatch, seed):
    """Through the op's own forward (the call order Op.launch passes), the launcher and the stand-in binding.

    Prefix sums, vector gk, accepted counts and a non-default scale: every optional
    input and param must land where the kernel reads it for the numbers to match.
    """
    launcher = _launcher()
    monkeypatch.setattr(op_base, "choose_kernel", lambda interface, call, target=None: (AscendRGDR310P, launcher))
    case = make_case([3, 1, 8, 2], gk="vector", accepted=True, seq_lens_style="cu_seqlens", seed=seed + 10)
    want_out, want_state = reference(case, "cu_seqlens", scale=0.3)
    op = RecurrentGatedDeltaRuleFwdOp(scale=0.3, seq_lens_style="cu_seqlens", check_contents=True)
    state = case["state"]
    out = op(case["query"], case["key"], case["value"], case["beta"], state, case["actual_seq_lengths"],
             case["ssm_state_indices"], case["g"], case["gk"], case["num_accepted_tokens"])
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL)
    torch.testing.assert_close(state.double(), want_state.double(), **STATE_TOL)


def test_more_tokens_than_b_times_8_are_refused_at_launch_before_anything_is_written():
    case = make_case([9, 8], seed=20)
    before = case["state"].clone()
    with pytest.raises(RefusedCall) as err:
        _launcher(_never_called)(*_args(case), None, "lengths", False)
    assert str(err.value) == (
        "RGDR on ascend310p refuses this call: T=17 tokens exceed B*MAX_MTP=16 (B=2, MAX_MTP=8): some sequence is "
        "longer than the 8 tokens the 310P kernel takes" + NOTE
    )
    assert torch.equal(case["state"], before)


def test_one_sequence_longer_than_8_is_refused_at_launch_from_the_lengths():
    case = make_case([1, 9], seed=21)
    with pytest.raises(RefusedCall) as err:
        _launcher(_never_called)(*_args(case), None, "lengths", False)
    assert str(err.value) == (
        "RGDR on ascend310p refuses this call: sequence 1 has 9 tokens, more than MAX_MTP=8: the 310P kernel would "
        "stop at it silently, leaving it and the rest of its core's work uncomputed" + NOTE
    )


def test_a_padding_slot_is_refused_at_launch():
    case = make_case([2, 2], seed=22)
    case["ssm_state_indices"][2] = -1
    with pytest.raises(RefusedCall) as err:
        _launcher(_never_called)(*_args(case), None, "lengths", False)
    assert str(err.value) == (
        "RGDR on ascend310p refuses this call: ssm_state_indices[2] = -1 is a padding slot: the 310P kernel has no "
        "padding path and would write outside the state pool" + NOTE
    )


def test_a_slot_past_the_pool_is_refused_at_launch_and_through_the_op_raises_refused_call(monkeypatch):
    """With the core's contents checks off (their default) a slot of S reached the kernel, a write past the pool
    on a 310P; and the op's call wrapped the launch's refusal in a KernelError, which the documented
    `except RefusedCall` / `except ValueError` did not catch (both found in review)."""
    launcher = _launcher(_never_called)
    monkeypatch.setattr(op_base, "choose_kernel", lambda interface, call, target=None: (AscendRGDR310P, launcher))
    case = make_case([2, 2], seed=22)
    case["ssm_state_indices"][2] = case["state"].shape[0]
    before = case["state"].clone()
    with pytest.raises(RefusedCall, match=r"ssm_state_indices\[2\] = \d+ is past the pool of \d+ slots") as err:
        RecurrentGatedDeltaRuleFwdOp(check_contents=False)(*(case[n] for n in (
            "query", "key", "value", "beta", "state", "actual_seq_lengths", "ssm_state_indices", "g", "gk",
            "num_accepted_tokens")))
    assert isinstance(err.value, ValueError) and torch.equal(case["state"], before)


def test_accepted_counts_past_a_sequences_length_are_clipped_as_every_backend_clips_them():
    """Found in review: the 310P kernel read the first token's slot for a count past L_b (outputs 0.56 off)."""
    case = make_case([3, 2], accepted=True, seed=7)
    clipped = dict(case, num_accepted_tokens=torch.tensor([3, 2], dtype=torch.int32),
                   state=case["state"].clone())
    want_out, want_state = reference(clipped)
    case["num_accepted_tokens"] = torch.tensor([5, 2], dtype=torch.int32)  # 5 > L_0 = 3
    out = _launcher()(*_args(case), None, "lengths", False)
    torch.testing.assert_close(out.double(), want_out, **OUT_TOL)
    torch.testing.assert_close(case["state"].double(), want_state.double(), **STATE_TOL)


def test_platforms_are_detected_once_per_device_with_the_detected_core_count(monkeypatch):
    fake = fake_torch_npu("Ascend310P3", 10, 10, count=2, current=1)
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    platforms = DevicePlatforms(fake.npu.current_device)
    first = platforms(types.SimpleNamespace(type="npu", index=None))  # the current device, npu:1
    assert (first.arch, first.core_count, first.schedulable_cores) == ("ascend310p", 10, 8)
    assert platforms(types.SimpleNamespace(type="npu", index=1)) is first
    assert fake.calls == 1
    platforms(types.SimpleNamespace(type="npu", index=0))
    assert fake.calls == 2


def test_a_device_that_is_not_a_310p_has_no_platform(monkeypatch):
    fake = fake_torch_npu("Ascend910B2", 48, 24)
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    with pytest.raises(RuntimeError) as err:
        DevicePlatforms(fake.npu.current_device)(types.SimpleNamespace(type="npu", index=0))
    assert str(err.value) == "npu:0: found Ascend910B2 (ascend910b); the RGDR kernel is built only for ascend310p"


def test_build_imports_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(ImportError):
        build()


def test_build_without_the_kernel_library_names_the_missing_binding(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend310P3", 8, 8))
    with pytest.raises(RuntimeError) as err:
        build()
    assert str(err.value) == (
        "torch.ops.tileops_ascend.recurrent_gated_delta_rule is not registered: build the Ascend 310P RGDR kernel "
        f"package (seed 003 kernel plus a launcher with schema {BINDING_SCHEMA!r}) and load it with "
        "torch.ops.load_library before launching"
    )


def test_selection_builds_the_launcher_once_and_it_launches_through_the_registered_binding():
    """In a fresh process: a fake torch_npu, the stand-in registered under the binding's real name.

    kernel_for on a simulated 310P call runs this kernel's build (torch_npu import, binding
    resolution, device platforms); the launcher then runs on CPU tensors through the
    stand-in and must match the float64 reference.
    """
    code = f"""
        import sys, torch
        from fake_torch_npu import fake_torch_npu
        sys.modules["torch_npu"] = fake_torch_npu("Ascend310P3", 8, 8)
        import binding_stand_in
        from tileops_ascend.launch import BINDING_SCHEMA
        lib = torch.library.Library("tileops_ascend", "DEF")
        lib.define(BINDING_SCHEMA)
        lib.impl("recurrent_gated_delta_rule", binding_stand_in._stand_in, "CPU")

        from rgdr_cases import make_case
        from simulated_calls import meta_instance, simulated_call
        from tileops_ascend.launcher import Rgdr310PLauncher
        from tileops_core.kernels.select import build_count, kernel_for
        from tileops_core.ops.linear_attention import RGDRKernel

        calls = [simulated_call(meta_instance(label, fp16=True)) for label in ("tiny-fp16-scalar-gk", "qwen3.5-b32-t4-mtp")]
        before = build_count()
        launchers = [kernel_for(RGDRKernel, call) for call in calls]
        assert launchers[0] is launchers[1] and isinstance(launchers[0], Rgdr310PLauncher), launchers
        assert build_count() - before == 1
        case = make_case([2, 3, 1], gk="scalar", seed={int.from_bytes(os.urandom(2), "little")})
        want_out, want_state = binding_stand_in.reference(case)
        out = launchers[0](*[case[n] for n in binding_stand_in.SEED_INPUT_ORDER], None, "lengths", False)
        torch.testing.assert_close(out.double(), want_out, rtol=4e-3, atol=1e-3)
        torch.testing.assert_close(case["state"].double(), want_state.double(), rtol=2e-3, atol=1e-3)
        print("ok")
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_built_launcher_conforms_to_rgdr_kernels_declared_launch_signature():
    from tileops_core.kernels.contract import mismatches
    from tileops_core.ops.linear_attention import RGDRKernel

    assert RGDRKernel.launch is not None
    assert mismatches(RGDRKernel.launch, _launcher(), AscendRGDR310P.writes_outputs) == []
