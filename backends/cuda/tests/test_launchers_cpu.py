"""Each TileLang kernel's one launch layer, run on the CPU with its compiled function stood in for.

A registered class's ``launcher(key)`` is the only host code between the core and the
compiled TileLang function. Here the compiled functions are replaced by torch code that
computes the kernel's semantics on exactly the views the launcher hands it (the shapes its
PrimFunc declares), so what a launcher passes, allocates and returns is checked against
torch on fresh random data, without a GPU.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tileops_cuda import registered  # noqa: E402
from tileops_cuda.kernels import gemm, group_norm, linear, reduce_sum, rmsnorm, silu_and_mul, skinny_linear  # noqa: E402
from tileops_cuda.kernels import softmax  # noqa: E402


def _stand_in(monkeypatch: pytest.MonkeyPatch, build: str, fn: Any) -> list[tuple[Any, ...]]:
    """Replace ``registered.<build>`` by a build whose compiled function is ``fn``; returns the
    list of argument tuples ``fn`` was called with."""
    calls: list[tuple[Any, ...]] = []

    def compiled(*args: Any) -> None:
        calls.append(args)
        fn(*args)

    monkeypatch.setattr(registered, build, lambda *key: SimpleNamespace(fn=compiled))
    return calls


@pytest.mark.parametrize("has_weight", [True, False])
def test_rmsnorm_launch_hands_the_kernel_rows_and_writes_the_cores_output(monkeypatch, has_weight):
    def kernel(x, *rest):
        *w, out, eps = rest
        out.copy_(F.rms_norm(x, (x.shape[-1],), w[0] if w else None, eps))

    calls = _stand_in(monkeypatch, "build_rmsnorm", kernel)
    launch = registered.TileLangRMSNorm.launcher(rmsnorm.RMSNormBuildKey("float32", 12, has_weight, "sm_90"))
    x, w = torch.randn(2, 3, 3, 4), torch.randn(3, 4)
    out = torch.empty(2, 3, 3, 4)
    assert launch(x, w if has_weight else None, (3, 4), 1e-5, out) is out
    torch.testing.assert_close(out, F.rms_norm(x, (3, 4), w if has_weight else None, 1e-5))
    args = calls[0]
    assert args[0].shape == (6, 12) and args[-2].shape == (6, 12) and args[-1] == 1e-5
    assert len(args) == (4 if has_weight else 3) and (not has_weight or args[1].shape == (12,))


def test_rmsnorm_launch_uses_the_dtypes_epsilon_for_eps_none_and_allocates_without_an_output(monkeypatch):
    calls = _stand_in(monkeypatch, "build_rmsnorm", lambda x, out, eps: out.copy_(F.rms_norm(x, (8,), None, eps)))
    launch = registered.TileLangRMSNorm.launcher(rmsnorm.RMSNormBuildKey("float32", 8, False, "sm_90"))
    x = torch.randn(5, 8)
    out = launch(x, None, (8,), None)
    assert calls[0][-1] == torch.finfo(torch.float32).eps
    torch.testing.assert_close(out, F.rms_norm(x, (8,)))


@pytest.mark.parametrize("shape,normalized,rows", [((5, 12), (12,), (5, 12)), ((4, 3), (4, 3), (1, 12))],
                         ids=["rows", "both-axes"])
def test_rmsnorm_launch_of_a_2d_input_hands_rows_of_the_normalized_width(monkeypatch, shape, normalized, rows):
    # A 2-D input whose last axis is the width goes to the kernel as it is; one normalized over both axes is
    # viewed as rows of their product (the launcher's fast path tests the width, not only the rank).
    def kernel(x, w, out, eps):
        out.copy_(F.rms_norm(x, (x.shape[-1],), w, eps))

    calls = _stand_in(monkeypatch, "build_rmsnorm", kernel)
    launch = registered.TileLangRMSNorm.launcher(rmsnorm.RMSNormBuildKey("float32", 12, True, "sm_90"))
    x, w = torch.randn(*shape), torch.randn(*normalized)
    torch.testing.assert_close(launch(x, w, normalized, 1e-5), F.rms_norm(x, normalized, w, 1e-5))
    assert calls[0][0].shape == rows and calls[0][2].shape == rows and (calls[0][0] is x) == (rows == shape)


def test_softmax_launch_writes_the_last_axis_softmax(monkeypatch):
    _stand_in(monkeypatch, "build_softmax", lambda x, out: out.copy_(torch.softmax(x, -1)))
    launch = registered.TileLangSoftmax.launcher(softmax.SoftmaxBuildKey("float32", 16, "sm_90"))
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(launch(x, -1, None), torch.softmax(x, -1))


def test_silu_and_mul_launch_allocates_half_the_last_axis(monkeypatch):
    calls = _stand_in(monkeypatch, "build_silu_and_mul",
                      lambda x, out: out.copy_(F.silu(x[:, :out.shape[1]]) * x[:, out.shape[1]:]))
    launch = registered.TileLangSiluAndMul.launcher(silu_and_mul.SiluAndMulBuildKey("float32", 8, "sm_90"))
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(launch(x), F.silu(x[..., :8]) * x[..., 8:])
    assert calls[0][0].shape == (6, 16) and calls[0][1].shape == (6, 8)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_launch_views_x_as_samples_groups_and_group_elements(monkeypatch, affine):
    groups = 4

    def kernel(x3, *rest):
        *wb, out3, eps = rest
        n = x3.shape[0]
        y = F.group_norm(x3.reshape(n, 8, -1), groups, *(wb or (None, None)), eps)
        out3.copy_(y.reshape(out3.shape))

    calls = _stand_in(monkeypatch, "build_group_norm", kernel)
    key = group_norm.GroupNormBuildKey("float32", groups, 8, 6, affine, "sm_90")
    launch = registered.TileLangGroupNorm.launcher(key)
    x, w, b = torch.randn(3, 8, 2, 3), torch.randn(8), torch.randn(8)
    got = launch(x, w if affine else None, b if affine else None, groups, 1e-5)
    torch.testing.assert_close(got, F.group_norm(x, groups, w if affine else None, b if affine else None, 1e-5))
    assert calls[0][0].shape == (3, groups, 12)


@pytest.mark.parametrize("M", [4, 8])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_launch_allocates_m_by_n_for_each_transpose(monkeypatch, trans_a, trans_b, M):
    """A transposed A of M % 8 != 0 rows (not whole 16-byte vectors, which the bulk copies need) runs the
    untransposed program on a packed copy (found in review: the transposed program's launch was refused)."""
    programs: list[bool] = []

    def build(key):
        def kernel(a, b, out):
            assert a.is_contiguous()
            out.copy_((a.t() if key.trans_a else a) @ (b.t() if key.trans_b else b))
            programs.append(key.trans_a)
        return SimpleNamespace(fn=kernel)

    monkeypatch.setattr(registered, "build_gemm", build)
    launch = registered.TileLangGemm.launcher(gemm.GemmBuildKey("float16", 5, 7, trans_a, trans_b, False, "sm_90"))
    a, b = torch.randn(*((7, M) if trans_a else (M, 7))), torch.randn(*((5, 7) if trans_b else (7, 5)))
    torch.testing.assert_close(launch(a, b, trans_a, trans_b),
                               (a.t() if trans_a else a) @ (b.t() if trans_b else b))
    assert programs == [trans_a and M % 8 == 0]


def test_bmm_launch_keeps_the_batch_axis(monkeypatch):
    _stand_in(monkeypatch, "build_gemm", lambda a, b, out: out.copy_(torch.bmm(a, b)))
    launch = registered.TileLangBmm.launcher(gemm.GemmBuildKey("float16", 5, 7, False, False, True, "sm_90"))
    a, b = torch.randn(3, 4, 7), torch.randn(3, 7, 5)
    torch.testing.assert_close(launch(a, b), torch.bmm(a, b))


def test_bmm_launch_runs_a_batch_past_cudas_grid_z_cap_in_pieces(monkeypatch):
    monkeypatch.setattr(registered, "GRID_YZ_MAX", 4)  # the program's grid z is the batch: CUDA caps it at 65535
    calls = _stand_in(monkeypatch, "build_gemm", lambda a, b, out: out.copy_(torch.bmm(a, b)))
    launch = registered.TileLangBmm.launcher(gemm.GemmBuildKey("float16", 5, 7, False, False, True, "sm_90"))
    a, b = torch.randn(10, 4, 7), torch.randn(10, 7, 5)
    torch.testing.assert_close(launch(a, b), torch.bmm(a, b))
    assert [args[0].shape[0] for args in calls] == [4, 4, 2]
    assert all(t.is_contiguous() for args in calls for t in args)


def test_sum_launch_of_a_0d_input_with_a_dim_is_the_input(monkeypatch):
    """torch.sum(x, 0) of a 0-d x is x (found in review: the launcher divided by the 0 axes)."""
    monkeypatch.setattr(reduce_sum, "build_sum", lambda key: _sum_pass(key.kind))
    launch = registered.TileLangSum.launcher(("float32", "float32", "sm_90"))
    for dim in (0, -1, [0]):
        torch.testing.assert_close(launch(torch.tensor(3.5), dim, False, None), torch.tensor(3.5))


@pytest.mark.parametrize("varlen", [False, True])
def test_conv_launch_over_a_pool_of_no_slots_runs_every_token_as_padding(varlen):
    """A [0, D, W - 1] pool with every slot -1 is a legal call (found in review: view(0, -1) raised)."""
    from tileops_cuda.kernels import conv1d

    D, W, T = 64, 4, 3
    x, weight, pool = torch.randn(T, D), torch.randn(D, W), torch.empty(0, D, W - 1)
    lengths = torch.ones(T, dtype=torch.int32)
    seen = []
    if varlen:
        key = conv1d.ConvVarlenBuildKey("float32", D, W, True, False, "lengths", "int32", "int32")
        run = conv1d._make_varlen_run(key, lambda *args: seen.append(args))
    else:
        key = conv1d.ConvUpdateBuildKey("float32", D, W, True, False, "lengths", "int32", "int32")
        run = conv1d._make_update_run(key, lambda *args: seen.append(args))
    run(x, pool, weight, lengths, torch.full((T,), -1, dtype=torch.int32), None, None, "silu", "lengths",
        torch.empty(T, D))
    assert seen and seen[0][1].shape == (0, D * (W - 1))


def test_a_varlen_conv_call_of_more_chunks_than_grid_y_holds_runs_the_flat_grid_programs(monkeypatch):
    """The varlen program's chunks run along grid y (65535 at most): past that the launcher hands the call, every
    argument as given, to the same key's programs laid along grid x (``flat_grid``), where the driver would
    refuse the launch (x here is one row expanded: no memory)."""
    from types import SimpleNamespace

    from tileops_cuda.kernels import conv1d

    D, W = 64, 4
    key = conv1d.ConvVarlenBuildKey("bfloat16", D, W, True, False, "lengths", "int32", "int32")
    seen, flat_calls, built = [], [], []

    def build(k):
        built.append(k)
        return SimpleNamespace(run=conv1d._make_varlen_run(k, lambda *args: flat_calls.append(args)))

    monkeypatch.setattr(conv1d, "build_conv_varlen", build)
    run = conv1d._make_varlen_run(key, lambda *args: seen.append(args))
    pool, weight, slots = torch.zeros(1, D, W - 1).bfloat16(), torch.randn(D, W).bfloat16(), torch.zeros(1).int()
    most = 65535 * key.chunk
    run(torch.randn(3, D).bfloat16(), pool, weight, torch.tensor([3]).int(), slots)  # within it: its own program
    assert len(seen) == 1 and not built
    x = torch.zeros(1, D).bfloat16().expand(most + 1, D)
    out = run(x, pool, weight, torch.tensor([most + 1]).int(), slots, None, None, "silu", "lengths")
    assert len(seen) == 1 and built == [conv1d.ConvVarlenBuildKey(**{**key.__dict__, "flat_grid": True})]
    assert len(flat_calls) == 1 and flat_calls[0][0].shape[0] == most + 1 and flat_calls[0][7] is out


def test_conv_launch_copies_contiguous_rows_at_a_misaligned_start_into_aligned_memory():
    from tileops_cuda.kernels import conv1d

    D, W = 64, 4
    key = conv1d.ConvUpdateBuildKey("bfloat16", D, W, True, False, "lengths", "int32", "int32")
    seen = []
    run = conv1d._make_update_run(key, lambda *args: seen.append(args))
    x = torch.randn(1, D + 8).bfloat16()[:, 1:D + 1]  # one token, contiguous, 2 bytes past an aligned start
    assert x.is_contiguous() and x.data_ptr() % 16
    pool = torch.randn(2, D, W - 1).bfloat16()
    run(x, pool, torch.randn(D, W).bfloat16(), torch.ones(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
        None, None, "silu", "lengths", torch.empty(1, D, dtype=torch.bfloat16))
    assert seen[0][0].data_ptr() % 16 == 0 and torch.equal(seen[0][0], x)


def _stand_in_linear(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[Any, ...]]]:
    """The linear programs stood in for by ``a @ w.t()`` (no skinny one where it refuses the key, as
    built); the calls each received, by program."""
    calls: dict[str, list[tuple[Any, ...]]] = {"gemm": [], "decode_gemm": [], "skinny": []}

    def program(name: str) -> SimpleNamespace:
        def compiled(a: Any, w: Any, out: Any) -> None:
            calls[name].append((a, w, out))
            out.copy_(a @ w.t())
        return SimpleNamespace(fn=compiled)

    def build(key: Any) -> linear.LinearPrograms:
        fits = skinny_linear.skinny_linear_refusal(key) is None
        return linear.LinearPrograms(program("gemm"), program("decode_gemm"), program("skinny") if fits else None,
                                     skinny_linear.rows_for(key) if fits else 0)

    monkeypatch.setattr(registered, "build_linear_kernels", build)
    return calls


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_launch_reads_the_weight_transposed_and_adds_the_bias(monkeypatch, with_bias):
    _stand_in_linear(monkeypatch)
    launch = registered.TileLangLinear.launcher(gemm.GemmBuildKey("float16", 5, 8, False, True, False, "sm_90"))
    x, w, bias = torch.randn(2, 3, 8), torch.randn(5, 8), torch.randn(5)
    torch.testing.assert_close(launch(x, w, bias if with_bias else None), F.linear(x, w, bias if with_bias else None))


@pytest.mark.parametrize("k,rows", [(64, 4), (10000, 3), (40000, 0)])
def test_a_linear_call_runs_the_skinny_program_then_the_gemms_decode_tiling_then_its_own_by_rows(monkeypatch, k,
                                                                                                  rows):
    calls = _stand_in_linear(monkeypatch)
    key = gemm.GemmBuildKey("bfloat16", 16, k, False, True, False, "sm_90")
    assert skinny_linear.rows_for(key) == rows
    launch = registered.TileLangLinear.launcher(key)
    w = torch.randn(16, k).to(torch.bfloat16)
    last = linear.DECODE_GEMM_ROWS
    for m in sorted({1, rows, rows + 1, last, last + 1} - {0}):
        x = torch.randn(m, k).to(torch.bfloat16)
        want = "skinny" if m <= rows else "decode_gemm" if m <= last else "gemm"
        before = len(calls[want])
        torch.testing.assert_close(launch(x, w, None), F.linear(x, w))
        assert len(calls[want]) == before + 1 and calls[want][-1][0].shape == (m, k), (m, want)


def test_the_decode_tiling_gives_narrow_weights_narrower_programs():
    def tiling(n: int) -> gemm.GemmTiling:
        return linear.decode_gemm_tiling(gemm.GemmBuildKey("bfloat16", n, 2048, False, True, False, "sm_90"))

    assert (tiling(512).block_m, tiling(512).block_n) == (64, 16)
    assert (tiling(520).block_m, tiling(520).block_n) == (64, 64)
    assert tiling(12288).threads == 128  # one consumer warpgroup: 64-row wgmma tiles


def _sum_pass(kind: str):
    """A stand-in for one compiled Sum pass: the sum over axis 1 into partial 0, zeros elsewhere."""

    def rows(x, part):
        part.zero_()
        part[:, 0] = x.sum(1)

    def cols(x, part):
        part.zero_()
        part[:, 0, :] = x.float().sum(1).to(part.dtype)

    return SimpleNamespace(fn=rows if kind == "rows" else cols)


@pytest.mark.parametrize("shape, dim, keepdim", [((4, 6, 5), (-1,), False), ((4, 6, 5), (1,), True),
                                                 ((4, 6, 5), None, False), ((4, 6, 5), (0, 1), False),
                                                 ((3, 8), [], True)])
def test_sum_launch_reduces_adjacent_axes_through_a_partial_and_a_fold(monkeypatch, shape, dim, keepdim):
    built = []

    def build(key):
        built.append(key)
        return _sum_pass(key.kind)

    monkeypatch.setattr(reduce_sum, "build_sum", build)
    launch = registered.TileLangSum.launcher(("float32", "float32", "sm_90"))
    x = torch.randn(shape)
    got = launch(x, dim, keepdim, None)
    want = torch.sum(x, dim, keepdim) if dim else (torch.sum(x).reshape([1] * x.dim()) if keepdim else torch.sum(x))
    torch.testing.assert_close(got, want)
    launch(torch.randn(shape), dim, keepdim, None)
    assert len(built) == 2  # a repeated shape finds its two compiled passes without building again
