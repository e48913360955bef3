"""Bad calls get the same verdict from a fresh op instance and from one that has a cached plan.

Issue 19: the warm path must not skip a check the cold path makes. Every core op, on its
smallest workload row, has each call-time input replaced in turn by a changed tensor of the
same role: another layout, requiring grad, on ``meta``, zero-size, stride-0 (expanded),
non-contiguous, with a dimension more or less, in another dtype. A fresh instance and a warm
one (it has just served the row's good call) must then agree: both raise the same error, or
both return the same result. Every rejection is TileOPs' own ``CheckError`` naming the
declaration it breaks (``file:line``), never torch's error from inside a kernel.

Hypothesis draws which dimension a change acts on and the data; the op x input x change
grid is enumerated whole.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileops_core import CheckError
from tileops_core.bench.workloads import instantiate
from tileops_core.workloads import dtype_cases
from test_catalogue import _core_specs, op_class

Change = Callable[[torch.Tensor, int], "torch.Tensor | None"]


def _dim(t: torch.Tensor, pick: int) -> int:
    return pick % t.dim()


def _expanded(t: torch.Tensor, pick: int) -> torch.Tensor | None:
    d = _dim(t, pick)
    if t.shape[d] < 2:
        return None
    return t.narrow(d, 0, 1).expand(t.shape)


def _non_contiguous(t: torch.Tensor, pick: int) -> torch.Tensor | None:
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return None
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _zero_size(t: torch.Tensor, pick: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[_dim(t, pick)] = 0
    return t.new_empty(shape)


def _other_dtype(t: torch.Tensor, pick: int) -> torch.Tensor:
    return t.to(torch.float64 if t.dtype != torch.float64 else torch.float32)


CHANGES: dict[str, Change] = {
    "sparse": lambda t, pick: t.to_sparse() if t.dim() <= 2 else None,
    "requires_grad": lambda t, pick: t.detach().clone().requires_grad_(True) if t.is_floating_point() else None,
    "meta": lambda t, pick: t.to("meta"),
    "zero_size": lambda t, pick: _zero_size(t, pick) if t.dim() else None,
    "expanded": lambda t, pick: _expanded(t, pick) if t.dim() else None,
    "non_contiguous": _non_contiguous,
    "extra_dim": lambda t, pick: t.unsqueeze(0),
    "dim_dropped": lambda t, pick: t.select(0, 0) if t.dim() else None,
    "other_dtype": _other_dtype,
}


@functools.lru_cache(maxsize=None)
def _specs() -> dict[str, Any]:
    return _core_specs()


@functools.lru_cache(maxsize=None)
def _smallest_row_of(name: str) -> Any:
    return _smallest_row(_specs()[name])


def _smallest_row(spec: Any) -> Any:
    return min(spec.workloads, key=lambda r: sum(m.numel() for m in instantiate(
        spec, r, dtype_cases(r)[0], meta_only=True).inputs.values()))


def _grid() -> list[Any]:
    params = []
    for name, spec in sorted(_core_specs().items()):
        row = _smallest_row(spec)
        meta = instantiate(spec, row, dtype_cases(row)[0], meta_only=True)
        for t in spec.call_inputs:
            if t.name in meta.inputs:
                params.extend(pytest.param(name, t.name, change, id=f"{name}-{t.name}-{change}") for change in CHANGES)
    return params


def _verdict(op: Any, args: list[Any]) -> tuple[str, Any]:
    try:
        result = op(*args)
    except Exception as exc:  # the verdict is the error itself
        return "raised", exc
    return "returned", result if isinstance(result, tuple) else (result,)


def _same_result(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
                return False
            if x.device.type != "meta" and not torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)):
                return False
        elif x != y:
            return False
    return True


_DECLARATION = re.compile(r"\([^()]+\.ya?ml:\d+\)")


@pytest.mark.parametrize("name,input_name,change", _grid())
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(min_value=0, max_value=7), seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_fresh_and_warm_instances_give_a_bad_call_the_same_verdict(name: str, input_name: str, change: str,
                                                                   pick: int, seed: int) -> None:
    spec = _specs()[name]
    row = _smallest_row_of(name)
    case = dtype_cases(row)[0]

    def call_args() -> tuple[Any, list[Any]]:
        inst = instantiate(spec, row, case, rng=torch.Generator().manual_seed(seed))
        return inst, inst.call_args(spec)

    inst, good = call_args()
    warm = op_class(spec)(**inst.op_kwargs)
    warm(*good)  # its plan for the good call is cached now
    bad = {}
    for who in ("fresh", "warm"):
        inst, args = call_args()
        position = [t.name for t in spec.call_inputs].index(input_name)
        changed = CHANGES[change](args[position], pick)
        if changed is None:
            pytest.skip(f"{change} does not apply to {input_name} of shape {list(args[position].shape)}")
        args[position] = changed
        op = op_class(spec)(**inst.op_kwargs) if who == "fresh" else warm
        bad[who] = _verdict(op, args)
    (fresh_kind, fresh), (warm_kind, warm_result) = bad["fresh"], bad["warm"]
    assert fresh_kind == warm_kind, f"fresh {fresh_kind} {fresh!r}; warm {warm_kind} {warm_result!r}"
    if fresh_kind == "raised":
        assert type(fresh) is type(warm_result) and str(fresh) == str(warm_result)
        assert isinstance(fresh, CheckError), f"{type(fresh).__name__} is not TileOPs' own: {fresh}"
        assert _DECLARATION.search(str(fresh)), f"names no declaration: {fresh}"
    else:
        assert _same_result(fresh, warm_result)
