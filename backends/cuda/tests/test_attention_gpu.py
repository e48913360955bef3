"""The attention TileLang kernels against a float64 reference on the GPU (skips without one).

Decode: every AttentionDecodeFwdOp workload row the kernel serves (up to 2^18 cached tokens a
row; the larger rows are the bench's) and targeted batches run through the launcher with a
NaN-poisoned ``out`` and NaN in every cache slot a sequence does not read (a slot the step
writes included, so a read before the write shows). Prefill: every AttentionPrefillFwdOp row
and ragged, padded and partly covered batches, ``out`` NaN-poisoned. Outputs are compared at the conformance
suite's tolerances (float16 2e-3, bfloat16 1.6e-2, relative); the caches bit for bit (the written
slots hold copies of the inputs, every other slot keeps its bits). The reference is float64
on the device: each live sequence's positions ``0 .. n`` gathered, the new key/value at ``n``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest

from tileops_cuda.kernels.attention_decode import (
    COMBINES, PAGED_TILES, DecodeBuildKey, DecodeSchedule, build_attention_decode, decode_refusal,
)
from tileops_cuda.kernels.attention_prefill import build_attention_prefill

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import TOLERANCE, relative_error  # noqa: E402
from decode_cases import decode_batch, decode_reference, poison_unread  # noqa: E402

DECODE, PREFILL = "AttentionDecodeFwdOp", "AttentionPrefillFwdOp"
_MAX_TOKENS = 1 << 18  # B · context above this: the bench's rows (float64 copies of the cache)


def _rows(op: str, max_tokens: int | None = None) -> list:
    """The op's workload rows × dtypes (decode: up to ``max_tokens`` cached tokens a row)."""
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    def small(row) -> bool:
        gen = row.values["generator"]
        return max_tokens is None or int(gen["B"]) * int(gen["context"]) <= max_tokens

    spec = load_manifest()[op]
    return [pytest.param(row.index, case, id=f"{row.label}[{case}]") for row in spec.workloads
            for case in dtype_cases(row) if small(row)]


def _instance(op: str, row_index: int, case, device, seed: int):
    import importlib

    import torch

    from tileops_core import load_manifest
    from tileops_core.bench.workloads import instantiate

    spec = load_manifest()[op]
    importlib.import_module(spec.source["op"])  # registers the workload generators
    inst = instantiate(spec, spec.workloads[row_index], case, device=device, rng=torch.Generator().manual_seed(seed))
    return inst.inputs, inst.op_kwargs.get("scale")


def _key(inputs, arch: str) -> DecodeBuildKey:
    name = lambda n: str(inputs[n].dtype).replace("torch.", "")  # noqa: E731
    _, NQ, D = inputs["query"].shape
    table = inputs.get("block_table")
    return DecodeBuildKey(name("query"), NQ, inputs["key"].shape[1], D, table is not None, name("cache_seqlens"),
                          None if table is None else name("block_table"), arch)


_DECODE_ARGS = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")
_PREFILL_ARGS = ("query", "key", "value", "key_cache", "value_cache", "cu_seqlens", "slot_mapping")


