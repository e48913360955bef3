"""What a user or backend author is told when the installation, not a call, is the problem.

Issue 19's plugin and target findings: an allow-list naming nothing installed, plugins switched
off on purpose, a target naming a backend that is not there or a device type torch does not
know, declarations that load but can never work (an arch detector for the CPU, a
``preferred_over`` naming no kernel, a shipped spec that does not load), and explaining a call
of any shape from the command line.
"""

from __future__ import annotations

import pytest
import torch

from plugin_site import install, install_interrupted_once, reload_all, site  # noqa: F401  (site is a fixture)
from tileops_core import SelectionError, plugins
from tileops_core._version import CORE_MAJOR
from tileops_core.cli.main import main
from tileops_core.kernels import registry
from tileops_core.kernels.targets import use_target
from tileops_core.ops.normalization import RMSNormFwdOp

pytestmark = pytest.mark.usefixtures("fresh_registry")


def _rms_norm_call() -> None:
    RMSNormFwdOp(normalized_shape=[8], eps=1e-6)(torch.randn(2, 8), torch.randn(8))


def test_an_allow_list_naming_no_installed_plugin_is_warned_listed_and_fails_backends(site, monkeypatch, capsys):
    monkeypatch.setenv(plugins.ENV_ONLY, "cpu_ref,cpu_rfe")
    with pytest.warns(RuntimeWarning, match="TILEOPS_PLUGINS names 'cpu-rfe', which no installed plugin is"):
        reload_all()
    assert main(["backends"]) == 1
    out = capsys.readouterr().out
    assert "loading notices (1):" in out
    assert "TILEOPS_PLUGINS names 'cpu-rfe', which no installed plugin is (installed plugins: " in out


def test_a_selection_error_names_the_plugins_switched_off_and_the_variable_that_did_it(site, monkeypatch):
    monkeypatch.setenv(plugins.ENV_DISABLE, "cpu_ref")
    reload_all()
    with pytest.raises(SelectionError) as err:
        _rms_norm_call()
    assert "plugins: cpu_ref (tileops-cpu-ref) is switched off: disabled by TILEOPS_DISABLE_PLUGINS" in str(err.value)


def test_a_selection_error_with_autoload_off_says_that_no_plugin_was_loaded_and_why(site, monkeypatch):
    plugins.reset_plugins()
    monkeypatch.setenv(plugins.ENV_NO_AUTOLOAD, "1")
    with pytest.raises(SelectionError) as err:
        _rms_norm_call()
    assert ("plugins: TILEOPS_DISABLE_PLUGIN_AUTOLOAD is set, so no installed plugin was loaded on first use"
            in str(err.value))


def test_a_target_naming_a_backend_that_is_not_installed_says_so_once_with_the_installed_ones(site):
    reload_all()
    with use_target("@acme"), pytest.raises(SelectionError) as err:
        _rms_norm_call()
    installed = ", ".join(sorted(registry.backends()))
    assert (f"target @acme names backend 'acme', which is not installed (installed: {installed}); see "
            "`tileops backends`") in str(err.value)


def test_explain_under_a_target_of_a_device_type_nothing_installed_is_for_is_one_usage_error(site, capsys):
    reload_all()
    assert main(["explain", "RMSNormFwdOp", "--target", "cdua"]) == 2
    err = capsys.readouterr().err
    assert "target cdua (--target) names device type 'cdua', which no installed backend or kernel is for" in err
    assert "Traceback" not in err


def test_an_arch_detector_for_the_cpu_is_refused_since_it_would_never_be_asked(site):
    install(site, f"""
        def tileops_register(registrar):
            registrar.backend("cpuarch", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.arch_detector("cpu", lambda device: "zen4")
    """)
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed"
    assert "registrar.arch_detector('cpu', ...): the core names the arch of a cpu device itself" in record.reason
    assert "cpuarch" not in registry.backends()


