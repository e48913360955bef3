"""The attention prefill TileLang kernels against a float64 reference on the GPU (skips
without one).

Every AttentionPrefillFwdOp workload row and ragged, padded and partly covered batches run
through the launcher with a NaN-poisoned ``out``, with the default setting and with each other
one (``_SETTINGS``: the pipelined program the default replaced, the default writing the caches
from its producer warpgroup, always or where the mean prompt is short (the op's registered key); the same
checks, the same tolerances: the conformance suite's, float16 2e-3, bfloat16 1.6e-2, relative); the caches
bit for bit. The reference is float64 on the device: causal attention within each prompt. Every kernel
the module runs is compiled up front, concurrently (``prebuilt``).
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from tileops_cuda.kernels.attention_prefill import (
    PREFILL_SETTINGS, REGISTERED_ATTENTION_WRITES_UPTO, PrefillBuildKey, build_attention_prefill, default_tiling,
    prefill_refusal,
)

from attention_cases import build_key_of, compare_with_reference, workload_instance, workload_rows
from catalogue_references import TOLERANCE, relative_error  # noqa: E402  (the path attention_cases adds)

PREFILL = "AttentionPrefillFwdOp"
#: The build key's own settings (its four fields' defaults).
_KEY_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PrefillBuildKey)
                 if f.name in ("program", "grid", "tile_counts", "cache_write")}
_PREFILL_ARGS = ("query", "key", "value", "key_cache", "value_cache", "cu_seqlens", "slot_mapping")
#: (NQ, NKV, D, dtype) beside Qwen3-Next's: grouped fp16 at D=128, one head a group at D=48.
_PREFILL_GROUPS = [(8, 1, 128, "float16"), (4, 4, 48, "bfloat16")]

#: The settings (build-key fields beside the call's) every test runs: the default (the overlap program on
#: the heads grid, tile counts by kernel), the pipelined program it replaced, the overlap program
#: writing the caches itself, that choice made per call as the op registers it (``registered``: the attention
#: writes them where the mean prompt is at most ``REGISTERED_ATTENTION_WRITES_UPTO`` tokens, so the Qwen3-Next
#: rows take both ways, 16k B=1 the launched write; its kernels are the first two settings').
#: ``PREFILL_TEST_SETTINGS`` (names, comma-separated) keeps some of them, and the ragged test only their
#: full settings: a device call cannot compile all the kernels in its slot.
_ALL_SETTINGS = {"default": {}, "pipelined": {"program": "pipelined", "grid": "tiles", "tile_counts": "torch"},
                 "overlap-writes-caches": {"cache_write": "attention"},
                 "registered": {"attention_writes_upto": REGISTERED_ATTENTION_WRITES_UPTO}}
_NAMED = os.environ.get("PREFILL_TEST_SETTINGS", ",".join(_ALL_SETTINGS)).split(",")
if set(_NAMED) - set(_ALL_SETTINGS):
    raise ValueError(f"PREFILL_TEST_SETTINGS names {sorted(set(_NAMED) - set(_ALL_SETTINGS))}, "
                     f"not among {list(_ALL_SETTINGS)}")
_SETTINGS = {n: _ALL_SETTINGS[n] for n in _NAMED}
_RAGGED_SETTINGS = [c for c in PREFILL_SETTINGS if "PREFILL_TEST_SETTINGS" not in os.environ
                    or any(c == {**_KEY_DEFAULTS, **s} for s in _SETTINGS.values())]


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


def _prefill_keys_used(arch: str) -> set:
    """Every build key this module runs, so they compile in parallel up front."""
    from tileops_core import load_manifest

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
    used |= {PrefillBuildKey(dtype, NQ, NKV, D, arch=arch) for NQ, NKV, D, dtype in _PREFILL_GROUPS}
    qwen = [key for key in used if key.head_dim == 256 and key.cu_dtype == "int32"]  # the ragged test's
    used.add(PrefillBuildKey("bfloat16", 16, 2, 256, True, "int32", "int64", arch))  # the 64-bit slots' test
    used = {dataclasses.replace(key, **setting) for key in used for setting in _SETTINGS.values()}
    return used | {dataclasses.replace(key, **setting) for key in qwen for setting in _RAGGED_SETTINGS}


@pytest.fixture(scope="module", autouse=True)
def prebuilt(arch, prebuild_all):
    """Compile every kernel the module needs concurrently (nvcc runs in parallel), the warp-specialised
    programs (the slowest to lower and compile) first so that none of them starts last; a failure
    is left for the test that needs the kernel to report. Not under xdist (``prebuild_all``)."""
    if not prebuild_all:
        return
    from tileops_cuda.kernels._common import compile_many

    keys = sorted(_prefill_keys_used(arch), key=lambda k: (k.program == "pipelined", k.head_dim != 256, str(k)))
    compile_many([lambda key=key: build_attention_prefill(key) for key in keys])


@pytest.fixture
def seed(cuda_device, gen):
    import torch

    return int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))


def _prefill_key(inputs, arch: str) -> PrefillBuildKey:
    return build_key_of(PrefillBuildKey, inputs, "cu_seqlens", "slot_mapping", arch)


def _prefill_reference(inputs, scale):
    """float64 ``(out, key_cache, value_cache)``: causal attention within each prompt, in query
    chunks; the cache writes of every covered token; zeros for tokens no prompt covers."""
    import torch

    kc, vc = inputs["key_cache"].clone(), inputs["value_cache"].clone()
    q, k, v = (inputs[n].double() for n in ("query", "key", "value"))
    T, NQ, D = q.shape
    G = NQ // k.shape[1]
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


def _check_prefill(inputs, scale, arch: str, setting: dict) -> None:
    key = dataclasses.replace(_prefill_key(inputs, arch), **setting)
    compare_with_reference(lambda: build_attention_prefill(key), prefill_refusal(key), _prefill_reference,
                           _PREFILL_ARGS, inputs, scale)


def _settings(names=tuple(_SETTINGS)) -> list:
    return [pytest.param(_SETTINGS[n], id=n) for n in names]


@pytest.mark.parametrize("setting", _settings())
@pytest.mark.parametrize("row_index,case", workload_rows(PREFILL))
def test_every_prefill_workload_row_matches_the_float64_reference(row_index, case, setting, arch, cuda_device, seed):
    inputs, scale = workload_instance(PREFILL, row_index, case, cuda_device[0], seed)
    _check_prefill(inputs, scale, arch, setting)


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


#: One key tile (the overlap program's loop never runs), a second warpgroup with no row inside
#: its prompt, value tiles crossing the end, and 16 key tiles (every pipeline stage's barriers
#: through several phases).
_RAGGED_LENGTHS = [1, 0, 63, 64, 65, 127, 129, 300, 1000]


@pytest.mark.parametrize("setting", [pytest.param(c, id=":".join(c.values())) for c in _RAGGED_SETTINGS])
@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_prefill_ragged_prompts_tile_edges_empty_and_padded_prompts(block, setting, arch, cuda_device, gen):
    inputs = _prefill_batch(cuda_device[0], gen, _RAGGED_LENGTHS, block=block, pad=(3,) if block else ())
    _check_prefill(inputs, None, arch, setting)


#: The attention programs' query tile (rows a program, which the tile counts count by; one for every program).
_QUERY_TILES = [default_tiling(PrefillBuildKey("bfloat16", 16, 2, 256)).block_m]


@pytest.fixture(scope="module")
def tile_count_kernels(arch):
    """The tile-count kernel for either offsets dtype and each program's query tile (:data:`_QUERY_TILES`),
    compiled alone (no attention behind it)."""
    from tileops_cuda.kernels._attention_common import compile_arch
    from tileops_cuda.kernels._common import compile_many, compile_prim_func
    from tileops_cuda.kernels.attention_prefill_program import prefill_tile_counts_program

    variants = [(d, m) for d in ("int32", "int64") for m in _QUERY_TILES]
    built = compile_many([lambda d=d, m=m: compile_prim_func(prefill_tile_counts_program(
        PrefillBuildKey("bfloat16", 16, 2, 256, cu_dtype=d), m), compile_arch(arch)) for d, m in variants])
    return dict(zip(variants, built))


@pytest.mark.parametrize("B", [1, 9, 1023, 1024, 3000])
@pytest.mark.parametrize("cu_dtype", ["int32", "int64"])
@pytest.mark.parametrize("block_m", _QUERY_TILES)
@pytest.mark.parametrize("order", ["valid", "unchecked"])
def test_the_tile_count_kernel_makes_the_clipped_prefix_sums_the_torch_path_makes(order, B, cu_dtype, block_m,
                                                                                  tile_count_kernels, cuda_device,
                                                                                  gen):
    """``prompt_cu`` is ``cummax(clip(cu_seqlens, 0, T))`` (RGDR's ``clipped_bounds``), ``tile_cu`` the
    prefix sums of its prompts' query tiles: valid prefix sums come back as given; unchecked ones (negative,
    decreasing, past T) clipped, across the 1024-entry chunks the program scans."""
    import itertools

    import torch

    from tileops_cpu_ref.rgdr import clipped_bounds

    kernel = tile_count_kernels[cu_dtype, block_m]
    if isinstance(kernel, Exception):
        raise kernel
    if order == "valid":
        lengths = torch.randint(0, 400, (B,), generator=gen, device=cuda_device[0])
        cu = torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0))
        T = int(cu[-1])
    else:  # some negative lengths, entries below 0 and past T
        lengths = torch.randint(-300, 400, (B,), generator=gen, device=cuda_device[0])
        cu = torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0)) - 500
        T = max(1, int(cu.max()) // 2)
    cu = cu.to(getattr(torch, cu_dtype))
    got = torch.full((B + 1,), -7, dtype=torch.int32, device=cu.device)
    prompts = torch.full((B + 1,), -7, dtype=cu.dtype, device=cu.device)
    kernel(cu, got, prompts, T)
    starts, spans = clipped_bounds(cu.tolist(), "cu_seqlens", T)
    want_prompts = [starts[0], *(s + n for s, n in zip(starts, spans))]
    want_tiles = [0, *itertools.accumulate(-(-n // block_m) for n in spans)]
    assert prompts.tolist() == want_prompts
    assert got.tolist() == want_tiles
    if order == "valid":
        assert torch.equal(prompts, cu)


@pytest.mark.parametrize("setting", _settings())
@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
def test_prefill_tokens_no_prompt_covers_get_zeros_and_write_nothing(block, setting, arch, cuda_device, gen):
    # 9 tokens after the last prompt and, with the prompts shifted by 130, 130 before the first: tokens
    # of two query-tile-sized token ranges, one of them holding no prompt at all.
    inputs = _prefill_batch(cuda_device[0], gen, [5, 70], block=block, T_extra=139)
    inputs["cu_seqlens"] += 130
    if block is not None:  # the slots follow their tokens
        inputs["slot_mapping"] = inputs["slot_mapping"].roll(130)
    _check_prefill(inputs, 0.1, arch, setting)


@pytest.mark.parametrize("setting", _settings())
def test_prefill_with_no_prompt_zeros_every_output_and_writes_nothing(setting, arch, cuda_device, gen):
    inputs = _prefill_batch(cuda_device[0], gen, [5], block=16, T_extra=40)
    inputs["cu_seqlens"] = inputs["cu_seqlens"][:1]
    _check_prefill(inputs, None, arch, setting)


@pytest.mark.parametrize("setting", _settings())
@pytest.mark.parametrize("NQ,NKV,D,dtype", _PREFILL_GROUPS, ids=["gqa8-fp16-d128", "mha-bf16-d48"])
@pytest.mark.parametrize("scale", [0.07, -0.05])
def test_prefill_head_groups_and_dtypes_with_an_explicit_scale_of_either_sign(NQ, NKV, D, dtype, scale, setting, arch,
                                                                             cuda_device, gen):
    inputs = _prefill_batch(cuda_device[0], gen, [70, 1, 200], NQ=NQ, NKV=NKV, D=D, dtype=dtype)
    _check_prefill(inputs, scale, arch, setting)


@pytest.mark.parametrize("setting", _settings())
def test_prefill_captures_in_a_cuda_graph(setting, arch, cuda_device, gen):
    import torch

    inputs = _prefill_batch(cuda_device[0], gen, [100, 7, 300], block=16)
    run = build_attention_prefill(dataclasses.replace(_prefill_key(inputs, arch), **setting)).run
    eager_out = torch.full_like(inputs["query"], float("nan"))
    run(*[inputs[n] for n in _PREFILL_ARGS], None, eager_out)
    out = torch.full_like(inputs["query"], float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(*[inputs[n] for n in _PREFILL_ARGS], None, out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out)


#: Unchecked cu_seqlens (contents checks off, as in serving) over T = 260 tokens (three query tiles):
#: past T, decreasing (a prompt starting below the running maximum: spans that overlap as written), a
#: prompt far past T ahead of in-range ones (more query tiles, as written, than the grid has), negative.
_UNCHECKED_PREFILL_T = 260
_UNCHECKED_CU = {"past-T": [0, 70, 400], "decreasing": [0, 150, 100, 260],
                 "decreasing-below-a-start": [20, 20, 200, 60, 240], "far-past-T-first": [0, 1000, 0, 260],
                 "negative-first": [-50, 130, 260], "all-negative": [-5, -9, -1]}


def _unchecked_prefill_batch(device, gen, cu: list, block: int | None):
    """Qwen3-Next-sized prompts over ``_UNCHECKED_PREFILL_T`` tokens with the unchecked ``cu``: a
    contiguous cache of T positions a row (every clipped prompt fits), or a paged pool of random
    slots, two of them padding."""
    import torch

    T, NQ, NKV, D, tdt = _UNCHECKED_PREFILL_T, 16, 2, 256, torch.bfloat16
    r = lambda *s: torch.randn(*s, device=device, generator=gen).to(tdt)  # noqa: E731
    inputs = dict(query=r(T, NQ, D), key=r(T, NKV, D), value=r(T, NKV, D),
                  cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device))
    if block is None:
        inputs.update(key_cache=r(len(cu) + 1, T, NKV, D), value_cache=r(len(cu) + 1, T, NKV, D))
        return inputs
    N = -(-T // block) + 4
    slots = torch.randperm(N * block, device=device, generator=gen)[:T].int()
    slots[[3, 200]] = -1
    inputs.update(key_cache=r(N, block, NKV, D), value_cache=r(N, block, NKV, D), slot_mapping=slots)
    return inputs


@pytest.mark.parametrize("setting", _settings())
@pytest.mark.parametrize("block", [None, 16], ids=["contiguous", "paged16"])
@pytest.mark.parametrize("cu", list(_UNCHECKED_CU.values()), ids=list(_UNCHECKED_CU))
def test_prefill_unchecked_cu_seqlens_follow_the_rgdr_rule(cu, block, setting, arch, cuda_device, gen):
    """The spec reads unchecked cu_seqlens as RGDR's ``clipped_bounds`` does (prompts end to end
    inside [0, T): prompt b spans [clip(max(cu[0..b])), clip(max(cu[0..b + 1])))): ``out`` (poisoned
    with NaN) is the float64 attention over the clipped prompts, zeros where no prompt covers a
    token, the caches bit for bit (a token written where its clipped prompt puts it; slots no token
    addresses keep their bits). The CPU reference on the same unchecked cu_seqlens gives the same."""
    import torch

    from tileops_cpu_ref.attention import attention_prefill
    from tileops_cpu_ref.rgdr import clipped_bounds

    T = _UNCHECKED_PREFILL_T
    inputs = _unchecked_prefill_batch(cuda_device[0], gen, cu, block)
    starts, lengths = clipped_bounds(cu, "cu_seqlens", T)
    clipped = torch.tensor([starts[0], *(s + n for s, n in zip(starts, lengths))], dtype=torch.int32,
                           device=cuda_device[0])
    cpu = {n: t.cpu().clone() for n, t in inputs.items()}
    ref_out = attention_prefill(cpu["query"], cpu["key"], cpu["value"], cpu["key_cache"], cpu["value_cache"],
                                cpu["cu_seqlens"], cpu.get("slot_mapping"), 0.1)

    def reference(inputs, scale):
        return _prefill_reference(dict(inputs, cu_seqlens=clipped), scale)

    key = dataclasses.replace(_prefill_key(inputs, arch), **setting)
    want_out, _, _ = reference(inputs, 0.1)
    compare_with_reference(lambda: build_attention_prefill(key), prefill_refusal(key), reference, _PREFILL_ARGS,
                           inputs, 0.1)
    assert relative_error(ref_out, want_out.cpu()) <= TOLERANCE[ref_out.dtype]
    covered = {t for s, n in zip(starts, lengths) for t in range(s, s + n)}
    uncovered = [t for t in range(T) if t not in covered]
    out = build_attention_prefill(key).run(*[inputs.get(n) for n in _PREFILL_ARGS], 0.1,
                                           torch.full_like(inputs["query"], float("nan")))
    torch.cuda.synchronize()
    assert torch.equal(out[uncovered], torch.zeros_like(out[uncovered]))
    for name in ("key_cache", "value_cache"):
        assert torch.equal(cpu[name].view(torch.int16), inputs[name].cpu().view(torch.int16)), \
            f"the CPU reference's {name} differs from the kernel's"


@pytest.mark.parametrize("setting", _settings())
def test_prefill_unchecked_64_bit_slots_past_int32_are_padding_not_the_rows_they_wrap_to(setting, arch, cuda_device,
                                                                                       gen):
    """int64 slot_mapping, checks off, with entries ``2**32 + k`` (``k`` in int32: a real cache row): one names
    a row no token writes, one the row the previous token writes. Past the cache, both are padding, as a GPU
    kernel reads a slot the cache does not hold (the CPU reference refuses it, writing nothing): those tokens
    write nothing. ``out`` is the float64 reference's with those entries -1 (a cache write does not change the
    attention) and both caches its caches bit for bit, so row ``k`` keeps its bits or the previous token's row.
    Every setting: the cache-write program and the attention programs that write the caches themselves."""
    import torch

    from tileops_cpu_ref.attention import attention_prefill

    inputs = _prefill_batch(cuda_device[0], gen, [5, 70], block=16)
    slots = inputs["slot_mapping"].long()
    free = sorted(set(range(inputs["key_cache"].shape[0] * 16)) - set(slots.tolist()))
    spare = free[int(torch.randint(len(free), (1,), generator=gen, device=cuda_device[0]))]
    slots[2], slots[40] = 2**32 + spare, 2**32 + slots[39]
    padded = slots.clone()
    padded[[2, 40]] = -1
    inputs["slot_mapping"] = slots
    cpu = {n: t.cpu().clone() for n, t in inputs.items()}
    with pytest.raises(IndexError, match="nothing was written"):
        attention_prefill(cpu["query"], cpu["key"], cpu["value"], cpu["key_cache"], cpu["value_cache"],
                          cpu["cu_seqlens"], cpu["slot_mapping"], None)

    def reference(inputs, scale):
        return _prefill_reference(dict(inputs, slot_mapping=padded), scale)

    key = dataclasses.replace(_prefill_key(inputs, arch), **setting)
    assert key.slot_dtype == "int64"
    compare_with_reference(lambda: build_attention_prefill(key), prefill_refusal(key), reference, _PREFILL_ARGS,
                           inputs, None)
    for name in ("key_cache", "value_cache"):
        rows = inputs[name].view(-1, *inputs[name].shape[2:])
        assert torch.equal(rows[spare].cpu().view(torch.int16), cpu[name].view(-1, *rows.shape[1:])[spare].view(
            torch.int16)), f"{name} row {spare} (the first entry in int32) was written"
