"""A compiled graph is keyed by the selection state: it is traced again after the state changes,
and not otherwise (``aot_eager`` on the CPU)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from tileops_core.kernels import lock as lock_module
from tileops_core.kernels.fingerprint import selection_fingerprint
from tileops_core.kernels.overrides import set_kernel_overrides, use_kernel_overrides
from tileops_core.kernels.registry import BackendInfo, active, register_backend
from tileops_core.ops.normalization import RMSNormFwdOp

pytestmark = pytest.mark.usefixtures("fresh_registry")


@pytest.fixture(autouse=True)
def no_steering():
    set_kernel_overrides(None)
    yield
    set_kernel_overrides(None)


def compiled_rms_norm():
    op = RMSNormFwdOp([32])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    return torch.compile(lambda x: op(x), fullgraph=True, backend=counter), counter


def test_a_compiled_call_is_not_traced_again_while_the_selection_state_stays():
    compiled, counter = compiled_rms_norm()
    x = torch.randn(4, 32)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), torch.nn.functional.rms_norm(x, [32]))
    assert counter.frame_count == 1


def test_a_compiled_call_is_traced_again_after_an_override_changes():
    compiled, counter = compiled_rms_norm()
    x = torch.randn(4, 32)
    compiled(x)
    with use_kernel_overrides("RMSNormFwdOp=cpu_ref"):
        compiled(x)
        compiled(x)
        assert counter.frame_count == 2
    compiled(x)
    assert counter.frame_count == 3


def test_a_compiled_call_is_traced_again_after_a_backend_registers(tmp_path):
    compiled, counter = compiled_rms_norm()
    x = torch.randn(4, 32)
    compiled(x)
    register_backend(BackendInfo("late", device_types=("cpu",)))
    compiled(x)
    assert counter.frame_count == 2


def test_a_compiled_call_is_traced_again_after_the_lock_changes(tmp_path):
    compiled, counter = compiled_rms_norm()
    x = torch.randn(4, 32)
    compiled(x)
    path = tmp_path / "empty.lock"
    path.write_text('{"tileops_lock": 1}\n')
    with lock_module.use_lock(path):
        compiled(x)
    assert counter.frame_count == 2


def test_the_fingerprint_changes_with_the_content_of_the_state_not_with_its_generation():
    compiled, _ = compiled_rms_norm()
    compiled(torch.randn(4, 32))  # plugins loaded
    before = selection_fingerprint(active())
    with use_kernel_overrides("RMSNormFwdOp=cpu_ref"):
        assert selection_fingerprint(active()) != before
    assert selection_fingerprint(active()) == before
