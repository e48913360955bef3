"""What the attention GPU tests share (decode and prefill): the manifest's workload rows as
test parameters, a row's inputs, and the check of a launcher against a float64 reference with a
NaN-poisoned output (the conformance suite's tolerances; caches bit for bit).

Nothing here imports torch at module import.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import TOLERANCE, relative_error  # noqa: E402

__all__ = ["build_key_of", "compare_with_reference", "workload_instance", "workload_rows"]


def workload_rows(op: str, max_tokens: int | None = None) -> list:
    """The op's workload rows × dtypes (decode: up to ``max_tokens`` cached tokens a row)."""
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    def small(row) -> bool:
        gen = row.values["generator"]
        return max_tokens is None or int(gen["B"]) * int(gen["context"]) <= max_tokens

    spec = load_manifest()[op]
    return [pytest.param(row.index, case, id=f"{row.label}[{case}]") for row in spec.workloads
            for case in dtype_cases(row) if small(row)]


def workload_instance(op: str, row_index: int, case, device, seed: int):
    """The inputs and ``scale`` of workload row ``row_index`` in dtype case ``case``, drawn with ``seed``."""
    import importlib

    import torch

    from tileops_core import load_manifest
    from tileops_core.bench.workloads import instantiate

    spec = load_manifest()[op]
    importlib.import_module(spec.source["op"])  # registers the workload generators
    inst = instantiate(spec, spec.workloads[row_index], case, device=device, rng=torch.Generator().manual_seed(seed))
    return inst.inputs, inst.op_kwargs.get("scale")


def compare_with_reference(launcher, reason, reference, names, inputs, scale) -> None:
    """Run ``launcher`` on ``inputs`` with a NaN-poisoned ``out``; the output within the dtype's
    tolerance of ``reference`` (float64), the caches bit for bit."""
    import torch

    if reason is not None:
        pytest.skip(reason)
    expected, kc, vc = reference(inputs, scale)
    out = torch.full_like(inputs["query"], float("nan"))
    launcher().run(*[inputs.get(n) for n in names], scale, out)
    torch.cuda.synchronize()
    err = relative_error(out, expected)
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g}"
    for got, want in ((inputs["key_cache"], kc), (inputs["value_cache"], vc)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "a cache slot differs"


def build_key_of(key_type, inputs, lengths: str, layout: str, arch: str):
    """``key_type(dtype, NQ, NKV, D, paged, lengths dtype, layout dtype, arch)`` of ``inputs``:
    paged when the ``layout`` input (block table or slot mapping) is present, its dtype else None."""
    name = lambda n: str(inputs[n].dtype).replace("torch.", "")  # noqa: E731
    _, NQ, D = inputs["query"].shape
    paged = inputs.get(layout) is not None
    return key_type(name("query"), NQ, inputs["key"].shape[1], D, paged, name(lengths), name(layout) if paged else None,
                    arch)
