"""Property: for each seed-001 example op, random valid calls never raise a check error, and
random invalid calls (one declaration broken at a time) always raise one that names a
declaration: ``Op: ... (manifest/<family>.yaml:<line>)`` with that line inside the op's entry.

Shapes are small and may be empty; the in-test kernels are the PyTorch functions (computed
in float32 and cast back, so every dtype of the spec runs on the CPU).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from example_ops import (REFERENCE_KERNELS, BmmFwdOp, BmmKernel, GemmFwdOp, GemmKernel, GroupNormFwdOp,
                         GroupNormKernel, ReciprocalFwdOp, ReciprocalKernel, RMSNormFwdOp, RMSNormKernel,
                         SSDDecodeFwdOp, SSDDecodeKernel)
from tileops_core.errors import CheckError
from tileops_core.kernels import KernelEntry, registry
from tileops_core.op import Op
from tileops_core.spec.manifest import core_manifest_dir


def _f32(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Run ``fn`` on float32 copies of the tensor arguments; cast back to the first one's dtype."""
    def run(*args):
        dtype = args[0].dtype
        return fn(*(a.float() if isinstance(a, torch.Tensor) else a for a in args)).to(dtype)
    return run


def _ssd(A, dt, x, B_in, C_in, state):
    group = torch.arange(A.shape[0]) // max(A.shape[0] // max(B_in.shape[1], 1), 1)
    b, c = B_in[:, group].float(), C_in[:, group].float()
    state.mul_(torch.exp(dt[..., None] * A)).add_(dt[..., None] * x.float()[..., None] * b[:, :, None, :])
    return (state * c[:, :, None, :]).sum(-1)


def _group_norm(x, w, b, groups, eps):
    # F.group_norm refuses one value per group; the spec does not (any non-empty x is valid)
    y = x.reshape(x.shape[0], groups, -1)
    y = (y - y.mean(-1, keepdim=True)) / torch.sqrt(y.var(-1, unbiased=False, keepdim=True) + eps)
    y = y.reshape(x.shape)
    if w is None:
        return y
    view = (1, -1) + (1,) * (x.dim() - 2)
    return y * w.view(view) + b.view(view)


@pytest.fixture
def kernels(fresh_registry, monkeypatch):
    """The fake backend in the test's fresh registry (the hypothesis examples of one test share it)."""
    monkeypatch.setenv("TILEOPS_DISABLE_PLUGIN_AUTOLOAD", "1")
    registry.register_backend(registry.BackendInfo("fake-properties"))
    impls = {
        BmmKernel: _f32(REFERENCE_KERNELS[BmmKernel]),
        GemmKernel: _f32(REFERENCE_KERNELS[GemmKernel]),
        RMSNormKernel: _f32(REFERENCE_KERNELS[RMSNormKernel]),
        GroupNormKernel: _f32(_group_norm),
        SSDDecodeKernel: _ssd,
        ReciprocalKernel: REFERENCE_KERNELS[ReciprocalKernel],
    }
    for interface, fn in impls.items():
        impl = type(f"Prop{interface.__name__}", (interface,), {
            "devices": ("cpu",), "general": True,
            "entry_for": classmethod(lambda cls, call, fn=fn: KernelEntry((cls.__name__,), lambda: fn))})
        registry.register_kernel(impl, "fake-properties")


@dataclass
class Call:
    """An op construction and a call: ``make()`` then ``op(*args, **kwargs)``."""

    make: Callable[[], Op]
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    broken: str = ""

    def run(self) -> Any:
        return self.make()(*self.args, **self.kwargs)


FLOATS = [torch.float16, torch.bfloat16, torch.float32]
NOT_FLOATS = [torch.int32, torch.float64, torch.bool, torch.complex64]
dim = st.integers(0, 4)
pos = st.integers(1, 4)


def rand(shape, dtype=torch.float32) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(tuple(shape)).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape)).bool()
    return torch.randint(1, 100, tuple(shape), dtype=dtype)


def other(draw, value: int) -> int:
    return draw(st.integers(0, 5).filter(lambda v: v != value))


# -- per op: a valid call, and the ways to break it ----------------------------------------------------

