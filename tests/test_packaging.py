"""The install stories of the README, run against the built wheels in fresh virtual environments.

Every distribution is built once per session (``scripts/build_dists.py``: sdist, then the
wheel from the sdist). Each scenario gets a new virtual environment, installs from those
wheels only (``pip install --no-index --find-links <wheels>``, pip configuration ignored, so
nothing can be downloaded — least of all an unpinned torch) and runs the ``tileops``
command and a small op from a folder outside the repository, so only what the wheels
installed can answer.

The environments reuse the packages already present for this interpreter (torch, pydantic,
...) the way ``venv --system-site-packages`` does, but through a view of those site folders
that leaves out TileOPs's own distributions: a development machine has them installed
editable (pointing at some checkout), and pip would count those as already satisfying
``tileops`` and install nothing.

A backend built for another core major is refused at load with the fix in the message:
``tests/test_plugins.py::test_backend_built_for_another_core_major_is_refused_with_the_fix``
(through a ``.dist-info`` like an installed wheel's) and the Ascend distribution's tests cover it.
"""

from __future__ import annotations

import email.parser
import importlib.util
import json
import os
import re
import site
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[1]
VERSION = (ROOT / "VERSION").read_text().strip()
CUDA_READY = (ROOT / "backends" / "cuda" / "pyproject.toml").is_file()

_spec = importlib.util.spec_from_file_location("build_dists", ROOT / "scripts" / "build_dists.py")
build_dists = sys.modules.setdefault("build_dists", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(build_dists)


# -- the wheels ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Wheelhouse:
    """Every distribution's sdist and wheel, in one folder (the ``--find-links`` of every scenario)."""

    path: Path
    built: dict[Path, Any]  # checkout folder -> build_dists.Built

    def wheel(self, folder: str) -> zipfile.ZipFile:
        return zipfile.ZipFile(self.built[ROOT / folder].wheel)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    path = tmp_path_factory.mktemp("wheelhouse")
    return Wheelhouse(path, build_dists.build_all(path))


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(name).decode())


def _requirements(wheel: zipfile.ZipFile) -> dict[str, Requirement]:
    """Requires-Dist by canonical name; one of an extra as ``name[extra]``."""
    out = {}
    for line in _metadata(wheel).get_all("Requires-Dist") or []:
        req = Requirement(line)
        extra = re.fullmatch(r'extra == "(.+)"', str(req.marker or ""))
        name = canonicalize_name(req.name)
        out[f"{name}[{extra[1]}]" if extra else name] = req
    return out


def _tileops_distributions() -> list[str]:
    """TileOPs's own distributions (one VERSION): the core and every backend with a pyproject."""
    return ["."] + [p.parent.relative_to(ROOT).as_posix() for p in sorted(ROOT.glob("backends/*/pyproject.toml"))]


def test_every_distribution_is_built_and_tileops_ones_carry_the_root_version(wheelhouse):
    assert {ROOT / d for d in _tileops_distributions()} | {ROOT / "plugins" / "example"} <= set(wheelhouse.built)
    for folder in _tileops_distributions():
        built = wheelhouse.built[ROOT / folder]
        assert _metadata(wheelhouse.wheel(folder))["Version"] == VERSION, folder
        assert built.sdist.name.endswith(f"-{VERSION}.tar.gz") and f"-{VERSION}-py3-none-any" in built.wheel.name


def test_every_package_in_every_wheel_ships_py_typed(wheelhouse):
    for source, built in wheelhouse.built.items():
        names = set(zipfile.ZipFile(built.wheel).namelist())
        top = {n.split("/")[0] for n in names if n.count("/") == 1 and n.endswith("/__init__.py")}
        assert top, source
        assert sorted(p for p in top if f"{p}/py.typed" not in names) == [], source


