"""The selection rule: availability, refusal, priority, preference, and the errors it raises.

Each outcome is checked with the exact text a user reads, on fake backends registered for
a fresh interface; install order never changes the winner; a build identity is built once.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import SelectionError
from tileops_core.kernels import registry
from tileops_core.kernels.select import build_count, kernel_for, select_kernel

pytestmark = pytest.mark.usefixtures("fresh_registry")


def lines(selection):
    return [c.line() for c in selection.candidates]


def test_implementation_for_the_call_device_is_kept_and_others_say_where_they_run():
    iface = make_interface()
    cpu, cuda = make_impl(iface, "CpuK"), make_impl(iface, "CudaK", devices=("cuda",))
    add_backend("b", cpu, cuda)
    selection = select_kernel(iface, make_call(iface, N=64))
    assert selection.chosen is cpu
    assert lines(selection) == ["kept    fakes:CpuK [b]: specialised and applicable",
                                "dropped fakes:CudaK [b]: runs on cuda, the call is on cpu"]


def test_arch_outside_supported_archs_is_unavailable():
    iface = make_interface()
    hopper = make_impl(iface, "HopperK", devices=("cuda",), archs=("sm_90",))
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("b", hopper, ref)
    selection = select_kernel(iface, make_call(iface, device_type="cuda", arch="sm_80", N=64))
    assert selection.chosen is ref
    assert lines(selection) == ["dropped fakes:HopperK [b]: supports archs sm_90, the device is sm_80",
                                "kept    fakes:RefK [b]: general"]


def test_refusal_is_reported_and_the_next_candidate_serves():
    iface = make_interface()
    fast = make_impl(iface, "FastK", refusal=lambda call: None if call.dims["N"] % 64 == 0 else
                     f"N={call.dims['N']} is not a multiple of 64")
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("b", fast, ref)
    selection = select_kernel(iface, make_call(iface, N=100))
    assert selection.chosen is ref
    assert lines(selection) == ["dropped fakes:FastK [b]: refused: N=100 is not a multiple of 64",
                                "kept    fakes:RefK [b]: general"]


def test_refusal_that_raises_is_reported_as_its_reason_not_swallowed():
    iface = make_interface()

    def broken(call):
        raise ValueError("N missing from the table")

    add_backend("b", make_impl(iface, "BrokenK", refusal=broken))
    selection = select_kernel(iface, make_call(iface, N=64))
    assert selection.chosen is None
    assert lines(selection) == ["dropped fakes:BrokenK [b]: refused: refusal() raised ValueError: N missing from "
                                "the table"]


def test_specialised_implementation_beats_the_general_one():
    iface = make_interface()
    fast, ref = make_impl(iface, "FastK"), make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("b", ref, fast)
    selection = select_kernel(iface, make_call(iface, N=64))
    assert selection.chosen is fast
    assert lines(selection) == ["kept    fakes:FastK [b]: specialised and applicable",
                                "dropped fakes:RefK [b]: general; a specialised implementation applies"]


def test_general_implementation_serves_when_nothing_specialised_applies():
    iface = make_interface()
    ref = make_impl(iface, "RefK", devices=("*",), general=True)
    add_backend("b", ref)
    assert kernel_for(iface, make_call(iface, N=7))() == "RefK"


def test_preferred_over_removes_the_other_implementation_named_by_class():
    iface = make_interface()
    plain = make_impl(iface, "PlainK")
    tuned = make_impl(iface, "TunedK", preferred_over=(plain,))
    add_backend("b", plain, tuned)
    selection = select_kernel(iface, make_call(iface, N=64))
    assert selection.chosen is tuned
    assert lines(selection) == ["dropped fakes:PlainK [b]: fakes:TunedK is preferred over it",
                                "kept    fakes:TunedK [b]: specialised and applicable"]


def test_preferred_over_accepts_a_module_qualname_string_across_backends():
    iface = make_interface()
    plain = make_impl(iface, "PlainK")
    tuned = make_impl(iface, "TunedK", preferred_over=("fakes:PlainK",))
    add_backend("vendor_a", plain)
    add_backend("vendor_b", tuned)
    assert select_kernel(iface, make_call(iface, N=64)).chosen is tuned


def test_two_applicable_specialised_implementations_are_an_ambiguity_error():
    iface = make_interface()
    add_backend("a", make_impl(iface, "AK"))
    add_backend("b", make_impl(iface, "BK"))
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, N=64))
    assert str(info.value) == (
        f"FakeOp: more than one implementation applies\n"
        f"fakes:{iface.__name__} for CallSpec(FakeOp.{iface.__name__} on cpu/cpu, dtypes={{'x': 'float32'}}, "
        f"dims={{'N': 64}}, flags={{}})\n"
        "target: automatic\n"
        "  dropped fakes:AK [a]: ambiguous: another applicable implementation has the same priority\n"
        "  dropped fakes:BK [b]: ambiguous: another applicable implementation has the same priority")


def test_no_applicable_implementation_is_an_error_listing_every_candidate_and_why():
    iface = make_interface()
    add_backend("b", make_impl(iface, "CudaK", devices=("cuda",)),
                make_impl(iface, "FastK", refusal=lambda call: "bfloat16 only"))
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, N=64))
    assert str(info.value) == (
        f"FakeOp: no implementation can serve this call\n"
        f"fakes:{iface.__name__} for CallSpec(FakeOp.{iface.__name__} on cpu/cpu, dtypes={{'x': 'float32'}}, "
        f"dims={{'N': 64}}, flags={{}})\n"
        "target: automatic\n"
        "  dropped fakes:CudaK [b]: runs on cuda, the call is on cpu\n"
        "  dropped fakes:FastK [b]: refused: bfloat16 only")


def test_selection_error_ends_with_the_plugins_that_failed_to_load():
    iface = make_interface()
    registry.record_failure(registry.LoadFailure("vendorx", "tileops-vendorx", "2.0.1",
                                                 "import failed: ModuleNotFoundError: No module named 'tilelang'"))
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, N=64))
    assert str(info.value).endswith(
        "plugins that failed to load:\n"
        "  plugin vendorx (tileops-vendorx 2.0.1) failed: import failed: ModuleNotFoundError: No module named "
        "'tilelang'")


def test_every_registration_order_selects_the_same_winner_with_the_same_story():
    iface = make_interface()
    impls = {
        "ref": make_impl(iface, "RefK", devices=("*",), general=True),
        "picky": make_impl(iface, "PickyK", refusal=lambda call: "N must be a multiple of 128"),
        "plain": make_impl(iface, "PlainK"),
        "tuned": make_impl(iface, "TunedK", preferred_over=("fakes:PlainK",)),
    }
    call = make_call(iface, N=64)
    outcomes = set()
    for order in itertools.permutations(sorted(impls)):
        with registry.use_registry(registry.Registry()):
            for backend in order:
                add_backend(backend, impls[backend])
            selection = select_kernel(iface, call)
        outcomes.add((selection.chosen, tuple(lines(selection))))
    [(chosen, story)] = outcomes
    assert chosen is impls["tuned"]
    assert "dropped fakes:PickyK [picky]: refused: N must be a multiple of 128" in story


def test_selection_itself_builds_nothing():
    iface = make_interface()
    built = []
    add_backend("b", make_impl(iface, "K", build=lambda: built.append(1) or (lambda: None)))
    select_kernel(iface, make_call(iface, N=64))
    assert built == []


def test_repeated_call_spec_is_served_from_the_cache_without_selecting_again():
    iface = make_interface()
    asked = []
    add_backend("b", make_impl(iface, "K", refusal=lambda call: asked.append(call) or None))
    first = kernel_for(iface, make_call(iface, N=64))
    second = kernel_for(iface, make_call(iface, N=64))
    assert second is first
    assert len(asked) == 1


def test_32_threads_racing_on_a_new_call_spec_build_it_exactly_once():
    iface = make_interface()
    builds = []

    def build():
        builds.append(threading.get_ident())
        time.sleep(0.05)  # widen the window in which a second build could start
        return lambda: "built"

    add_backend("b", make_impl(iface, "K", build=build))
    call = make_call(iface, N=4096)
    barrier = threading.Barrier(32)
    kernels, errors = [], []

    def worker():
        try:
            barrier.wait()
            kernels.append(kernel_for(iface, call))
        except Exception as exc:  # reported below; a thread must not die silently
            errors.append(exc)

    before = build_count()
    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(builds) == 1 and build_count() - before == 1
    assert len(kernels) == 32 and all(k is kernels[0] for k in kernels)


def test_call_specs_sharing_a_build_identity_share_one_build():
    iface = make_interface()
    builds = []
    add_backend("b", make_impl(iface, "K", build=lambda: builds.append(1) or (lambda: "k"),
                               build_key=lambda call: ("one", call.dtypes["x"])))
    a = kernel_for(iface, make_call(iface, N=64))
    b = kernel_for(iface, make_call(iface, N=128))
    assert a is b and builds == [1]


def test_preferred_over_cycle_is_reported_when_the_registry_is_built():
    iface = make_interface()
    add_backend("b", make_impl(iface, "AK", preferred_over=("fakes:BK",)),
                make_impl(iface, "BK", preferred_over=("fakes:AK",)))
    assert registry.check_consistency("b") == [
        f"fakes:{iface.__name__}: preferred_over cycle: fakes:AK -> fakes:BK -> fakes:AK"]


def test_two_general_implementations_for_one_device_are_reported():
    iface = make_interface()
    add_backend("a", make_impl(iface, "RefA", general=True))
    add_backend("b", make_impl(iface, "RefB", general=True))
    assert registry.check_consistency("b") == [
        f"fakes:{iface.__name__}: two general implementations for device 'cpu': fakes:RefA (a), fakes:RefB (b)"]


def test_a_general_implementation_for_any_device_overlaps_one_for_a_named_device():
    iface = make_interface()
    add_backend("a", make_impl(iface, "RefAny", general=True, devices=("*",)))
    add_backend("b", make_impl(iface, "RefCpu", general=True, devices=("cpu",)))
    assert registry.check_consistency("b") == [
        f"fakes:{iface.__name__}: two general implementations for device 'cpu': fakes:RefCpu (b), fakes:RefAny (a)"]


def test_selections_of_older_registry_generations_are_dropped():
    iface = make_interface()
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    for i in range(50):  # a process that registers and unregisters a backend again and again
        add_backend(f"churn{i}", make_impl(iface, f"Churn{i}K", devices=("npu",)), device_types=("npu",))
        assert kernel_for(iface, make_call(iface, N=8))() == "RefK"
        registry.unregister_backend(f"churn{i}")
    assert len(registry.active().caches.selections) <= 1


def test_a_kernel_whose_build_returns_no_callable_is_a_failed_build_and_selection_falls_back():
    iface = make_interface()  # no launch signature declared: only callability can be checked
    add_backend("vendor", make_impl(iface, "NoneK", build=lambda: None))
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with pytest.warns(RuntimeWarning, match=r"fakes:NoneK \[vendor\] build failed .*returned NoneType, not a callable"):
        assert kernel_for(iface, make_call(iface, N=8))() == "RefK"
    assert kernel_for(iface, make_call(iface, N=16))() == "RefK"  # a cached None is never taken for a kernel


def test_a_kernel_whose_build_raises_is_named_marked_failed_and_selection_falls_back():
    iface = make_interface()

    def broken_build():
        raise ZeroDivisionError("tile size 0")

    fast = make_impl(iface, "FastK", build=broken_build)
    add_backend("vendor", fast)
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    before = build_count()
    with pytest.warns(RuntimeWarning) as caught:
        assert kernel_for(iface, make_call(iface, N=8))() == "RefK"
    assert [str(w.message) for w in caught] == [
        "FakeOp: kernel fakes:FastK [vendor] build failed for ('FastK',): ZeroDivisionError: tile size 0; "
        "selection falls back to the next implementation"]
    assert [str(f) for f in registry.failures()] == [
        "plugin kernel fakes:FastK [vendor] failed: build failed for ('FastK',): ZeroDivisionError: tile size 0"]
    assert kernel_for(iface, make_call(iface, N=16))() == "RefK"  # the same identity is not built again
    assert build_count() == before + 1  # the reference, once
