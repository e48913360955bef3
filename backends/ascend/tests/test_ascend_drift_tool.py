"""The drift tool runs and measures a real, small difference (a smoke test on a tiny shape)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "drift_report.py"


def _load_tool(monkeypatch):
    spec = importlib.util.spec_from_file_location("drift_report", TOOL)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "drift_report", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_fp16_state_drifts_a_little_and_is_reported_at_each_requested_step(monkeypatch):
    tool = _load_tool(monkeypatch)
    rows = tool.drift(batch=2, nk=1, nv=2, dk=16, dv=16, report_steps=(1, 4), warmup=3, seed=5)
    assert [r.step for r in rows] == [1, 4]
    for r in rows:
        assert 0 < r.out_rel < 1e-2
        assert 0 < r.state_rel < 1e-2
        assert 0 < r.state_max_abs < 5e-2
