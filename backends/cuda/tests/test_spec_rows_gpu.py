"""The TileLang kernels on every workload row and dtype of their ops' specs, on an NVIDIA GPU.

Two checks per row and dtype, both against the float64 references of the conformance suite
(``tests/catalogue_references.py``, same tolerances): the TileLang kernel called with the exact
arguments the op passes it and NaN-filled outputs (every element must be written), and the op
through its public API on CUDA tensors (the TileLang kernel selected wherever it does not
refuse). Each call draws a fresh seed, printed in every failure. Skips cleanly without a GPU
or tilelang. Ops served by TileLang kernels with their own spec-row checks elsewhere (RGDR,
conv1d) are not listed here; one row of every op a launcher serves is run again with each input
contiguous at a misaligned start (``MISALIGNED_ROWS``).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
from typing import Any

import pytest
import torch

from tileops_core import load_manifest
from tileops_core.bench.baselines import capture_launches
from tileops_core.bench.workloads import instantiate
from tileops_core.kernels import select_kernel
from tileops_core.workloads import dtype_cases

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import ERROR_SCALES, REFERENCES, TOLERANCE, relative_error, resolve_ref_api  # noqa: E402

#: The gated-delta-net layer's norms and gating, then the attention and MoE block's memory-bound ops.
OPS = ("ZeroCentredRMSNormFwdOp", "FusedAddZeroCentredRMSNormFwdOp", "GatedRMSNormFwdOp", "GDNGatingFwdOp",
       "QKNormRopeFwdOp", "SigmoidGateMulFwdOp", "MoETopKRoutingFwdOp",
       "MoEPermuteFwdOp", "MoEUnpermuteFwdOp", "MoEGroupedExpertsFwdOp", "MoESharedExpertFwdOp")
#: Ops whose real-size rows carry a full expert bank (gigabytes drawn on the CPU per row): only
#: their tiny rows run here; ``test_model_ops_gpu.py`` checks real sizes with inputs drawn on the GPU.
TINY_ROWS_ONLY = ("MoEGroupedExpertsFwdOp",)


def _cases(ops: tuple[str, ...] = OPS) -> list[Any]:
    """One pytest param per (op, workload row, dtype case) of ``ops``."""
    manifest = load_manifest()
    return [pytest.param(name, i, case, id=f"{name}-{row.label}[{case}]")
            for name in ops for i, row in enumerate(manifest[name].workloads) for case in dtype_cases(row)
            if name not in TINY_ROWS_ONLY or row.label.startswith("tiny")]


def _instance(name: str, row_index: int, case: Any) -> tuple[Any, Any, Any, str]:
    spec = load_manifest()[name]
    cls = getattr(importlib.import_module(spec.source["op"]), name)
    seed = int.from_bytes(os.urandom(4), "little")
    inst = instantiate(spec, spec.workloads[row_index], case, rng=torch.Generator().manual_seed(seed))
    return spec, cls, inst, f"{inst.name} seed={seed}"


def _check(spec: Any, got: dict, originals: dict, params: dict, where: str) -> None:
    api = None if spec.ref_api == "none" else resolve_ref_api(spec.ref_api)  # (as the conformance suite's)
    expected = REFERENCES[spec.name](api, originals, params)
    scale = ERROR_SCALES[spec.name](originals, params) if spec.name in ERROR_SCALES else None
    for out_name, out in got.items():
        ref = expected[out_name]
        assert tuple(out.shape) == tuple(ref.shape), f"{where}: {out_name} shape"
        err = relative_error(out.cpu(), ref, scale)  # infinite on any NaN: an element left unwritten
        assert err <= TOLERANCE[out.dtype], f"{where}: {out_name} relative error {err:.3g} > {TOLERANCE[out.dtype]:g}"


def _poisoned(shape: Any, dtype: torch.dtype) -> torch.Tensor:
    """NaN for floating outputs, the most negative value for integer ones (never a valid index)."""
    fill = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min
    return torch.full(shape, fill, dtype=dtype, device="cuda")


@pytest.mark.parametrize("name,row_index,case", _cases())
def test_kernel_writes_every_element_of_poisoned_outputs_and_matches_float64(cuda_device, name: str, row_index: int,
                                                                             case: Any) -> None:
    """Given the op's exact launch arguments and poisoned outputs (skipped where it refuses the row)."""
    spec, cls, inst, where = _instance(name, row_index, case)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    launch = capture_launches(op, args)[0]  # calls the op (once or twice): args are spent after this
    selection = select_kernel(launch.interface, launch.call)
    impl = selection.chosen
    if selection.chosen_backend != "cuda":
        pytest.skip(f"{where}: the TileLang kernel refuses this row: {impl.refusal(launch.call)}")
    # The launch's tensors are the captured call's; give the kernel fresh copies of the originals.
    names = {id(a): t.name for a, t in zip(args, spec.call_inputs) if a is not None}
    captured = op.last_plan
    fresh = {n: originals[n].to("cuda") for n in originals}
    kernel_args = [fresh[names[id(a)]] if id(a) in names else a for a in launch.args]
    outs = [_poisoned(shape, dtype) for shape, dtype in zip(captured.out_shapes, captured.out_dtypes)]
    impl.entry_for(launch.call).build()(*kernel_args, *outs)
    torch.cuda.synchronize()
    got = dict(zip(spec.outputs, outs))
    got.update({t.name: fresh[t.name] for t in spec.call_inputs if t.mutated and t.name in fresh})
    _check(spec, got, originals, op.params, where)


