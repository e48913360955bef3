"""The command line as a demanding user and a third-party backend author meet it (third review).

Each test is one finding of that review: a plugin that failed to load passed ``tileops
validate`` unseen, ``--fix`` on a file it cannot write ended in a traceback, ``tileops
backends --format json`` crashed on what a backend's ``detect()`` reported, ``tileops docs``
rewrote pages before failing on a folder standing where a page goes, and ``tileops validate``
of a folder holding no spec passed having checked nothing.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import types
from pathlib import Path

import pytest
import torch

from plugin_site import install, site  # noqa: F401  (site is a fixture)
from tileops_core import plugins
from tileops_core._version import CORE_MAJOR
from tileops_core.cli.main import main
from tileops_core.validate.runner import validate

CORPUS = Path(__file__).parent / "validate_corpus"

pytestmark = pytest.mark.usefixtures("fresh_registry")


def _declare_specs(site: Path, module: str, dist: str = "tileops-fakeplug", version: str = "1.2.3") -> None:
    """Declare ``module``'s ``manifest`` folder in the entry-point group the spec lint reads."""
    entry_points = site / f"{dist.replace('-', '_')}-{version}.dist-info" / "entry_points.txt"
    entry_points.write_text(entry_points.read_text() + f"\n[tileops.manifests]\nfakeplug = {module}.manifest\n")


def test_validate_fails_on_a_plugin_that_did_not_load_and_lints_the_specs_it_declares(site, capsys):
    module = install(site, f"""
        from pathlib import Path

        def tileops_register(registrar):
            registrar.backend("brokenyaml", device_types=("cpu",), core_major={CORE_MAJOR})
            registrar.manifest_dir(Path(__file__).parent / "manifest")
            registrar.ops(__name__ + ".ops")
    """, files={"manifest/broken.yaml": "FakeBrokenFwdOp:\n  family: [fake\n",
                "ops.py": "from tileops_core.op import Op\n\n\nclass FakeBrokenFwdOp(Op):\n    pass\n"})
    _declare_specs(site, module)
    with pytest.warns(RuntimeWarning, match="plugin fakeplug"):
        report = validate()
    assert not report.ok
    failed = [d for d in report.errors if d.rule == "L1.plugin"]
    assert [(d.file, d.severity) for d in failed] == [(f"entry point fakeplug = {module}", "error")]
    assert failed[0].message.startswith("plugin fakeplug (tileops-fakeplug 1.2.3) failed to load, so its op classes "
                                        "and kernels went unchecked: backend 'brokenyaml' rolled back: ")
    assert [(d.rule, d.file, d.line) for d in report.errors if d.rule == "L0.yaml"] == [
        ("L0.yaml", "fakeplug:manifest/broken.yaml", 3)]
    assert main(["validate"]) == 1
    assert "fakeplug:manifest/broken.yaml\n  3: error L0.yaml" in capsys.readouterr().out


def test_validate_runs_no_conformance_pass_on_the_specs_of_a_plugin_that_did_not_load(site):
    module = install(site, """
        raise RuntimeError("vendor runtime missing")
    """, files={"manifest/cube.yaml": (
        'FakeCubeFwdOp:\n  family: fake\n  ref_api: "none"\n  status: implemented\n  signature:\n    inputs:\n'
        '      x: {dtype: "float32", shape: "[*S]"}\n    outputs:\n      y: {dtype: "same_as(x)", shape: "[*S]"}\n'
        '  workloads:\n    - {x_shape: [4, 8], dtypes: [float32], label: "small"}\n'
        '  roofline: {flops: "0", bytes: "0"}\n  source: {op: fakeplug_nowhere.ops}\n')})
    _declare_specs(site, module)
    with pytest.warns(RuntimeWarning, match="vendor runtime missing"):
        report = validate()
    assert [d.rule for d in report.errors] == ["L1.plugin"]  # not L1.import: its op module is not looked for
    assert report.ops["FakeCubeFwdOp"]["checks"] == "spec"
    assert ("plugins that did not load (fakeplug): the specs they declare got the spec lint alone"
            in " ".join(report.notes))


