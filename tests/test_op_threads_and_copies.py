"""Per-call views under threads, and copies of op instances.

``op.last_plan`` / ``last_call_env`` / ``eval_roofline()`` describe the calling thread's
last call, never another thread's (an instance shared by a thread pool); an op instance,
called or not, survives ``copy.deepcopy`` and ``pickle`` (a model holding ops is copied to
compare a patched model with the original) and the copy computes what the original does.
"""

from __future__ import annotations

import copy
import pickle
import threading

import torch

from tileops_core.ops.normalization import RMSNormFwdOp
from tileops_core.ops.reduction import SumFwdOp


def test_last_plan_describes_the_calling_threads_own_call():
    op = SumFwdOp(dim=[-1])
    errors: list[str] = []
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        x = torch.randn(2, 3 + i)
        start.wait()
        for _ in range(200):
            op(x)
            env = op.last_call_env
            if env is None or tuple(env["S"]) != (2, 3 + i):
                errors.append(f"thread {i} saw {None if env is None else env['S']}")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_thread_that_made_no_call_sees_no_last_plan():
    op = RMSNormFwdOp(normalized_shape=[8])
    op(torch.randn(2, 8))
    seen = []
    t = threading.Thread(target=lambda: seen.append(op.last_plan))
    t.start()
    t.join()
    assert seen == [None] and op.last_plan is not None


def test_a_called_op_deep_copies_and_pickles_and_the_copies_compute_the_same():
    op = RMSNormFwdOp(normalized_shape=[16], eps=1e-6)
    x, w = torch.randn(4, 16), torch.randn(16)
    want = op(x, w)
    for twin in (copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
        assert twin.last_plan is None and twin.params == op.params
        torch.testing.assert_close(twin(x, w), want, rtol=0, atol=0)