def _compare(launcher, reason, reference, names, inputs, scale) -> None:
    """Run ``launcher`` on ``inputs`` with a NaN-poisoned ``out``; the output within the dtype's
    tolerance of ``reference`` (float64), the caches bit for bit."""
    import torch

    if reason is not None:
        pytest.skip(reason)
    expected, kc, vc = reference(inputs, scale)
    out = torch.full_like(inputs["query"], float("nan"))
    launcher().run(*[inputs.get(n) for n in names], scale, out)
    torch.cuda.synchronize()
    err = relative_error(out, expected)
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g}"
    for got, want in ((inputs["key_cache"], kc), (inputs["value_cache"], vc)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "a cache slot differs"


def _check(inputs, scale, arch: str, schedule: DecodeSchedule | None = None) -> None:
    key = dataclasses.replace(_key(inputs, arch), schedule=schedule)
    if decode_refusal(key) is None:
        poison_unread(inputs)
    _compare(lambda: build_attention_decode(key), decode_refusal(key), decode_reference, _DECODE_ARGS, inputs, scale)


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


def _keys_used(arch: str) -> dict:
    """Every (build key, block sizes) this module runs, so they compile in parallel up front."""
    from tileops_core import load_manifest

    qwen = dict(num_q_heads=16, num_kv_heads=2, head_dim=256, arch=arch)
    used: dict = {DecodeBuildKey("bfloat16", **qwen): set(),
                  DecodeBuildKey("bfloat16", **qwen, paged=True, table_dtype="int32"): {16, 1, 128}}
    for NQ, NKV, dtype in _GROUPS:
        used[DecodeBuildKey(dtype, NQ, NKV, 128, arch=arch)] = set()
    for block, schedule in _SCHEDULE_CASES:
        key = DecodeBuildKey("bfloat16", **qwen, paged=block is not None,
                             table_dtype=None if block is None else "int32",
                             schedule=schedule)
        used.setdefault(key, set()).update({block} if block else set())
    for row in load_manifest()[DECODE].workloads:
        gen, v = row.values["generator"], row.values
        if int(gen["B"]) * int(gen["context"]) > _MAX_TOKENS:
            continue
        for dtype in v["dtypes"]:
            paged = "block_size" in gen
            key = DecodeBuildKey(dtype, int(v["NQ"]), int(v["NKV"]), int(v["D"]), paged,
                                 v.get("cache_seqlens_dtype", "int32"), v.get("block_table_dtype", "int32") if paged
                                 else None, arch)
            if decode_refusal(key) is None:
                used.setdefault(key, set()).update({int(gen["block_size"])} if paged else set())
    return used


@pytest.fixture(scope="module", autouse=True)
def prebuilt(arch):
    """Compile every kernel the module needs concurrently (nvcc runs in parallel; a failure is
    left for the test that needs the kernel to report)."""
    from tileops_cuda.kernels._common import compile_many

    def thunk(key, blocks):
        def build():
            launcher = build_attention_decode(key)
            compile_many([lambda b=b: launcher.prepare(b) for b in blocks])
        return build

    thunks = [thunk(key, blocks) for key, blocks in _keys_used(arch).items()]
    thunks += [lambda key=key: build_attention_prefill(key) for key in _prefill_keys_used(arch)]
    compile_many(thunks)


def _prefill_keys_used(arch: str) -> set:
    from tileops_core import load_manifest
    from tileops_cuda.kernels.attention_prefill import PrefillBuildKey, prefill_refusal

    used = {PrefillBuildKey("bfloat16", 16, 2, 256, False, "int32", None, arch),
            PrefillBuildKey("bfloat16", 16, 2, 256, True, "int32", "int32", arch)}
    for row in load_manifest()[PREFILL].workloads:
        v = row.values
        paged = "block_size" in v["generator"]
        for dtype in v["dtypes"]:
            key = PrefillBuildKey(dtype, int(v["NQ"]), int(v["NKV"]), int(v["D"]), paged,
                                  v.get("cu_seqlens_dtype", "int32"), v.get("slot_mapping_dtype", "int32") if paged
                                  else None, arch)
            if prefill_refusal(key) is None:
                used.add(key)
    return used


@pytest.fixture
def seed(cuda_device, gen):
    import torch

    return int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))


@pytest.mark.parametrize("row_index,case", _rows(DECODE, _MAX_TOKENS))
def test_every_decode_workload_row_matches_the_float64_reference(row_index, case, arch, cuda_device, seed):
    inputs, scale = _instance(DECODE, row_index, case, cuda_device[0], seed)
    _check(inputs, scale, arch)


#: Empty caches, lengths either side of the 64-position tiles, padding sequences.
_RAGGED = [0, 63, -1, 64, 65, 127, 1, 300, -1, 128]


@pytest.mark.parametrize("block", [None, 16, 1, 128], ids=["contiguous", "paged16", "paged1", "paged128"])
def test_ragged_lengths_tile_edges_and_padding_rows_across_splits(block, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch)


#: Every schedule the rule can pick, on the layouts it changes: the contiguous pipeline's depths,
#: paged tiles by block or gathered (16-token blocks, and 48, which no 64-position tile divides),
#: each with either combine; a pinned split count runs the combine on this short batch too.
_SCHEDULE_CASES = ([(None, DecodeSchedule(stages=st, combine=c, splits=sp)) for st in (2, 3) for c in COMBINES
                    for sp in (None, 4)]
                   + [(block, DecodeSchedule(paged_tiles=t, combine=c, splits=4)) for block in (16, 48)
                      for t in PAGED_TILES for c in COMBINES])


