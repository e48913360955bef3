"""static_decode_session on CUDA: the step captures in a CUDA graph, replays equal eager steps, no host sync.

Skipped without a GPU (the CPU behaviour is specified in test_transformers_static_decode.py).
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from tileops_core.integrations.transformers import apply_tileops, static_decode_session  # noqa: E402
from tileops_core.integrations.transformers._tiny import tiny_model  # noqa: E402
from test_transformers_integration import _left_padded_batch  # noqa: E402
from test_transformers_static_decode import _hf_greedy  # noqa: E402

STEPS = 4


def _on_cuda(model_type: str, seed: int):
    ref = tiny_model(model_type, seed=seed)
    patched = copy.deepcopy(ref).cuda()
    apply_tileops(patched)
    return ref, patched


def _run(session, ids, mask, tokens):
    out = [session.prefill(ids, mask).clone()]
    for t in tokens:
        out.append(session.step(t).clone())
    return out


@pytest.mark.parametrize("model_type, capture", [("qwen3_next", "cuda_graph"), ("qwen3_5", "cuda_graph"),
                                                 ("qwen3_5_moe", "cuda_graph"), ("qwen3_next", "reduce_overhead")])
def test_captured_steps_equal_the_eager_static_steps(model_type: str, capture: str) -> None:
    _, patched = _on_cuda(model_type, seed=40)
    ids, mask = (t.cuda() for t in _left_padded_batch(patched.config.vocab_size, seed=41))
    g = torch.Generator().manual_seed(42)
    tokens = [torch.randint(1, patched.config.vocab_size, (2,), generator=g).cuda() for _ in range(STEPS)]
    want = _run(static_decode_session(patched, 2, 16), ids, mask, tokens)
    session = static_decode_session(patched, 2, 16, capture=capture)
    before = session.addresses()
    got = _run(session, ids, mask, tokens)
    assert session.addresses() == before
    assert max((a - b).abs().max().item() for a, b in zip(want, got)) <= 1e-5


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe"])
def test_the_eager_static_step_makes_no_host_sync(model_type: str) -> None:
    _, patched = _on_cuda(model_type, seed=43)
    ids, mask = (t.cuda() for t in _left_padded_batch(patched.config.vocab_size, seed=44))
    session = static_decode_session(patched, 2, 16)
    tokens = session.prefill(ids, mask).argmax(-1)
    session.step(tokens)  # first calls plan and build kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        session.step(tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_graph_replayed_steps_on_cuda_match_unpatched_hf_on_the_cpu(model_type: str) -> None:
    ref, patched = _on_cuda(model_type, seed=45)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=46)
    session = static_decode_session(patched, 2, 16, capture="cuda_graph")
    want, tokens = _hf_greedy(ref, ids, mask, STEPS)
    got = [session.prefill(ids.cuda(), mask.cuda()).cpu()]
    got += [session.step(t.cuda()).cpu() for t in tokens[:-1]]
    assert max((a - b).abs().max().item() for a, b in zip(want, got)) <= 1e-4
