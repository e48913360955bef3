"""The command line as a demanding user and a third-party backend author meet it (third review).

Each test is one finding of that review: a plugin that failed to load passed ``tileops
validate`` unseen, ``--fix`` on a file it cannot write ended in a traceback, ``tileops
backends --format json`` crashed on what a backend's ``detect()`` reported, ``tileops docs``
rewrote pages before failing on a folder standing where a page goes, and ``tileops validate``
of a folder holding no spec passed having checked nothing.
"""

from __future__ import annotations

import json
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
    write_text = pathlib.Path.write_text

    def read_only(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", read_only)
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
