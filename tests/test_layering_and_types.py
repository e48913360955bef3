"""The architecture is enforced by tools, not by reviewers: import-linter's contracts and mypy.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``): the core's layers, bottom
up ``errors < lang < spec < workloads, roofline < kernels < plugins < op < ops < bench <
validate < docsgen < cli``, function-level imports included; the core never imports a
backend; the spec language, the manifest, the instantiator and the roofline import no torch.
mypy (``[tool.mypy]``) checks the core and the three backends. Each runs as the command a
contributor would type, from the repository root.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed beside {sys.executable} (the dev extra installs it)")
    return path


def test_import_contracts_hold():
    done = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_mypy_finds_no_error_in_the_core_and_the_backends():
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_at_most_ten_type_ignores_each_with_an_error_code_and_a_reason():
    found = []
    for folder in ("tileops_core", "backends", "plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "type: ignore" in line and not line.lstrip().startswith(("#", '"', "'")):
                    found.append((path.relative_to(ROOT), n, line))
    assert len(found) <= 10, found
    for path, n, line in found:
        assert re.search(r"type: ignore\[[a-z-]+(, [a-z-]+)*\]\s+#\s*\S", line), f"{path}:{n}: {line.strip()}"
