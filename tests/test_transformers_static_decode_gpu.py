"""static_decode_session on CUDA: the step captures in a CUDA graph, replays equal eager steps, no host sync.

Skipped without a GPU (the CPU behaviour is specified in test_transformers_static_decode.py). The
models are the tiny ones in bf16 with GatedDeltaNet heads of 128 (DK = DV = 128, conv_dim 1024),
sizes the TileLang kernels serve: the reference conv1d update and RGDR read their metadata on the
host, which no CUDA graph can hold (the session says so when it meets one).
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from tileops_core.integrations.transformers import apply_tileops, build_kernels, cache_kwargs, cache_of, static_decode_session  # noqa: E402
from tileops_core.integrations.transformers._tiny import GPU_HEAD_SIZES, hf_torch_path, tiny_model  # noqa: E402
from test_transformers_integration import _left_padded_batch  # noqa: E402
from test_transformers_static_decode import _hf_greedy  # noqa: E402

STEPS = 4


@pytest.fixture(autouse=True)
def _no_contents_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns contents checks on (root conftest); a captured session refuses them (they
    read tensors on the host), so the ops these tests create are made with them off."""
    monkeypatch.setenv("TILEOPS_CHECK_CONTENTS", "0")


def _on_cuda(model_type: str, seed: int, every_module: bool = False):
    """(float32 CPU model, bf16 CUDA copy on TileOPs, bf16 CUDA copy left as HF wrote it); the patched
    model's kernels are built up front, in parallel."""
    ref = tiny_model(model_type, seed=seed, **GPU_HEAD_SIZES)
    hf = copy.deepcopy(ref).to("cuda", torch.bfloat16)
    patched = copy.deepcopy(hf)
    assert build_kernels(apply_tileops(patched, every_module=every_module).kernel_calls) == []
    return ref, patched, hf


def _run(session, ids, mask, tokens):
    out = [session.prefill(ids, mask).float()]
    for t in tokens:
        out.append(session.step(t).float())
    return out


@pytest.mark.parametrize("model_type, capture, every_module", [
    ("qwen3_next", "cuda_graph", False), ("qwen3_5", "cuda_graph", False), ("qwen3_5_moe", "cuda_graph", False),
    ("qwen3_5_moe", "cuda_graph", True), ("qwen3_next", "reduce_overhead", False)])
def test_captured_steps_equal_the_eager_static_steps(model_type: str, capture: str, every_module: bool) -> None:
    _, patched, _ = _on_cuda(model_type, seed=40, every_module=every_module)
    ids, mask = (t.cuda() for t in _left_padded_batch(patched.config.vocab_size, seed=41))
    g = torch.Generator().manual_seed(42)
    tokens = [torch.randint(1, patched.config.vocab_size, (2,), generator=g).cuda() for _ in range(STEPS)]
    want = _run(static_decode_session(patched, 2, 16), ids, mask, tokens)
    session = static_decode_session(patched, 2, 16, capture=capture)
    before = session.addresses()
    got = _run(session, ids, mask, tokens)
    assert session.addresses() == before
    diff = max((a - b).abs().max().item() for a, b in zip(want, got))
    assert diff <= 1e-3, f"{capture} replays differ from eager static steps by {diff}"


def test_a_reduce_overhead_session_replays_graphs_over_more_batch_sizes_than_the_recompile_limit() -> None:
    """Found in review (on the CPU, not yet run here): the compiled step made its metadata inside its trace
    (two compiles a batch size: the fifth size hit the limit of 8) and wrote pool views not marked static
    (cudagraph trees then ran it without a graph). Ten batch sizes, each equal to the eager session's step,
    and no cudagraph skipped."""
    from torch._dynamo.utils import counters

    _, patched, _ = _on_cuda("qwen3_next", seed=43)
    eager, compiled = static_decode_session(patched, 10, 8), static_decode_session(patched, 10, 8, "reduce_overhead")
    skips = counters["inductor"]["cudagraph_skips"]
    g = torch.Generator().manual_seed(44)
    for batch in range(1, 11):
        ids = torch.randint(1, patched.config.vocab_size, (batch, 3), generator=g).cuda()
        step = torch.randint(1, patched.config.vocab_size, (batch,), generator=g).cuda()
        want = (eager.prefill(ids).float(), eager.step(step).float())
        got = (compiled.prefill(ids).float(), compiled.step(step).float())
        assert max((a - b).abs().max().item() for a, b in zip(want, got)) <= 1e-3, batch
    assert counters["inductor"]["cudagraph_skips"] == skips


@pytest.mark.parametrize("model_type, every_module", [("qwen3_next", False), ("qwen3_5_moe", True)])
def test_the_eager_static_step_makes_no_host_sync(model_type: str, every_module: bool) -> None:
    _, patched, _ = _on_cuda(model_type, seed=43, every_module=every_module)
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


