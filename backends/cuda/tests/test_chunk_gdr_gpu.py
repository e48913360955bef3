"""The chunked gated delta rule's TileLang kernels against float64 on the GPU (skips without one).

Every call writes a NaN-poisoned ``out``; slots of no sequence (spare slots, the slot a
padding sequence would have, slots of empty sequences) are compared bit for bit.

Tolerances (relative, ``||got - truth|| / ||truth||``; why in ``kernels/chunk_gdr.py``): the
kernels keep the state walk, decays, inverse and every sum in float32 but feed the tensor
cores bf16 operands where flash-linear-attention does (U, D, the decayed keys, W, the
per-chunk states, the masked Q Kᵀ). A float32 emulation of exactly those roundings on the CPU
puts the final state 2.3e-3..3.0e-3 from float64 over the written slots (sequences of 200 to
4096 tokens) and the output ~3e-3. (FLA's 1.1e-4..8.8e-4 in NOTES.md are over the whole
pool, untouched slots included, which dilutes them; per written slot they are of this order.)
So:

* ``out`` (bf16): 1.6e-2, the conformance suite's bf16 tolerance;
* a float32 state: 8e-3 over the written slots (the emulated 3e-3 with margin; a wrong
  kernel is off by O(1));
* a 16-bit state: that plus its own rounding (bf16 4e-3, fp16 5e-4).

The truth is the decode step's float64 recurrence run token by token
(``chunk_gated_delta_rule_by_recurrence``) for the mixed-length cases, and for the Qwen3.5
rows of the spec (4k and 32k tokens) the reference's chunked algebra in float64 on the GPU,
which ``backends/cpu_ref/tests/test_chunk_gdr_reference.py`` shows equal to it to 1e-12.
"""

from __future__ import annotations

import pytest

from tileops_cuda.kernels.chunk_gdr import ChunkGDRBuildKey, build_chunk_gdr, chunk_gdr_refusal

OP = "ChunkGatedDeltaRuleFwdOp"
OUT_TOL = 1.6e-2
STATE_TOL = {"float32": 8e-3, "bfloat16": 8e-3 + 4e-3, "float16": 8e-3 + 5e-4}


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _key(inputs, arch: str, stages: int = 2) -> ChunkGDRBuildKey:
    T, NK, DK = inputs["query"].shape
    NV, DV = inputs["value"].shape[1:]
    return ChunkGDRBuildKey(_dtype_name(inputs["query"]), _dtype_name(inputs["state"]), NK, NV, DK, DV, arch, stages,
                            _dtype_name(inputs["cu_seqlens"]), _dtype_name(inputs["ssm_state_indices"]))


def _rel(got, ref) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / ref.norm())


def _truth(inputs, params, by_recurrence: bool):
    """``(out float64, expected pool)``; ``inputs`` are left as they are."""
    import torch

    from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule, chunk_gated_delta_rule_by_recurrence

    if by_recurrence:
        return chunk_gated_delta_rule_by_recurrence(**inputs, **params)
    pool = inputs["state"].clone()
    out = torch.empty(inputs["value"].shape, dtype=torch.float64, device=pool.device)
    chunk_gated_delta_rule(**dict(inputs, state=pool), **params, compute_dtype=torch.float64, out=out)
    return out, pool


def _check(inputs, params, arch: str, by_recurrence: bool, stages: int = 2) -> dict:
    """Run the launcher on a copy of the pool with a poisoned ``out`` and compare; returns the errors."""
    import torch

    expected_out, expected_pool = _truth(inputs, params, by_recurrence)
    pool = inputs["state"].clone()
    out = torch.full_like(inputs["value"], float("nan"))
    run = build_chunk_gdr(_key(inputs, arch, stages)).run
    run(**dict(inputs, state=pool), scale=params.get("scale"),
        use_qk_l2norm_in_kernel=params.get("use_qk_l2norm_in_kernel", False), out=out)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "some output rows were never written"
    out_err = _rel(out, expected_out)
    slots = inputs["ssm_state_indices"].long().cpu()
    bounds = inputs["cu_seqlens"].long().cpu()
    written = sorted(int(s) for b, s in enumerate(slots.tolist()) if s >= 0 and bounds[b + 1] > bounds[b])
    untouched = [s for s in range(pool.shape[0]) if s not in written]
    got_pool, original = pool.cpu(), inputs["state"].cpu()
    for s in untouched:
        assert torch.equal(got_pool[s].view(torch.uint8), original[s].view(torch.uint8)), f"slot {s} was written"
    state_err = _rel(got_pool[written], expected_pool.cpu()[written]) if written else 0.0
    assert out_err <= OUT_TOL, f"out relative error {out_err:.3g}"
    assert state_err <= STATE_TOL[_dtype_name(pool)], f"final state relative error {state_err:.3g}"
    return {"out": out_err, "state": state_err}