def test_the_core_wheel_holds_every_module_spec_and_hardware_profile_of_the_tree(wheelhouse):
    names = set(wheelhouse.wheel(".").namelist())
    expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tileops_core").rglob("*.py")}
    expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "tileops_core" / "profiles").glob("*.yaml")}
    expected |= {f"tileops_manifest/{p.name}" for p in (ROOT / "manifest").glob("*.yaml")}
    assert any(n.startswith("tileops_manifest/") for n in expected)
    assert any(n.startswith("tileops_core/profiles/") for n in expected)
    assert sorted(expected - names) == []


def test_dependency_bounds_are_the_tested_ranges(wheelhouse):
    minor = Version(VERSION).release[:2]
    this_series, next_series = f"{minor[0]}.{minor[1]}.0", f"{minor[0]}.{minor[1] + 1}.0"
    core = _requirements(wheelhouse.wheel("."))
    # Backends move in lockstep with the core: exactly the core's minor series.
    for name in ["tileops-cpu-ref", "tileops-cuda[cuda]", "tileops-ascend[ascend]"]:
        spec = core[name].specifier
        assert spec.contains(VERSION) and spec.contains(this_series) and not spec.contains(next_series), name
    # torch: 2.11 (the GPU machine) to 2.13 (CPU CI), never an untested newer minor; the others by major.
    for version, admitted in [("2.10.0", False), ("2.11.0", True), ("2.13.0", True), ("2.14.0", False)]:
        assert core["torch"].specifier.contains(version) is admitted, version
    for name, ok, too_new in [("pydantic", "2.6.0", "3.0.0"), ("pluggy", "1.5.0", "2.0.0"), ("pyyaml", "6.0", "7.0")]:
        assert core[name].specifier.contains(ok) and not core[name].specifier.contains(too_new), name
    assert {"pytest[dev]", "hypothesis[dev]", "build[dev]", "setuptools[dev]"} <= set(core)
    for folder in _tileops_distributions()[1:]:
        reqs = _requirements(wheelhouse.wheel(folder))
        assert "tileops" not in reqs, f"{folder} depends back on the core"
        assert reqs["torch"].specifier == core["torch"].specifier, folder
    if CUDA_READY:
        tilelang = _requirements(wheelhouse.wheel("backends/cuda"))["tilelang"].specifier
        assert tilelang.contains("0.1.15") and not tilelang.contains("0.2.0"), tilelang


# -- the environments ------------------------------------------------------------------------------

def _is_ours(name: str) -> bool:
    """A site entry of TileOPs itself, one that only an interpreter start would run (.pth), or
    TileLang: the scenarios are a machine without it (the wheelhouse lacks it, and the CUDA
    backend must register without it), even where a developer installed it to compile kernels."""
    name = name.lower()
    return name.startswith(("tileops", "__editable__", "tilelang")) or name.endswith((".pth", ".egg-link"))


