"""tileops-ascend as a distribution and a plugin: entry point, one version, core major, no torch_npu until a build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import warnings
import zipfile
from pathlib import Path

import tileops_ascend.plugin as plugin_module
from tileops_ascend.kernel import AscendRGDR310P
from tileops_core import plugins
from tileops_core._version import CORE_MAJOR, __version__ as CORE_VERSION
from tileops_core.kernels import registry

ASCEND = Path(__file__).resolve().parents[1]
TESTS = ASCEND / "tests"
ROOT_VERSION = (ASCEND.parents[1] / "VERSION").read_text().strip()


def test_the_entry_point_registers_the_310p_kernel_as_the_ascend_backend():
    records = {r.name: r for r in plugins.load_plugins()}
    assert records["ascend"].status == "loaded", records["ascend"].reason
    assert (records["ascend"].distribution, records["ascend"].version) == ("tileops-ascend", ROOT_VERSION)
    assert records["ascend"].hardware_profiles == ()
    info = registry.backends()["ascend"]
    assert (info.distribution, info.device_types, info.kernels) == ("tileops-ascend", ("npu",), [AscendRGDR310P])


def test_a_core_of_another_major_refuses_the_backend(fresh_registry, monkeypatch):
    monkeypatch.setenv("TILEOPS_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setattr(plugin_module, "BUILT_FOR_CORE_MAJOR", CORE_MAJOR + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        record = plugins.register_plugin(plugin_module, name="ascend", distribution="tileops-ascend")
    assert record.status == "failed"
    assert (f"backend 'ascend' was built for tileops core major {CORE_MAJOR + 1}, but the installed core is "
            f"tileops {CORE_VERSION} (major {CORE_MAJOR})") in record.reason
    assert "ascend" not in registry.backends()


def test_loading_selecting_and_explaining_never_import_torch_npu_and_the_build_does():
    """A fresh process where any import of torch_npu is recorded and refused."""
    code = """
        import contextlib, io, sys
        attempts = []

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch_npu":
                    attempts.append(name)
                    raise ImportError("torch_npu is blocked in this test")
                return None

        sys.meta_path.insert(0, Blocker())
        from tileops_core import plugins
        from tileops_core.cli.main import main
        from tileops_core.kernels.select import kernel_for, select_kernel
        from tileops_core.ops.linear_attention import RGDRKernel
        from simulated_calls import meta_instance, simulated_call

        records = {r.name: r for r in plugins.load_plugins()}
        assert records["ascend"].status == "loaded", records["ascend"].reason
        call = simulated_call(meta_instance("tiny-fp16-scalar-gk", fp16=True))
        assert select_kernel(RGDRKernel, call).chosen.__name__ == "AscendRGDR310P"
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["backends"]) == 0
            assert main(["explain", "RecurrentGatedDeltaRuleFwdOp", "--workload", "qwen3.5-b8-t2-bf16state",
                         "--device", "npu", "--arch", "ascend310p"]) == 0
        assert "  ascend  (tileops-ascend " in out.getvalue(), out.getvalue()
        assert attempts == [] and "torch_npu" not in sys.modules, attempts
        try:
            kernel_for(RGDRKernel, call)
        except ImportError as exc:
            assert str(exc) == "torch_npu is blocked in this test", exc
        assert attempts == ["torch_npu"], attempts
        print("ok")
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_version_comes_from_the_root_version_file_and_torch_npu_is_only_an_extra(tmp_path):
    # A copy of the repository layout with a version no real release has: the symlink
    # backends/ascend/VERSION -> ../../VERSION must carry it into the sdist as a file and
    # from the unpacked sdist into the wheel.
    repo = tmp_path / "repo"
    (repo / "backends").mkdir(parents=True)
    (repo / "VERSION").write_text("7.8.9\n")
    shutil.copytree(ASCEND, repo / "backends" / "ascend", symlinks=True,
                    ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__", "tests", "tools"))
    assert (repo / "backends" / "ascend" / "VERSION").is_symlink()
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                           str(repo / "backends" / "ascend")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(dist / "tileops_ascend-7.8.9.tar.gz") as sdist:
        member = sdist.getmember("tileops_ascend-7.8.9/VERSION")
        assert member.isfile()
        assert sdist.extractfile(member).read().decode().strip() == "7.8.9"
    with zipfile.ZipFile(dist / "tileops_ascend-7.8.9-py3-none-any.whl") as wheel:
        metadata = wheel.read("tileops_ascend-7.8.9.dist-info/METADATA").decode().splitlines()
        entry_points = wheel.read("tileops_ascend-7.8.9.dist-info/entry_points.txt").decode()
        names = set(wheel.namelist())
    assert "Version: 7.8.9" in metadata
    assert sorted(line for line in metadata if line.startswith(("Requires-Dist", "Provides-Extra"))) == [
        "Provides-Extra: npu", 'Requires-Dist: torch<2.14,>=2.11', 'Requires-Dist: torch_npu; extra == "npu"']
    assert "[tileops]\nascend = tileops_ascend.plugin" in entry_points
    assert {"tileops_ascend/py.typed", "tileops_ascend/plugin.py", "tileops_ascend/kernel.py"} <= names
