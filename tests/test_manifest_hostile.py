"""Hostile manifests cost a bounded read: each is refused fast, in little memory, naming file and line.

Each case is a file written at run time under ``tmp_path`` (the 50 MB ones too: nothing
large is committed) and validated (load and lint, ``conformance=False``) in a fresh
process, which reports its own CPU time and its peak-RSS growth over the state after
imports. The bound is 2 CPU seconds and 100 MB a case (CPU time, so that other work on
the machine does not count); today's main ran some of these for over a minute at 3-5 GB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_manifest_load import GOOD
from tileops_core.spec.manifest import core_manifest_dir
from tileops_core.spec.yamlbounds import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, MAX_OPS_PER_FILE, MAX_SCALAR_CHARS

CPU_BOUND_S = 2.0
RSS_BOUND_KB = 100 * 1024

_PROBE = """
import json, resource, sys, time
from tileops_core.validate.runner import validate
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
report = validate([sys.argv[1]], conformance=False)
cpu = time.process_time() - start
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"cpu": cpu, "growth_kb": growth, "found": [str(d) for d in report.diagnostics],
                  "ops": report.ops}))
"""


def probe(path: Path) -> dict:
    """Validate ``path`` in a fresh process; its findings, CPU seconds and peak-RSS growth (KB)."""
    done = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["cpu"] < CPU_BOUND_S, f"{path.name}: {result['cpu']:.2f} CPU s"
    assert result["growth_kb"] < RSS_BOUND_KB, f"{path.name}: RSS grew {result['growth_kb'] / 1024:.0f} MB"
    return result


def only_finding(path: Path) -> str:
    (finding,) = probe(path)["found"]
    return finding


def laughs(depth: int, name: str = "lol") -> list[str]:
    """Anchors ``&lol0``..``&lol{depth-1}``, each a list of ten aliases of the one before."""
    lines = [f"  - &{name}0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, depth):
        lines.append(f"  - &{name}{i} [{', '.join([f'*{name}{i - 1}'] * 10)}]")
    return lines


def bomb_file(tmp_path: Path, depth: int, place: str) -> tuple[Path, int]:
    """A small manifest whose alias bomb of ``depth`` levels is used at ``place``; the line that passes the bound."""
    top = depth - 1
    text = GOOD
    if place == "op entry":
        text += f"BombFwdOp: *lol{top}\n"
    elif place == "workloads":
        text = text.replace("  workloads:\n    - {M: 4, N: 8, dtypes: [float32], label: small}\n",
                            f"  workloads: *lol{top}\n")
    elif place == "description":
        text = text.replace("  status: spec-only\n", f"  status: spec-only\n  description: *lol{top}\n")
    text = "x-anchors:\n" + "\n".join(laughs(depth)) + "\n" + text
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    # Anchors count once where written (11, 111, ...); the first one past the bound is the culprit.
    weight, total, line = 11, 11, 2
    for level in range(1, depth):
        weight = 1 + 10 * weight
        total += weight
        line += 1
        if total > MAX_NODES:
            return path, line
    return path, next(i + 1 for i, t in enumerate(text.splitlines()) if f"*lol{top}" in t and "&" not in t)


@pytest.mark.parametrize("depth", [6, 8, 9])
@pytest.mark.parametrize("place", ["op entry", "workloads", "description"])
def test_an_alias_bomb_is_refused_at_the_alias_that_passes_the_node_bound(tmp_path, depth, place):
    path, line = bomb_file(tmp_path, depth, place)
    finding = only_finding(path)
    assert finding.startswith(f"{path}:{line}: error L0.limit: alias *lol")
    assert finding.endswith(f"brings the file past {MAX_NODES} YAML nodes (aliases count every node they "
                            "repeat); write the values out, or split the file")


@pytest.mark.parametrize("place", ["op entry", "workloads", "description"])
def test_a_small_bomb_within_the_bound_is_read_and_judged_as_a_spec(tmp_path, place):
    path, _ = bomb_file(tmp_path, 3, place)  # 1,221 nodes: admitted, then refused for what it says
    result = probe(path)
    assert not any("L0.limit" in f for f in result["found"])
    assert result["found"], "a list of strings where a spec, a workload row or a description belongs is a problem"


def test_an_alias_inside_the_node_it_names_is_a_cycle_refused_with_its_line(tmp_path):
    path = tmp_path / "cycle.yaml"
    path.write_text(GOOD + "Loop: &loop\n  - [a, *loop]\n")
    line = GOOD.count("\n") + 2
    assert only_finding(path) == f"{path}:{line}: error L0.limit: alias *loop is used inside the node it names (a cycle)"


def test_a_50_mb_manifest_of_127k_distinct_ops_is_refused_by_its_size_at_the_line_that_passes_it(tmp_path):
    text = "".join(f"# op {i} of a wide family\n" + GOOD.replace("ProbeFwdOp", f"Probe{i}FwdOp")
                   for i in range(127_000))
    assert len(text) > 50_000_000
    path = tmp_path / "wide.yaml"
    path.write_text(text)
    line = text.encode().count(b"\n", 0, MAX_FILE_BYTES) + 1
    assert only_finding(path) == (f"{path}:{line}: error L0.limit: the file is {len(text)} bytes, more than the "
                                  f"{MAX_FILE_BYTES} a manifest file may hold (the limit is passed on this line); "
                                  "split it, one family per file")


def test_a_50_mb_flow_list_on_one_line_is_refused_by_its_size(tmp_path):
    path = tmp_path / "flow.yaml"
    path.write_text("Flow: [" + "1, " * 17_000_000 + "1]\n")
    assert only_finding(path).startswith(f"{path}:1: error L0.limit: the file is 51000010 bytes, more than the "
                                         f"{MAX_FILE_BYTES} a manifest file may hold")


def test_a_flow_list_under_the_size_limit_is_refused_at_the_node_bound(tmp_path):
    path = tmp_path / "flow.yaml"
    path.write_text("Flow: [\n" + "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,\n" * 20_000 + "1]\n")
    line = 2 + MAX_NODES // 10 - 1  # the root mapping, the key and the list count too
    assert only_finding(path) == (f"{path}:{line}: error L0.limit: this node brings the file past {MAX_NODES} YAML "
                                  "nodes (aliases count every node they repeat); write the values out, or split the "
                                  "file")


@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_deeper_than_the_bound_is_refused_at_the_line_that_passes_it(tmp_path, style):
    path = tmp_path / "deep.yaml"
    if style == "flow":
        path.write_text(GOOD + "Deep: " + "[" * 200_000 + "]" * 200_000 + "\n")
        line = GOOD.count("\n") + 1
        finding = only_finding(path)
        assert finding.startswith(f"{path}:{line}: error L0.")  # libyaml's own depth bound, or ours
        assert "nesting depth" in finding or f"nested deeper than {MAX_DEPTH} levels" in finding
    else:
        path.write_text(GOOD + "".join(f"{'  ' * i}k{i}:\n" for i in range(500)) + "  " * 500 + "v\n")
        line = GOOD.count("\n") + MAX_DEPTH
        assert only_finding(path) == f"{path}:{line}: error L0.limit: YAML nested deeper than {MAX_DEPTH} levels"


def test_a_huge_string_scalar_is_refused_with_its_line(tmp_path):
    path = tmp_path / "scalar.yaml"
    path.write_text(GOOD.replace("  status: spec-only\n", "  status: spec-only\n  description: '"
                                 + "lol " * 400_000 + "'\n"))
    assert only_finding(path) == (f"{path}:5: error L0.limit: a scalar of 1600000 characters, more than "
                                  f"{MAX_SCALAR_CHARS}")


def test_a_5000_digit_number_is_refused_with_its_line(tmp_path):
    path = tmp_path / "number.yaml"
    path.write_text(GOOD.replace("{M: 4, N: 8,", "{M: " + "4" * 5000 + ", N: 8,"))
    line = GOOD.count("\n") - 2
    assert only_finding(path) == (f"{path}:{line}: error L0.yaml: YAML value cannot be read: ValueError: Exceeds "
                                  "the limit (4300 digits) for integer string conversion: value has 5000 digits; use "
                                  "sys.set_int_max_str_digits() to increase the limit")


def test_more_ops_in_one_file_than_the_bound_are_refused_at_the_first_op_past_it(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text("".join(f"Op{i}FwdOp: {{}}\n" for i in range(MAX_OPS_PER_FILE + 5)))
    assert only_finding(path) == (f"{path}:{MAX_OPS_PER_FILE + 1}: error L0.limit Op{MAX_OPS_PER_FILE}FwdOp: "
                                  f"{MAX_OPS_PER_FILE + 5} ops in one file, more than {MAX_OPS_PER_FILE}; split it, "
                                  "one family per file")


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system", "!!python/name:os.system",
                                 "!!python/object/new:subprocess.Popen"])
def test_a_python_tag_constructs_nothing_and_is_refused_with_its_line(tmp_path, tag):
    marker = tmp_path / "ran"
    path = tmp_path / "tag.yaml"
    path.write_text(GOOD.replace("  status: spec-only\n", f"  status: spec-only\n  description: {tag} "
                                 f"['touch {marker}']\n"))
    finding = only_finding(path)
    assert finding.startswith(f"{path}:5: error L0.yaml: YAML syntax error: could not determine a constructor for "
                              f"the tag 'tag:yaml.org,2002:python/")
    assert not marker.exists()


def test_forty_read_boolean_params_are_checked_on_a_labelled_sample(tmp_path):
    flags = "".join(f"      f{i}: {{type: bool, default: false}}\n" for i in range(40))
    text = GOOD.replace("    shape_rules:\n", "    params:\n" + flags + "    requires:\n      - \""
                        + " or ".join(f"not f{i}" for i in range(40)) + "\"\n    shape_rules:\n")
    path = tmp_path / "flags.yaml"
    path.write_text(text)
    result = probe(path)
    assert result["ops"]["ProbeFwdOp"]["coverage"] == "sampled"
    assert (result["ops"]["ProbeFwdOp"]["combinations"], result["ops"]["ProbeFwdOp"]["checked"]) == (2**40, 4096)
    (finding,) = result["found"]
    assert finding.startswith(f"{path}:1: advisory C0.sampled ProbeFwdOp: SAMPLED: 1099511627776 discriminant "
                              "combinations, more than the 4096 checked one by one; the per-combination checks ran "
                              "on 4096 combinations drawn with seed 0, not on all")


def test_forty_unread_boolean_params_are_covered_whole_through_one_combination(tmp_path):
    flags = "".join(f"      f{i}: {{type: bool, default: false}}\n" for i in range(40))
    path = tmp_path / "flags.yaml"
    path.write_text(GOOD.replace("    shape_rules:\n", "    params:\n" + flags + "    shape_rules:\n"))
    result = probe(path)
    op = result["ops"]["ProbeFwdOp"]
    assert (op["coverage"], op["combinations"], op["checked"]) == ("projected", 2**40, 1)
    (finding,) = result["found"]
    assert finding.startswith(f"{path}:1: advisory C0.combinations ProbeFwdOp: 1099511627776 discriminant "
                              "combinations, more than the cap of 256; all are covered by checking 1: the params f0, "
                              "f1, f2")


def test_the_bounds_admit_the_shipped_manifest_a_hundred_times_over():
    for path in core_manifest_dir().glob("*.yaml"):
        text = path.read_text()
        assert 100 * len(text.encode()) < MAX_FILE_BYTES, path.name
        assert 100 * text.count("\n") < MAX_NODES, path.name  # a line holds at most a few nodes


def test_an_alias_bomb_in_a_plugin_hardware_profile_is_refused_like_one_in_a_manifest(tmp_path):
    from tileops_core.bench.profiles import load_profile
    from tileops_core.errors import TileOpsError

    path = tmp_path / "profile.yaml"
    path.write_text("x-anchors:\n" + "\n".join(laughs(9)) + "\nname: bomb\n")
    start = time.process_time()
    with pytest.raises(TileOpsError) as info:
        load_profile(path)
    assert time.process_time() - start < CPU_BOUND_S
    assert str(info.value).startswith(f"hardware profile {path}:6: alias *lol3 (11111 nodes) brings the file past "
                                      f"{MAX_NODES} YAML nodes")
