"""Arch ranges in ``supported_archs``: exact names, ``sm_90+`` and ``sm_8x``, in selection and in the
contradiction checks a backend's registration must pass."""

from __future__ import annotations

import pytest

from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import PluginError
from tileops_core.kernels import registry
from tileops_core.kernels.archs import arch_matches, parse_arch_pattern, patterns_overlap
from tileops_core.kernels.select import select_kernel


@pytest.mark.parametrize("pattern, arch, expected", [
    ("*", "sm_80", True), ("*", "unknown", True),
    ("sm_90", "sm_90", True), ("sm_90", "sm_90a", False), ("sm_90a", "sm_90a", True),
    ("sm_90+", "sm_90", True), ("sm_90+", "sm_90a", True), ("sm_90+", "sm_100", True), ("sm_90+", "sm_120", True),
    ("sm_90+", "sm_89", False), ("sm_90+", "ascend910", False), ("sm_90+", "unknown", False),
    ("sm_8x", "sm_80", True), ("sm_8x", "sm_86", True), ("sm_8x", "sm_89", True), ("sm_8x", "sm_90", False),
    ("sm_8x", "sm_8", False), ("sm_10x", "sm_100", True), ("sm_10x", "sm_110", False),
    ("ascend310p", "ascend310p", True), ("ascend310p", "ascend910", False), ("cpu", "cpu", True),
])
def test_a_pattern_matches_the_archs_of_its_set(pattern, arch, expected):
    assert arch_matches((pattern,), arch) is expected


@pytest.mark.parametrize("a, b, expected", [
    (("sm_90+",), ("sm_8x",), False), (("sm_90+",), ("sm_9x",), True), (("sm_90+",), ("sm_100",), True),
    (("sm_8x",), ("sm_86",), True), (("sm_8x",), ("sm_90",), False), (("sm_90",), ("sm_90",), True),
    (("sm_90",), ("sm_90a",), False), (("*",), ("sm_80",), True), (("sm_100+",), ("sm_90+",), True),
    (("sm_80", "sm_100+"), ("sm_9x",), False),
])
def test_two_declarations_overlap_exactly_where_their_sets_meet(a, b, expected):
    assert patterns_overlap(a, b) is expected
    assert patterns_overlap(b, a) is expected


@pytest.mark.parametrize("text", ["sm_90++", "sm 90", "", " sm_90", "sm_9x+"])
def test_a_malformed_pattern_names_the_forms(text):
    with pytest.raises(ValueError, match="arch pattern"):
        parse_arch_pattern(text)


@pytest.mark.usefixtures("fresh_registry")
def test_a_kernel_declaring_a_malformed_pattern_is_refused_at_registration():
    iface = make_interface()
    with pytest.raises(PluginError, match=r"fakes:BadK.supported_archs: arch pattern 'sm_90\+\+' is not"):
        add_backend("b", make_impl(iface, "BadK", devices=("cuda",), archs=("sm_90++",)))


@pytest.mark.usefixtures("fresh_registry")
def test_a_kernel_whose_range_lacks_the_device_arch_drops_out_before_launch_saying_why():
    iface = make_interface()
    hopper_up = make_impl(iface, "HopperUpK", devices=("cuda",), archs=("sm_90+",))
    ampere = make_impl(iface, "AmpereK", devices=("cuda",), archs=("sm_8x",))
    add_backend("b", hopper_up, ampere, device_types=("cuda",))
    on_blackwell = select_kernel(iface, make_call(iface, device_type="cuda", arch="sm_100", N=8))
    assert on_blackwell.chosen is hopper_up
    assert [c.line() for c in on_blackwell.candidates] == [
        "dropped fakes:AmpereK [b]: supports archs sm_8x, the device is sm_100",
        "kept    fakes:HopperUpK [b]: specialised and applicable"]
    assert select_kernel(iface, make_call(iface, device_type="cuda", arch="sm_86", N=8)).chosen is ampere


@pytest.mark.usefixtures("fresh_registry")
def test_general_kernels_for_disjoint_ranges_of_one_device_do_not_contradict():
    iface = make_interface()
    add_backend("b", make_impl(iface, "GenAmpere", devices=("cuda",), archs=("sm_8x",), general=True),
                make_impl(iface, "GenHopper", devices=("cuda",), archs=("sm_90+",), general=True),
                device_types=("cuda",))
    assert registry.check_consistency() == []


@pytest.mark.usefixtures("fresh_registry")
def test_general_kernels_for_overlapping_ranges_of_one_device_contradict_naming_the_ranges():
    iface = make_interface()
    add_backend("b", make_impl(iface, "GenNine", devices=("cuda",), archs=("sm_9x",), general=True),
                make_impl(iface, "GenHopper", devices=("cuda",), archs=("sm_90+",), general=True),
                device_types=("cuda",))
    assert registry.check_consistency() == [
        f"fakes:{iface.__name__}: two general implementations for device 'cuda' on overlapping archs sm_90+, sm_9x: "
        "fakes:GenHopper (b), fakes:GenNine (b)"]
