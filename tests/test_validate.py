"""``tileops validate``: the corpus of broken specs, the real manifest, --fix, the CLI contract.

Every file of ``tests/validate_corpus`` is a spec broken in one place; the line that is
wrong carries ``# expect: RULE`` (several rules separated by commas when one defect has
several consequences). A file must produce exactly those (rule, line) pairs: no more,
no fewer. Conformance cases pair with the classes of ``validate_corpus/corpus_ops.py``.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tileops_core.op.definition import is_bound
from tileops_core.cli.main import main
from tileops_core.validate.fix import rewrite_is_none_text
from tileops_core.validate.rules import RULES
from tileops_core.validate.runner import UsageError, validate

CORPUS = Path(__file__).parent / "validate_corpus"
CORPUS_FILES = sorted(CORPUS.glob("*.yaml"))
_EXPECT = re.compile(r"#\s*expect:\s*(.+)$")


def expectations(path: Path) -> set[tuple[str, int]]:
    """The (rule, line) pairs a corpus file's ``# expect:`` markers announce."""
    out = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            out |= {(rule.strip(), number) for rule in match.group(1).split(",")}
    return out


@pytest.fixture
def corpus_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The corpus directory, importable (its op module and benchmark live there)."""
    monkeypatch.syspath_prepend(str(CORPUS))
    return CORPUS


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_corpus_file_yields_exactly_its_expected_rules_and_lines(path: Path, corpus_path: Path) -> None:
    label = str(path)
    report = validate([label])
    got = {(d.rule, d.line) for d in report.diagnostics}
    assert got == expectations(path), "\n".join(str(d) for d in report.diagnostics)
    assert {d.file for d in report.diagnostics} == {label}


def test_corpus_covers_every_check_level_and_table_3_row() -> None:
    rules = {rule for path in CORPUS_FILES for rule, _ in expectations(path)}
    families = {rule.split(".")[0] for rule in rules}
    required = {f"C{i}" for i in range(1, 9)} | {f"L{i}" for i in range(5)} | {f"T3.{i}" for i in range(1, 8)}
    assert required <= families | rules, sorted(required - families - rules)
    assert rules <= set(RULES), sorted(rules - set(RULES))


def test_corpus_fixture_classes_are_restored_after_conformance(corpus_path: Path) -> None:
    import corpus_ops

    validate([str(CORPUS / "l2_inference.yaml")])
    assert not is_bound(corpus_ops.CorpusInferenceFwdOp)
    left = [s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("tileops::corpus_inference")]
    assert left == []  # its torch.library op is gone with the binding


# -- the real manifest ---------------------------------------------------------------------------


def test_real_manifest_validates_clean_with_every_check() -> None:
    report = validate()
    assert report.ops, "the manifest has ops"
    assert [str(d) for d in report.errors] == []
    implemented = [name for name, info in report.ops.items() if info["status"] == "implemented"]
    assert all(report.ops[name]["checks"] == "all" for name in implemented)


def test_conformance_judges_the_real_op_class(monkeypatch: pytest.MonkeyPatch) -> None:
    from tileops_core.op.base import Op
    from tileops_core.ops.gemm import GemmFwdOp

    def flipped(self: Op, trans_a: bool = False, trans_b: bool = True, **options: object) -> None:
        Op.__init__(self, trans_a=not trans_a, trans_b=trans_b, **options)

    monkeypatch.setattr(GemmFwdOp, "__init__", flipped)
    report = validate([str(Path(__file__).parents[1] / "manifest" / "gemm.yaml")], check_op="GemmFwdOp")
    rules = {d.rule for d in report.errors}
    assert rules == {"L2.inference"}, [str(d) for d in report.errors]
    assert "the op's generated checks reject the row" in report.errors[0].message


def test_example_plugin_specs_validate_clean_with_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = Path(__file__).parents[1] / "plugins" / "example"
    monkeypatch.syspath_prepend(str(plugin))  # its op module, whether or not the plugin is installed
    report = validate([str(plugin / "tileops_example" / "manifest")])
    assert report.ops and all(info["checks"] == "all" for info in report.ops.values())
    assert [str(d) for d in report.diagnostics] == []


def test_real_manifest_validation_takes_seconds_not_minutes() -> None:
    validate()  # imports and caches warm
    report = validate()
    assert report.seconds < 10.0, f"validating the manifest took {report.seconds:.1f} s"


def test_pure_lint_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from tileops_core.spec import load_manifest\n"
        "from tileops_core.validate.lint import lint_spec\n"
        "from tileops_core.validate.runner import validate\n"
        "assert [lint_spec(s) for s in load_manifest().values()]\n"
        "validate(conformance=False)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"TILEOPS_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": ""})
    assert result.returncode == 0, result.stderr


# -- status and --check-op -----------------------------------------------------------------------


def _spec_only_copy(tmp_path: Path, name: str) -> Path:
    text = (CORPUS / name).read_text(encoding="utf-8").replace("status: implemented", "status: spec-only")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_only_status_skips_code_checks_and_check_op_forces_them(tmp_path: Path, corpus_path: Path) -> None:
    path = _spec_only_copy(tmp_path, "l1_init.yaml")
    assert validate([str(path)]).errors == []
    forced = validate([str(path)], check_op="CorpusInitFwdOp")
    assert [d.rule for d in forced.errors] == ["L1.init"]
    assert forced.ops["CorpusInitFwdOp"]["checks"] == "all"


def test_check_op_reports_only_that_op(corpus_path: Path) -> None:
    report = validate([str(CORPUS)], check_op="CorpusUnifyFwdOp")
    assert list(report.ops) == ["CorpusUnifyFwdOp"]
    assert {d.op for d in report.diagnostics} == {"CorpusUnifyFwdOp"}


def test_unknown_check_op_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no op named 'NoSuchFwdOp'"):
        validate([str(CORPUS / "c6_unify.yaml")], check_op="NoSuchFwdOp")


# -- the command line ----------------------------------------------------------------------------


def test_cli_exit_codes(corpus_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(CORPUS / "t3_4_tensor_is_none.yaml")]) == 1
    assert main(["validate", str(CORPUS / "l4_label.yaml")]) == 0  # warnings do not fail
    assert main(["validate", str(CORPUS / "no_such_file.yaml")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_cli_json_carries_structured_diagnostics(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CORPUS / "c6_unify.yaml")
    assert main(["validate", "--format", "json", path]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["counts"]["error"] == 1
    (d,) = data["diagnostics"]
    assert (d["rule"], d["severity"], d["file"], d["line"], d["op"], d["field"]) == (
        "C6.unify", "error", path, 12, "CorpusUnifyFwdOp", "workloads[0]")
    assert "M = 5" in d["message"]
    assert data["ops"]["CorpusUnifyFwdOp"]["combinations"] == 1


def test_cli_text_groups_findings_by_file_in_line_order(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(CORPUS / "c6_rule.yaml"), str(CORPUS / "c1_guard_and.yaml")
    main(["validate", a, b])
    out = capsys.readouterr().out.splitlines()
    assert out.index(b) < out.index(a)  # files sorted, each a header followed by its findings
    block = out[out.index(b) + 1: out.index(b) + 4]
    assert block[0].startswith("  13: error C1.guard") and block[2].startswith("  15: error C6.rule")
    assert out[-1].startswith("2 op(s), 2 file(s): 3 errors")


def test_max_combinations_sets_the_advisory_cap(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CORPUS / "c0_combinations.yaml")
    assert [d.rule for d in validate([path]).diagnostics] == ["C0.combinations"]
    assert validate([path], max_combinations=512).diagnostics == []
    report = validate([path], max_combinations=1)
    assert report.ops["CorpusManyCombinationsFwdOp"]["combinations"] == 512  # still every one checked


# -- --fix ---------------------------------------------------------------------------------------

FIXABLE_FILES = ["t3_1_shape_read.yaml", "t3_3_defines_name.yaml", "t3_4_tensor_is_none.yaml",
                 "t3_5_value_is_none.yaml"]


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    return removed, added


def test_fix_rewrites_table_3_forms_and_the_result_validates_clean(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for name in FIXABLE_FILES:
        shutil.copy(CORPUS / name, tmp_path / name)
    assert main(["validate", "--fix", str(tmp_path)]) == 0
    assert validate([str(tmp_path)]).diagnostics == []
    changes = {name: _changed_lines((CORPUS / name).read_text(), (tmp_path / name).read_text())
               for name in FIXABLE_FILES}
    assert changes["t3_1_shape_read.yaml"] == (
        ['      w: {dtype: "same_as(x)"}', "    shape_rules:", '      - "w.shape == (K,)"  # expect: T3.1'],
        ['      w: {dtype: "same_as(x)", shape: "[K]"}'])
    assert changes["t3_3_defines_name.yaml"] == (
        ['      - "half == K // 2"  # expect: T3.3'], ["    let:", '      half: "K // 2"'])
    assert changes["t3_4_tensor_is_none.yaml"] == (
        ['      - "w is None or W == K"  # expect: T3.4'], ['      - "not present(w) or W == K"  # expect: T3.4'])
    assert changes["t3_5_value_is_none.yaml"] == (
        ['      - "(eps is None) or (eps > 0)"  # expect: T3.5'],
        ['      - "(not present(eps)) or (eps > 0)"  # expect: T3.5'])
    assert "fixed" in capsys.readouterr().err


def test_fix_is_idempotent_and_leaves_unfixable_forms_reported(tmp_path: Path) -> None:
    for name in ("t3_4_tensor_is_none.yaml", "t3_7_set_comprehension.yaml"):
        shutil.copy(CORPUS / name, tmp_path / name)
    main(["validate", "--fix", str(tmp_path)])
    once = {p.name: p.read_text() for p in tmp_path.glob("*.yaml")}
    assert main(["validate", "--fix", str(tmp_path)]) == 1  # T3.7 needs a person
    assert {p.name: p.read_text() for p in tmp_path.glob("*.yaml")} == once
    assert once["t3_7_set_comprehension.yaml"] == (CORPUS / "t3_7_set_comprehension.yaml").read_text()
    assert [d.rule for d in validate([str(tmp_path)]).diagnostics] == ["T3.7"]


def test_fix_adds_lets_to_an_existing_block_and_empties_shape_rules(tmp_path: Path) -> None:
    path = tmp_path / "lets.yaml"
    text = (CORPUS / "t3_3_defines_name.yaml").read_text()
    text = text.replace('      - "K % 2 == 0"\n', "").replace(
        "    shape_rules:\n", '    let:\n      twice: "2 * K"  # kept\n    shape_rules:\n')
    path.write_text(text)
    main(["validate", "--fix", str(path)])
    removed, added = _changed_lines(text, path.read_text())
    assert removed == ["    shape_rules:", '      - "half == K // 2"  # expect: T3.3']
    assert added == ['      half: "K // 2"']
    assert validate([str(path)]).diagnostics == []


@pytest.mark.parametrize(("text", "fixed"), [
    ("w is None or W == K", "not present(w) or W == K"),
    ("(w is None) == (b is None)", "(not present(w)) == (not present(b))"),
    ("w is not None and  W > 0", "present(w) and  W > 0"),
    ("K if w is None else W", "K if not present(w) else W"),
    ("(w is None) + 1 > 0", "(not present(w)) + 1 > 0"),
    ("not w is None", "not not present(w)"),
])
def test_is_none_rewrite_keeps_the_rest_of_the_text(text: str, fixed: str) -> None:
    assert rewrite_is_none_text(text) == fixed


MOE_LEGACY = '''\
# seed 001's MoePermuteNopadFwdOp, written in the legacy forms seed 000 rejects
MoePermuteNopadFwdOp:
  family: moe
  ref_api: "none"
  status: spec-only
  signature:
    inputs:
      hidden_states: {dtype: "float16 | bfloat16", shape: "[T, H]"}
      topk_ids: {dtype: "int32", shape: "[T, K]"}
      expert_map: {dtype: "int32", optional: true}   # presence picks the scan kernel
    outputs:
      out: {dtype: "same_as(hidden_states)", shape: "[T, K, H]"}
    params:
      num_experts: {type: int}
      num_experts_local: {type: int}
    shape_rules:
      - "expert_map is None or expert_map.shape == (num_experts,)"
      - "num_experts_local <= num_experts"
  workloads:
    - {hidden_states_shape: [1, 7168], topk_ids_shape: [1, 8], num_experts: 384,
       num_experts_local: 384, dtypes: [bfloat16], label: "kimi-k2-decode"}
    - {hidden_states_shape: [1, 7168], topk_ids_shape: [1, 8], num_experts: 256,
       num_experts_local: 128, expert_map_shape: [256], dtypes: [bfloat16], label: "deepseek-v3-ep2-decode"}
  roofline: {vars: {elem: "hidden_states.itemsize"}, flops: "T * K * H", bytes: "2 * T * K * H * elem"}
  source: {}
'''


def test_fix_moves_a_guarded_shape_read_onto_the_optional_tensor_keeping_its_comment(tmp_path: Path) -> None:
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_LEGACY)
    assert [(d.rule, d.line) for d in validate([str(path)]).diagnostics] == [("T3.1", 17)]
    assert main(["validate", "--fix", str(path)]) == 0
    removed, added = _changed_lines(MOE_LEGACY, path.read_text())
    assert removed == ['      expert_map: {dtype: "int32", optional: true}   # presence picks the scan kernel',
                       '      - "expert_map is None or expert_map.shape == (num_experts,)"']
    assert added == ['      expert_map: {dtype: "int32", optional: true, shape: "[num_experts]"}   # presence picks the '
                     'scan kernel']


def test_validating_a_spec_leaves_no_torch_library_op_registered(corpus_path: Path) -> None:
    import torch

    from tileops_core.op import boundary

    qualname = "tileops::corpus_inference_fwd_op"
    for _ in range(2):  # the second run gets the same name: the first gave it back
        validate([str(CORPUS / "l2_inference.yaml")])
        assert qualname not in torch._C._dispatch_get_all_op_names()
        assert not any(name.startswith(qualname) for name in boundary._used_names)
