"""The one registry: handles that undo exactly, selection that follows every change, isolation by swap."""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from fake_backends import add_backend, make_call, make_impl, make_interface
from tileops_core import plugins
from tileops_core._version import CORE_MAJOR
from tileops_core.errors import PluginError
from tileops_core.kernels import registry
from tileops_core.kernels.records import BackendInfo
from tileops_core.kernels.select import kernel_for

pytestmark = pytest.mark.usefixtures("fresh_registry")


@dataclass(frozen=True)
class FakeDevice:
    """A device of a type torch does not know (arch detection only reads ``.type``)."""

    type: str
    index: int = 0


def _plugin(name: str, backend: str, tmp_path: Path, *kernels: type, arch: str) -> types.ModuleType:
    """An in-process plugin contributing kernels, an arch detector, a spec directory and a profile."""
    folder = tmp_path / backend
    (folder / "manifest").mkdir(parents=True)
    (folder / "profile.yaml").write_text("name: fake\n")

    def tileops_register(registrar):
        registrar.backend(backend, device_types=("fakedev",), core_major=CORE_MAJOR)
        registrar.kernels(*kernels)
        registrar.arch_detector("fakedev", lambda device: arch)
        registrar.manifest_dir(folder / "manifest")
        registrar.hardware_profile(folder / "profile.yaml")

    module = types.ModuleType(name)
    module.tileops_register = tileops_register  # type: ignore[attr-defined]
    return module


def _state(*interfaces: type) -> tuple[object, ...]:
    """Everything a plugin can register, as comparable data."""
    active = registry.active()
    return (sorted(active.backends()),
            {i: [(k, active.backend_of(k)) for k in active.implementations(i)] for i in interfaces},
            [(s.label, s.directory) for s in active.manifest_sources()],
            [(p.backend, p.path) for p in active.hardware_profiles()],
            active.device_arch(FakeDevice("fakedev")))


def test_a_handle_undoes_exactly_what_its_plugin_registered(tmp_path, monkeypatch):
    monkeypatch.setenv(plugins.ENV_NO_AUTOLOAD, "1")
    iface, other = make_interface(), make_interface()
    kept = plugins.register_plugin(_plugin("keeper", "zz_keep", tmp_path, make_impl(iface, "KeepK"), arch="keep9"))
    assert kept.status == "loaded", kept.reason
    before = _state(iface, other)
    added = plugins.register_plugin(_plugin("adder", "aa_add", tmp_path, make_impl(iface, "AddK"),
                                            make_impl(other, "OtherK"), arch="add9"))
    assert added.status == "loaded", added.reason
    assert _state(iface, other) != before  # its kernels, its arch (first by backend name), its dirs
    handle = registry.active().plugins.handles["adder"]
    plugins.unregister_plugin("adder")
    assert _state(iface, other) == before
    assert not handle.live and [k.__name__ for k in handle.kernels] == ["AddK", "OtherK"]


def test_undoing_a_handle_twice_changes_nothing_the_second_time():
    iface = make_interface()
    handle = registry.register_backend(BackendInfo("once"))
    handle.kernel(make_impl(iface, "OnceK"))
    handle.undo()
    add_backend("once", make_impl(iface, "AgainK"))  # the name is free again, for a new registration
    handle.undo()
    assert [k.__name__ for k in registry.implementations(iface)] == ["AgainK"]


def test_an_undone_handle_registers_nothing_more():
    handle = registry.register_backend(BackendInfo("closed"))
    handle.undo()
    with pytest.raises(PluginError, match="backend 'closed' was unregistered; its registration is closed"):
        handle.kernel(make_impl(make_interface(), "LateK"))


def test_a_registry_change_invalidates_selection():
    iface = make_interface()
    call = make_call(iface, N=8)
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    assert kernel_for(iface, call)() == "RefK"
    add_backend("fast", make_impl(iface, "FastK"))
    assert kernel_for(iface, call)() == "FastK"
    registry.unregister_backend("fast")
    assert kernel_for(iface, call)() == "RefK"


def test_swapping_in_another_registry_invalidates_selection_and_the_first_comes_back_untouched():
    iface = make_interface()
    call = make_call(iface, N=8)
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    assert kernel_for(iface, call)() == "RefK"
    with registry.use_registry(registry.Registry()):
        assert registry.backends() == {}
        add_backend("other", make_impl(iface, "OtherK", devices=("*",), general=True))
        assert kernel_for(iface, call)() == "OtherK"
    assert sorted(registry.backends()) == ["ref"]
    assert kernel_for(iface, call)() == "RefK"


def test_which_backend_registered_a_kernel_is_kept_by_each_registry_not_on_the_class():
    impl = make_impl(make_interface(), "SharedK")
    add_backend("first", impl)
    with registry.use_registry(registry.Registry()):
        add_backend("second", impl)
        assert registry.backend_of(impl) == "second"
    assert registry.backend_of(impl) == "first"
    assert "backend" not in vars(impl)