@pytest.fixture(scope="session")
def present_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of links to this interpreter's site packages, TileOPs's own left out."""
    view = tmp_path_factory.mktemp("present-packages")
    for folder in site.getsitepackages():
        for entry in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
            if not _is_ours(entry.name) and not (view / entry.name).exists():
                (view / entry.name).symlink_to(entry)
    assert (view / "torch").is_dir(), "torch must be installed where the tests run"
    return view


class Venv:
    """A fresh virtual environment that installs from the wheelhouse only and runs outside the repo."""

    def __init__(self, path: Path, wheelhouse: Wheelhouse, present: Path, cwd: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
        (purelib,) = path.glob("lib/python*/site-packages")
        (purelib / "_present_packages.pth").write_text(f"{present}\n")
        self.path, self.wheelhouse, self.cwd, self.purelib = path, wheelhouse, cwd, purelib
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TILEOPS_", "PIP_", "PYTHON")) and k != "VIRTUAL_ENV"}
        self.env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")

    def run(self, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(args, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == rc, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def pip(self, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        command = [str(self.path / "bin" / "python"), "-m", "pip", *args]
        if args[0] == "install":
            command += ["--no-index", "--find-links", str(self.wheelhouse.path)]
        return self.run(*command, rc=rc)

    def python(self, code: str) -> str:
        return self.run(str(self.path / "bin" / "python"), "-c", textwrap.dedent(code)).stdout.strip()

    def tileops(self, *args: str) -> str:
        return self.run(str(self.path / "bin" / "tileops"), *args).stdout

    def versions(self) -> list[str]:
        """``tileops --version``, one "name version" per line."""
        return self.tileops("--version").splitlines()

    def backends(self) -> dict[str, tuple[str, str]]:
        """``tileops backends``: backend -> (distribution, version); it exits 0 only without load failures."""
        data = json.loads(self.tileops("backends", "--format", "json"))
        assert data["failures"] == [] and data["core"]["version"] == VERSION
        return {b["name"]: (b["distribution"], b["version"]) for b in data["backends"]}

    def explain(self, op: str, *args: str) -> dict[str, Any]:
        (selection,) = json.loads(self.tileops("explain", op, "--format", "json", *args))["interfaces"]
        return selection


@pytest.fixture
def venv(tmp_path: Path, wheelhouse: Wheelhouse, present_packages: Path) -> Venv:
    (tmp_path / "work").mkdir()
    return Venv(tmp_path / "venv", wheelhouse, present_packages, cwd=tmp_path / "work")


#: A small RMSNorm on the CPU, and where the code, the specs and the profiles were read from.
_RMSNORM = """
    import json, torch
    from importlib import resources
    import tileops_core
    from tileops_core.ops.normalization import RMSNormFwdOp

    x, w = torch.randn(8, 64), torch.randn(64)
    torch.testing.assert_close(RMSNormFwdOp(normalized_shape=[64], eps=1e-6)(x, w),
                               torch.nn.functional.rms_norm(x, [64], w, 1e-6))
    print(json.dumps({"core": tileops_core.__file__,
                      "specs": [str(p) for p in resources.files("tileops_manifest").iterdir()],
                      "profiles": [str(p) for p in resources.files("tileops_core").joinpath("profiles").iterdir()]}))
