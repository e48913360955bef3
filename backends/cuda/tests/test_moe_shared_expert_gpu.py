"""The shared expert's TileLang kernel on an NVIDIA GPU at Qwen3-Next / Qwen3.5 sizes (H=2048,
I=512), decode to prefill row counts, with and without the sigmoid gate, bf16 and fp16: every
element of a NaN-filled output written, within the conformance tolerance of the float64 result,
and no further from it than torch's path with the spec's roundings (``F.linear`` three times, as
the reference kernel computes it) by more than accumulation order explains. Skips cleanly without
a GPU or tilelang."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import TOLERANCE, relative_error  # noqa: E402

H, I = 2048, 512
_DTYPES = pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
_GATED = pytest.mark.parametrize("gated", [True, False], ids=["gated", "ungated"])


def _inputs(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, gated: bool) -> list:
    """x and the weights, scaled so each GEMM's outputs are about unit size."""
    def draw(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*size, device="cuda", generator=gen) * scale).to(dtype)

    return [draw(*shape, H), draw(I, H, scale=H ** -0.5), draw(I, H, scale=H ** -0.5), draw(H, I, scale=I ** -0.5),
            draw(1, H, scale=H ** -0.5) if gated else None]


def _float64(x, gate_proj, up_proj, down_proj, expert_gate) -> torch.Tensor:
    x, g, u, d = (t.double() for t in (x, gate_proj, up_proj, down_proj))
    out = (torch.nn.functional.silu(x @ g.T) * (x @ u.T)) @ d.T
    return out if expert_gate is None else out * torch.sigmoid(x @ expert_gate.double().T)


def _check(got: torch.Tensor, args: list, where: str) -> None:
    from tileops_cpu_ref.moe import moe_shared_expert

    want = _float64(*args)
    err = relative_error(got, want)  # infinite on any NaN: an element left unwritten
    torch_err = relative_error(moe_shared_expert(*args), want)
    assert err <= TOLERANCE[got.dtype], f"{where}: relative error {err:.3g} > {TOLERANCE[got.dtype]:g}"
    assert err <= 1.5 * torch_err + 1e-4, f"{where}: relative error {err:.3g}, torch's path {torch_err:.3g}"


@pytest.mark.parametrize("tokens", [1, 7, 64, 4096])
@_GATED
@_DTYPES
def test_the_kernel_writes_every_element_of_a_poisoned_output_within_the_float64_tolerance(cuda_device, gen, tokens,
                                                                                           gated, dtype):
    from tileops_cuda.kernels._common import dtype_name
    from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey
    from tileops_cuda.registered_model import TileLangMoESharedExpert

    args = _inputs(gen, (tokens,), dtype, gated)
    launch = TileLangMoESharedExpert.launcher(MoESharedExpertBuildKey(dtype_name(dtype), H, I, gated, cuda_device[1]))
    out = torch.full((tokens, H), float("nan"), dtype=dtype, device="cuda")
    assert launch(*args, out) is out
    torch.cuda.synchronize()
    _check(out, args, f"T={tokens} gated={gated} {dtype} seed={gen.initial_seed()}")


@pytest.mark.parametrize("tiling", ["plain", "dependent", "fused-logit", "split"])
@pytest.mark.parametrize("tokens", [1, 2, 3, 4, 5])
@_GATED
@_DTYPES
def test_the_skinny_programs_write_every_element_of_a_poisoned_output_within_the_float64_tolerance(
        cuda_device, gen, tokens, gated, dtype, tiling):
    """A key with ``skinny_rows=4``: one to four rows run the warp-per-feature programs, five the
    decode tiling's (the launcher's switch), each checked as the tensor-core programs are; the plain
    programs, the dependent ones the registered keys launch, the fused logit's (a gated key's
    logit formed by one more gate/up program, weights first), and that with a gate row and an up
    row to two warps (``gate_up_split``)."""
    from tileops_cuda.kernels._common import dtype_name
    from tileops_cuda.kernels.moe_shared_expert import MoESharedExpertBuildKey
    from tileops_cuda.kernels.moe_skinny import MoESkinnyTiling
    from tileops_cuda.registered_model import TileLangMoESharedExpert

    args = _inputs(gen, (tokens,), dtype, gated)
    skinny_tiling = {"plain": MoESkinnyTiling(), "dependent": MoESkinnyTiling(dependent_launch=True),
                     "fused-logit": MoESkinnyTiling(weights_first=True, fused_logit=True, dependent_launch=True),
                     "split": MoESkinnyTiling(weights_first=True, fused_logit=True, dependent_launch=True,
                                              gate_up_split=True)}[tiling]
    key = MoESharedExpertBuildKey(dtype_name(dtype), H, I, gated, cuda_device[1], skinny_rows=4,
                                  dependent_launch=tiling != "plain", skinny_tiling=skinny_tiling)
    out = torch.full((tokens, H), float("nan"), dtype=dtype, device="cuda")
    assert TileLangMoESharedExpert.launcher(key)(*args, out) is out
    torch.cuda.synchronize()
    _check(out, args, f"skinny {tiling} T={tokens} gated={gated} {dtype} seed={gen.initial_seed()}")


@pytest.mark.parametrize("shape", [(3, 5), (2, 1100)], ids=["3x5", "2x1100"])
@_GATED
def test_the_op_on_cuda_selects_the_kernel_for_leading_axes_and_matches_float64(cuda_device, gen, shape, gated):
    from tileops_core.kernels import select_kernel
    from tileops_core.ops.moe import MoESharedExpertFwdOp, MoESharedExpertKernel

    args = _inputs(gen, shape, torch.bfloat16, gated)
    op = MoESharedExpertFwdOp()
    got = op(*args)
    selection = select_kernel(MoESharedExpertKernel, op.last_plan.call_specs[MoESharedExpertKernel])
    assert selection.chosen_backend == "cuda", selection.report()
    assert got.shape == (*shape, H)
    _check(got, args, f"shape={shape} gated={gated} seed={gen.initial_seed()}")


def test_a_strided_x_gives_the_bits_of_its_contiguous_copy(cuda_device, gen):
    from tileops_core.ops.moe import MoESharedExpertFwdOp

    _, *weights = _inputs(gen, (1,), torch.bfloat16, True)
    x = torch.randn(37, 3 * H, device="cuda", generator=gen).bfloat16()[:, H:2 * H]
    op = MoESharedExpertFwdOp()
    assert torch.equal(op(x, *weights), op(x.contiguous(), *weights))
