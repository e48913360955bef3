"""Targets: the layers and their precedence, explicit targets that fail loudly, automatic fallback."""

from __future__ import annotations

import json
import threading
import warnings

import pytest
import torch

import tileops_core
from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import SelectionError, TileOpsError
from tileops_core.cli.main import main
from tileops_core.kernels import targets
from tileops_core.kernels.select import kernel_for
from tileops_core.kernels.targets import (Target, active_target_source, current_target, default_device, parse_target,
                                          refresh_env_target, set_target, target_layers, use_target)
from tileops_core.ops.normalization import RMSNormFwdOp

pytestmark = pytest.mark.usefixtures("fresh_registry")


@pytest.fixture(autouse=True)
def no_targets(monkeypatch):
    """No process or environment target before or after a test."""
    monkeypatch.delenv("TILEOPS_TARGET", raising=False)
    refresh_env_target()
    set_target(None)
    yield
    set_target(None)
    monkeypatch.delenv("TILEOPS_TARGET", raising=False)
    refresh_env_target()


def test_target_text_forms_parse_into_device_arch_and_backend():
    assert parse_target("cuda") == Target("cuda", None, None)
    assert parse_target("cuda:sm_90") == Target("cuda", "sm_90", None)
    assert parse_target("cpu@cpu_ref") == Target("cpu", None, "cpu_ref")
    assert parse_target("@example") == Target(None, None, "example")
    assert parse_target("  ") is None


def test_malformed_target_names_the_form_to_write():
    with pytest.raises(TileOpsError) as info:
        parse_target("cuda/0")
    assert str(info.value) == ("invalid target 'cuda/0': write device[:arch][@backend], e.g. 'cuda:sm_90' or "
                               "'cpu@cpu_ref'")


def test_precedence_is_op_then_scope_then_process_then_environment(monkeypatch):
    monkeypatch.setenv("TILEOPS_TARGET", "cpu@from_env")
    refresh_env_target()
    assert str(current_target()) == "cpu@from_env"
    assert active_target_source() == "cpu@from_env from TILEOPS_TARGET"
    set_target("cpu@from_process")
    assert str(current_target()) == "cpu@from_process"
    with use_target("cpu@from_scope"):
        assert str(current_target()) == "cpu@from_scope"
        op_target = parse_target("cpu@from_op")
        assert current_target(op_target) is op_target
        assert active_target_source(op_target) == "cpu@from_op from the op"
        assert [(layer, str(v)) for layer, v in target_layers(op_target)] == [
            ("op target=", "cpu@from_op"), ("use_target()", "cpu@from_scope"), ("set_target()", "cpu@from_process"),
            ("TILEOPS_TARGET", "cpu@from_env")]
    assert str(current_target()) == "cpu@from_process"
    set_target(None)
    assert str(current_target()) == "cpu@from_env"


def test_malformed_environment_target_fails_at_first_selection_not_at_import(monkeypatch):
    monkeypatch.setenv("TILEOPS_TARGET", "cuda:sm 90")
    refresh_env_target()
    with pytest.raises(TileOpsError) as info:
        current_target()
    assert str(info.value) == ("TILEOPS_TARGET: invalid target 'cuda:sm 90': write device[:arch][@backend], e.g. "
                               "'cuda:sm_90' or 'cpu@cpu_ref'")


def test_scoped_target_belongs_to_its_thread():
    seen = []
    set_target("cpu@from_process")
    with use_target("cpu@from_scope"):
        thread = threading.Thread(target=lambda: seen.append(str(current_target())))
        thread.start()
        thread.join()
    assert seen == ["cpu@from_process"]


def test_package_exports_the_target_api():
    assert tileops_core.set_target is targets.set_target
    assert tileops_core.use_target is targets.use_target


def test_explicit_target_that_cannot_serve_fails_loudly_with_every_reason():
    iface = make_interface()
    fast = make_impl(iface, "FastK", devices=("cuda",), refusal=lambda call: "hidden size 100 is not a multiple of 8")
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("vendor", fast, device_types=("cuda",))
    add_backend("ref", ref)
    target = parse_target("cuda@vendor")
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_90", N=100), target)
    assert str(info.value) == (
        "FakeOp: no implementation can serve this call within the explicit target cuda@vendor\n"
        f"fakes:{iface.__name__} for CallSpec(FakeOp.{iface.__name__} on cuda/sm_90, dtypes={{'x': 'float32'}}, "
        "dims={'N': 100}, flags={})\n"
        "target: cuda@vendor\n"
        "  dropped fakes:FastK [vendor]: refused: hidden size 100 is not a multiple of 8\n"
        "  dropped fakes:RefK [ref]: target cuda@vendor asks for backend 'vendor', this is 'ref'")


def test_target_arch_excludes_implementations_on_another_arch():
    iface = make_interface()
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_80", N=8), parse_target("cuda:sm_90"))
    assert "dropped fakes:RefK [ref]: target cuda:sm_90 asks for arch 'sm_90', the device is 'sm_80'" in str(info.value)


def test_automatic_fallback_to_the_general_kernel_on_an_accelerator_warns_once_with_the_refusal():
    iface = make_interface()
    fast = make_impl(iface, "FastK", devices=("cuda",), refusal=lambda call: f"N={call.dims['N']} is not a multiple "
                     "of 8")
    add_backend("vendor", fast, device_types=("cuda",))
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with pytest.warns(RuntimeWarning) as record:
        assert kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_90", N=100))() == "RefK"
    assert [str(w.message) for w in record] == [
        "FakeOp: falling back to the general fakes:RefK on cuda (fakes:FastK: refused: N=100 is not a multiple of 8); "
        "tileops_core.dispatch_report() counts every fallback of this process (TILEOPS_DISPATCH_REPORT=1 prints it "
        "at exit)"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_90", N=101))  # the same fallback: silent


def test_general_kernel_on_the_cpu_is_the_intended_path_and_does_not_warn():
    iface = make_interface()
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_for(iface, make_call(iface, N=3))() == "RefK"


def test_explicit_target_on_an_accelerator_uses_the_general_kernel_without_a_warning():
    iface = make_interface()
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel_for(iface, make_call(iface, device_type="cuda", arch="sm_90", N=3), parse_target("cuda@ref"))


def test_op_target_reaches_selection_and_beats_the_scoped_target():
    x = torch.randn(4, 32)
    with use_target("cpu@no_such_backend"):
        with pytest.raises(SelectionError) as info:
            RMSNormFwdOp([32])(x)
        assert "within the explicit target cpu@no_such_backend" in str(info.value)
        y = RMSNormFwdOp([32], target="cpu@cpu_ref")(x)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, [32]))


def test_default_device_follows_the_target_device_class():
    assert default_device(parse_target("cpu")) == torch.device("cpu")
    acc = torch.accelerator.current_accelerator()
    if acc is None:
        assert default_device(parse_target("cuda")) == torch.device("cuda", 0)
        assert default_device(None) == torch.device("cpu")
    else:
        assert default_device(None).type == acc.type


def test_explain_shows_the_active_target_and_the_layer_it_comes_from(capsys):
    set_target("cpu@cpu_ref")
    assert main(["explain", "RMSNormFwdOp", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"]["source"] == "cpu@cpu_ref from set_target()"
    assert data["target"]["layers"] == {"op target=": None, "use_target()": None, "per-op overrides": None,
                                        "set_target()": "cpu@cpu_ref", "TILEOPS_TARGET": None}
    assert data["interfaces"][0]["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