@pytest.mark.parametrize("name,row_index,case", _cases())
def test_op_on_cuda_selects_tilelang_unless_refused_and_matches_float64(cuda_device, name: str, row_index: int,
                                                                        case: Any) -> None:
    spec, cls, inst, where = _instance(name, row_index, case)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    args = [None if a is None else a.to("cuda") for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    result = op(*args)
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        tilelang = next(c.impl for c in selection.candidates if c.backend == "cuda")
        expected_backend = "cuda" if tilelang.refusal(call) is None else "cpu_ref"
        assert selection.chosen_backend == expected_backend, f"{where}: {selection.report()}"
    got = dict(zip(spec.outputs, result if isinstance(result, tuple) else (result,)))
    for name_, out in got.items():
        assert out.device.type == "cuda" and out.dtype == inst.dtypes[name_], f"{where}: {name_}"
    got.update({t.name: args[i] for i, t in enumerate(spec.call_inputs) if t.mutated and i < len(args)})
    _check(spec, got, originals, op.params, where)


#: A row each launcher whose programs read an input in 16-byte vectors or through tensor maps serves (its
#: TileLang kernel selected), with the dtype case: (op, row label, dtype). ``test_launch_alignment.py`` checks
#: the same launchers on the CPU; the chunked prefill's row is in ``test_chunk_gdr_gpu.py``.
MISALIGNED_ROWS = (
    ("RMSNormFwdOp", "decode-m1-4096", "bfloat16"), ("RMSNormFwdOp", "small-fp32-weight", "float32"),
    ("SoftmaxFwdOp", "attn-probs-2k", "bfloat16"), ("SiluAndMulFwdOp", "llama3-8b-mlp-decode-256", "bfloat16"),
    ("SumFwdOp", "rows-16m", "bfloat16"), ("GroupNormFwdOp", "image-g32-affine", "bfloat16"),
    ("GemmFwdOp", "llama3-8b-up-decode", "bfloat16"), ("BmmFwdOp", "llama-attn-scores-2k", "float16"),
    ("LinearFwdOp", "qwen3.5-out-proj-decode-b4", "bfloat16"), ("LinearFwdOp", "llama3-8b-up-decode", "bfloat16"),
    ("ZeroCentredRMSNormFwdOp", "qwen3-next-80b-decode-m1", "bfloat16"),
    ("FusedAddZeroCentredRMSNormFwdOp", "qwen3.5-h4096-decode-m1", "bfloat16"),
    ("GatedRMSNormFwdOp", "qwen3-next-decode-m1", "bfloat16"), ("QKNormRopeFwdOp", "qwen3-next-decode-t1", "bfloat16"),
    ("MoETopKRoutingFwdOp", "qwen3.5-35b-decode-b1", "bfloat16"),
    ("MoEUnpermuteFwdOp", "qwen3-next-80b-decode-b1", "bfloat16"), ("MoEGroupedExpertsFwdOp", "tiny", "bfloat16"),
    ("MoESharedExpertFwdOp", "qwen3-next-80b-decode-b1", "bfloat16"),
    ("MoESharedExpertFwdOp", "tiny-3d-ungated", "bfloat16"),
    ("AttentionDecodeFwdOp", "tiny-contiguous", "bfloat16"), ("AttentionDecodeFwdOp", "tiny-paged", "bfloat16"),
    ("AttentionPrefillFwdOp", "tiny-contiguous", "bfloat16"), ("AttentionPrefillFwdOp", "tiny-paged", "bfloat16"),
    ("RecurrentGatedDeltaRuleFwdOp", "qwen3.5-b1-t1-fp32state", "bfloat16"),
    ("CausalConv1dUpdateFwdOp", "qwen3.5-b1-t1", "bfloat16"),
    ("CausalConv1dVarlenFwdOp", "tiny-padding-bf16", "bfloat16"),
)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a contiguous tensor one element past a 16-byte boundary (``.contiguous()`` returns
    such a tensor as it is; the caching allocator starts ``base`` on a 512-byte one)."""
    base = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = base[1:].view(t.shape).copy_(t)
    assert view.is_contiguous() and view.data_ptr() % 16
    return view


@pytest.mark.parametrize("name,label,dtype", MISALIGNED_ROWS, ids=[f"{n}-{l}[{d}]" for n, l, d in MISALIGNED_ROWS])
def test_op_on_cuda_matches_float64_with_every_input_contiguous_at_a_misaligned_start(cuda_device, name: str,
                                                                                     label: str, dtype: str) -> None:
    """Found in review: the launchers passed a contiguous input at a misaligned start (a one-token slice of a
    fused projection at an odd offset) to programs that read 16-byte vectors; they pack it now, and write a
    mutated one (a pool, a cache) back through its packed copy."""
    spec = load_manifest()[name]
    row_index = next(i for i, row in enumerate(spec.workloads) if row.label == label)
    case = next(c for c in dtype_cases(spec.workloads[row_index]) if str(c) == dtype)
    spec, cls, inst, where = _instance(name, row_index, case)
    originals = {n: t.clone() for n, t in inst.inputs.items()}
    args = [None if a is None else _misaligned(a.to("cuda")) for a in inst.call_args(spec)]
    op = cls(**inst.op_kwargs)
    result = op(*args)
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        assert selection.chosen_backend == "cuda", f"{where}: {selection.report()}"
    got = dict(zip(spec.outputs, result if isinstance(result, tuple) else (result,)))
    got.update({t.name: args[i] for i, t in enumerate(spec.call_inputs) if t.mutated and i < len(args)})
    _check(spec, got, originals, op.params, where)


#: QKNormRope's lanes program (a sweep candidate until the H200 has timed it against the registered
#: first program) at its plan's block, at 128 threads, and at 32 threads x 3 rows, whose programs of
#: 3 rows straddle tokens at Qwen's head counts (a table of 2-3 tokens).
_LANES_SHAPES = ({"program": "lanes"}, {"program": "lanes", "threads": 128, "rows": 2},
                 {"program": "lanes", "threads": 32, "rows": 3})
#: The lanes program's candidates (qknr3): the per-(token, frequency) table, the warp's own table
#: (no block barrier), the 2π-reduced hardware sincos, vector partners, the 16-bit rotation; at the
#: plan's block and at 32 threads x 3 rows (tables of 2-3 tokens; a warp's rows of different tokens).
#: The sweep checks its other combinations against float64 on the prefill rows.
_FAST = {"sincos": "reduced", "partners": "vectors", "rotation": "native"}
_CANDIDATE_SHAPES = {
    "pairs-fast": {"program": "lanes", "table": "pairs", **_FAST},
    "warp-fast": {"program": "lanes", "table": "warp", **_FAST},
    "pairs-fast-t32-r3": {"program": "lanes", "table": "pairs", "threads": 32, "rows": 3, **_FAST},
    "warp-t32-r3": {"program": "lanes", "table": "warp", "threads": 32, "rows": 3},
}


@pytest.mark.parametrize("shape", [*_LANES_SHAPES, *_CANDIDATE_SHAPES.values()],
                         ids=["plan", "t128", "t32-r3", *_CANDIDATE_SHAPES])
@pytest.mark.parametrize("name,row_index,case", _cases(("QKNormRopeFwdOp",)))
def test_qk_norm_rope_lanes_program_writes_every_element_and_matches_float64(cuda_device, monkeypatch, shape: dict,
                                                                             name: str, row_index: int,
                                                                             case: Any) -> None:
    from tileops_cuda.kernels import block_shapes

    monkeypatch.setitem(block_shapes.BLOCK_SHAPES, "TileLangQKNormRope", ((None, shape),))
    test_kernel_writes_every_element_of_poisoned_outputs_and_matches_float64(cuda_device, name, row_index, case)
