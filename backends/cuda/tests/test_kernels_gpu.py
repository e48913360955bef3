"""RMSNorm, Softmax, SiluAndMul, GEMM, Sum and GroupNorm kernels against float64 torch on the GPU.

Each kernel is called through its one launch layer, the launcher its registered class builds
(``registered.TileLang*.launcher(key)``), with the interface's arguments, as the core calls it.
"""

from __future__ import annotations

import pytest

from tileops_cuda import registered
from tileops_cuda.kernels import gemm as kg
from tileops_cuda.kernels import group_norm as kgn
from tileops_cuda.kernels import rmsnorm as kr
from tileops_cuda.kernels import silu_and_mul as ksm
from tileops_cuda.kernels import softmax as ksf
from tileops_cuda.testing import rel_err


def _within_rounding(got, want64, slack=2e-5):
    """Error no more than twice the output dtype's own rounding of the exact result."""
    import torch

    assert not torch.isnan(got.float()).any(), "output has NaN (unwritten or wrong)"
    err = rel_err(got, want64)
    rounding = rel_err(want64.to(got.dtype), want64)
    assert err <= 2 * rounding + slack, (err, rounding)


def _dt(name):
    import torch

    return getattr(torch, name)


@pytest.mark.parametrize(
    "shape,dtype,weight",
    [((37, 4096), "bfloat16", True), ((5, 5120), "float16", True), ((64, 1000), "float32", False), ((3, 8192), "bfloat16", False)],
)
def test_rmsnorm_matches_float64(shape, dtype, weight, cuda_device, gen):
    import torch
    import torch.nn.functional as F

    dev = cuda_device[0]
    x = torch.randn(shape, device=dev, generator=gen).to(_dt(dtype))
    w = torch.randn(shape[-1], device=dev, generator=gen).to(_dt(dtype)) if weight else None
    launch = registered.TileLangRMSNorm.launcher(kr.RMSNormBuildKey(dtype, shape[-1], weight, cuda_device[1]))
    y = launch(x, w, (shape[-1],), 1e-6)
    want = F.rms_norm(x.double(), (shape[-1],), None if w is None else w.double(), 1e-6)
    _within_rounding(y, want)


@pytest.mark.parametrize("shape,dtype", [((7, 32000), "bfloat16"), ((33, 2048), "float16"), ((9, 1000), "float32"), ((2, 3, 48), "float32")])
def test_softmax_matches_float64(shape, dtype, cuda_device, gen):
    import torch

    x = (torch.randn(shape, device=cuda_device[0], generator=gen) * 4).to(_dt(dtype))
    launch = registered.TileLangSoftmax.launcher(ksf.SoftmaxBuildKey(dtype, shape[-1], cuda_device[1]))
    _within_rounding(launch(x, -1, None), torch.softmax(x.double(), -1))


# (262200, 2 * 512) float32: 65550 row tiles of 4, past the 65535 that grid y would hold (the grid is on x).
@pytest.mark.parametrize("shape,dtype", [((37, 2 * 14336), "bfloat16"), ((3, 2 * 256), "float32"), ((2, 5, 2 * 88), "float16"),
                                         ((262200, 2 * 512), "float32")])  # fmt: skip
def test_silu_and_mul_matches_float64(shape, dtype, cuda_device, gen):
    import torch
    import torch.nn.functional as F

    x = (torch.randn(shape, device=cuda_device[0], generator=gen) * 3).to(_dt(dtype))
    n = shape[-1] // 2
    x64 = x.double()
    launch = registered.TileLangSiluAndMul.launcher(ksm.SiluAndMulBuildKey(dtype, n, cuda_device[1]))
    _within_rounding(launch(x), F.silu(x64[..., :n]) * x64[..., n:])


@pytest.mark.parametrize(
    "m,n,k,ta,tb,dtype,batch",
    [(256, 512, 384, False, True, "bfloat16", None), (200, 384, 256, False, False, "float16", None),
     (128, 256, 512, True, False, "bfloat16", None), (64, 256, 128, True, True, "float16", None),
     (300, 256, 128, False, False, "bfloat16", 3),
     (5, 256, 128, True, False, "bfloat16", None), (100, 256, 128, True, True, "float16", None),
     (8, 136, 40, False, False, "bfloat16", 70001)],  # fmt: skip
    # (M = 5 and 100 with A transposed: rows of A not whole 16-byte vectors, served by the untransposed program;
    # a batch of 70001: past grid z's 65535, launched in two pieces)
)
def test_gemm_matches_float64(m, n, k, ta, tb, dtype, batch, cuda_device, gen):
    import torch

    dev = cuda_device[0]
    lead = (batch,) if batch else ()
    a = torch.randn(*lead, *((k, m) if ta else (m, k)), device=dev, generator=gen).to(_dt(dtype))
    b = torch.randn(*lead, *((n, k) if tb else (k, n)), device=dev, generator=gen).to(_dt(dtype))
    key = kg.GemmBuildKey(dtype, n, k, ta, tb, batch is not None, cuda_device[1])
    c = registered.TileLangBmm.launcher(key)(a, b) if batch else registered.TileLangGemm.launcher(key)(a, b, ta, tb)
    a64 = a.double().transpose(-1, -2) if ta else a.double()
    b64 = b.double().transpose(-1, -2) if tb else b.double()
    _within_rounding(c, a64 @ b64, slack=1e-4)


