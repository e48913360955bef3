"""Importing the backend never loads torch_npu; detection loads it only when asked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from fake_torch_npu import fake_torch_npu
from tileops_ascend.platform import ASCEND_310P, arch_from_soc_name, arch_of_device, detect, visible_devices

BACKEND_ROOT = Path(__file__).resolve().parents[1]
CPU_REF_ROOT = BACKEND_ROOT.parent / "cpu_ref"
MODULES = [
    "tileops_ascend", "tileops_ascend.platform", "tileops_ascend.tiling", "tileops_ascend.tiling_struct",
    "tileops_ascend.refusal", "tileops_ascend.launch", "tileops_ascend.schedule_model", "tileops_ascend.plugin",
    "tileops_ascend.kernel", "tileops_ascend.launcher",
]


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BACKEND_ROOT), str(CPU_REF_ROOT)])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)


def test_every_module_imports_with_torch_npu_absent_and_never_asks_for_it():
    result = _run(
        f"""
        import importlib, sys

        attempts = []

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch_npu":
                    attempts.append(name)
                    raise ImportError("torch_npu is blocked in this test")
                return None

        sys.meta_path.insert(0, Blocker())
        for name in {MODULES!r}:
            importlib.import_module(name)
        assert attempts == [], attempts
        assert "torch_npu" not in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_importing_the_package_does_not_import_torch():
    """The facade is host arithmetic only; torch loads with the launch and the model."""
    result = _run("import sys, tileops_ascend; print('torch' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    "soc, arch",
    [
        ("Ascend310P3", "ascend310p"),
        ("Ascend310P1", "ascend310p"),
        ("Ascend910B2", "ascend910b"),
        ("Ascend910B4-1", "ascend910b"),
        ("Ascend910_9391", "ascend910_93"),
        ("Ascend910PremiumA", "ascend910"),
        ("Ascend310B1", "ascend310b"),
        ("Ascend310", "ascend310"),
        ("Ascend950PR", None),
        ("GeForce RTX 4090", None),
    ],
)
def test_soc_name_maps_to_arch(soc, arch):
    assert arch_from_soc_name(soc) == arch


def test_detect_without_torch_npu_reports_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    found = detect()
    assert not found.available
    assert found.reason.startswith("torch_npu is not importable (")
    assert found.reason.endswith("); install torch_npu with the CANN toolkit")
    assert found.platform is None


def test_detect_maps_a_310p_and_falls_back_to_ai_cores(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend310P3", 0, 10))
    found = detect()
    assert (found.available, found.soc_name, found.arch, found.core_count) == (True, "Ascend310P3", "ascend310p", 10)
    assert found.reason == "found Ascend310P3 (ascend310p)"
    assert found.platform.core_count == 10
    assert found.platform.schedulable_cores == 8
    assert found.platform.ub_bytes == ASCEND_310P.ub_bytes


def test_detect_other_ascend_has_no_rgdr_platform(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend910B2", 48, 24))
    found = detect()
    assert (found.available, found.arch, found.core_count) == (True, "ascend910b", 48)
    assert found.platform is None


def test_detect_unknown_soc_keeps_the_device_but_no_arch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend950PR", 32, 32))
    found = detect()
    assert (found.available, found.arch) == (True, None)
    assert found.reason == "found 'Ascend950PR', a SoC name this backend does not map to an arch"


def test_detect_with_no_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend310P3", 8, 8, count=0))
    found = detect()
    assert (found.available, found.reason) == (False, "torch_npu reports no NPU at index 0")


class _ImportRecorder:
    """A meta-path finder that records (and refuses) any attempt to import torch_npu."""

    def __init__(self):
        self.attempts = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch_npu":
            self.attempts.append(name)
            raise ImportError("torch_npu is blocked in this test")
        return None


def _npu(index=None):
    return types.SimpleNamespace(type="npu", index=index)


def test_arch_detector_and_listing_never_import_torch_npu(monkeypatch):
    recorder = _ImportRecorder()
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    monkeypatch.setattr(sys, "meta_path", [recorder, *sys.meta_path])
    assert arch_of_device(_npu(0)) == "unknown"
    assert visible_devices() == []
    assert recorder.attempts == []


def test_arch_detector_reads_a_loaded_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend310P3", 8, 8, count=2, current=1))
    assert arch_of_device(_npu(0)) == "ascend310p"
    assert arch_of_device(_npu()) == "ascend310p"  # no index: the current device
    assert arch_of_device(_npu(2)) == "unknown"  # past device_count


def test_arch_detector_says_unknown_for_a_soc_it_cannot_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend950PR", 32, 32))
    assert arch_of_device(_npu(0)) == "unknown"


def test_visible_devices_lists_each_npu_with_its_arch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend910B2", 48, 24, count=2))
    assert visible_devices() == [
        {"device": f"npu:{i}", "arch": "ascend910b", "name": "Ascend910B2", "cores": 48,
         "rgdr": "no kernel for this arch"}
        for i in range(2)
    ]
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu("Ascend310P3", 8, 8))
    assert visible_devices() == [
        {"device": "npu:0", "arch": "ascend310p", "name": "Ascend310P3", "cores": 8, "rgdr": "ascend310p kernel"}
    ]