"""


def _rmsnorm_runs_from_the_installed_wheels(venv: Venv) -> None:
    found = json.loads(venv.python(_RMSNORM))
    assert Path(found["core"]).is_relative_to(venv.purelib)
    for kind, source in [("specs", ROOT / "manifest"), ("profiles", ROOT / "tileops_core" / "profiles")]:
        paths = [Path(p) for p in found[kind] if p.endswith(".yaml")]
        assert all(p.is_relative_to(venv.purelib) for p in paths), paths
        assert sorted(p.name for p in paths) == sorted(p.name for p in source.glob("*.yaml")), kind


def test_plain_tileops_gives_working_ops_on_the_cpu(venv):
    venv.pip("install", "tileops")
    assert venv.versions() == [f"tileops {VERSION}", f"tileops-cpu-ref {VERSION}"]
    assert venv.backends() == {"cpu_ref": ("tileops-cpu-ref", VERSION)}
    assert venv.explain("RMSNormFwdOp")["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
    _rmsnorm_runs_from_the_installed_wheels(venv)
    assert " 0 errors" in venv.tileops("validate")


def test_tileops_ascend_installs_and_registers_without_torch_npu(venv):
    venv.pip("install", "tileops[ascend]")
    assert venv.versions() == [f"tileops {VERSION}", f"tileops-ascend {VERSION}", f"tileops-cpu-ref {VERSION}"]
    assert venv.backends() == {"ascend": ("tileops-ascend", VERSION), "cpu_ref": ("tileops-cpu-ref", VERSION)}
    assert venv.python("import importlib.util; print(importlib.util.find_spec('torch_npu'))") == "None"
    npu = venv.explain("RecurrentGatedDeltaRuleFwdOp", "--workload", "tiny-fp16-scalar-gk", "--device", "npu",
                       "--arch", "ascend310p")
    assert npu["chosen"] == "tileops_ascend.kernel:AscendRGDR310P"
    assert venv.explain("RecurrentGatedDeltaRuleFwdOp")["chosen"] == "tileops_cpu_ref.kernels:RefRGDR"
    _rmsnorm_runs_from_the_installed_wheels(venv)


@pytest.mark.skipif(not CUDA_READY, reason="backends/cuda has no pyproject.toml yet")
def test_tileops_cuda_resolves_to_tilelang_and_its_plugin_registers_without_a_gpu(venv):
    # The extra pulls tileops-cuda and tileops-cuda pulls tilelang, the one thing the wheelhouse lacks.
    unresolved = venv.pip("install", "--dry-run", "tileops[cuda]", rc=1).stderr
    assert "requirement tilelang" in unresolved and "(from tileops-cuda" in unresolved, unresolved
    venv.pip("install", "tileops")
    venv.pip("install", "--no-deps", "tileops-cuda")
    assert venv.python("import importlib.util; print(importlib.util.find_spec('tilelang'))") == "None"
    assert venv.versions() == [f"tileops {VERSION}", f"tileops-cpu-ref {VERSION}", f"tileops-cuda {VERSION}"]
    backends = venv.backends()
    (cuda,) = [name for name, (dist, _) in backends.items() if dist == "tileops-cuda"]
    assert backends == {cuda: ("tileops-cuda", VERSION), "cpu_ref": ("tileops-cpu-ref", VERSION)}
    on_cpu = venv.explain("RMSNormFwdOp")
    assert on_cpu["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
    assert [c["kept"] for c in on_cpu["candidates"] if c["backend"] == cuda] == [False], on_cpu["candidates"]
    _rmsnorm_runs_from_the_installed_wheels(venv)


_EXAMPLE_OP = """
    import torch
    from tileops_example.ops import SquaredReluFwdOp   # constructed before any plugin was loaded explicitly
    x = torch.randn(4, 9)
    assert torch.equal(SquaredReluFwdOp()(x), torch.relu(x) ** 2)
    print("ok")
"""


def test_a_third_party_plugin_installs_on_top_is_selected_and_uninstalls_cleanly(venv):
    venv.pip("install", "tileops")
    venv.pip("install", "tileops-example")
    assert venv.versions() == [f"tileops {VERSION}", f"tileops-cpu-ref {VERSION}", "tileops-example 0.1.0"]
    assert venv.backends() == {"cpu_ref": ("tileops-cpu-ref", VERSION), "example": ("tileops-example", "0.1.0")}
    assert venv.explain("RMSNormFwdOp")["chosen"] == "tileops_example.kernels:ExampleRMSNormLastAxis"
    relu = json.loads(venv.tileops("explain", "SquaredReluFwdOp", "--format", "json"))
    assert relu["spec"].startswith("example:manifest/squared_relu.yaml")
    assert relu["interfaces"][0]["chosen"] == "tileops_example.kernels:RefSquaredRelu"
    assert venv.python(_EXAMPLE_OP) == "ok"
    assert " 0 errors" in venv.tileops("validate")  # the plugin's spec included
    lint = json.loads(venv.tileops("validate", "--no-conformance", "--format", "json"))
    assert "example:manifest/squared_relu.yaml" in lint["files"]  # declared in metadata: seen without the plugin

    venv.pip("uninstall", "--yes", "tileops-example")
    assert venv.versions() == [f"tileops {VERSION}", f"tileops-cpu-ref {VERSION}"]
    assert venv.backends() == {"cpu_ref": ("tileops-cpu-ref", VERSION)}
    assert venv.explain("RMSNormFwdOp")["chosen"] == "tileops_cpu_ref.kernels:RefRMSNorm"
    _rmsnorm_runs_from_the_installed_wheels(venv)
    assert " 0 errors" in venv.tileops("validate")