def test_a_preferred_over_naming_no_registered_kernel_is_a_loading_notice(site, capsys):
    install(site, f"""
        from fake_backends import make_impl, make_interface

        IFACE = make_interface()
        FAST = make_impl(IFACE, "FakeFastK", preferred_over=("fakes:FakeSlwoK",))

        def tileops_register(registrar):
            registrar.backend("typo", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.kernels(FAST)
    """)
    with pytest.warns(RuntimeWarning, match="is preferred_over fakes:FakeSlwoK, which is no registered kernel"):
        record = reload_all()["fakeplug"]
    assert record.status == "loaded"  # it works; the declaration just does nothing
    assert main(["backends"]) == 1
    assert "fakes:FakeFastK [typo] is preferred_over fakes:FakeSlwoK" in capsys.readouterr().out


def test_a_shipped_spec_that_does_not_load_is_a_loading_notice_though_no_op_of_it_is_imported(site, capsys):
    install(site, f"""
        from pathlib import Path

        def tileops_register(registrar):
            registrar.backend("badspec", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.manifest_dir(Path(__file__).parent / "manifest")
    """, files={"manifest/broken.yaml": "FakeBrokenFwdOp:\n  family: fake\n  signature: [unclosed\n"})
    with pytest.warns(RuntimeWarning, match="backend 'badspec' ships a spec that does not load: "
                                            "badspec:manifest/broken.yaml:"):
        reload_all()
    assert main(["backends"]) == 1
    assert "YAML syntax error" in capsys.readouterr().out


def test_explain_takes_any_input_shape_from_the_command_line(site, capsys):
    reload_all()
    assert main(["explain", "RMSNormFwdOp", "--shape", "x=8,4096", "--format", "json"]) == 0
    assert '"shape": [\n        8,\n        4096\n      ]' in capsys.readouterr().out


def test_explain_with_a_shape_the_spec_refuses_names_the_declaration(site, capsys):
    reload_all()
    assert main(["explain", "RMSNormFwdOp", "--shape", "x=8,1000"]) == 1
    assert "(manifest/normalization.yaml:" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["x", "x=8,a", "=8", "x=8,-1"])
def test_a_malformed_shape_option_names_the_form_to_write(site, text, capsys):
    reload_all()
    assert main(["explain", "RMSNormFwdOp", "--shape", text]) == 2  # a usage error
    assert "write NAME=D0,D1,... with non-negative integer sizes" in capsys.readouterr().err


_OVERLAPPING = """
    from fake_backends import make_impl
    from tileops_core.ops.normalization import RMSNormKernel

    FAST = make_impl(RMSNormKernel, "{name}", preferred_over={preferred})

    def tileops_register(registrar):
        registrar.backend("{backend}", device_types=("cpu",), core_major=%d)
        registrar.kernels(FAST)
""" % CORE_MAJOR


def test_two_plugins_specialising_one_interface_without_a_preference_are_reported_when_loaded(site, capsys):
    install(site, _OVERLAPPING.format(name="AcmeRMSNorm", preferred=(), backend="acme"),
            dist="tileops-acme", entry="acme")
    install(site, _OVERLAPPING.format(name="ZedRMSNorm", preferred=(), backend="zed"), dist="tileops-zed", entry="zed")
    with pytest.warns(RuntimeWarning, match="fakes:ZedRMSNorm .zed. and fakes:AcmeRMSNorm .acme. both specialise"):
        reload_all()
    assert main(["backends"]) == 1
    assert "neither is preferred_over the other: a call both accept fails as ambiguous" in capsys.readouterr().out


def test_a_preferred_over_between_the_two_plugins_settles_the_overlap_silently(site, recwarn):
    install(site, _OVERLAPPING.format(name="AcmeRMSNorm", preferred=(), backend="acme"),
            dist="tileops-acme", entry="acme")
    install(site, _OVERLAPPING.format(name="ZedRMSNorm", preferred=("fakes:AcmeRMSNorm",), backend="zed"),
            dist="tileops-zed", entry="zed")
    reload_all()
    assert not [w for w in recwarn if "TileOPs" in str(w.message)]
    assert registry.active().plugins.notices == []


