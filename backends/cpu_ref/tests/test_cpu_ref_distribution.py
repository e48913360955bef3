"""tileops-cpu-ref as a distribution: one version source, an entry point, every reference kernel."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tileops_core import plugins
from tileops_core.kernels import registry

CPU_REF = Path(__file__).resolve().parents[1]


def test_plugin_registers_every_reference_kernel_as_the_cpu_ref_backend():
    from tileops_cpu_ref.kernels import KERNELS

    records = {r.name: r for r in plugins.load_plugins()}
    assert records["cpu_ref"].status == "loaded", records["cpu_ref"].reason
    info = registry.backends()["cpu_ref"]
    assert info.distribution == "tileops-cpu-ref"
    assert set(info.kernels) == set(KERNELS)
    assert all(k.general and k.devices == ("*",) for k in KERNELS)


def test_reference_kernels_declare_that_they_never_read_the_current_call_and_none_does():
    """``reads_current_call = False`` lets a direct op call skip recording the call for the kernel
    (about 0.2 µs of a 1 µs torch call); it is true while no module of the package reaches the
    call: none names ``current_call``, ``Op.launch``, ``Op.bound`` or ``Op.construction_tensor``."""
    from tileops_cpu_ref.kernels import KERNELS

    assert [k for k in KERNELS if k.reads_current_call] == []
    reaching = {"current_call", "launch", "bound", "construction_tensor", "CURRENT"}
    for path in sorted((CPU_REF / "tileops_cpu_ref").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not used & reaching, f"{path.name} uses {sorted(used & reaching)}"


def test_version_comes_from_the_root_version_file_through_sdist_and_wheel(tmp_path):
    # A copy of the repository layout with a version no real release has: the symlink
    # backends/cpu_ref/VERSION -> ../../VERSION must carry it into the sdist as a file
    # and from the unpacked sdist into the wheel.
    repo = tmp_path / "repo"
    (repo / "backends").mkdir(parents=True)
    (repo / "VERSION").write_text("7.8.9\n")
    shutil.copytree(CPU_REF, repo / "backends" / "cpu_ref", symlinks=True,
                    ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    assert (repo / "backends" / "cpu_ref" / "VERSION").is_symlink()
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                           str(repo / "backends" / "cpu_ref")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(dist / "tileops_cpu_ref-7.8.9.tar.gz") as sdist:
        member = sdist.getmember("tileops_cpu_ref-7.8.9/VERSION")
        assert member.isfile()
        assert sdist.extractfile(member).read().decode().strip() == "7.8.9"
    with zipfile.ZipFile(dist / "tileops_cpu_ref-7.8.9-py3-none-any.whl") as wheel:
        metadata = wheel.read("tileops_cpu_ref-7.8.9.dist-info/METADATA").decode()
        entry_points = wheel.read("tileops_cpu_ref-7.8.9.dist-info/entry_points.txt").decode()
        names = set(wheel.namelist())
    assert "Version: 7.8.9" in metadata.splitlines()
    assert [line for line in metadata.splitlines() if line.startswith("Requires-Dist")] == [
        "Requires-Dist: torch<2.14,>=2.11"]
    assert "[tileops]\ncpu_ref = tileops_cpu_ref.plugin" in entry_points
    assert "tileops_cpu_ref/py.typed" in names