def _case(lengths, dev, gen, *, NK=2, NV=4, DK=128, DV=128, state_dtype="float32", padding=(), initial=True,
          unit_qk=False, spare=3):
    """Fresh random bf16 inputs (never zeros) in the spec's layout; sequence ``b`` owns slot
    ``slots[b]`` of a pool with ``spare`` slots nobody owns, padding sequences slot -1."""
    import torch

    B, T = len(lengths), sum(lengths)

    def rows(*shape):
        x = torch.randn(*shape, device=dev, generator=gen)
        return x / x.norm(dim=-1, keepdim=True) if unit_qk else x

    slots = torch.randperm(B + spare, device=dev, generator=gen)[:B]
    for b in padding:
        slots[b] = -1
    has = torch.rand(B, device=dev, generator=gen) < 0.6
    has[0] = True
    bf = torch.bfloat16
    inputs = {
        "query": rows(T, NK, DK).to(bf), "key": rows(T, NK, DK).to(bf),
        "value": torch.randn(T, NV, DV, device=dev, generator=gen).to(bf),
        "g": -(0.05 + 0.5 * torch.rand(T, NV, device=dev, generator=gen)),
        "beta": torch.sigmoid(torch.randn(T, NV, device=dev, generator=gen)).to(bf),
        "state": torch.randn(B + spare, NV, DV, DK, device=dev, generator=gen).to(getattr(torch, state_dtype)),
        "cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev),
        "ssm_state_indices": slots.int(),
        "has_initial_state": has if initial else None,
    }
    return inputs


@pytest.fixture(scope="module")
def arch(cuda_device):
    return cuda_device[1]


def _spec_rows() -> list:
    from tileops_core import load_manifest
    from tileops_core.workloads import dtype_cases

    spec = load_manifest()[OP]
    return [pytest.param(row.index, case, id=f"{row.label}[{case}]") for row in spec.workloads
            for case in dtype_cases(row)]


@pytest.mark.parametrize("row_index,case", _spec_rows())
def test_every_workload_row_matches_float64_or_is_refused_by_name(row_index, case, arch, cuda_device, gen):
    import importlib

    import torch

    from tileops_core import load_manifest
    from tileops_core.bench.workloads import instantiate

    spec = load_manifest()[OP]
    importlib.import_module(spec.source["op"])  # registers the workload generator
    seed = int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0]))
    inst = instantiate(spec, spec.workloads[row_index], case, device=cuda_device[0],
                       rng=torch.Generator().manual_seed(seed))
    reason = chunk_gdr_refusal(_key(inst.inputs, arch))
    if reason is not None:
        assert "chunked gated delta rule TileLang kernel" in reason and "use the reference" in reason
        return
    _check(dict(inst.inputs), dict(inst.op_kwargs), arch, by_recurrence=False)


@pytest.mark.parametrize("l2norm", [True, False])
def test_lengths_around_the_chunk_size_match_the_token_by_token_recurrence(l2norm, arch, cuda_device, gen):
    lengths = [1, 63, 64, 65, 1000, 0, 130]  # one token, chunk edges, a long one, an empty one
    inputs = _case(lengths, cuda_device[0], gen, padding=(6,), unit_qk=not l2norm)
    _check(inputs, {"use_qk_l2norm_in_kernel": l2norm}, arch, by_recurrence=True)


def test_the_state_walk_without_software_pipelining_gives_the_same_result(arch, cuda_device, gen):
    inputs = _case([1, 64, 65, 300], cuda_device[0], gen, NK=1, NV=2, DK=64, DV=64, padding=(1,))
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=True, stages=0)


def test_a_16_bit_state_pool_is_read_and_written_once_at_its_dtype(arch, cuda_device, gen):
    # (float16 pools take the same code path: the state dtype only enters the first read and last write)
    inputs = _case([130, 64, 7], cuda_device[0], gen, NK=1, NV=2, DK=64, DV=64, state_dtype="bfloat16")
    _check(inputs, {"use_qk_l2norm_in_kernel": True, "scale": 0.3}, arch, by_recurrence=True)


