"""Plugin loading: discovery through entry points, isolation and whole roll-back, env switches.

Fake distributions are written as real ``.dist-info`` folders on a temporary ``sys.path``
entry, so discovery, distribution names and versions go through ``importlib.metadata``
exactly as for an installed wheel.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
import threading
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fake_backends import add_backend, make_call, make_interface
from plugin_site import FakeDevice, install, install_interrupted_once, reload_all, site  # noqa: F401  (site is a fixture)
from tileops_core import SelectionError, plugins
from tileops_core._version import CORE_MAJOR, __version__
from tileops_core.cli.main import main
from tileops_core.kernels import registry
from tileops_core.kernels.select import kernel_for
from tileops_core.ops.normalization import RMSNormFwdOp
from tileops_core.spec.manifest import load_manifest

pytestmark = pytest.mark.usefixtures("fresh_registry")

GOOD = """
    from fake_backends import make_impl, make_interface
    from tileops_core.plugins import hookimpl

    IFACE = make_interface()
    FAST = make_impl(IFACE, "FakeFastK")

    @hookimpl
    def tileops_register(registrar):
        registrar.backend("fakeback", device_types=("cpu",), core_major={major})
        registrar.kernels(FAST)
"""


def test_installed_plugin_is_discovered_with_its_distribution_name_and_version(site):
    module = install(site, GOOD.format(major=CORE_MAJOR))
    records = reload_all()
    record = records["fakeplug"]
    assert (record.status, record.distribution, record.version, record.backend) == (
        "loaded", "tileops-fakeplug", "1.2.3", "fakeback")
    assert record.origin == f"entry point fakeplug = {module}"
    mod = sys.modules[module]
    assert kernel_for(mod.IFACE, make_call(mod.IFACE, N=8))() == "FakeFastK"
    assert records["cpu_ref"].status == "loaded"


def test_hook_may_be_an_unmarked_function_named_tileops_register(site):
    install(site, GOOD.format(major=CORE_MAJOR).replace("@hookimpl", ""))
    assert reload_all()["fakeplug"].status == "loaded"


def test_plugin_that_fails_to_import_is_recorded_warned_once_and_the_others_load(site):
    install(site, "import tilelang_that_is_not_installed\n", dist="tileops-broken", version="0.0.1", entry="broken")
    plugins.reset_plugins()
    with pytest.warns(RuntimeWarning) as record:
        plugins.load_plugins()
    messages = [str(w.message) for w in record if "broken" in str(w.message)]
    assert len(messages) == 1
    assert messages[0].startswith("TileOPs plugin broken (tileops-broken 0.0.1) failed: import failed: "
                                  "ModuleNotFoundError: No module named 'tilelang_that_is_not_installed' (at ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugins.load_plugins()  # idempotent: no second load, no second warning
    failed = {r.name: r for r in plugins.plugin_records()}["broken"]
    assert failed.status == "failed" and "fakeplug" not in registry.backends()
    x = torch.randn(3, 16)
    torch.testing.assert_close(RMSNormFwdOp([16])(x), torch.nn.functional.rms_norm(x, [16]))


def test_hook_that_raises_half_way_leaves_nothing_of_the_plugin(site):
    module = install(site, """
        from fake_backends import make_impl, make_interface

        IFACE = make_interface()
        FAST = make_impl(IFACE, "FakeFastK")

        def tileops_register(registrar):
            registrar.backend("halfway", device_types=("cpu",), core_major=%d)
            registrar.kernels(FAST)
            raise RuntimeError("vendor library version mismatch")
    """ % CORE_MAJOR)
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed"
    assert record.reason.startswith("tileops_register raised: RuntimeError: vendor library version mismatch (at ")
    assert "halfway" not in registry.backends()
    assert registry.implementations(sys.modules[module].IFACE) == []


def test_failure_while_applying_rolls_back_kernels_specs_detectors_and_profiles(site):
    spec = """
        FakeRollbackFwdOp:
          family: fake
          ref_api: "none"
          status: implemented
          signature:
            inputs:
              x: {dtype: float32, shape: "[*S]"}
            outputs:
              y: {dtype: same_as(x), shape: "[*S]"}
          source: {op: fakeplug_x.ops}
    """
    module = install(site, """
        from pathlib import Path
        from fake_backends import make_impl, make_interface

        IFACE = make_interface()
        FAST = make_impl(IFACE, "FakeFastK")
        HERE = Path(__file__).parent

        def tileops_register(registrar):
            registrar.backend("rollback", device_types=("fakedev",), core_major=%d)
            registrar.kernels(FAST)
            registrar.arch_detector("fakedev", lambda device: "fake9")
            registrar.manifest_dir(HERE / "manifest")
            registrar.hardware_profile(HERE / "profile.yaml")
            registrar.ops(__name__ + ".ops")
    """ % CORE_MAJOR, files={"manifest/fake.yaml": spec, "profile.yaml": "name: fake\n",
                             "ops.py": "raise ImportError('op module needs a newer vendor runtime')\n"})
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed"
    assert record.reason.startswith("backend 'rollback' rolled back: ImportError: op module needs a newer vendor "
                                    "runtime (at ")
    assert "rollback" not in registry.backends()
    assert registry.implementations(sys.modules[module].IFACE) == []
    assert "FakeRollbackFwdOp" not in load_manifest()
    assert plugins.hardware_profiles() == []
    assert registry.device_arch(FakeDevice("fakedev")) == "unknown"


def _two_plugins(site, first: str, second: str) -> tuple[str, str]:
    a = install(site, first, dist="tileops-first", entry="first")
    b = install(site, second, dist="tileops-second", entry="second")
    return a, b


def test_duplicate_backend_name_is_refused_and_the_first_plugin_keeps_it(site):
    body = """
        from fake_backends import make_impl, make_interface
        IFACE = make_interface()
        K = make_impl(IFACE, "{name}")
        def tileops_register(registrar):
            registrar.backend("samename", device_types=("cpu",), core_major=%d)
            registrar.kernels(K)
    """ % CORE_MAJOR
    _, second = _two_plugins(site, body.format(name="FirstK"), body.format(name="SecondK"))
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["first"].status == "loaded"
    assert records["second"].reason == (
        "backend 'samename' rolled back: backend 'samename' is registered twice: plugin first (tileops-first 1.2.3) "
        "holds it, and plugin second (tileops-second 1.2.3) declares it too; uninstall one, or keep one out with "
        "TILEOPS_DISABLE_PLUGINS=second")
    assert [k.__name__ for k in registry.backends()["samename"].kernels] == ["FirstK"]
    assert registry.implementations(sys.modules[second].IFACE) == []


def test_kernel_claimed_by_two_plugins_is_refused_whole_for_the_second(site):
    a = install(site, """
        from fake_backends import make_impl, make_interface
        IFACE = make_interface()
        SHARED = make_impl(IFACE, "SharedK")
        def tileops_register(registrar):
            registrar.backend("owner", device_types=("cpu",), core_major=%d)
            registrar.kernels(SHARED)
    """ % CORE_MAJOR, dist="tileops-owner", entry="owner")
    install(site, """
        import sys
        from fake_backends import make_impl
        OWNER = sys.modules["%s"]
        MINE = make_impl(OWNER.IFACE, "MineK")
        def tileops_register(registrar):
            registrar.backend("claimer", device_types=("cpu",), core_major=%d)
            registrar.kernels(MINE, OWNER.SHARED)
    """ % (a, CORE_MAJOR), dist="tileops-claimer", entry="zz_claimer")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["zz_claimer"].reason == "backend 'claimer' rolled back: fakes:SharedK is registered twice"
    assert [k.__name__ for k in registry.implementations(sys.modules[a].IFACE)] == ["SharedK"]
    assert "claimer" not in registry.backends()


def test_second_general_kernel_for_a_device_rolls_back_the_plugin_that_adds_it(site):
    a = install(site, """
        from fake_backends import make_impl, make_interface
        IFACE = make_interface()
        REF = make_impl(IFACE, "RefA", general=True)
        def tileops_register(registrar):
            registrar.backend("refa", device_types=("cpu",), core_major=%d)
            registrar.kernels(REF)
    """ % CORE_MAJOR, dist="tileops-refa", entry="refa")
    install(site, """
        import sys
        from fake_backends import make_impl
        IFACE = sys.modules["%s"].IFACE
        REF = make_impl(IFACE, "RefB", general=True)
        def tileops_register(registrar):
            registrar.backend("refb", device_types=("cpu",), core_major=%d)
            registrar.kernels(REF)
    """ % (a, CORE_MAJOR), dist="tileops-refb", entry="refb")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    iface = sys.modules[a].IFACE
    assert records["refb"].reason == (
        f"backend 'refb' rolled back: contradictory declarations: fakes:{iface.__name__}: two general "
        "implementations for device 'cpu': fakes:RefA (refa), fakes:RefB (refb)")
    assert [k.__name__ for k in registry.implementations(iface)] == ["RefA"]


def test_plugin_closing_a_preferred_over_cycle_is_rolled_back(site):
    a = install(site, """
        from fake_backends import make_impl, make_interface
        IFACE = make_interface()
        A = make_impl(IFACE, "CycA", preferred_over=("fakes:CycB",))
        def tileops_register(registrar):
            registrar.backend("cyca", device_types=("cpu",), core_major=%d)
            registrar.kernels(A)
    """ % CORE_MAJOR, dist="tileops-cyca", entry="cyca")
    install(site, """
        import sys
        from fake_backends import make_impl
        B = make_impl(sys.modules["%s"].IFACE, "CycB", preferred_over=("fakes:CycA",))
        def tileops_register(registrar):
            registrar.backend("cycb", device_types=("cpu",), core_major=%d)
            registrar.kernels(B)
    """ % (a, CORE_MAJOR), dist="tileops-cycb", entry="cycb")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["cyca"].status == "loaded"
    assert records["cycb"].reason.endswith("preferred_over cycle: fakes:CycA -> fakes:CycB -> fakes:CycA")


def test_plugin_manifest_that_redefines_a_core_op_is_refused(site):
    install(site, """
        from pathlib import Path
        def tileops_register(registrar):
            registrar.backend("hijack", device_types=("cpu",), core_major=%d)
            registrar.manifest_dir(Path(__file__).parent / "manifest")
    """ % CORE_MAJOR, files={"manifest/norm.yaml": "RMSNormFwdOp:\n  family: normalization\n"})
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    core = load_manifest()["RMSNormFwdOp"]
    assert record.reason == (
        "backend 'hijack' rolled back: its manifest redefines existing ops (RMSNormFwdOp at "
        f"hijack:manifest/norm.yaml:1 is already defined at {core.file}:{core.line}); a plugin adds kernels to "
        "existing ops and ships only new ops of its own")
    assert load_manifest()["RMSNormFwdOp"].file == core.file


def test_backend_built_for_another_core_major_is_refused_with_the_fix(site):
    install(site, GOOD.format(major=CORE_MAJOR + 1), dist="tileops-future", version="9.0.0")
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.reason == (
        f"backend 'fakeback' rolled back: backend 'fakeback' was built for tileops core major {CORE_MAJOR + 1}, but "
        f"the installed core is tileops {__version__} (major {CORE_MAJOR}); install a release of tileops-future built "
        f"for core {CORE_MAJOR}.x, or a tileops {CORE_MAJOR + 1}.x core")
    assert "fakeback" not in registry.backends()


def test_hook_that_declares_no_backend_is_refused(site):
    install(site, "def tileops_register(registrar):\n    pass\n")
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.reason.startswith("tileops_register raised: plugin fakeplug: tileops_register() did not call "
                                    "registrar.backend(...)")


def test_misspelt_hook_marked_for_tileops_is_refused_as_an_invalid_plugin(site):
    install(site, """
        from tileops_core.plugins import hookimpl
        @hookimpl
        def tileops_regster(registrar):
            pass
    """)
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed"
    assert record.reason.startswith("not a valid plugin: ")
    assert "tileops_regster" in record.reason


def test_deny_list_keeps_a_plugin_out_and_reports_it_as_disabled(site, monkeypatch):
    install(site, GOOD.format(major=CORE_MAJOR))
    monkeypatch.setenv(plugins.ENV_DISABLE, "fakeplug")
    record = reload_all()["fakeplug"]
    assert (record.status, record.reason) == ("disabled", "disabled by TILEOPS_DISABLE_PLUGINS")
    assert "fakeback" not in registry.backends()


def test_allow_list_loads_only_the_named_plugins_by_entry_point_or_distribution_name(site, monkeypatch):
    install(site, GOOD.format(major=CORE_MAJOR))
    monkeypatch.setenv(plugins.ENV_ONLY, "tileops_fakeplug")
    records = reload_all()
    assert records["fakeplug"].status == "loaded"
    assert (records["cpu_ref"].status, records["cpu_ref"].reason) == ("disabled", "not listed in TILEOPS_PLUGINS")


def test_deny_list_wins_over_allow_list(site, monkeypatch):
    install(site, GOOD.format(major=CORE_MAJOR))
    monkeypatch.setenv(plugins.ENV_ONLY, "fakeplug,cpu_ref")
    monkeypatch.setenv(plugins.ENV_DISABLE, "tileops-fakeplug")
    assert reload_all()["fakeplug"].status == "disabled"


def test_autoload_off_makes_first_use_load_nothing_but_an_explicit_load_still_works(site, monkeypatch):
    install(site, GOOD.format(major=CORE_MAJOR))
    monkeypatch.setenv(plugins.ENV_NO_AUTOLOAD, "1")
    plugins.reset_plugins()
    plugins.ensure_plugins_loaded()
    assert registry.backends() == {} and plugins.plugin_records() == []
    plugins.load_plugins()
    assert {"cpu_ref", "fakeback"} <= set(registry.backends())


def test_concurrent_first_use_runs_each_hook_exactly_once(site):
    module = install(site, """
        import threading, time
        CALLS = []
        def tileops_register(registrar):
            CALLS.append(threading.get_ident())
            time.sleep(0.05)
            registrar.backend("slow", device_types=("cpu",), core_major=%d)
    """ % CORE_MAJOR)
    plugins.reset_plugins()
    barrier = threading.Barrier(16)

    def first_use():
        barrier.wait()
        plugins.ensure_plugins_loaded()

    threads = [threading.Thread(target=first_use) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sys.modules[module].CALLS) == 1
    assert "slow" in registry.backends()


def test_plugin_op_module_binds_to_its_spec_at_import_without_recursing(site):
    spec = """
        FakeNegateFwdOp:
          family: fake
          ref_api: "none"
          status: implemented
          description: y = -x
          signature:
            inputs:
              x: {dtype: "float32", shape: "[*S]"}
            outputs:
              y: {dtype: "same_as(x)", shape: "[*S]"}
          workloads:
            - {x_shape: [4, 8], dtypes: [float32], label: tiny}
          source: {op: PLACEHOLDER.ops}
    """
    ops = """
        from tileops_core.kernels import KernelInterface
        from tileops_core.op.base import Op
        from tileops_core.op.definition import is_bound
        from tileops_core.plugins import ensure_plugins_loaded

        ensure_plugins_loaded()  # re-entrant on the loading thread: returns at once

        class NegateKernel(KernelInterface):
            op = "FakeNegateFwdOp"

        class FakeNegateFwdOp(Op):
            interfaces = (NegateKernel,)
            def forward(self, x):
                return self.launch(NegateKernel, x)

        BOUND_AT_DEFINITION = is_bound(FakeNegateFwdOp)
    """
    source = """
        from pathlib import Path
        from tileops_core.kernels import KernelEntry

        def tileops_register(registrar):
            registrar.backend("negate", device_types=("cpu",), core_major=%d)
            registrar.manifest_dir(Path(__file__).parent / "manifest")
            registrar.ops(__name__ + ".ops")

        def register_kernel_later(ops):
            class RefNegate(ops.NegateKernel):
                devices = ("*",)
                general = True
                @classmethod
                def entry_for(cls, call):
                    return KernelEntry(("neg",), lambda: (lambda x: -x))
            return RefNegate
    """ % CORE_MAJOR
    installed = install(site, source, files={"manifest/neg.yaml": spec, "ops.py": ops})
    (site / installed / "manifest" / "neg.yaml").write_text(
        (site / installed / "manifest" / "neg.yaml").read_text().replace("PLACEHOLDER", installed))
    record = reload_all()["fakeplug"]
    assert record.status == "loaded", record.reason
    assert record.ops == ("FakeNegateFwdOp",)
    ops_module = sys.modules[f"{installed}.ops"]
    assert ops_module.BOUND_AT_DEFINITION
    add_backend("negate_ref", sys.modules[installed].register_kernel_later(ops_module))
    x = torch.randn(5, 3)
    assert torch.equal(ops_module.FakeNegateFwdOp()(x), -x)


def test_arch_detectors_of_several_backends_answer_in_backend_name_order(site):
    body = """
        def tileops_register(registrar):
            registrar.backend("{name}", device_types=("fakegpu",), core_major=%d)
            registrar.arch_detector("fakegpu", lambda device: "{arch}")
    """ % CORE_MAJOR
    install(site, body.format(name="zz_vendor", arch="fake90"), dist="tileops-zz", entry="zz")
    install(site, body.format(name="aa_vendor", arch="unknown"), dist="tileops-aa", entry="aa")
    reload_all()
    device = FakeDevice("fakegpu")
    assert registry.device_arch(device) == "fake90"
    plugins.unregister_plugin("zz")
    assert registry.device_arch(device) == "unknown"


def test_hardware_profiles_are_listed_with_the_backend_that_shipped_them(site):
    install(site, """
        from pathlib import Path
        def tileops_register(registrar):
            registrar.backend("profiled", device_types=("cpu",), core_major=%d)
            registrar.hardware_profile(Path(__file__).parent / "box.yaml")
    """ % CORE_MAJOR, files={"box.yaml": "name: box\n"})
    reload_all()
    (profile,) = [p for p in plugins.hardware_profiles() if p.backend == "profiled"]
    assert profile.path.name == "box.yaml"


def test_tileops_backends_lists_the_failure_and_exits_1(site, capsys):
    install(site, "raise RuntimeError('needs CANN 8')\n", dist="tileops-broken", version="0.0.1", entry="broken")
    with pytest.warns(RuntimeWarning):
        reload_all()
    assert main(["backends"]) == 1
    out = capsys.readouterr().out
    assert "  cpu_ref  (tileops-cpu-ref " in out
    assert "load failures (1):\n  broken (tileops-broken 0.0.1): import failed: RuntimeError: needs CANN 8 (at " in out


def test_selection_error_names_the_plugin_that_failed(site):
    install(site, "raise RuntimeError('needs CANN 8')\n", dist="tileops-broken", version="0.0.1", entry="broken")
    with pytest.warns(RuntimeWarning):
        reload_all()
    iface = make_interface()
    with pytest.raises(SelectionError) as info:
        kernel_for(iface, make_call(iface, N=1))
    assert "plugins that failed to load:\n  plugin broken (tileops-broken 0.0.1) failed: import failed: " \
           "RuntimeError: needs CANN 8" in str(info.value)


def test_register_plugin_in_process_is_isolated_like_an_entry_point():
    def hook(registrar):
        registrar.backend("inline", device_types=("cpu",), core_major=CORE_MAJOR)
        registrar.kernels(object)

    plugin = types.ModuleType("inline_plugin")
    plugin.tileops_register = hook
    with pytest.warns(RuntimeWarning):
        record = plugins.register_plugin(plugin, "inline")
    assert record.status == "failed"
    assert record.reason.startswith("tileops_register raised: plugin inline: registrar.kernels() takes kernel "
                                    "implementation classes (subclasses of a kernel interface), got <class 'object'>")
    assert "inline" not in registry.backends()


def test_reset_forgets_plugin_failures_and_the_next_use_loads_again(site):
    install(site, "raise RuntimeError('needs CANN 8')\n", dist="tileops-broken", version="0.0.1", entry="broken")
    with pytest.warns(RuntimeWarning):
        reload_all()
    assert any(f.name == "broken" for f in registry.failures())
    plugins.reset_plugins()
    assert registry.failures() == [] and registry.backends() == {}
    with pytest.warns(RuntimeWarning):
        plugins.ensure_plugins_loaded()
    assert "cpu_ref" in registry.backends()


def test_two_distributions_claiming_one_plugin_name_load_only_the_first_by_distribution_name(site):
    body = """
        def tileops_register(registrar):
            registrar.backend("{backend}", device_types=("cpu",), core_major=%d)
    """ % CORE_MAJOR
    first = install(site, body.format(backend="twin_a"), dist="tileops-twin-a", entry="twin")
    second = install(site, body.format(backend="twin_b"), dist="tileops-twin-b", entry="twin")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["twin"].backend == "twin_a"
    shadowed = records[f"twin (entry point twin = {second})"]
    assert shadowed.reason == (f"not loaded: a plugin named 'twin' is already loaded (from entry point twin = "
                               f"{first}, tileops-twin-a)")
    assert "twin_b" not in registry.backends()


# -- containment: a newcomer never displaces a core backend; an interrupted load is retried ----------

def test_a_plugin_taking_a_core_backend_name_is_the_one_rolled_back_whatever_its_name_sorts_like(site):
    install(site, """
        def tileops_register(registrar):
            registrar.backend("cpu_ref", device_types=("cpu",), core_major=%d)
    """ % CORE_MAJOR, dist="tileops-aaa-dupname", entry="aaa-dupname")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["cpu_ref"].status == "loaded"
    assert records["aaa-dupname"].status == "failed"
    assert records["aaa-dupname"].reason.endswith(
        f"backend 'cpu_ref' is registered twice: plugin cpu_ref (tileops-cpu-ref {records['cpu_ref'].version}) holds "
        "it, and plugin aaa-dupname (tileops-aaa-dupname 1.2.3) declares it too; uninstall one, or keep one out with "
        "TILEOPS_DISABLE_PLUGINS=aaa-dupname")
    assert registry.backends()["cpu_ref"].distribution == "tileops-cpu-ref"
    x = torch.randn(2, 8)
    torch.testing.assert_close(RMSNormFwdOp(normalized_shape=[8])(x), torch.nn.functional.rms_norm(x, [8]))


def test_a_plugin_adding_a_second_general_kernel_to_a_core_op_is_rolled_back_not_the_reference(site):
    install(site, """
        import torch
        from tileops_core.kernels import KernelEntry
        from tileops_core.ops.normalization import RMSNormKernel

        class ZerosRMSNorm(RMSNormKernel):
            devices = ("*",)
            general = True

            @classmethod
            def entry_for(cls, call):
                return KernelEntry(("zeros",), lambda: (lambda x, w, shape, eps: torch.zeros_like(x)))

        def tileops_register(registrar):
            registrar.backend("aaa_general", device_types=("cpu",), core_major=%d)
            registrar.kernels(ZerosRMSNorm)
    """ % CORE_MAJOR, dist="tileops-aaa-general", entry="aaa-general")
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["cpu_ref"].status == "loaded"
    assert records["aaa-general"].status == "failed"
    assert "two general implementations" in records["aaa-general"].reason
    x = torch.randn(2, 8)
    torch.testing.assert_close(RMSNormFwdOp(normalized_shape=[8])(x), torch.nn.functional.rms_norm(x, [8]))


def test_an_interrupted_load_is_retried_on_the_next_use(site, tmp_path):
    install_interrupted_once(site, tmp_path)
    plugins.reset_plugins()
    with pytest.raises(KeyboardInterrupt):
        plugins.load_plugins()
    plugins.ensure_plugins_loaded()  # the next use loads again, from where it stopped
    records = {r.name: r for r in plugins.plugin_records()}
    assert records["slowpoke"].status == "loaded"
    assert records["cpu_ref"].status == "loaded"
    assert not [r for r in records.values() if r.status == "failed"]


def test_a_plugin_whose_manifest_file_cannot_be_read_is_told_that_file_and_line(site):
    ops = """
        from tileops_core.kernels import KernelInterface
        from tileops_core.op.base import Op

        class BrokenKernel(KernelInterface):
            op = "FakeBrokenFwdOp"

        class FakeBrokenFwdOp(Op):
            interfaces = (BrokenKernel,)
            def forward(self, x):
                return self.launch(BrokenKernel, x)
    """
    source = """
        from pathlib import Path

        def tileops_register(registrar):
            registrar.backend("broken_spec", device_types=("cpu",), core_major=%d)
            registrar.manifest_dir(Path(__file__).parent / "manifest")
            registrar.ops(__name__ + ".ops")
    """ % CORE_MAJOR
    bad = "FakeBrokenFwdOp:\n  family: fake\n  signature: [unclosed\n"
    install(site, source, files={"manifest/broken.yaml": bad, "ops.py": ops})
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed"
    assert "because this plugin's manifest could not be read: broken_spec:manifest/broken.yaml:" in record.reason
    assert "YAML syntax error" in record.reason
    assert "ship its spec in a directory" not in record.reason


def test_a_plugin_registering_a_kernel_that_does_not_conform_to_its_interface_is_rolled_back_whole(site):
    module = install(site, """
        import torch
        from tileops_core.kernels import KernelInterface, launch_signature

        class ProbeKernel(KernelInterface):
            op = "ProbeOp"

            @launch_signature
            def launch(x: torch.Tensor, eps: float) -> torch.Tensor:
                raise NotImplementedError

        def good(x, eps):
            return x

        def bad(x, epsilon):
            return x

        class Good(ProbeKernel):
            devices = ("cpu",)
            launchers = classmethod(lambda cls: {"fn": good})

        class Bad(ProbeKernel):
            devices = ("cpu",)
            launchers = classmethod(lambda cls: {"fn": bad})

        def tileops_register(registrar):
            registrar.backend("contractback", device_types=("cpu",), core_major=%d)
            registrar.kernels(Good, Bad)
    """ % CORE_MAJOR)
    with pytest.warns(RuntimeWarning):
        records = reload_all()
    assert records["fakeplug"].status == "failed"
    assert records["fakeplug"].reason == (
        f"backend 'contractback' rolled back: kernel {module}:Bad does not conform to the launch signature of interface "
        f"{module}:ProbeKernel (its fn): missing parameter 'eps'; extra required parameter 'epsilon' (only "
        "parameters with a default, e.g. out=None, may follow the interface's)\n"
        "  interface: launch(x: torch.Tensor, eps: float) -> torch.Tensor\n  kernel:    (x, epsilon)")
    assert registry.implementations(sys.modules[module].ProbeKernel) == []
    assert "contractback" not in registry.backends()
