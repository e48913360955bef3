"""The one workload instantiator (``tileops_core.workloads``) and the one ``TensorMeta``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from tileops_core.errors import ExprError, SpecError
from tileops_core.lang.tensor_meta import TensorMeta
from tileops_core.spec.analysis import SpecAnalysis
from tileops_core.spec.compile import compile_op
from tileops_core.spec.nodes import OpSpec
from tileops_core.spec.yamlload import load_yaml_text
from tileops_core.workloads import check_row, instantiate_case


def make_spec(workloads: str) -> OpSpec:
    text = textwrap.dedent("""\
        TestFwdOp:
          family: test
          ref_api: "none"
          status: spec-only
          signature:
            inputs:
              x: {dtype: "float32 | float16", shape: "[M, K]"}
              w: {dtype: "same_as(x)", shape: "[K]", optional: true}
            outputs:
              y: {dtype: "same_as(x)", shape: "[M, K]"}
          workloads: WORKLOADS
          roofline: {func: none}
          source: {}
        """).replace("WORKLOADS", workloads)
    raw = load_yaml_text(text, "test.yaml")
    return compile_op("TestFwdOp", raw["TestFwdOp"], "test.yaml", raw.key_lines["TestFwdOp"])


def test_each_dtype_case_keeps_the_entry_it_was_made_from() -> None:
    spec = make_spec('[{M: 4, K: 8, dtypes: [bfloat61, float16, float32], label: "tiny"}]')
    instance, findings = check_row(SpecAnalysis(spec), spec.workloads[0])
    assert findings == []  # the bad name is the key check's finding, not the instantiation's
    assert instance is not None
    assert [(c.entry, c.dtypes["x"], c.dtypes["y"]) for c in instance.cases] == [
        ("float16", "float16", "float16"), ("float32", "float32", "float32")]


def test_a_row_instantiates_shapes_outputs_and_indices_without_torch_types() -> None:
    spec = make_spec('[{M: 4, K: 8, w_shape: [K], dtypes: [float16], label: "tiny"}]')
    instance, case = instantiate_case(spec, spec.workloads[0], "float16")
    assert instance.present == {"x", "w"}
    assert instance.shapes == {"x": (4, 8), "w": (8,)} and instance.outputs == {"y": (4, 8)}
    assert instance.env["M"] == 4 and instance.env["K"] == 8
    assert case.dtypes == {"x": "float16", "w": "float16", "y": "float16"} and case.name == "float16"


def test_lenient_instantiation_passes_on_a_dtype_the_spec_excludes() -> None:
    spec = make_spec('[{M: 4, K: 8, label: "tiny"}]')
    _, case = instantiate_case(spec, spec.workloads[0], {"x": "float64"})
    assert case.dtypes["x"] == "float64"  # the benchmark lets the op refuse it
    _, findings = check_row(SpecAnalysis(spec), make_spec('[{M: 4, K: 8, x_dtype: float64, label: "t"}]').workloads[0])
    assert [f.rule for f in findings] == ["C6.dtype"]


def test_lenient_instantiation_raises_what_leaves_nothing_to_run() -> None:
    spec = make_spec('[{M: 4, label: "tiny"}]')
    with pytest.raises(SpecError, match=r"workload row 'tiny': cannot instantiate input x \[M, K\]: K is given "
                                        "neither by the row nor by its generator"):
        instantiate_case(spec, spec.workloads[0])


def test_tensor_meta_of_a_tensor_and_of_a_dtype_name_read_alike() -> None:
    t = torch.empty(3, 5, dtype=torch.bfloat16)
    meta = TensorMeta.of(t)
    assert (meta.shape, meta.dtype, meta.device) == ((3, 5), torch.bfloat16, t.device)
    assert meta.itemsize == 2 == TensorMeta((3, 5), "bfloat16").itemsize
    assert meta.ndim == meta.dim() == 2 and meta.numel() == 15
    with pytest.raises(ExprError, match="the dtype of this tensor is not known on this row"):
        TensorMeta((3,)).itemsize


def test_the_instantiator_and_the_roofline_import_no_torch() -> None:
    code = (
        "import sys\n"
        "from tileops_core.roofline import evaluate_roofline\n"
        "from tileops_core.spec import load_manifest\n"
        "from tileops_core.workloads import instantiate_case, dtype_cases\n"
        "for spec in load_manifest().values():\n"
        "    for row in spec.workloads:\n"
        "        if 'generator' not in row.values:\n"
        "            inst, case = instantiate_case(spec, row, dtype_cases(row)[0])\n"
        "            if spec.roofline is not None and spec.roofline.func is None:\n"
        "                env = {**inst.env, **{n: None for n in spec.inputs}, **inst.metas(case)}\n"
        "                assert evaluate_roofline(spec, env).flops >= 0\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"TILEOPS_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": ""})
    assert result.returncode == 0, result.stderr
