"""The launch: kernel input order, the binding schema, and a CPU stand-in of the binding."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from binding_stand_in import SEED_INPUT_ORDER, SEEN, STAND_IN, reference
from rgdr_cases import make_case
from tileops_ascend.launch import (
    BINDING_SCHEMA,
    KERNEL_INPUT_ORDER,
    call_binding,
    launch,
    prepare_kernel_inputs,
    tiling_for,
)


def test_kernel_inputs_fields_are_the_seed_input_order():
    assert KERNEL_INPUT_ORDER == SEED_INPUT_ORDER


def test_binding_schema_takes_the_inputs_in_seed_order_then_the_plan():
    schema = torch._C.parse_schema(BINDING_SCHEMA)
    names = [a.name for a in schema.arguments]
    assert tuple(names[:10]) == SEED_INPUT_ORDER
    assert names[10:] == ["tiling", "block_dim", "workspace_bytes"]


def test_binding_schema_marks_only_state_as_written():
    schema = torch._C.parse_schema(BINDING_SCHEMA)
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["state"]


def test_binding_schema_optionals_are_exactly_g_gk_and_accepted_tokens():
    schema = torch._C.parse_schema(BINDING_SCHEMA)
    optional = [a.name for a in schema.arguments if isinstance(a.type, torch.OptionalType)]
    assert optional == ["g", "gk", "num_accepted_tokens"]


def test_prepare_kernel_inputs_is_keyword_only():
    case = make_case([1, 1], seed=0)
    with pytest.raises(TypeError):
        prepare_kernel_inputs(*case.values())


def test_accepted_counts_are_passed_as_int32():
    """The kernel reads num_accepted_tokens through an int32_t pointer whatever the tensor's dtype."""
    inputs = prepare_kernel_inputs(**make_case([2, 3], accepted=True, index_dtype=torch.int64, seed=1))
    assert inputs.num_accepted_tokens.dtype == torch.int32
    assert inputs.actual_seq_lengths.dtype == torch.int64  # the tiling's bit tells the kernel


def test_non_contiguous_state_is_refused():
    case = make_case([1], seed=2)
    case["state"] = case["state"].transpose(2, 3)
    with pytest.raises(ValueError) as err:
        prepare_kernel_inputs(**case)
    assert str(err.value) == (
        "state must be contiguous: the 310P kernel updates it in place through dense [S, NV, DV, DK] strides, "
        "and a contiguous copy would receive the update instead of the caller's pool"
    )


def test_binding_call_puts_every_tensor_in_its_slot():
    case = make_case([3, 1, 2], gk="vector", accepted=True, seed=3)
    want_out, want_state = reference(case)
    inputs = prepare_kernel_inputs(**case)
    tiling = tiling_for(inputs)
    out = call_binding(STAND_IN, inputs, tiling)
    torch.testing.assert_close(out.double(), want_out, rtol=4e-3, atol=1e-3)
    torch.testing.assert_close(inputs.state.double(), want_state.double(), rtol=2e-3, atol=1e-3)
    assert SEEN["data"] == tiling.data
    assert (SEEN["block_dim"], SEEN["workspace_bytes"]) == (tiling.block_dim, 16 << 20)


def test_swapping_beta_and_g_is_caught_by_the_stand_in_check():
    """beta and g are both [T, NV]: the §6.1 reorder type-checks, and only the numbers reveal it."""
    case = make_case([3, 2], seed=4)
    want_out, _ = reference(case)
    inputs = prepare_kernel_inputs(**case)
    tiling = tiling_for(inputs)
    swapped = inputs._replace(beta=inputs.g.half(), g=inputs.beta.float())
    out = call_binding(STAND_IN, swapped, tiling)
    assert not torch.allclose(out.double(), want_out, rtol=4e-3, atol=1e-3)


def test_launch_without_the_kernel_library_names_the_missing_binding(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    inputs = prepare_kernel_inputs(**make_case([1], seed=5))
    with pytest.raises(RuntimeError) as err:
        launch(inputs, tiling_for(inputs))
    assert str(err.value) == (
        "torch.ops.tileops_ascend.recurrent_gated_delta_rule is not registered: build the Ascend 310P RGDR kernel "
        f"package (seed 003 kernel plus a launcher with schema {BINDING_SCHEMA!r}) and load it with "
        "torch.ops.load_library before launching"
    )


def test_launch_imports_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    inputs = prepare_kernel_inputs(**make_case([1], seed=6))
    with pytest.raises(ImportError):
        launch(inputs, tiling_for(inputs))
