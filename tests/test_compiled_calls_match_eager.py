"""Compiled calls that failed where eager served them (found in review): a kernel's strided output against
Inductor's packed fake, a dim a kernel specialises on made symbolic by a dynamic trace under the
decomposition policy, and the first trace's compile key taken before the plugins were loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch._dynamo

from tileops_core.kernels.compile_policy import set_decompose_policy
from tileops_core.ops.activation import SiluAndMulFwdOp
from tileops_core.ops.moe import MoETopKRoutingFwdOp


@pytest.fixture(autouse=True)
def no_policy():
    set_decompose_policy(None)
    torch._dynamo.reset()
    yield
    set_decompose_policy(None)
    torch._dynamo.reset()


def test_inductor_serves_routing_whose_reference_outputs_were_slices_of_a_sort():
    """top_k < E: the reference's outputs were strided slices, and Inductor's check of their strides
    against the packed fake failed the call (eager accepted them)."""
    op = MoETopKRoutingFwdOp(top_k=4, renormalize=True)
    logits = torch.randn(7, 16, generator=torch.Generator().manual_seed(1))
    want = op(logits)
    got = torch.compile(lambda t: op(t), fullgraph=True, backend="inductor")(logits)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert torch.equal(got[1], want[1]) and all(t.is_contiguous() for t in got)


@pytest.mark.parametrize("dynamic", [True, None])
def test_a_decomposed_op_whose_specialised_dim_is_symbolic_stays_the_custom_op(dynamic):
    """SiluAndMul specialises on N = D // 2: a dynamic trace made it a SymInt, and the decomposition's call
    spec raised "unhashable SymInt" inside the fake. The call stays the custom op there."""
    set_decompose_policy("measured")
    op = SiluAndMulFwdOp()
    compiled = torch.compile(lambda t: op(t), fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for width in (16, 32):  # (dynamic=None: the second width makes the trace dynamic)
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(width))
        torch.testing.assert_close(compiled(x), op(x), rtol=0, atol=0)


def test_the_first_trace_of_a_process_keys_its_graph_by_the_loaded_kernels():
    script = """
import json, torch
from tileops_core.kernels.compile_policy import set_decompose_policy
from tileops_core.kernels.fingerprint import selection_fingerprint
from tileops_core.op.decompose import compile_key
set_decompose_policy("measured")
first = compile_key("RMSNormFwdOp")  # before any op call loaded the plugins
print(json.dumps([first, selection_fingerprint()]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert first == loaded