@st.composite
def bmm(draw, broken: bool):
    b, m, k, n = (draw(dim) for _ in range(4))
    dt = draw(st.sampled_from(FLOATS))
    sa, sb, da, db = [b, m, k], [b, k, n], dt, dt
    how = draw(st.sampled_from(["dtype", "same_as", "batch", "inner", "rank", "missing"])) if broken else ""
    if how == "dtype":
        da = db = draw(st.sampled_from(NOT_FLOATS))
    elif how == "same_as":
        db = draw(st.sampled_from([d for d in FLOATS + NOT_FLOATS if d != dt]))
    elif how == "batch":
        sb[0] = other(draw, b)
    elif how == "inner":
        sb[1] = other(draw, k)
    elif how == "rank":
        sa = draw(st.sampled_from([sa[1:], sa + [2]]))
    args = [rand(sa, da), None if how == "missing" else rand(sb, db)]
    return Call(BmmFwdOp, args, broken=how)


@st.composite
def gemm(draw, broken: bool):
    ta, tb = draw(st.booleans()), draw(st.booleans())
    m, n, k = (draw(dim) for _ in range(3))
    dt = draw(st.sampled_from(FLOATS))
    sa = [k, m] if ta else [m, k]
    sb = [n, k] if tb else [k, n]
    how = draw(st.sampled_from(["inner", "rank", "same_as", "flag"])) if broken else ""
    db = dt
    make = lambda: GemmFwdOp(ta, tb)  # noqa: E731
    if how == "inner":
        sb[1 if tb else 0] = other(draw, k)
    elif how == "rank":
        sa = sa + [1]
    elif how == "same_as":
        db = draw(st.sampled_from([d for d in FLOATS if d != dt]))
    elif how == "flag":
        make = lambda: GemmFwdOp(int(ta), tb)  # noqa: E731
    return Call(make, [rand(sa, dt), rand(sb, db)], broken=how)


@st.composite
def rmsnorm(draw, broken: bool):
    s = draw(st.lists(dim, max_size=2))
    norm = draw(st.lists(pos, min_size=1, max_size=2))
    dt = draw(st.sampled_from(FLOATS))
    eps = draw(st.one_of(st.none(), st.floats(1e-8, 1e-2)))
    with_weight = draw(st.booleans())
    how = draw(st.sampled_from(["trailing", "weight_shape", "weight_dtype", "dtype", "rank", "eps", "empty_shape"])) \
        if broken else ""
    xs, ws, wdt, xdt, shape = s + norm, list(norm), dt, dt, list(norm)
    if how == "trailing":
        xs[-1] = other(draw, norm[-1])
    elif how == "weight_shape":
        with_weight, ws = True, ws[:-1] + [other(draw, norm[-1])]
    elif how == "weight_dtype":
        with_weight, wdt = True, draw(st.sampled_from([d for d in FLOATS if d != dt]))
    elif how == "dtype":
        xdt = wdt = draw(st.sampled_from(NOT_FLOATS))
    elif how == "rank":
        xs = norm[1:]
        if not xs:
            xs, shape = [norm[0]], [norm[0], 2]
    elif how == "eps":
        eps = -draw(st.floats(1e-6, 1.0))
    elif how == "empty_shape":
        shape = []
    args = [rand(xs, xdt), rand(ws, wdt) if with_weight else None]
    return Call(lambda: RMSNormFwdOp(shape, eps), args, broken=how)


@st.composite
def groupnorm(draw, broken: bool):
    groups, per = draw(pos), draw(pos)
    b, r = draw(dim), draw(st.lists(dim, max_size=2))
    c = groups * per
    dt = draw(st.sampled_from(FLOATS))
    affine = draw(st.booleans())
    how = draw(st.sampled_from(["divisible", "half_switch", "weight_shape", "rank", "groups", "dtype"])) if broken else ""
    xs, ws, g, xdt = [b, c, *r], [c], groups, dt
    if how == "divisible":
        xs[1] = c + draw(st.integers(1, groups - 1)) if groups > 1 else c
        if groups == 1:
            g, xs[1] = 2, 2 * per + 1
    elif how == "half_switch":
        affine = None
    elif how == "weight_shape":
        affine, ws = True, [other(draw, c)]
    elif how == "rank":
        xs = [c]
    elif how == "groups":
        g = draw(st.integers(-3, 0))
    elif how == "dtype":
        xdt = draw(st.sampled_from(NOT_FLOATS))
    if affine is None:
        args = [rand(xs, xdt), rand(ws, xdt), None] if draw(st.booleans()) else [rand(xs, xdt), None, rand(ws, xdt)]
    elif affine:
        args = [rand(xs, xdt), rand(ws, xdt), rand(ws, xdt)]
    else:
        args = [rand(xs, xdt)]
    return Call(lambda: GroupNormFwdOp(g), args, broken=how)