def test_backends_names_a_kernel_whose_build_failed_in_this_process_and_exits_1(site, capsys):
    from fake_backends import add_backend, make_call, make_impl, make_interface
    from tileops_core.kernels.select import kernel_for

    reload_all()
    iface = make_interface()

    def broken_build():
        raise ZeroDivisionError("tile size 0")

    add_backend("vendor", make_impl(iface, "FastK", build=broken_build))
    add_backend("ref", make_impl(iface, "RefK", devices=("*",), general=True))
    with pytest.warns(RuntimeWarning, match="build failed"):
        kernel_for(iface, make_call(iface, N=8))
    assert main(["backends"]) == 1
    assert "kernel fakes:FastK [vendor]: build failed for ('FastK',): ZeroDivisionError: tile size 0" in (
        capsys.readouterr().out)


def test_backends_names_the_plugin_whose_load_was_interrupted_and_exits_1(site, tmp_path, capsys):
    install_interrupted_once(site, tmp_path)
    plugins.reset_plugins()
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="interrupted"):
        plugins.load_plugins()
    assert main(["backends"]) == 1
    out = capsys.readouterr().out
    assert ("loading plugins was interrupted by KeyboardInterrupt while plugin slowpoke (tileops-slowpoke) loaded; "
            "the next use loads the plugins again") in out
    assert "slowpoke  (tileops-slowpoke 1.2.3)" in out


def test_a_kernel_of_an_op_no_manifest_defines_is_a_loading_notice(site, capsys):
    """It could never be selected (found in review: it loaded silently)."""
    install(site, f"""
        from fake_backends import make_impl, make_interface

        GHOST = make_impl(make_interface(op="RMSNormFwdop"), "GhostK")

        def tileops_register(registrar):
            registrar.backend("ghost", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.kernels(GHOST)
    """)
    with pytest.warns(RuntimeWarning, match="GhostK \\[ghost\\] serves op 'RMSNormFwdop', which no manifest defines"):
        record = reload_all()["fakeplug"]
    assert record.status == "loaded"
    assert main(["backends"]) == 1
    assert "which no manifest defines, so no call can select it" in capsys.readouterr().out


def test_two_kernel_classes_of_one_name_roll_the_plugin_back(site):
    """Pins, locks and preferred_over name kernels by module:QualName (found in review: every call failed)."""
    install(site, f"""
        from fake_backends import make_impl, make_interface

        IFACE = make_interface()
        A, B = make_impl(IFACE, "TwinK"), make_impl(IFACE, "TwinK")

        def tileops_register(registrar):
            registrar.backend("twins", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.kernels(A, B)
    """)
    with pytest.warns(RuntimeWarning):
        record = reload_all()["fakeplug"]
    assert record.status == "failed" and "TwinK: another kernel of" in record.reason
    assert "twins" not in registry.backends()


def test_a_shipped_op_whose_spec_cannot_be_used_is_a_loading_notice(site, capsys):
    """Its file loads, yet every construction of the op fails (found in review: the plugin read as healthy)."""
    spec = ('FakeCubeFwdOp:\n  family: fake\n  ref_api: "none"\n  status: implemented\n  signature:\n    inputs:\n'
            '      x: {dtype: "float32", shape: "[*S"}\n    outputs:\n      y: {dtype: "same_as(q)", shape: "[*S]"}\n'
            '  workloads:\n    - {x_shape: [4, 8], dtypes: [float32], label: "small"}\n')
    ops = ("from tileops_core.op import Op\n\n\nclass FakeCubeFwdOp(Op):\n"
           "    def forward(self, x):\n        return x\n")
    install(site, f"""
        from pathlib import Path

        def tileops_register(registrar):
            registrar.backend("cube", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.manifest_dir(Path(__file__).parent / "manifest")
            registrar.ops(__name__ + ".ops")
    """, files={"manifest/cube.yaml": spec, "ops.py": ops})
    with pytest.warns(RuntimeWarning, match="backend 'cube' ships op FakeCubeFwdOp, whose spec cannot be used"):
        record = reload_all()["fakeplug"]
    assert record.status == "loaded"
    assert main(["backends"]) == 1
    assert "same_as(q)" in capsys.readouterr().out