@pytest.mark.parametrize("n,k", [(12288, 2048), (2048, 4096), (256, 2048), (136, 40), (512, 8200)],
                         ids=["qwen3.5-qkvz", "qwen3.5-out", "router", "tiny", "k-tail"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_linear_matches_float64_through_each_of_its_programs(n, k, dtype, cuda_device, gen):
    """Every row count up to the skinny program's, then the GEMM's decode tiling to its last row and the
    GEMM one past it, on a NaN-poisoned output: each element written, within two roundings of the
    float64 product, and the launcher's output bit for bit the program's its rows pick."""
    import torch

    from tileops_cuda.kernels import linear as kl

    dev = cuda_device[0]
    key = kg.GemmBuildKey(dtype, n, k, False, True, False, cuda_device[1])
    launch = registered.TileLangLinear.launcher(key)
    programs = kl.build_linear_kernels(key)
    rows, last = programs.skinny_rows, kl.DECODE_GEMM_ROWS
    w = (torch.randn(n, k, device=dev, generator=gen) / k ** 0.5).to(_dt(dtype))
    for m in sorted({1, 2, 3, rows, rows + 1, 17, last, last + 1} - {0}):
        x = torch.randn(m, k, device=dev, generator=gen).to(_dt(dtype))
        want = x.double() @ w.double().t()
        out = torch.full((m, n), float("nan"), device=dev, dtype=_dt(dtype))
        launch(x, w, None, out)
        _within_rounding(out, want, slack=1e-4)
        program = programs.skinny if m <= rows else programs.decode_gemm if m <= last else programs.gemm
        direct = torch.full((m, n), float("nan"), device=dev, dtype=_dt(dtype))
        program.fn(x, w, direct)
        _within_rounding(direct, want, slack=1e-4)
        assert torch.equal(direct, out), f"the launcher's call of {m} rows is not its program's"


@pytest.mark.parametrize(
    "shape,dims,dtype,out",
    [((64, 4096), (-1,), "bfloat16", None), ((1 << 20,), None, "float32", None), ((300, 64), (0,), "float16", None),
     ((8, 32, 4, 128), (2,), "float32", None), ((6, 1000), (1,), "bfloat16", "float32"), ((4, 5, 6), (0, 1), "float32", None),
     ((70001, 64), (-1,), "float32", None), ((70001, 5, 24), (1,), "bfloat16", None)],  # fmt: skip
)  # the last two: 70001 output rows, past grid y / z's 65535 (both passes launch on grid x)
def test_sum_matches_float64(shape, dims, dtype, out, cuda_device, gen):
    import torch

    x = torch.randn(shape, device=cuda_device[0], generator=gen).to(_dt(dtype))
    launch = registered.TileLangSum.launcher((dtype, out or dtype, cuda_device[1]))
    got = launch(x, dims, False, None if out is None else _dt(out))
    want = torch.sum(x.double(), dims) if dims else torch.sum(x.double())
    assert got.dtype == (x.dtype if out is None else _dt(out))
    assert got.shape == want.shape
    _within_rounding(got, want, slack=1e-5)


@pytest.mark.parametrize(
    "shape,groups,dtype,affine",
    [((2, 64, 16, 16), 8, "float32", False), ((2, 64, 16, 16), 8, "float32", True), ((3, 128, 32, 32), 32, "bfloat16", True),
     ((2, 32, 40), 4, "float16", True), ((70001, 8, 4), 2, "float32", True)],  # fmt: skip (70001: past grid y's cap)
)
def test_group_norm_matches_float64(shape, groups, dtype, affine, cuda_device, gen):
    import torch
    import torch.nn.functional as F

    dev = cuda_device[0]
    x = (torch.randn(shape, device=dev, generator=gen) * 2 + 3).to(_dt(dtype))  # offset mean: the shift matters
    w = torch.randn(shape[1], device=dev, generator=gen).to(_dt(dtype)) if affine else None
    b = torch.randn(shape[1], device=dev, generator=gen).to(_dt(dtype)) if affine else None
    spatial = x[0, 0].numel()
    key = kgn.GroupNormBuildKey(dtype, groups, shape[1], spatial, affine, cuda_device[1])
    got = registered.TileLangGroupNorm.launcher(key)(x, w, b, groups, 1e-5)
    want = F.group_norm(x.double(), groups, None if w is None else w.double(), None if b is None else b.double(), 1e-5)
    _within_rounding(got, want, slack=1e-5)
