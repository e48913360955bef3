"""The attention decode TileLang kernels against a float64 reference on the GPU (skips without one).

Every AttentionDecodeFwdOp workload row the kernel serves (up to 2^18 cached tokens a row; the
larger rows are the bench's) and targeted batches run through the launcher with a
NaN-poisoned ``out`` and NaN in every cache slot a sequence does not read (a slot the step
writes included, so a read before the write shows). Outputs are compared at the conformance
suite's tolerances (float16 2e-3, bfloat16 1.6e-2, relative); the caches bit for bit (the written
slots hold copies of the inputs, every other slot keeps its bits). The reference is float64
on the device: each live sequence's positions ``0 .. n`` gathered, the new key/value at ``n``.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from tileops_cuda.kernels.attention_decode import DecodeBuildKey, build_attention_decode, decode_refusal

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from catalogue_references import TOLERANCE, relative_error  # noqa: E402

DECODE = "AttentionDecodeFwdOp"
_MAX_TOKENS = 1 << 18  # B · context above this: the bench's rows (float64 copies of the cache)


def _rows() -> list:
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    spec = load_manifest()[DECODE]
    return [pytest.param(row.index, case, id=f"{row.label}[{case}]") for row in spec.workloads
            for case in dtype_cases(row)
            if int(row.values["generator"]["B"]) * int(row.values["generator"]["context"]) <= _MAX_TOKENS]


def _instance(row_index: int, case, device, seed: int):
    import importlib

    import torch

    from tileops_core import load_manifest
    from tileops_core.bench.workloads import instantiate

    spec = load_manifest()[DECODE]
    importlib.import_module(spec.source["op"])  # registers the workload generators
    inst = instantiate(spec, spec.workloads[row_index], case, device=device, rng=torch.Generator().manual_seed(seed))
    return inst.inputs, inst.op_kwargs.get("scale")


def _key(inputs, arch: str) -> DecodeBuildKey:
    name = lambda n: str(inputs[n].dtype).replace("torch.", "")  # noqa: E731
    _, NQ, D = inputs["query"].shape
    table = inputs.get("block_table")
    return DecodeBuildKey(name("query"), NQ, inputs["key"].shape[1], D, table is not None, name("cache_seqlens"),
                          None if table is None else name("block_table"), arch)


def _places(inputs, b: int, n: int):
    """``(rows, offsets)`` of positions ``0 .. n`` of sequence ``b`` (device tensors)."""
    import torch

    dev = inputs["query"].device
    pos = torch.arange(n + 1, device=dev)
    L = inputs["key_cache"].shape[1]
    table = inputs.get("block_table")
    if table is None:
        return torch.full_like(pos, b), pos
    return table[b].long()[pos // L], pos % L


def _poison_unread(inputs) -> None:
    """NaN into every cache slot no sequence reads before this step (the step's own slot included)."""
    import torch

    read = torch.zeros(inputs["key_cache"].shape[:2], dtype=torch.bool, device=inputs["key_cache"].device)
    for b, n in enumerate(inputs["cache_seqlens"].tolist()):
        if n > 0:
            rows, at = _places(inputs, b, n - 1)
            read[rows, at] = True
    inputs["key_cache"][~read] = float("nan")
    inputs["value_cache"][~read] = float("nan")


def _reference(inputs, scale):
    """float64 ``(out, key_cache, value_cache)`` after the step, on the device."""
    import torch

    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    q = inputs["query"].double()
    B, NQ, D = q.shape
    NKV = inputs["key"].shape[1]
    out = torch.zeros(B, NQ, D, dtype=torch.float64, device=q.device)
    for b, n in enumerate(inputs["cache_seqlens"].tolist()):
        if n < 0:
            continue
        rows, at = _places(inputs, b, n)
        kc[rows[n], at[n]] = inputs["key"][b]
        vc[rows[n], at[n]] = inputs["value"][b]
        k = kc[rows, at].double().repeat_interleave(NQ // NKV, dim=1)  # [n + 1, NQ, D]
        v = vc[rows, at].double().repeat_interleave(NQ // NKV, dim=1)
        s = torch.einsum("hd,thd->ht", q[b], k) * (D ** -0.5 if scale is None else scale)
        out[b] = torch.einsum("ht,thd->hd", torch.softmax(s, dim=-1), v)
    return out, kc, vc


def _check(inputs, scale, arch: str) -> None:
    import torch

    key = _key(inputs, arch)
    reason = decode_refusal(key)
    if reason is not None:
        pytest.skip(reason)
    _poison_unread(inputs)
    expected, kc, vc = _reference(inputs, scale)
    out = torch.full_like(inputs["query"], float("nan"))
    i = inputs
    build_attention_decode(key).run(i["query"], i["key"], i["value"], i["key_cache"], i["value_cache"],
                                    i["cache_seqlens"], i.get("block_table"), scale, out)
    torch.cuda.synchronize()
    err = relative_error(out, expected)
    assert err <= TOLERANCE[out.dtype], f"out relative error {err:.3g}"
    for got, want in ((i["key_cache"], kc), (i["value_cache"], vc)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "a cache slot differs"


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

    compile_many([thunk(key, blocks) for key, blocks in _keys_used(arch).items()])


@pytest.fixture
def seed(cuda_device, gen):
    import torch

    return int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))


@pytest.mark.parametrize("row_index,case", _rows())
def test_every_decode_workload_row_matches_the_float64_reference(row_index, case, arch, cuda_device, seed):
    inputs, scale = _instance(row_index, case, cuda_device[0], seed)
    _check(inputs, scale, arch)


def _batch(device, gen, lengths, NQ=16, NKV=2, D=256, block=None, dtype="bfloat16", capacity=None):
    """A decode batch with the given ``cache_seqlens`` (-1: padding); contiguous, or paged with
    ``block``-token blocks drawn at random from a pool with spare blocks (unused entries -1)."""
    import torch

    tdt = getattr(torch, dtype)
    B = len(lengths)
    capacity = capacity or max(lengths) + 1
    r = lambda *s: torch.randn(*s, device=device, generator=gen).to(tdt)  # noqa: E731
    inputs = dict(query=r(B, NQ, D), key=r(B, NKV, D), value=r(B, NKV, D),
                  cache_seqlens=torch.tensor(lengths, dtype=torch.int32, device=device))
    if block is None:
        inputs.update(key_cache=r(B + 2, capacity, NKV, D), value_cache=r(B + 2, capacity, NKV, D))
        return inputs
    M = -(-capacity // block)
    N = B * M + 3
    table = torch.randperm(N, device=device, generator=gen)[: B * M].view(B, M).int()
    used = torch.arange(M, device=device).unsqueeze(0) <= (torch.tensor(lengths, device=device).clamp(min=0)
                                                           // block).unsqueeze(1)
    table[~used] = -1
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D), block_table=table)
    return inputs


#: Empty caches, lengths either side of the 64-position tiles, padding sequences.
_RAGGED = [0, 63, -1, 64, 65, 127, 1, 300, -1, 128]


@pytest.mark.parametrize("block", [None, 16, 1, 128], ids=["contiguous", "paged16", "paged1", "paged128"])
def test_ragged_lengths_tile_edges_and_padding_rows_across_splits(block, arch, cuda_device, gen):
    _check(_batch(cuda_device[0], gen, _RAGGED, block=block), None, arch)


@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_a_batch_wide_enough_for_one_split_writes_the_output_directly(block, arch, cuda_device, gen):
    import torch

    lengths = torch.randint(0, 200, (80,), generator=gen, device=cuda_device[0]).tolist()
    lengths[3] = lengths[40] = -1
    _check(_batch(cuda_device[0], gen, lengths, block=block, capacity=256), None, arch)


_GROUPS = [(4, 4, "bfloat16"), (8, 1, "float16"), (64, 1, "bfloat16")]


@pytest.mark.parametrize("NQ,NKV,dtype", _GROUPS, ids=["mha-bf16", "gqa8-fp16", "gqa64-bf16"])
@pytest.mark.parametrize("scale", [0.07, -0.05])
def test_head_groups_and_dtypes_with_an_explicit_scale_of_either_sign(NQ, NKV, dtype, scale, arch, cuda_device, gen):
    _check(_batch(cuda_device[0], gen, [5, 77, -1, 200], NQ=NQ, NKV=NKV, D=128, dtype=dtype), scale, arch)


def test_one_long_sequence_is_split_across_the_multiprocessors(arch, cuda_device, gen):
    _check(_batch(cuda_device[0], gen, [20000], block=16, capacity=32768), None, arch)


def test_decode_captures_in_a_cuda_graph(arch, cuda_device, gen):
    import torch

    inputs = _batch(cuda_device[0], gen, [10, 500, -1], block=16)
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
