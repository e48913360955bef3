"""Which form of a reference kernel serves a call, and that the plain torch form computes the same.

``kernels.py`` runs the plain torch call (``direct``) where it computes what the portable
float32 form (``fn``) computes: calls without half-precision tensors, and on the CPU the
half dtypes whose torch kernel works in float32 and rounds once. These tests pin the
choice and check the claim on fresh random data:

* no half precision: both forms give the same bits;
* CPU half precision, elementwise and reductions whose order torch fixes (softmax,
  reciprocal, RMSNorm, the GDN gating's sigmoid): the same bits;
* CPU half precision, a sum along an axis into the half dtype: the same value or its
  neighbour on the dtype's grid. torch's float16 kernel sums in float32 in another order
  than the float32 kernel, so where the float32 sum lies within a few ulps of a rounding
  boundary the two round to neighbours (2 rows in 200000 of randn(1024) for float16;
  seed 2111507424 of ``_cases`` row 4 is one);
* CPU half precision, the matmul family and group norm: within 1.25x of the portable form's
  own error against float64 (both sum in float32, in other orders; a half-precision
  accumulator would be many times worse at these K).

SiluAndMul on the CPU runs the plain call in half precision too, although it rounds twice:
there it is the ``F.silu(gate) * up`` a model already runs, bit for bit, and each element
stays within one rounding (one step of the dtype's grid) of the portable form's wherever
silu(gate) is a normal number of the dtype (below that, float16's fixed grid adds the first
rounding's absolute error times ``|up|``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cpu_ref_rows import fresh_rng
from tileops_core.kernels import CallSpec
from tileops_cpu_ref import kernels as K


def _call(kernel, device_type: str, **dtypes: str) -> CallSpec:
    return CallSpec(kernel.op, "interface", device_type, device_type, dtypes, {}, {})


def _form(kernel, call: CallSpec) -> str:
    return "direct" if kernel.entry_for(call).build_key[-1] == "direct" else "portable"


@pytest.mark.parametrize("kernel", [k for k in K.KERNELS if k.direct is not None], ids=lambda k: k.__name__)
@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_calls_without_half_precision_run_the_plain_torch_call(kernel, device_type):
    assert _form(kernel, _call(kernel, device_type, input="float32", output="float32")) == "direct"


@pytest.mark.parametrize("kernel", [k for k in K.KERNELS if k.direct is not None], ids=lambda k: k.__name__)
def test_half_precision_off_the_cpu_runs_the_portable_float32_form(kernel):
    assert _form(kernel, _call(kernel, "cuda", input="bfloat16", output="bfloat16")) == "portable"


@pytest.mark.parametrize("kernel,dtype,form", [
    (K.RefRMSNorm, "bfloat16", "direct"), (K.RefRMSNorm, "float16", "direct"),
    (K.RefGroupNorm, "bfloat16", "direct"), (K.RefGroupNorm, "float16", "portable"),
    (K.RefSiluAndMul, "bfloat16", "direct"), (K.RefSiluAndMul, "float16", "direct"),
    (K.RefLinear, "float16", "direct"),
    (K.RefSSDDecode, "float32", "portable"), (K.RefRGDR, "float32", "portable"),
])
def test_cpu_half_precision_runs_the_plain_call_only_where_torch_computes_it_in_float32(kernel, dtype, form):
    assert _form(kernel, _call(kernel, "cpu", input=dtype, output=dtype)) == form


def test_a_sum_into_a_narrower_half_dtype_keeps_the_portable_form():
    # torch.sum(x, dtype=bfloat16) rounds the float32 inputs before summing them.
    assert _form(K.RefSum, _call(K.RefSum, "cpu", input="float32", output="bfloat16")) == "portable"
    assert _form(K.RefSum, _call(K.RefSum, "cpu", input="bfloat16", output="float32")) == "direct"


def _integer_reciprocal():
    entry = K.RefReciprocal.entry_for(_call(K.RefReciprocal, "cpu", input="int32", output="float32"))
    assert entry.build_key[-1] == "integer"
    return entry.build()


BITS, STEP, ERROR = "bits", "step", "error"  # how close the plain call's result is claimed to be


def _cases(gen: torch.Generator, dtype: torch.dtype):
    """(kernel, args, claim) per op: the args a kernel gets, fresh random values, and how close
    the plain half-precision call comes to the portable form (one of BITS, STEP, ERROR)."""
    def r(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    return [
        (K.RefRMSNorm, (r(16, 1024), r(1024), (1024,), 1e-6), BITS),
        (K.RefRMSNorm, (r(16, 1024), None, (1024,), None), BITS),
        (K.RefSoftmax, (r(16, 2048), -1, None), BITS),
        (K.RefSoftmax, (r(8, 6, 4), 1, "float32"), BITS),
        (K.RefSoftmax, (r(256, 64), 0, None), BITS),  # not the last axis (found in review: torch rounds inside)
        (K.RefSum, (r(64, 1024), -1, False, None), STEP),
        (K.RefSum, (r(1 << 16), None, True, "float32"), BITS),
        (K.RefReciprocal, (r(64, 64), None), BITS),
        (K.RefReciprocal, (r(64, 64), torch.empty(64, 64, dtype=dtype)), BITS),
        (K.RefGroupNorm, (r(4, 64, 16, 16), r(64), r(64), 8, 1e-5), ERROR),
        (K.RefBmm, (r(4, 64, 2048), r(4, 2048, 32)), ERROR),
        (K.RefGemm, (r(64, 2048), r(96, 2048), False, True), ERROR),
        (K.RefGemm, (r(2048, 64), r(2048, 32), True, False), ERROR),
        (K.RefLinear, (r(16, 2048), r(128, 2048), r(128)), ERROR),
        (K.RefSiluAndMul, (r(16, 512),), BITS),
        (K.RefGDNGating, (r(64, 32), r(64, 32), torch.randn(32, generator=gen), torch.randn(32, generator=gen)), BITS),
    ]


def _outputs(result):
    """A kernel's outputs as a tuple of fresh tensors (Reciprocal may write one out)."""
    return tuple(t.clone() for t in (result if isinstance(result, tuple) else (result,)))


