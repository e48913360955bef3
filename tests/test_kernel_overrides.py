"""Per-op kernel overrides: their syntax, their place among the layers, denies, and typos that fail loudly.

Precedence, highest first: an op's ``target=`` > ``use_target()`` > per-op pins >
``set_target()``/``TILEOPS_TARGET`` > automatic; denies hold under every layer. Each test
runs in a fresh registry with fake backends for a fresh interface, and no override,
target or lock in force before or after it.
"""

from __future__ import annotations

import json

import pytest

from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import SelectionError, TileOpsError
from tileops_core.cli.main import main
from tileops_core.kernels import overrides
from tileops_core.kernels.overrides import parse_overrides, set_kernel_overrides, use_kernel_overrides
from tileops_core.kernels.select import kernel_for, select_kernel
from tileops_core.kernels.targets import parse_target, refresh_env_target, set_target, use_target

pytestmark = pytest.mark.usefixtures("fresh_registry")


@pytest.fixture(autouse=True)
def no_steering(monkeypatch):
    """No override or target in force before or after a test."""
    monkeypatch.delenv("TILEOPS_KERNELS", raising=False)
    monkeypatch.delenv("TILEOPS_TARGET", raising=False)
    overrides.refresh_env_overrides()
    refresh_env_target()
    set_kernel_overrides(None)
    set_target(None)
    yield
    set_kernel_overrides(None)
    set_target(None)
    monkeypatch.delenv("TILEOPS_KERNELS", raising=False)
    overrides.refresh_env_overrides()
    refresh_env_target()


def two_backends():
    """A specialised kernel of backend ``fast`` and the general one of ``ref``; ``fast`` wins by the rule."""
    iface = make_interface("SteerOp")
    fast, ref = make_impl(iface, "FastK"), make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("fast", fast)
    add_backend("ref", ref)
    return iface, fast, ref


def chosen(iface, target=None):
    return select_kernel(iface, make_call(iface, N=8), target).chosen


def test_entries_parse_into_pins_and_denies_per_op():
    parsed = parse_overrides("RMSNormFwdOp=cpu_ref; RecurrentGatedDeltaRuleFwdOp=-TileLangRGDR,-cuda", "X")
    assert [(r.op, r.name, r.deny) for r in parsed.rules] == [
        ("RMSNormFwdOp", "cpu_ref", False), ("RecurrentGatedDeltaRuleFwdOp", "TileLangRGDR", True),
        ("RecurrentGatedDeltaRuleFwdOp", "cuda", True)]


