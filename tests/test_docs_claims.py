"""What README.md and docs/architecture.md tell a newcomer, checked against the tree as it is.

Each test checks one kind of claim that goes stale when code moves: a file path a document names,
the layout table's list of modules, the import layers, the set-up commands and what CI runs, the
command line's sub-commands and flags, the install extras and pins, the environment variables, the
error message and the demo output the README prints.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCH = (ROOT / "docs" / "architecture.md").read_text()

#: Where a relative path in the docs may be rooted: the checkout, the core package, the CUDA backend's folder
#: and package (architecture.md names `tileops_cuda/registered.py`, `kernels/block_shapes.py` of that package).
_ROOTS = (ROOT, ROOT / "tileops_core", ROOT / "backends" / "cuda", ROOT / "backends" / "cuda" / "tileops_cuda")


def _code_spans(text: str) -> list[str]:
    """The text of every inline code span, a line break inside one read as a space."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]


def _named_paths(text: str) -> list[str]:
    """Every code span that is a path in the tree: it has a slash or a file suffix, and no spaces or
    placeholders (``cmd_<name>.py``, ``{cpu_ref,cuda}``); ``file.py: name`` counts as ``file.py``."""
    found = []
    for span in _code_spans(text):
        path = span.split(":")[0].strip()
        if " " in path or any(c in path for c in "<>{}$~=") or path.startswith(("-", "http")):
            continue
        if "/" in path or re.search(r"\.(py|md|yaml|sh|toml)$", path):
            found.append(path)
    return found


def _exists(path: str) -> bool:
    return any(any(r.glob(path)) if "*" in path else (r / path).exists() for r in _ROOTS)


@pytest.mark.parametrize("doc,text", [("README.md", README), ("docs/architecture.md", ARCH)])
def test_every_path_a_document_names_exists(doc: str, text: str) -> None:
    bare = {p for p in _named_paths(text) if "/" not in p}
    # A bare file name is checked in the layout table (below), where its folder is known.
    missing = [p for p in _named_paths(text) if p not in bare and not _exists(p)]
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def _layout_rows() -> dict[str, str]:
    """architecture.md's layout table: folder -> the text of its row."""
    return dict(re.findall(r"^\| `(tileops_core/[a-z_/]+/)` \| (.*)$", ARCH, flags=re.M))


#: Rows that summarise their folder instead of listing its modules.
_SUMMARISED = {"tileops_core/ops/", "tileops_core/validate/", "tileops_core/integrations/transformers/"}


def test_the_layout_table_names_only_modules_that_exist_and_every_module_of_the_core() -> None:
    rows = _layout_rows()
    packages = {f"tileops_core/{p.parent.name}/" for p in (ROOT / "tileops_core").glob("*/__init__.py")}
    assert packages - {"tileops_core/integrations/"} <= set(rows), (
        f"packages without a row in architecture.md's layout: {sorted(packages - set(rows))}")
    for folder, row in rows.items():
        named = {n for n in re.findall(r"`([A-Za-z_]+\.py)`", row)}
        actual = {p.name for p in (ROOT / folder).glob("*.py")} - {"__init__.py"}
        if "`cmd_<name>.py`" in row:  # one module per sub-command
            named |= {n for n in actual if n.startswith("cmd_")}
        assert named <= actual, f"{folder} row names modules that do not exist: {sorted(named - actual)}"
        if folder not in _SUMMARISED:
            assert actual <= named, f"{folder} row does not say what these modules are: {sorted(actual - named)}"


def test_the_import_layers_are_the_ones_lint_imports_checks() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c.get("type") == "layers"]
    bottom_up = [set(layer.replace(" ", "").split("|")) for layer in reversed(layers)]
    line = re.search(r"Layers, bottom up.*?: (.*?)\. The core", ARCH, flags=re.S)
    assert line, "architecture.md no longer states the layers"
    stated = [set(re.findall(r"`([a-z_]+)`", step)) for step in line.group(1).split("→")]
    assert stated == bottom_up


def _bash_blocks(text: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [[ln for ln in b.splitlines() if ln.strip()] for b in blocks]


def test_setup_is_two_commands_and_ci_runs_exactly_the_readme_test_command() -> None:
    (setup,) = _bash_blocks(README.split("## Set-up", 1)[1].split("\n## ", 1)[0])
    assert len(setup) == 2
    main, tests = (ln.split("#", 1)[0].strip() for ln in setup)
    assert main == "bash scripts/setup.sh && .venv/bin/tileops demo"
    assert tests == "bash scripts/setup.sh && .venv/bin/python -m pytest"
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.startswith(("#", "set ", "cd "))]
    assert " && ".join(ci) == tests


def test_the_pins_the_readme_states_are_the_ones_installed_and_declared() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    for pin in re.findall(r"(?:torch|transformers)==[\d.]+", setup):
        name, version = pin.split("==")
        assert f"{name} {version}" in README, f"setup.sh pins {pin}; the README does not say {name} {version}"
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch>=2.11,<2.14" in core["dependencies"] and "tested on torch 2.11 to 2.13" in README
    cuda = tomllib.loads((ROOT / "backends" / "cuda" / "pyproject.toml").read_text())["project"]
    assert "tilelang>=0.1.15,<0.1.16" in cuda["dependencies"] and len(re.findall(r"tilelang`? 0\.1\.15", README)) >= 2