@pytest.mark.parametrize("block,schedule", _SCHEDULE_CASES,
                         ids=[f"{block or 'contiguous'}-{s.stages}st-{s.paged_tiles}-{s.combine}-{s.splits}sp"
                              for block, s in _SCHEDULE_CASES])
def test_every_schedule_matches_the_reference_on_ragged_lengths(block, schedule, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch, schedule)


@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_a_batch_wide_enough_for_one_split_writes_the_output_directly(block, arch, cuda_device, gen):
    import torch

    lengths = torch.randint(0, 200, (80,), generator=gen, device=cuda_device[0]).tolist()
    lengths[3] = lengths[40] = -1
    _check(decode_batch(cuda_device[0], gen, lengths, block=block, capacity=256), None, arch)


_GROUPS = [(4, 4, "bfloat16"), (8, 1, "float16"), (64, 1, "bfloat16")]


@pytest.mark.parametrize("NQ,NKV,dtype", _GROUPS, ids=["mha-bf16", "gqa8-fp16", "gqa64-bf16"])
@pytest.mark.parametrize("scale", [0.07, -0.05])
def test_head_groups_and_dtypes_with_an_explicit_scale_of_either_sign(NQ, NKV, dtype, scale, arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, [5, 77, -1, 200], NQ=NQ, NKV=NKV, D=128, dtype=dtype), scale, arch)


def test_one_long_sequence_is_split_across_the_multiprocessors(arch, cuda_device, gen):
    _check(decode_batch(cuda_device[0], gen, [20000], block=16, capacity=32768), None, arch)


