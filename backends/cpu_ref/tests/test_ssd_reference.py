"""The SSD decode kernel against a literal transcription of the step, in float64.

The oracle loops over batch and head, as the manifest states the step; the kernel users run
is ``RefSSDDecode.fn`` (float32, the state updated in place). Tolerances, as
``||got - oracle|| / ||oracle||``: 2e-6 for the float32 kernel (a few float32 roundings per
element, no long sums), 1e-12 for the float64 form other backends are checked against.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cpu_ref_rows import fresh_rng, workload_params
from tileops_core.bench.workloads import instantiate
from tileops_cpu_ref.kernels import RefSSDDecode
from tileops_cpu_ref.ssd import ssd_decode

FP32_TOL = 2e-6
FP64_TOL = 1e-12
#: Workload rows whose state is above this run only with ``-m all_workloads``.
SMALL_STATE_BYTES = 64 << 20


def _literal(A, dt, x, B_in, C_in, state):
    """(y, new state) in float64, one batch entry and head at a time."""
    batch, H, P = dt.shape
    G = B_in.shape[1]
    S = state.double().clone()
    y = torch.zeros(batch, H, P, dtype=torch.float64)
    for b in range(batch):
        for h in range(H):
            g = h // (H // G)
            dA = torch.exp(dt[b, h].double()[:, None] * A[h].double())  # [P, N]
            S[b, h] = S[b, h] * dA + (dt[b, h].double() * x[b, h].double())[:, None] * B_in[b, g].double()[None, :]
            y[b, h] = S[b, h] @ C_in[b, g].double()
    return y, S


def _case(batch, H, P, N, G, dtype=torch.bfloat16, rng=None):
    gen = rng or fresh_rng()
    return dict(A=-torch.exp(torch.randn(H, P, N, generator=gen)), dt=F.softplus(torch.randn(batch, H, P, generator=gen)),
                x=torch.randn(batch, H, P, generator=gen).to(dtype), B_in=torch.randn(batch, G, N, generator=gen).to(dtype),
                C_in=torch.randn(batch, G, N, generator=gen).to(dtype), state=torch.randn(batch, H, P, N, generator=gen))


def _relative(got, expected):
    return float((got.double() - expected).norm() / expected.norm())


def _assert_kernel_matches(case):
    expected, expected_state = _literal(**case)
    state = case["state"].clone()
    y = RefSSDDecode.fn(case["A"], case["dt"], case["x"], case["B_in"], case["C_in"], state)
    assert y.dtype == torch.float32 and y.shape == case["dt"].shape and y.is_contiguous()
    assert _relative(y, expected) <= FP32_TOL
    assert _relative(state, expected_state) <= FP32_TOL


@pytest.mark.parametrize("shape", [(2, 8, 16, 16, 2), (3, 4, 5, 7, 1), (1, 6, 4, 8, 6), (2, 8, 3, 5, 4)],
                         ids=["groups-2", "one-group", "group-per-head", "odd-sizes"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_matches_literal_transcription(shape, dtype):
    _assert_kernel_matches(_case(*shape, dtype=dtype))


_SPEC, _ROWS = workload_params("SSDDecodeFwdOp", "state", SMALL_STATE_BYTES)


@pytest.mark.parametrize("row_index,dtypes", _ROWS)
def test_kernel_matches_literal_transcription_on_workload_rows(row_index, dtypes):
    inst = instantiate(_SPEC, _SPEC.workloads[row_index], dtypes, rng=fresh_rng())
    _assert_kernel_matches({k: inst.inputs[k] for k in ("A", "dt", "x", "B_in", "C_in", "state")})


def test_float64_form_matches_literal_transcription():
    case = _case(2, 8, 16, 16, 2)
    expected, expected_state = _literal(**case)
    state = case["state"].double()
    y = ssd_decode(case["A"], case["dt"], case["x"], case["B_in"], case["C_in"], state, torch.float64)
    assert y.dtype == torch.float64
    assert _relative(y, expected) <= FP64_TOL and _relative(state, expected_state) <= FP64_TOL


def test_a_strided_state_is_updated_through_its_view():
    case = _case(2, 4, 8, 6, 2)
    expected, expected_state = _literal(**case)
    storage = torch.zeros(2, 4, 8, 12)
    state = storage[..., ::2]
    state.copy_(case["state"])
    y = RefSSDDecode.fn(case["A"], case["dt"], case["x"], case["B_in"], case["C_in"], state)
    assert _relative(y, expected) <= FP32_TOL and _relative(state, expected_state) <= FP32_TOL
    assert torch.equal(storage[..., 1::2], torch.zeros(2, 4, 8, 6))  # the gaps stay untouched