def _distributions() -> dict[str, dict]:
    found = {}
    for path in [ROOT / "pyproject.toml", *ROOT.glob("backends/*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")]:
        project = tomllib.loads(path.read_text())["project"]
        found[project["name"]] = project
    return found


def test_every_install_the_readme_shows_names_a_distribution_and_extra_that_exist() -> None:
    dists = _distributions()
    installs = re.findall(r"pip install (?:--\S+ )*(?:--find-links \S+ )?(tileops[a-z-]*)(?:\[([a-z_]+)\])?", README)
    assert installs
    for name, extra in installs:
        assert name in dists, f"README installs {name}, no such distribution in the tree"
        if extra:
            assert extra in dists[name].get("optional-dependencies", {}), f"{name} has no extra [{extra}]"
    for name in re.findall(r"`(tileops-[a-z-]+)`", README):
        assert name in dists, f"README names the distribution {name}, no such distribution in the tree"


def test_the_backend_distributions_do_not_depend_back_on_the_core() -> None:
    dists = _distributions()
    assert "tileops-cpu-ref>=0.1,<0.2" in dists["tileops"]["dependencies"]
    for name in ("tileops-cpu-ref", "tileops-cuda", "tileops-ascend"):
        assert not any(re.match(r"tileops\b(?!-)", d) for d in dists[name]["dependencies"]), name


def test_every_environment_variable_the_readme_names_is_read_by_the_code_and_every_one_the_code_reads_is_named() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "tileops_core").rglob("*.py"))
    read = set(re.findall(r"\b(TILEOPS_[A-Z_]+)\b", source)) - {"TILEOPS_EXPERTS"}  # (an HF registry name)
    named = set(re.findall(r"\b(TILEOPS_[A-Z_]+)\b", README))
    assert named <= read, f"README names variables the code never reads: {sorted(named - read)}"
    assert read <= named, f"the code reads variables the README never names: {sorted(read - named)}"


def test_the_command_line_section_lists_every_sub_command() -> None:
    from tileops_core.cli.main import COMMANDS

    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"`tileops ([a-z]+)", section)
    assert set(listed) == set(COMMANDS)


def _tileops_commands(text: str) -> list[list[str]]:
    """Every ``tileops ...`` command line in a code span, its optional ``[...]`` parts taken in."""
    commands = []
    for span in _code_spans(text):
        m = re.match(r"(?:\.venv/bin/)?tileops ([a-z].*)$", span.strip())
        if not m or "/" in m.group(1).split()[0]:
            continue
        line = re.sub(r"[\[\]]", "", m.group(1)).replace("KEY=VALUE", "num_experts=4").replace("OP", "RMSNormFwdOp")
        commands.append(shlex.split(line))
    return commands


def test_every_tileops_command_the_readme_shows_parses() -> None:
    """GPU-only ones included (``--device cuda``): parsing them needs no GPU; running one here is refused
    with exit code 2, which a test of the command itself checks."""
    from tileops_core.cli.main import build_parser

    commands = _tileops_commands(README)
    assert len(commands) >= 10
    parser = build_parser()
    for argv in commands:
        if argv == ["--version"]:
            continue
        args = parser.parse_args(argv)
        assert args.command == argv[0]


def test_the_readme_snippet_runs_and_its_error_message_is_the_one_a_bad_weight_gets() -> None:
    import torch

    from tileops_core.errors import CheckError

    code = README.split("## Using an op", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["y"].shape == (8, 4096)
    shown = re.search(r"^CheckError: (.*)$", README, flags=re.M)
    assert shown
    with pytest.raises(CheckError) as refused:
        scope["op"](torch.randn(8, 4096), torch.randn(1024))
    assert str(refused.value) == shown.group(1)


def test_the_demo_output_the_readme_shows_is_what_tileops_demo_prints(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from tileops_core.cli.main import main

    sample = README.split("`tileops demo` does exactly this", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    assert main(["demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [ln for ln in sample.splitlines() if ln.strip() != "..."]
    # The header and the routes are exact; numbers (tokens, timings, the logit difference) vary by machine.
    varying = re.compile(r"^(max \|dlogits\||generate\(\), |row \d+: |\s+TileOPs \[)")

    def shape(line: str) -> str:
        return re.sub(r"\d+(\.\d+)?(e[+-]\d+)?", "N", line)

    shapes = [shape(o) for o in out]
    for line in lines:
        if varying.match(line):
            assert shape(line) in shapes, f"tileops demo no longer prints a line like: {line!r}"
        else:
            assert line in out, f"tileops demo no longer prints: {line!r}"
    # The sample keeps the demo's order.
    positions = [shapes.index(shape(ln)) if varying.match(ln) else out.index(ln) for ln in lines]
    assert positions == sorted(positions)
