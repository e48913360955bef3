"""The chunked gated delta rule's host side, without a GPU: refusals, the metadata buffers, the launch order.

The compiled kernels are stood in for by functions that record their arguments, so what the
launcher hands them (the int32 metadata the first kernel writes and the others read, the
chunk bound that sizes the grids, the runtime flags) is checked on the CPU; what the
metadata kernel writes is checked on the GPU (``test_chunk_gdr_gpu.py``).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from tileops_cuda.kernels import chunk_gdr  # noqa: E402

KEY = chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 2, 4, 64, 64)


@pytest.mark.parametrize("field,value,named", [
    ("input_dtype", "float16", "bfloat16"), ("input_dtype", "float32", "bfloat16"),
    ("state_dtype", "int8", "state dtype"), ("num_v_heads", 5, "multiple"), ("head_k_dim", 16, "DK=16"),
    ("head_v_dim", 32, "DV=32"), ("arch", "sm_75", "sm_75"), ("stages", 5, "stages"),
    ("cu_dtype", "int16", "cu_dtype int16"), ("slot_dtype", "uint8", "slot_dtype uint8"),
])
def test_what_the_kernels_were_not_written_for_is_refused_by_name(field, value, named):
    reason = chunk_gdr.chunk_gdr_refusal(dataclasses.replace(KEY, **{field: value}))
    assert reason is not None and named in reason and "use the reference" in reason


def test_the_qwen35_head_shape_is_served():
    assert chunk_gdr.chunk_gdr_refusal(chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128)) is None


def _recorded_call(lengths, has_initial_state=True):
    calls = {}

    def record(name):
        def fn(*args):
            calls[name] = args
        return fn

    run = chunk_gdr._make_run(KEY, record("meta"), record("wy"), record("state"), record("out"))
    B, T = len(lengths), sum(lengths)
    gen = torch.Generator().manual_seed(0)
    inputs = dict(query=torch.randn(T, 2, 64, generator=gen).bfloat16(), key=torch.randn(T, 2, 64).bfloat16(),
                  value=torch.randn(T, 4, 64).bfloat16(), g=-torch.rand(T, 4), beta=torch.rand(T, 4).bfloat16(),
                  state=torch.randn(B + 2, 4, 64, 64),
                  cu_seqlens=torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64),
                  ssm_state_indices=torch.arange(B, dtype=torch.int64),
                  has_initial_state=torch.ones(B, dtype=torch.bool) if has_initial_state else None)
    out = run(**inputs, scale=None, use_qk_l2norm_in_kernel=True)
    return calls, out


@pytest.mark.parametrize("lengths", [[1], [64], [65, 0, 63], [1000, 1, 64, 129, 0]])
def test_the_metadata_kernel_writes_what_the_others_read_and_the_grid_bound_covers_every_chunk(lengths):
    calls, out = _recorded_call(lengths)
    B = len(lengths)
    cu_seqlens, slots_in, cu, slots, chunks, zeroed = calls["meta"]
    assert cu_seqlens.dtype == slots_in.dtype == torch.int64  # read as given, converted in the kernel
    assert zeroed is out  # where it zeroes the rows of tokens no sequence covers (T: its rows)
    assert all(t.dtype == torch.int32 for t in (cu, slots, chunks))
    assert (cu.shape[0], chunks.shape[0], slots.shape[0]) == (B + 1, B + 1, B)
    assert calls["wy"][4] is cu and calls["wy"][5] is chunks and calls["state"][6] is slots
    assert calls["out"][6] is cu and calls["out"][7] is chunks
    bound = calls["wy"][6].shape[0]  # W is [NC, 64, NV, DK]: the grids' chunk count
    assert bound >= sum(math.ceil(n / 64) for n in lengths) and bound == (sum(lengths) + 63 * B) // 64
    assert calls["out"][8] is out and calls["out"][-1] == pytest.approx(64**-0.5)


def test_has_initial_state_and_the_l2_norm_are_runtime_flags():
    with_init, _ = _recorded_call([70, 3])
    without, _ = _recorded_call([70, 3], has_initial_state=False)
    assert with_init["state"][-1] == 1 and without["state"][-1] == 0
    assert with_init["wy"][-1] == 1 and with_init["out"][-2] == 1


@pytest.mark.parametrize("lengths", [[], [0, 0]])
def test_a_call_without_tokens_launches_nothing(lengths):
    calls, out = _recorded_call(lengths)
    assert calls == {} and out.shape[0] == 0


def test_tokens_without_sequences_are_zeros_and_nothing_is_launched():
    """B = 0 with T > 0 (cu_seqlens ``[c]``, checks off): every token is uncovered, so zeros (a zero-sized
    grid is not launchable; torch fills ``out``)."""
    calls = {}
    run = chunk_gdr._make_run(KEY, *(lambda *a, n=n: calls.setdefault(n, a) for n in ("meta", "wy", "state", "out")))
    T = 5
    out = torch.full((T, 4, 64), float("nan"), dtype=torch.bfloat16)
    got = run(torch.randn(T, 2, 64).bfloat16(), torch.randn(T, 2, 64).bfloat16(), torch.randn(T, 4, 64).bfloat16(),
              -torch.rand(T, 4), torch.rand(T, 4).bfloat16(), torch.randn(2, 4, 64, 64),
              torch.tensor([3], dtype=torch.int64), torch.zeros(0, dtype=torch.int64), out=out)
    assert calls == {} and got is out and not out.any()


def test_a_prefill_past_int32_indexing_is_refused_before_launching():
    with pytest.raises(ValueError, match="int32"):
        chunk_gdr._check_int32(2**26, 1, 1, chunk_gdr.ChunkGDRBuildKey("bfloat16", "float32", 16, 32, 128, 128))


@pytest.mark.parametrize("lengths", [[1], [65, 0, 63], [1000, 1, 64, 129, 0]])
def test_the_work_buffers_carved_from_one_allocation_are_disjoint_and_aligned(lengths):
    calls, _ = _recorded_call(lengths)
    _, _, _, _, cu, chunks, w, u, kf, gcum, kscale = calls["wy"][:11]
    h, d = calls["state"][9], calls["state"][10]
    slots = calls["state"][6]
    by_base = {}
    for t in (w, u, kf, h, d, gcum, kscale, cu, chunks, slots):
        by_base.setdefault(t.untyped_storage().data_ptr(), []).append(t)
    assert len(by_base) == 2  # the bf16 work buffers, and the float32/int32 ones
    for base, views in by_base.items():
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in views)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    for t in (w, u, kf, h, d, gcum, kscale, cu):  # each carved view starts on a 256-byte boundary
        assert (t.data_ptr() - t.untyped_storage().data_ptr()) % 256 == 0
    assert all(t.is_contiguous() for t in (w, u, kf, h, d, gcum, kscale))