def test_validate_fix_on_a_file_it_cannot_write_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    path = tmp_path / "fixme.yaml"
    shutil.copy(CORPUS / "t3_4_tensor_is_none.yaml", path)
    before = path.read_text()
    access = os.access

    def read_only(name, mode, *args, **kwargs):  # the file is read-only (chmod does not stop root, who runs CI)
        if pathlib.Path(name).resolve() == path.resolve() and mode & os.W_OK:
            return False
        return access(name, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", read_only)
    assert main(["validate", "--fix", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"tileops validate: --fix cannot write {path}: Permission denied\n" in err
    assert "Traceback" not in err
    assert path.read_text() == before


def _detecting_plugin(name: str, detect) -> types.ModuleType:
    plugin = types.ModuleType(f"{name}_plugin")

    def tileops_register(registrar):
        registrar.backend(name, device_types=("cpu",), core_major=CORE_MAJOR, detect=detect)

    plugin.tileops_register = tileops_register
    return plugin


def test_backends_json_carries_a_torch_device_that_detect_reports(capsys):
    plugins.load_plugins()
    record = plugins.register_plugin(_detecting_plugin("devices", lambda: [{"device": torch.device("cpu"),
                                                                             "arch": "cpu"}]), "devices")
    assert record.status == "loaded", record.reason
    capsys.readouterr()
    main(["backends", "--format", "json"])
    (backend,) = [b for b in json.loads(capsys.readouterr().out)["backends"] if b["name"] == "devices"]
    assert backend["detected"] == [{"device": "cpu", "arch": "cpu"}]


def test_backends_says_what_detect_returned_when_it_is_not_a_list_of_mappings(capsys):
    plugins.load_plugins()
    plugins.register_plugin(_detecting_plugin("oddly", lambda: "cpu:0"), "oddly")
    main(["backends"])
    assert ("    detected: error: detect() returned 'cpu:0', not a list of mappings such as "
            "[{'device': 'cuda:0', 'arch': 'sm_90'}]") in capsys.readouterr().out


def test_docs_refuses_a_folder_where_a_page_goes_before_writing_any_page(tmp_path, capsys):
    out = tmp_path / "site"
    assert main(["docs", "--out", str(out), "--format", "md"]) in (0, 1)
    last = sorted((out / "ops").glob("*.md"))[-1]
    last.unlink()
    last.mkdir()
    (out / "index.md").write_text("mine\n")
    assert main(["docs", "--out", str(out), "--format", "md"]) == 2
    assert f"{last} is a folder where a page goes" in capsys.readouterr().err
    assert (out / "index.md").read_text() == "mine\n"


def test_validate_of_a_folder_holding_no_spec_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "specs.yml").write_text("FooFwdOp: {}\n")
    assert main(["validate", "--no-conformance", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"tileops validate: no *.yaml file in {tmp_path}: nothing to validate "
                                       "(specs are read from files ending in .yaml)\n")


# -- fourth pass: usage errors exit 2, a taken backend name names its holder, writes replace whole files -----------

def _error_line(capsys) -> str:
    """The one line a usage error prints on stderr (and nothing else there)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def test_the_steer_string_given_to_kernels_is_a_usage_error(capsys):
    assert main(["explain", "RMSNormFwdOp", "--kernels", "garbage"]) == 2
    assert _error_line(capsys) == ("tileops explain: error: --kernels: entry 'garbage' is not 'Op=kernel', "
                                   "'Op=backend' or 'Op=-denied' (e.g. RMSNormFwdOp=cpu_ref;"
                                   "RecurrentGatedDeltaRuleFwdOp=-TileLangRGDR)")


@pytest.mark.parametrize("command", ["explain", "lock"])
def test_a_target_of_a_device_type_nothing_installed_is_for_is_a_usage_error(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # where lock would write tileops.lock
    plugins.load_plugins()
    installed = ", ".join(sorted({t for b in plugins.loaded_registry().backends().values() for t in b.device_types
                                  if t != "*"} | {"cpu"}))
    assert main([command, "RMSNormFwdOp", "--target", "nope"]) == 2
    assert _error_line(capsys) == (f"tileops {command}: error: target nope (--target) names device type 'nope', "
                                   f"which no installed backend or kernel is for (installed: {installed}): a typo, "
                                   "or its backend is not installed")
    assert list(tmp_path.iterdir()) == []


def test_a_lock_flag_naming_a_missing_file_is_a_usage_error(tmp_path, capsys):
    missing = tmp_path / "missing.lock"
    assert main(["explain", "RMSNormFwdOp", "--lock", str(missing)]) == 2
    assert _error_line(capsys) == (f"tileops explain: error: --lock: lock file {missing}: cannot be read: [Errno 2] "
                                   f"No such file or directory: '{missing}'")


def test_a_lock_flag_naming_a_file_that_is_no_lock_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "notes.json"
    path.write_text('{"hi": 1}\n')
    assert main(["backends", "--lock", str(path)]) == 2
    assert _error_line(capsys) == (f"tileops backends: error: --lock: {path}:1: not a tileops lock header (expected "
                                   '{"tileops_lock": 1, ...}); write one with `tileops lock`')


def test_a_backend_name_taken_twice_names_both_plugins_and_their_distributions(site):
    body = """
        def tileops_register(registrar):
            registrar.backend("alpha", device_types=("cpu",), core_major=%d)
    """ % CORE_MAJOR
    install(site, body, dist="tileops-alpha-one", version="1.0", entry="alpha_one")
    install(site, body, dist="tileops-alpha-two", version="2.0", entry="alpha_two")
    with pytest.warns(RuntimeWarning):
        records = {r.name: r for r in plugins.load_plugins()}
    assert records["alpha_one"].status == "loaded"
    assert records["alpha_two"].reason == (
        "backend 'alpha' rolled back: backend 'alpha' is registered twice: plugin alpha_one (tileops-alpha-one 1.0) "
        "holds it, and plugin alpha_two (tileops-alpha-two 2.0) declares it too; uninstall one, or keep one out with "
        "TILEOPS_DISABLE_PLUGINS=alpha_two")


def test_lock_of_an_unknown_op_is_the_usage_error_other_commands_give(tmp_path, capsys):
    assert main(["explain", "RMSNormFwdO"]) == 2
    explained = _error_line(capsys).removeprefix("tileops explain: error: ")
    assert explained.startswith("unknown op 'RMSNormFwdO'; did you mean RMSNormFwdOp")
    assert main(["lock", "RMSNormFwdO", "-o", str(tmp_path / "x.lock")]) == 2
    assert _error_line(capsys) == f"tileops lock: error: {explained}"


def test_lock_of_an_op_that_has_no_workloads_to_lock_keeps_saying_so(tmp_path, monkeypatch, capsys):
    from tileops_core.cli import cmd_lock

    benchable = cmd_lock.benchable_specs()
    monkeypatch.setattr(cmd_lock, "benchable_specs", lambda: {n: s for n, s in benchable.items()
                                                              if n != "RMSNormFwdOp"})
    assert main(["lock", "RMSNormFwdOp", "-o", str(tmp_path / "x.lock")]) == 2
    assert _error_line(capsys).startswith("tileops lock: error: not implemented ops with workloads: RMSNormFwdOp "
                                          "(ops: ")


@pytest.mark.parametrize("command", [["bench", "SumFwdOp", "--quick", "--baseline", "none", "--json"],
                                     ["calibrate", "--quick", "--copy-mib", "1", "--matmul-n", "64", "--out"]])
def test_an_output_under_a_file_is_a_usage_error_that_says_so_before_any_work(command, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "sub" / ("r.json" if command[0] == "bench" else "p.yaml")
    assert main([*command, str(target)]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing was run
    assert out.err == f"tileops {command[0]}: error: {command[-1]} {target}: {blocker} is a file, not a folder\n"


def _disk_fills_half_way(monkeypatch) -> None:
    """Every ``Path.write_text`` writes half its text, then fails as a full disk does."""
    def half(self, data, *args, **kwargs):
        with open(self, "w") as f:
            f.write(data[: len(data) // 2])
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", half)


@pytest.mark.parametrize("command,name", [
    (["bench", "SumFwdOp", "--quick", "--baseline", "none", "--min-samples", "3", "--min-time", "0.005", "--json"],
     "r.json"),
    (["lock", "RMSNormFwdOp", "-o"], "x.lock"),
    (["calibrate", "--quick", "--copy-mib", "1", "--matmul-n", "64", "--out"], "p.yaml"),
    (["validate", "--fix"], "fixme.yaml"),
], ids=["bench --json", "lock -o", "calibrate --out", "validate --fix"])
def test_a_write_that_fails_half_way_leaves_the_previous_file_whole_and_no_temporary_file(command, name, tmp_path,
                                                                                          monkeypatch, capsys):
    path = tmp_path / name
    if command[0] == "validate":
        shutil.copy(CORPUS / "t3_4_tensor_is_none.yaml", path)
    else:
        path.write_text("the previous file\n")
    before = path.read_text()
    _disk_fills_half_way(monkeypatch)
    assert main([*command, str(path)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_backends_exits_1_when_a_backend_detect_raised(capsys):
    def broken():
        raise RuntimeError("driver gone")

    plugins.load_plugins()
    plugins.register_plugin(_detecting_plugin("breaks", broken), "breaks")
    assert main(["backends"]) == 1
    assert "    detected: error: detect() raised RuntimeError: driver gone" in capsys.readouterr().out


def test_backends_with_autoloading_off_says_none_loaded_and_why(capsys, monkeypatch):
    """Found in review: with ``TILEOPS_DISABLE_PLUGIN_AUTOLOAD`` set, the installed backends were reported as
    "none installed"."""
    monkeypatch.setenv(plugins.ENV_NO_AUTOLOAD, "1")
    main(["backends"])
    assert ("backends: none loaded (TILEOPS_DISABLE_PLUGIN_AUTOLOAD is set: installed plugins are not loaded)"
            in capsys.readouterr().out.splitlines())