@pytest.mark.parametrize("text, message", [
    ("RMSNormFwdOp", "X: entry 'RMSNormFwdOp' is not 'Op=kernel', 'Op=backend' or 'Op=-denied'"),
    ("RMSNormFwdOp=a b", "X: entry 'RMSNormFwdOp=a b': 'a b' is not a backend or kernel name"),
    ("A=x;A=y", "X: A is pinned twice ('A=x' and 'A=y'); an op has one pin"),
])
def test_malformed_entries_name_the_entry(text, message):
    with pytest.raises(TileOpsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_overrides(text, "X")


def test_a_pin_to_a_backend_replaces_the_rule_winner():
    iface, fast, ref = two_backends()
    assert chosen(iface) is fast
    set_kernel_overrides("SteerOp=ref")
    selection = select_kernel(iface, make_call(iface, N=8))
    assert selection.chosen is ref
    assert [c.line() for c in selection.candidates] == [
        "dropped fakes:FastK [fast]: not what set_kernel_overrides() pins for SteerOp ('SteerOp=ref')",
        "kept    fakes:RefK [ref]: general"]


def test_a_pin_names_a_kernel_by_class_name_or_module_qualname():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=RefK")
    assert chosen(iface) is ref
    set_kernel_overrides("SteerOp=fakes:RefK")
    assert chosen(iface) is ref


def test_a_pin_outranks_the_process_target_and_says_so():
    iface, fast, ref = two_backends()
    set_target("@fast")
    set_kernel_overrides("SteerOp=ref")
    selection = select_kernel(iface, make_call(iface, N=8), parse_target("@fast", "set_target()"))
    assert selection.chosen is ref
    assert "steering: target @fast from set_target(): shadowed for SteerOp by the per-op pin 'SteerOp=ref'" in \
        selection.report()


def test_a_scope_target_outranks_a_pin():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=ref")
    with use_target("@fast") as scoped:
        selection = select_kernel(iface, make_call(iface, N=8), scoped)
    assert selection.chosen is fast
    assert ("steering: per-op pin 'SteerOp=ref' (set_kernel_overrides()): shadowed by target @fast from use_target()"
            in selection.report())


def test_an_op_target_outranks_a_pin():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=ref")
    assert chosen(iface, parse_target("@fast", "the op's target=")) is fast


def test_a_denied_kernel_drops_out_with_the_deny_as_its_reason():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=-FastK")
    selection = select_kernel(iface, make_call(iface, N=8))
    assert selection.chosen is ref
    assert selection.candidates[0].line() == "dropped fakes:FastK [fast]: denied by set_kernel_overrides() ('SteerOp=-FastK')"


def test_a_deny_holds_under_a_scope_target_that_asks_for_the_denied_backend():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=-fast")
    with use_target("@fast") as scoped, pytest.raises(SelectionError) as raised:
        kernel_for(iface, make_call(iface, N=8), scoped)
    assert "dropped fakes:FastK [fast]: denied by set_kernel_overrides() ('SteerOp=-fast')" in str(raised.value)


def test_a_star_rule_applies_to_every_op():
    iface, fast, ref = two_backends()
    other = make_interface("OtherOp")
    other_fast, other_ref = make_impl(other, "OtherFastK"), make_impl(other, "OtherRefK", devices=("*",), general=True)
    add_backend("more", other_fast, other_ref)
    set_kernel_overrides("*=-fast,-fakes:OtherFastK")
    assert chosen(iface) is ref and chosen(other) is other_ref


@pytest.mark.parametrize("text", ["*=ref;SteerOp=fast", "SteerOp=fast;*=ref"])
def test_an_ops_own_pin_outranks_a_star_pin_in_either_order(text):
    iface, fast, ref = two_backends()
    set_kernel_overrides(text)
    assert chosen(iface) is fast


def test_a_misspelled_backend_is_an_error_naming_what_is_installed():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOp=reff")
    with pytest.raises(SelectionError) as raised:
        kernel_for(iface, make_call(iface, N=8))
    assert str(raised.value) == (
        "kernel overrides name nothing installed:\n  set_kernel_overrides(): 'SteerOp=reff': 'reff' is no installed "
        "backend or kernel of SteerOp; installed backends: fast, ref; kernels of SteerOp: FastK (fast), RefK (ref)")


def test_a_misspelled_op_is_an_error_with_the_closest_op():
    iface, fast, ref = two_backends()
    set_kernel_overrides("SteerOP=-FastK")
    with pytest.raises(SelectionError, match="'SteerOP=-FastK' names SteerOP, which no installed kernel implements "
                                             r"\(did you mean SteerOp\?\)"):
        kernel_for(iface, make_call(iface, N=8))


def test_a_malformed_environment_value_raises_at_selection_naming_the_variable(monkeypatch):
    iface, fast, ref = two_backends()
    monkeypatch.setenv("TILEOPS_KERNELS", "SteerOp")
    overrides.refresh_env_overrides()
    with pytest.raises(TileOpsError, match="TILEOPS_KERNELS: entry 'SteerOp' is not"):
        kernel_for(iface, make_call(iface, N=8))


def test_the_environment_variable_pins_and_the_programmatic_layer_replaces_it(monkeypatch):
    iface, fast, ref = two_backends()
    monkeypatch.setenv("TILEOPS_KERNELS", "SteerOp=ref")
    overrides.refresh_env_overrides()
    assert kernel_for(iface, make_call(iface, N=8))() == "RefK"
    with use_kernel_overrides("SteerOp=fast"):
        assert kernel_for(iface, make_call(iface, N=8))() == "FastK"
    assert kernel_for(iface, make_call(iface, N=8))() == "RefK"  # a changed override is never served from cache


def test_explain_shows_the_override_layer_in_its_place_and_the_cli_flag_leaves_nothing_behind(capsys):
    assert main(["explain", "RMSNormFwdOp", "--kernels", "RMSNormFwdOp=-RefRMSNorm", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert list(data["target"]["layers"]) == ["op target=", "use_target()", "per-op overrides", "set_target()",
                                              "TILEOPS_TARGET"]
    assert data["target"]["layers"]["per-op overrides"] == "RMSNormFwdOp=-RefRMSNorm (--kernels)"
    [candidate] = [c for c in data["interfaces"][0]["candidates"] if c["impl"].endswith(":RefRMSNorm")]
    assert candidate["reason"] == "denied by --kernels ('RMSNormFwdOp=-RefRMSNorm')"
    assert overrides.kernel_overrides() is None


def test_an_empty_kernels_flag_replaces_the_environment_by_no_override(monkeypatch, capsys):
    """The help says --kernels replaces TILEOPS_KERNELS; '' is "no override" (found in review: it was skipped,
    so the environment's deny stayed and no kernel was chosen)."""
    monkeypatch.setenv("TILEOPS_KERNELS", "RMSNormFwdOp=-RefRMSNorm")
    overrides.refresh_env_overrides()
    assert main(["explain", "RMSNormFwdOp", "--kernels", "", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interfaces"][0]["chosen"].endswith(":RefRMSNorm")


def test_backends_reports_an_override_naming_nothing_installed_and_exits_1(capsys):
    assert main(["backends", "--kernels", "RMSNormFwdOp=cpu_reff"]) == 1
    out = capsys.readouterr().out
    assert "selection layers (highest first): op target= (per op), use_target() (scope), per-op overrides" in out
    assert "'cpu_reff' is no installed backend or kernel of RMSNormFwdOp; installed backends:" in out