def test_decode_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    inputs = decode_batch(cuda_device[0], gen, [10, 500, -1], block=16)
    key = _key(inputs, arch)
    run = build_attention_decode(key).run
    names = ("query", "key", "value", "key_cache", "value_cache", "cache_seqlens", "block_table")

    def call(caches, out):
        run(*[caches.get(n, inputs[n]) for n in names], None, out)

    eager = {"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}
    eager_out = torch.full_like(inputs["query"], float("nan"))
    call(eager, eager_out)
    out = torch.full_like(inputs["query"], float("nan"))
    call({"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}, out)  # warm up
    graphed = {"key_cache": inputs["key_cache"].clone(), "value_cache": inputs["value_cache"].clone()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(graphed, out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out)
    assert torch.equal(graphed["key_cache"], eager["key_cache"]) and torch.equal(graphed["value_cache"],
                                                                               eager["value_cache"])


# -- prefill ---------------------------------------------------------------------------------------


def _prefill_key(inputs, arch: str):
    from tileops_cuda.kernels.attention_prefill import PrefillBuildKey

    name = lambda n: str(inputs[n].dtype).replace("torch.", "")  # noqa: E731
    _, NQ, D = inputs["query"].shape
    slots = inputs.get("slot_mapping")
    return PrefillBuildKey(name("query"), NQ, inputs["key"].shape[1], D, slots is not None, name("cu_seqlens"),
                           None if slots is None else name("slot_mapping"), arch)


def _prefill_reference(inputs, scale):
    """float64 ``(out, key_cache, value_cache)``: causal attention within each prompt, in query
    chunks; the cache writes of every covered token; zeros for tokens no prompt covers."""
    import torch

    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    q, k, v = (inputs[n].double() for n in ("query", "key", "value"))
    T, NQ, D = q.shape
    G = NQ // k.shape[1]
    L = kc.shape[1]
    slots = inputs.get("slot_mapping")
    out = torch.zeros(T, NQ, D, dtype=torch.float64, device=q.device)
    cu = inputs["cu_seqlens"].tolist()
    for b, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        if slots is None:
            kc[b, : e - s], vc[b, : e - s] = inputs["key"][s:e], inputs["value"][s:e]
        else:
            sl = slots[s:e].long()
            keep = sl >= 0
            kc.view(-1, *kc.shape[2:])[sl[keep]] = inputs["key"][s:e][keep]
            vc.view(-1, *vc.shape[2:])[sl[keep]] = inputs["value"][s:e][keep]
        kk = k[s:e].repeat_interleave(G, dim=1).transpose(0, 1)  # [NQ, n, D]
        vv = v[s:e].repeat_interleave(G, dim=1).transpose(0, 1)
        for c in range(s, e, 2048):
            rows = torch.arange(c, min(c + 2048, e), device=q.device) - s
            sc = torch.einsum("thd,hnd->htn", q[c : c + rows.numel()], kk) * (D ** -0.5 if scale is None else scale)
            sc = sc.masked_fill(torch.arange(e - s, device=q.device) > rows.unsqueeze(1), float("-inf"))
            out[c : c + rows.numel()] = torch.einsum("htn,hnd->thd", torch.softmax(sc, dim=-1), vv)
    return out, kc, vc


def _check_prefill(inputs, scale, arch: str) -> None:
    from tileops_cuda.kernels.attention_prefill import prefill_refusal

    key = _prefill_key(inputs, arch)
    _compare(lambda: build_attention_prefill(key), prefill_refusal(key), _prefill_reference, _PREFILL_ARGS, inputs,
             scale)


@pytest.mark.parametrize("row_index,case", _rows(PREFILL))
def test_every_prefill_workload_row_matches_the_float64_reference(row_index, case, arch, cuda_device, seed):
    inputs, scale = _instance(PREFILL, row_index, case, cuda_device[0], seed)
    _check_prefill(inputs, scale, arch)


def _prefill_batch(device, gen, lengths, block=None, pad=(), T_extra=0, NQ=16, NKV=2, D=256, dtype="bfloat16"):
    """Packed prompts of ``lengths`` (plus ``T_extra`` tokens no prompt covers); contiguous
    (one cache row a prompt) or paged (each prompt's own random blocks; prompts in ``pad`` -1)."""
    import torch

    tdt = getattr(torch, dtype)
    T = sum(lengths) + T_extra
    r = lambda *s: torch.randn(*s, device=device, generator=gen).to(tdt)  # noqa: E731
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    inputs = dict(query=r(T, NQ, D), key=r(T, NKV, D), value=r(T, NKV, D), cu_seqlens=cu)
    if block is None:
        L = max(lengths) + 3
        inputs.update(key_cache=r(len(lengths) + 2, L, NKV, D), value_cache=r(len(lengths) + 2, L, NKV, D))
        return inputs
    blocks = [-(-n // block) for n in lengths]
    N = sum(blocks) + 4
    pool = torch.randperm(N, generator=torch.Generator().manual_seed(int(torch.randint(1 << 30, (1,)))))
    slots, used = [], 0
    for b, n in enumerate(lengths):
        mine = pool[used : used + blocks[b]].tolist()
        used += blocks[b]
        slots += [-1 if b in pad else mine[j // block] * block + j % block for j in range(n)]
    slots += [-1] * T_extra
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D),
                  slot_mapping=torch.tensor(slots, dtype=torch.int32, device=device))
    return inputs


@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_prefill_ragged_prompts_tile_edges_empty_and_padded_prompts(block, arch, cuda_device, gen):
    lengths = [1, 0, 63, 64, 65, 127, 129, 300]
    _check_prefill(_prefill_batch(cuda_device[0], gen, lengths, block=block, pad=(3,) if block else ()), None, arch)


def test_prefill_tokens_no_prompt_covers_get_zeros_and_write_nothing(arch, cuda_device, gen):
    _check_prefill(_prefill_batch(cuda_device[0], gen, [5, 70], block=16, T_extra=9), 0.1, arch)


def test_prefill_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    from tileops_cuda.kernels.attention_prefill import build_attention_prefill

    inputs = _prefill_batch(cuda_device[0], gen, [100, 7, 300], block=16)
    run = build_attention_prefill(_prefill_key(inputs, arch)).run
    names = ("query", "key", "value", "key_cache", "value_cache", "cu_seqlens", "slot_mapping")
    eager_out = torch.full_like(inputs["query"], float("nan"))
    run(*[inputs[n] for n in names], None, eager_out)
    out = torch.full_like(inputs["query"], float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(*[inputs[n] for n in names], None, out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out)