def test_without_has_initial_state_every_sequence_starts_from_zeros(arch, cuda_device, gen):
    inputs = _case([65, 200, 1], cuda_device[0], gen, initial=False)
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=True)


@pytest.mark.parametrize("B", [1, 255, 256, 700])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_the_metadata_kernel_writes_int32_metadata_and_the_chunk_table(B, index_dtype, arch, cuda_device):
    """Across its blocks of sequences (256 a block), in both index dtypes; lengths of 0..200 and,
    as unchecked metadata may hold, a decreasing pair (a floor of a negative count, as torch's)."""
    import torch

    from tileops_cuda.kernels._common import direct_entry

    dev, idt = cuda_device[0], getattr(torch, index_dtype)
    lengths = torch.randint(0, 200, (B,), generator=torch.Generator().manual_seed(B))
    cu = torch.nn.functional.pad(lengths.cumsum(0), (1, 0))
    if B > 2:
        cu[2] = cu[1] - 70  # decreasing: a count of floor((-70 + 63) / 64) = -1, then a longer one
    slots = torch.randperm(B + 5, generator=torch.Generator().manual_seed(7))[:B] - 1  # -1 included
    key = ChunkGDRBuildKey("bfloat16", "float32", 2, 4, 128, 128, arch, cu_dtype=index_dtype, slot_dtype=index_dtype)
    meta = direct_entry(build_chunk_gdr(key).kernels[0])
    got = torch.full((3 * B + 2,), -7, dtype=torch.int32, device=dev)
    meta(cu.to(idt).to(dev), slots.to(idt).to(dev), got[:B + 1], got[2 * B + 2:], got[B + 1:2 * B + 2])
    torch.cuda.synchronize()
    counts = torch.div(cu[1:] - cu[:-1] + 63, 64, rounding_mode="floor")
    table = torch.nn.functional.pad(counts.cumsum(0), (1, 0))
    expected = torch.cat([cu, table, slots]).int()
    assert torch.equal(got.cpu(), expected)


def test_many_short_sequences_share_one_launch(arch, cuda_device, gen):
    import torch

    lengths = torch.randint(0, 150, (61,), generator=torch.Generator().manual_seed(
        int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0])))).tolist()
    inputs = _case(lengths, cuda_device[0], gen, padding=(3, 40))
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=False)


def test_the_op_reads_inputs_and_writes_a_pool_that_start_off_a_16_byte_boundary(arch, cuda_device, gen):
    """Contiguous, one element past a 16-byte boundary: the core copies only non-contiguous inputs and
    ``.contiguous()`` returns these as they are (found in review: the rows reached 16-byte loads, the pool
    16-byte stores, misaligned); the launcher packs them and writes the pool back."""
    import torch

    from tileops_core.kernels import select_kernel
    from tileops_core.ops.gated_delta_prefill import ChunkGatedDeltaRuleFwdOp

    def misaligned(t):
        base = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = base[1:].view(t.shape).copy_(t)
        assert view.is_contiguous() and view.data_ptr() % 16
        return view

    inputs = _case([100, 30], cuda_device[0], gen)
    expected_out, expected_pool = _truth(inputs, {"use_qk_l2norm_in_kernel": True}, by_recurrence=True)
    shifted = {n: None if t is None else misaligned(t) for n, t in inputs.items()}
    op = ChunkGatedDeltaRuleFwdOp(use_qk_l2norm_in_kernel=True)
    out = op(**shifted)
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        assert selection.chosen_backend == "cuda", selection.report()
    assert _rel(out, expected_out) <= OUT_TOL
    assert _rel(shifted["state"], expected_pool) <= STATE_TOL["float32"]


def test_the_op_on_cuda_selects_the_tilelang_kernel_and_matches(arch, cuda_device, gen):
    from tileops_core.kernels import select_kernel
    from tileops_core.ops.gated_delta_prefill import ChunkGatedDeltaRuleFwdOp

    inputs = _case([100, 30], cuda_device[0], gen)
    expected_out, expected_pool = _truth(inputs, {"use_qk_l2norm_in_kernel": True}, by_recurrence=True)
    pool = inputs["state"].clone()
    op = ChunkGatedDeltaRuleFwdOp(use_qk_l2norm_in_kernel=True)
    out = op(**dict(inputs, state=pool))
    for interface, call in op.last_plan.call_specs.items():
        selection = select_kernel(interface, call)
        assert selection.chosen_backend == "cuda", selection.report()
    assert _rel(out, expected_out) <= OUT_TOL
    assert _rel(pool, expected_pool) <= STATE_TOL["float32"]