def _float64(args):
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def _relative(got, expected):
    return float((got.double() - expected).norm() / expected.norm())


@pytest.mark.parametrize("index", range(16))
def test_without_half_precision_the_plain_call_gives_the_portable_forms_bits(index):
    kernel, args, _ = _cases(fresh_rng(), torch.float32)[index]
    direct, portable = _outputs(kernel.direct(*args)), _outputs(kernel.fn(*args))
    assert all(torch.equal(d, p) for d, p in zip(direct, portable, strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("index", range(16))
def test_on_the_cpu_the_plain_half_call_computes_in_float32(dtype, index):
    kernel, args, claim = _cases(fresh_rng(), dtype)[index]
    if str(dtype).removeprefix("torch.") not in kernel.cpu_half_in_float32:
        pytest.skip(f"{kernel.__name__} runs its portable form for {dtype}")
    outputs = list(zip(_outputs(kernel.direct(*args)), _outputs(kernel.fn(*args)), strict=True))
    assert all(d.dtype == p.dtype and d.shape == p.shape for d, p in outputs)
    if claim == BITS:
        assert all(torch.equal(d, p) for d, p in outputs)
    elif claim == STEP:
        inf = torch.full_like(outputs[0][1], float("inf"))
        for direct, portable in outputs:
            neighbours = (portable, torch.nextafter(portable, inf), torch.nextafter(portable, -inf))
            assert torch.stack([direct == n for n in neighbours]).any(dim=0).all()
    else:
        direct, portable = outputs[0]
        expected = kernel.fn(*_float64(args))
        assert _relative(direct, expected) <= 1.25 * _relative(portable, expected) + 1e-7


def test_a_silu_and_mul_in_half_precision_rounds_once():
    # Rounded once, it is the float64 result rounded to bfloat16 except where float32 and
    # float64 straddle a rounding boundary; the plain torch call, rounding twice, differs
    # from it in about a quarter of the elements.
    x = torch.randn(64, 1024, generator=fresh_rng()).bfloat16()
    gate, up = x.double().chunk(2, dim=-1)
    expected = (F.silu(gate) * up).to(torch.bfloat16)
    assert (K.RefSiluAndMul.fn(x) != expected).double().mean() < 1e-3


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("form", ["integer", "portable"])
def test_an_integer_reciprocal_is_float32_and_writes_the_given_out(dtype, form):
    fn = _integer_reciprocal() if form == "integer" else K.RefReciprocal.fn
    x = torch.randint(-1000, 1000, (257,), generator=fresh_rng()).to(dtype)
    expected = torch.reciprocal(x.to(torch.float32))
    assert torch.equal(fn(x, None), expected)
    out = torch.empty(257)
    assert fn(x, out) is out and torch.equal(out, expected)


def test_an_integer_reciprocal_is_float32_whatever_the_default_dtype():
    fn = _integer_reciprocal()
    x = torch.randint(1, 1000, (16,), generator=fresh_rng())
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result = fn(x, None)
    finally:
        torch.set_default_dtype(previous)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, torch.reciprocal(x.double()).float(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_on_the_cpu_a_half_silu_and_mul_is_the_torch_statement_it_replaces(dtype):
    # Under a leading batch axis, as a model's MLP calls it.
    run = K.RefSiluAndMul.entry_for(_call(K.RefSiluAndMul, "cpu", x=str(dtype).removeprefix("torch."))).build()
    x = torch.randn(2, 7, 2 * 300, generator=fresh_rng()).to(dtype)
    gate, up = x.chunk(2, dim=-1)
    assert torch.equal(run(x), F.silu(gate) * up)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_on_the_cpu_a_half_silu_and_mul_is_within_one_rounding_of_the_portable_form(dtype):
    # Rounding silu(gate) first moves the product by under one step of the dtype's grid, so
    # the second rounding lands on the portable form's value or on one of its neighbours. That
    # holds where silu(gate) is a normal number of the dtype, whose rounding error is relative.
    # Below the dtype's smallest normal (float16: |gate| < 1.2e-4) the grid is fixed and the
    # error absolute (up to 2**-25), so times |up| it can reach two steps of the product (seed
    # 17 of randn(64, 1024): gate -9.16e-5, up -2.19, direct 1.00374e-4, portable 1.00493e-4).
    # There the bound is that error times |up|, plus one step.
    x = torch.randn(64, 1024, generator=fresh_rng()).to(dtype)
    direct, portable = K.RefSiluAndMul.direct(x), K.RefSiluAndMul.fn(x)
    inf = torch.full_like(portable, float("inf"))
    above, below = torch.nextafter(portable, inf), torch.nextafter(portable, -inf)
    gate, up = x.chunk(2, dim=-1)
    silu = F.silu(gate)  # rounded to the dtype, as the direct form rounds it
    normal = silu.abs() >= torch.finfo(dtype).tiny
    assert torch.stack([direct == n for n in (portable, above, below)]).any(dim=0)[normal].all()
    first_rounding = (silu.float() - F.silu(gate.float())).abs() * up.float().abs()
    step = torch.maximum((above.float() - portable.float()).abs(), (portable.float() - below.float()).abs())
    assert ((direct.float() - portable.float()).abs() <= first_rounding + step)[~normal].all()
    assert not torch.equal(direct, portable)  # the two forms do differ: the test sees the second rounding


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_torch_cpu_sigmoid_of_every_half_value_is_the_float32_sigmoid_rounded_once(dtype):
    # What RefGDNGating's plain form relies on for beta: all 65536 bit patterns, in the
    # vectorised loop and the scalar tail (an odd length).
    x = torch.arange(-32768, 32767, dtype=torch.int32).to(torch.int16).view(dtype)
    direct, portable = torch.sigmoid(x), torch.sigmoid(x.float()).to(dtype)
    assert torch.equal(direct.view(torch.int16)[~direct.isnan()], portable.view(torch.int16)[~direct.isnan()])
    assert torch.equal(direct.isnan(), portable.isnan())