def test_attention_and_moe_run_on_tilelang_kernels_built_before_the_first_forward() -> None:
    from tileops_core.kernels.select import build_count

    model = tiny_model("qwen3_5_moe", seed=47, **GPU_HEAD_SIZES).to("cuda", torch.bfloat16)
    report = apply_tileops(model, every_module=True)
    assert report.unserved_modules() == []
    tilelang = {r.piece for r in report.served() if all(k.endswith("[cuda]") for k in (r.kernel or "").split(", "))}
    assert {"q/k norm + rotary", "attention decode", "attention prefill", "output gate", "routing", "experts",
            "recurrent decode", "conv1d decode"} <= tilelang, tilelang
    assert build_kernels(report.kernel_calls) == []
    built = build_count()
    ids, mask = (t.cuda() for t in _left_padded_batch(model.config.vocab_size, seed=48))
    session = static_decode_session(model, 2, 16)
    session.step(session.prefill(ids, mask).argmax(-1))
    assert build_count() == built  # every kernel the prefill and the step use was built ahead


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def test_graph_replayed_bf16_steps_stay_within_hfs_own_bf16_error_of_the_fp32_cpu_run(model_type: str) -> None:
    """bf16 costs what it costs: the tolerance is twice HF's own bf16 model's error against the
    float32 CPU run, plus 1% of the largest |logit| (the bench's rule); every run is fed the
    float32 run's greedy tokens."""
    ref, patched, hf = _on_cuda(model_type, seed=45)
    ids, mask = _left_padded_batch(ref.config.vocab_size, seed=46)
    with hf_torch_path():  # transformers may have bound CUDA-only kernels (FLA) at import
        want, tokens = _hf_greedy(ref, ids, mask, STEPS)
    session = static_decode_session(patched, 2, 16, capture="cuda_graph")
    got = [session.prefill(ids.cuda(), mask.cuda()).float().cpu()]
    got += [session.step(t.cuda()).float().cpu() for t in tokens[:-1]]
    hf_logits, cache, m = [], None, mask.cuda()
    with torch.no_grad():
        for step in range(1 + STEPS):
            x = ids.cuda() if step == 0 else tokens[step - 1].cuda()
            out = hf(input_ids=x, attention_mask=m, use_cache=True, **({} if cache is None else cache_kwargs(hf, cache)))
            cache = cache_of(out)
            hf_logits.append(out.logits[:, -1].float().cpu())
            m = torch.cat([m, torch.ones_like(tokens[step].cuda())], dim=1)
    scale = max(w.abs().max().item() for w in want)
    hf_err = max((a - b).abs().max().item() for a, b in zip(want, hf_logits))
    err = max((a - b).abs().max().item() for a, b in zip(want, got))
    assert err <= 2 * hf_err + 0.01 * scale, f"TileOPs bf16 error {err}, HF's {hf_err}, max |logit| {scale}"


@pytest.mark.parametrize("out_features", [32, 256])
def test_linear_op_serves_the_narrow_projections_of_qwen3_5_moe(out_features: int) -> None:
    """in_proj_b / in_proj_a (NV = 32 outputs) and the router (256 experts) are narrower than the
    TileLang GEMM's 256-column tile; decode and prefill row counts are below its 128-row tile."""
    import torch.nn.functional as F

    from tileops_core.ops.gemm import LinearFwdOp

    g = torch.Generator(device="cuda").manual_seed(49)
    w = torch.randn(out_features, 2048, device="cuda", generator=g).to(torch.bfloat16)
    op = LinearFwdOp(in_features=2048, out_features=out_features)
    for rows in (1, 2, 33):
        x = torch.randn(rows, 2048, device="cuda", generator=g).to(torch.bfloat16)
        want = F.linear(x.double(), w.double())
        err = (op(x, w).double() - want).abs().max().item()
        assert err <= 2 ** -7 * want.abs().max().item(), f"rows {rows}: {err}"


def test_a_model_moved_to_cuda_after_apply_tileops_with_every_module_gives_hfs_logits() -> None:
    """``apply_tileops(every_module=True)`` on the CPU, then ``.to("cuda")``: every adapter follows its
    Parameters (the embedding lookup's unit weight among them, found in review on the CPU)."""
    ref = tiny_model("qwen3_5_moe", seed=43, **GPU_HEAD_SIZES)
    patched = copy.deepcopy(ref)
    apply_tileops(patched, every_module=True)
    hf, patched = ref.to("cuda"), patched.to("cuda")
    ids, mask = (t.cuda() for t in _left_padded_batch(patched.config.vocab_size, seed=44))
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).logits
        got = patched(input_ids=ids, attention_mask=mask).logits
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() <= 1e-3 * scale
