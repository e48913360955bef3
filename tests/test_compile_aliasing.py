"""A compiled call refuses the storage sharing an eager call refuses, with the eager call's error.

An eager call refuses an out buffer that shares storage with an input, and a mutated input that
shares memory with another argument (a ``CheckError`` naming the declaration). Compiled, the out
buffer reached no check (the custom op returns a fresh output, which the traced wrapper copies
into the buffer), and under ``aot_eager`` functionalization handed the kernel a copy of the mutated
input: both calls were computed. What the trace shows is refused while dynamo traces, which wraps
the error (the ``CheckError`` is in its chain); a graph traced for separate tensors, which dynamo
runs for aliased ones too, refuses a shared out buffer when it runs. A mutated input that overlaps
itself is refused in the trace with eager's error too (torch's functionalization failed on it with its own).

Traced with dynamic shapes, a mutated input interleaved with another of the graph's inputs, which eager
accepts (no common element), was computed wrong under ``aot_eager`` and failed Inductor's compile: torch's
AOTAutograd merges them into one base and rebuilds them with wrong strides. Such a call is refused in the
trace; the layouts torch compiles right (views made inside the compiled function, parts of one buffer whose
byte ranges do not meet, static shapes) are not.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from example_ops import REFERENCE_KERNELS, ReciprocalFwdOp, SSDDecodeFwdOp, at, rand, ssd_args
from tileops_core import CheckError

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def kernels(fake_backend):
    for interface, fn in REFERENCE_KERNELS.items():
        fake_backend.kernel(interface, fn)


def compiled(fn, backend, dynamic=False):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=backend, dynamic=dynamic)


def interleaved_rows(state, dt):
    """``state`` and ``dt`` copied into one buffer: per (b, h, p) the state row, then dt; the two views
    share the buffer and no element."""
    rows = torch.empty(*state.shape[:3], state.shape[3] + 1)
    return rows, rows[..., :-1].copy_(state), rows[..., -1].copy_(dt)


def assert_compiled_call_computes_as_eager(op, backend, dynamic, args, dt_view, state_view):
    """The compiled call on ``dt_view`` and ``state_view`` (``args``' dt and state, laid out otherwise) gives
    eager's output and state for ``args``."""
    A, dt, x, B_in, C_in, state = args
    expected_state = state.clone()
    expected = op(A, dt, x, B_in, C_in, expected_state)
    out = compiled(lambda *a: op(*a), backend, dynamic=dynamic)(A, dt_view, x, B_in, C_in, state_view)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(state_view, expected_state)


def check_error(call) -> CheckError:
    """The ``CheckError`` that ``call()`` raised: the error itself, or the one in the chain of the
    error dynamo raised instead (dynamo wraps what a fake implementation raises while it traces)."""
    with pytest.raises(Exception) as info:
        call()
    error: BaseException | None = info.value
    while error is not None and not isinstance(error, CheckError):
        error = error.__cause__ or error.__context__
    assert error is not None, f"no CheckError in the chain of {info.value!r}"
    return error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_call_refuses_an_out_buffer_sharing_storage_with_its_input_as_eager_does(backend):
    op = ReciprocalFwdOp()
    x = rand(2, 3, 4) + 3
    eager = check_error(lambda: op(x[0], out=x[1]))
    assert str(eager) == "ReciprocalFwdOp: out buffer out shares storage with an input" + at(
        op.op_spec().outputs["output"])
    call = compiled(lambda t, o: op(t, out=o), backend)
    got = check_error(lambda: call(x[0], x[1]))
    assert (type(got), str(got)) == (type(eager), str(eager))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_compiled_for_separate_tensors_refuses_an_out_buffer_sharing_storage_when_it_runs(backend):
    # Dynamo does not guard on storage sharing between distinct tensors: the graph traced for
    # separate ones runs for aliased ones, and its implementation refuses them as eager does.
    op = ReciprocalFwdOp()
    call = compiled(lambda t, o: op(t, out=o), backend)
    x, out = rand(3, 4) + 3, torch.empty(3, 4)
    assert call(x, out) is out
    torch.testing.assert_close(out, 1 / x)
    aliased = rand(2, 3, 4) + 3
    eager = check_error(lambda: op(aliased[0], out=aliased[1]))
    with pytest.raises(CheckError) as info:
        call(aliased[0], aliased[1])
    assert str(info.value) == str(eager)


def test_an_aot_eager_call_refuses_a_mutated_input_sharing_memory_with_another_argument_as_eager_does():
    op = SSDDecodeFwdOp()
    A, _, x, B_in, C_in, state = ssd_args()
    dt = state[..., 0]  # read from the state the call writes
    eager = check_error(lambda: op(A, dt, x, B_in, C_in, state))
    assert str(eager) == (
        "SSDDecodeFwdOp: input state is mutated (written in place) and shares memory with dt: a kernel would change "
        "dt while reading it; pass arguments that do not overlap (e.g. dt.clone())" + at(op.op_spec().inputs["state"]))
    call = compiled(lambda *args: op(*args), "aot_eager")
    got = check_error(lambda: call(A, dt, x, B_in, C_in, state))
    assert (type(got), str(got)) == (type(eager), str(eager))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_call_accepts_a_mutated_input_interleaved_with_another_argument_without_a_common_byte(backend):
    # The trace's check lists bytes as eager does: ranges that meet without a shared element pass.
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args()
    _, state_view, dt_view = interleaved_rows(state, dt)
    assert_compiled_call_computes_as_eager(op, backend, False, (A, dt, x, B_in, C_in, state), dt_view, state_view)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_dynamic_shape_compiled_call_refuses_a_mutated_input_interleaved_with_another_input_torch_rebuilds_wrongly(
        backend):
    # AOTAutograd merges the two inputs into one base and rebuilds dt with its outer stride h*p*(n+1) read as
    # h*p: aot_eager computed wrong output and state, Inductor failed ("mul expected 2 arguments, got 3").
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args()
    rows, state_view, dt_view = interleaved_rows(state, dt)
    before = rows.clone()
    call = compiled(lambda *args: op(*args), backend, dynamic=True)
    got = check_error(lambda: call(A, dt_view, x, B_in, C_in, state_view))
    assert str(got) == (
        "SSDDecodeFwdOp: input state is mutated (written in place) and shares its buffer with dt without a common "
        "element, which an eager call accepts; compiled with dynamic shapes, torch's AOTAutograd merges such inputs "
        "into one base and rebuilds them from it with wrong strides (wrong results under aot_eager, a failed compile "
        "under Inductor); pass tensors of separate buffers (e.g. dt.clone()), or compile with static shapes "
        "(dynamic=False)" + at(op.op_spec().inputs["state"]))
    assert torch.equal(rows, before)  # refused while tracing: nothing was written


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_dynamic_shape_compiled_call_accepts_interleaved_inputs_whose_wrongly_rebuilt_stride_is_a_length_1_axis(
        backend):
    # One batch row: the stride AOTAutograd rebuilds wrongly addresses nothing, and aot_eager computes the call
    # right. (Inductor fails to compile it, with torch's error: no compile computes it wrong, so it is not refused.)
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args(b=1)
    _, state_view, dt_view = interleaved_rows(state, dt)
    assert_compiled_call_computes_as_eager(op, backend, True, (A, dt, x, B_in, C_in, state), dt_view, state_view)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("made_inside", ["both views", "the read view"])
def test_a_dynamic_shape_compiled_call_accepts_interleaved_views_made_inside_the_compiled_function(backend,
                                                                                                  made_inside):
    # Views the function makes are traced from their base, which AOTAutograd does not rebuild: computed right.
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args()
    rows, state_view, _ = interleaved_rows(state, dt)
    expected_state = state.clone()
    expected = op(A, dt, x, B_in, C_in, expected_state)
    if made_inside == "both views":
        call = compiled(lambda A, rows, x, B_in, C_in: op(A, rows[..., -1], x, B_in, C_in, rows[..., :-1]), backend,
                        dynamic=True)
        out = call(A, rows, x, B_in, C_in)
    else:
        call = compiled(lambda A, rows, x, B_in, C_in, s: op(A, rows[..., -1], x, B_in, C_in, s), backend,
                        dynamic=True)
        out = call(A, rows, x, B_in, C_in, state_view)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(rows[..., :-1], expected_state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dynamic_shape_compiled_call_accepts_a_mutated_input_and_another_input_in_apart_parts_of_one_buffer(backend):
    # Byte ranges that do not meet: AOTAutograd's own analysis tells them apart and does not merge them.
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args()
    arena = torch.empty(state.numel() + dt.numel())
    state_view = arena[:state.numel()].view(state.shape).copy_(state)
    dt_view = arena[state.numel():].view(dt.shape).copy_(dt)
    assert_compiled_call_computes_as_eager(op, backend, True, (A, dt, x, B_in, C_in, state), dt_view, state_view)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_compiled_call_refuses_a_mutated_input_that_overlaps_itself_as_eager_does(backend, dynamic):
    # aot_eager and Inductor failed in functionalization's write-back, with torch's error.
    op = SSDDecodeFwdOp()
    A, dt, x, B_in, C_in, state = ssd_args()
    expanded = state[:1].expand(state.shape)  # every batch row is row 0
    eager = check_error(lambda: op(A, dt, x, B_in, C_in, expanded))
    assert str(eager) == (
        "SSDDecodeFwdOp: input state is mutated (written in place) and overlaps itself (strides [0, 15, 5, 1], an "
        "expanded view): a kernel would write some elements more than once; pass a tensor of its own memory"
        + at(op.op_spec().inputs["state"]))
    call = compiled(lambda *args: op(*args), backend, dynamic=dynamic)
    got = check_error(lambda: call(A, dt, x, B_in, C_in, expanded))
    assert (type(got), str(got)) == (type(eager), str(eager))



def _symbolic_ints():
    """A backed symbol hinted 6, an expression of it, and an unbacked symbol (no hint), from a shape env."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    backed = env.create_symintnode(env.create_symbol(6, ConstantSource("s")), hint=6)
    return backed, backed * 3 - 1, env.create_unbacked_symint()


def test_trace_time_hints_of_backed_sizes_are_read_from_their_nodes_calling_no_release_function(monkeypatch):
    # torch 2.11 (the H200's) warns on every call of hint_int ("used size_hint instead"), 2.13 deprecates
    # size_hint, and importing optimization_hint on 2.11 once failed every compiled call with a mutated input:
    # backed sizes, the only ones a compiled call's tensors have here, must need none of them.
    from torch.fx.experimental import symbolic_shapes
    from tileops_core.op import overlap

    def refuse(*args, **kwargs):
        raise AssertionError("a release's hint function was called for a backed size")

    monkeypatch.setattr(symbolic_shapes, "hint_int", refuse, raising=False)
    monkeypatch.setattr(symbolic_shapes, "optimization_hint", refuse, raising=False)
    backed, expression, _ = _symbolic_ints()
    assert (overlap.hint_of(backed), overlap.hint_of(expression), overlap.hint_of(7)) == (6, 17, 7)
    t = torch.empty(4, 6)[1:, ::2]
    assert overlap._hinted_span(t) == (4 * 6, (3, 3), (6, 2), 4)


def test_an_unbacked_size_asks_the_release_hint_function_by_the_name_torch_before_2_13_gives_it(monkeypatch):
    from torch.fx.experimental import symbolic_shapes
    from tileops_core.op import overlap

    asked = []

    def hint_int(a, fallback=None):
        asked.append(a)
        return 11

    monkeypatch.setattr(symbolic_shapes, "hint_int", hint_int, raising=False)
    monkeypatch.delattr(symbolic_shapes, "optimization_hint")
    _, _, unbacked = _symbolic_ints()
    assert overlap.hint_of(unbacked) == 11 and asked == [unbacked]