@st.composite
def ssd(draw, broken: bool):
    g, per = draw(pos), draw(pos)
    b, p, n = draw(dim), draw(pos), draw(pos)
    h = g * per
    xdt = draw(st.sampled_from([torch.float16, torch.bfloat16]))
    shapes = {"A": [h, p, n], "dt": [b, h, p], "x": [b, h, p], "B_in": [b, g, n], "C_in": [b, g, n], "state": [b, h, p, n]}
    dtypes = {"A": torch.float32, "dt": torch.float32, "x": xdt, "B_in": xdt, "C_in": xdt, "state": torch.float32}
    how = draw(st.sampled_from(["divisible", "state_dtype", "x_dtype", "same_as", "shape", "missing"])) if broken else ""
    if how == "divisible":
        shapes["B_in"][1] = shapes["C_in"][1] = h + 1
    elif how == "state_dtype":
        dtypes["state"] = draw(st.sampled_from([torch.float16, torch.float64, torch.int32]))
    elif how == "x_dtype":
        dtypes["x"] = dtypes["B_in"] = dtypes["C_in"] = draw(st.sampled_from([torch.float32, torch.int8]))
    elif how == "same_as":
        dtypes["C_in"] = torch.float16 if xdt == torch.bfloat16 else torch.bfloat16
    elif how == "shape":
        name = draw(st.sampled_from(sorted(shapes)))
        axis = draw(st.integers(0, len(shapes[name]) - 1))
        shapes[name][axis] = other(draw, shapes[name][axis])
    args = [rand(shapes[k], dtypes[k]) for k in ("A", "dt", "x", "B_in", "C_in", "state")]
    if how == "missing":
        args[draw(st.integers(0, 5))] = None
    return Call(SSDDecodeFwdOp, args, broken=how)


RECIPROCAL_IN = [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.uint8]


@st.composite
def reciprocal(draw, broken: bool):
    s = draw(st.lists(dim, max_size=3))
    dt = draw(st.sampled_from(RECIPROCAL_IN))
    out_dt = dt if dt.is_floating_point else torch.float32
    with_out = draw(st.booleans())
    how = draw(st.sampled_from(["dtype", "out_shape", "out_dtype"])) if broken else ""
    os_ = list(s)
    if how == "dtype":
        dt = draw(st.sampled_from([torch.bool, torch.float64, torch.complex64]))
    elif how == "out_shape":
        with_out, os_ = True, draw(st.lists(dim, max_size=3).filter(lambda v: v != s))
    elif how == "out_dtype":
        with_out, out_dt = True, draw(st.sampled_from([d for d in (torch.float16, torch.float32, torch.int32)
                                                        if d != out_dt]))
    kwargs = {"out": torch.empty(os_, dtype=out_dt)} if with_out else {}
    return Call(ReciprocalFwdOp, [rand(s, dt)], kwargs, broken=how)


OPS = {"BmmFwdOp": bmm, "GemmFwdOp": gemm, "RMSNormFwdOp": rmsnorm, "GroupNormFwdOp": groupnorm,
       "SSDDecodeFwdOp": ssd, "ReciprocalFwdOp": reciprocal}

NAMES_A_DECLARATION = re.compile(r"^(?P<op>\w+FwdOp): .+ \((?P<file>manifest/\w+\.yaml):(?P<line>\d+)\)$", re.S)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])


@pytest.mark.parametrize("name", sorted(OPS))
def test_valid_calls_never_raise_a_check_error(kernels, name):
    @SETTINGS
    @given(call=OPS[name](broken=False))
    def check(call):
        result = call.run()
        if "out" in call.kwargs:
            assert result is call.kwargs["out"]

    check()


@pytest.mark.parametrize("name", sorted(OPS))
def test_invalid_calls_always_raise_a_check_error_naming_a_declaration(kernels, name):
    spec_line = {}

    @SETTINGS
    @given(call=OPS[name](broken=True))
    def check(call):
        with pytest.raises(CheckError) as info:
            call.run()
        match = NAMES_A_DECLARATION.match(str(info.value))
        assert match, f"{call.broken}: {info.value}"
        assert match["op"] == name
        file = core_manifest_dir() / match["file"].split("/", 1)[1]
        lines = file.read_text().splitlines()
        line = int(match["line"])
        if name not in spec_line:
            spec_line[name] = next(i + 1 for i, text in enumerate(lines) if text.startswith(f"{name}:"))
        end = next((i + 1 for i, text in enumerate(lines) if i >= spec_line[name] and re.match(r"^\w", text)),
                   len(lines) + 1)
        assert spec_line[name] <= line < end and lines[line - 1].strip(), (call.broken, str(info.value))

    check()
