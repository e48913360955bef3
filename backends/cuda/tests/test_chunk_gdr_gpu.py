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

from tileops_cpu_ref.rgdr import clipped_bounds
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
    """``||got - ref|| / ||ref||``; absolute where ``ref`` is all zeros (every token uncovered)."""
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / (ref.norm() if ref.norm() > 0 else 1))


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


def _check(inputs, params, arch: str, by_recurrence: bool, stages: int = 2, truth_slots=None) -> dict:
    """Run the launcher on a copy of the pool with a poisoned ``out`` and compare; returns the errors.
    ``truth_slots``: the slots the truth reads in place of the call's (the call's with the entries a GPU
    kernel reads as padding made -1)."""
    import torch

    truth = inputs if truth_slots is None else dict(inputs, ssm_state_indices=truth_slots)
    expected_out, expected_pool = _truth(truth, params, by_recurrence)
    pool = inputs["state"].clone()
    out = torch.full_like(inputs["value"], float("nan"))
    run = build_chunk_gdr(_key(inputs, arch, stages)).run
    run(**dict(inputs, state=pool), scale=params.get("scale"),
        use_qk_l2norm_in_kernel=params.get("use_qk_l2norm_in_kernel", False), out=out)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "some output rows were never written"
    out_err = _rel(out, expected_out)
    # the spans the reference follows (valid cu_seqlens: as written), so unchecked metadata is checked too
    starts, lengths = clipped_bounds(inputs["cu_seqlens"].tolist(), "cu_seqlens", out.shape[0])
    head, tail = (starts[0], starts[-1] + lengths[-1]) if starts else (out.shape[0], out.shape[0])
    assert not out[:head].any() and not out[tail:].any(), "a token no sequence covers is not zero"
    slots = truth["ssm_state_indices"].long().cpu()
    written = sorted(int(s) for b, s in enumerate(slots.tolist()) if s >= 0 and lengths[b] > 0)
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
def test_the_metadata_kernel_writes_the_clipped_prefix_sums_the_chunk_table_and_zeros(B, index_dtype, arch,
                                                                                      cuda_device):
    """Across its blocks of sequences (256 a block), in both index dtypes, on unchecked cu_seqlens (past T,
    negative, decreasing; int64: past int32 both ways): ``cu = cummax(clip(cu_seqlens))`` (the spec's
    rule), the chunk table of those lengths, the slots as int32, and zeros in exactly the output rows of
    the tokens no sequence covers (the rest keep their NaN)."""
    import torch

    from tileops_cuda.kernels._common import direct_entry

    dev, idt = cuda_device[0], getattr(torch, index_dtype)
    rng = torch.Generator().manual_seed(B)
    lengths = torch.randint(0, 200, (B,), generator=rng)
    cu = torch.nn.functional.pad(lengths.cumsum(0), (1, 0))
    T = int(cu[-1]) + 1
    garbage = [int(cu[-1]) + 50, -30, 2**32 + 3, -(2**32) + 3] if index_dtype == "int64" else [T + 50, -30]
    for b in torch.randperm(B + 1, generator=rng)[: (B + 1) // 3].tolist():
        cu[b] = garbage[b % len(garbage)] if b % 3 else max(int(cu[b]) - 70, 0)  # or decreasing
    cu[0] = 5  # an uncovered head
    slots = torch.randperm(B + 5, generator=torch.Generator().manual_seed(7))[:B] - 1  # -1 included
    key = ChunkGDRBuildKey("bfloat16", "float32", 2, 4, 128, 128, arch, cu_dtype=index_dtype, slot_dtype=index_dtype)
    meta = direct_entry(build_chunk_gdr(key).kernels[0])
    got = torch.full((3 * B + 2,), -7, dtype=torch.int32, device=dev)
    out = torch.full((T, 4, 128), float("nan"), dtype=torch.bfloat16, device=dev)
    meta(cu.to(idt).to(dev), slots.to(idt).to(dev), got[:B + 1], got[2 * B + 2:], got[B + 1:2 * B + 2], out)
    torch.cuda.synchronize()
    clipped = cu.clamp(0, T).cummax(0).values
    assert clipped[:-1].tolist() == clipped_bounds(cu.tolist(), "cu_seqlens", T)[0]
    table = torch.nn.functional.pad((-(-(clipped[1:] - clipped[:-1]) // 64)).cumsum(0), (1, 0))
    assert torch.equal(got.cpu(), torch.cat([clipped, table, slots]).int())
    uncovered = torch.ones(T, dtype=torch.bool)
    uncovered[int(clipped[0]):int(clipped[-1])] = False
    assert bool(uncovered.any()) and torch.equal(out.isnan().all(-1).all(-1).cpu(), ~uncovered)
    assert not out[uncovered.to(dev)].any()


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


def test_unchecked_64_bit_slots_past_int32_are_padding_not_the_slots_they_wrap_to(arch, cuda_device, gen):
    """int64 ssm_state_indices, checks off (the launcher reads no contents), with entries ``2**32 + k`` (``k`` in
    int32: a real slot): sequence 0's names a spare slot, where it would read its initial state; sequence 2's
    the slot of sequence 1. Outside ``[0, S)``, both are padding, as a GPU kernel reads such a slot (the CPU
    reference refuses it): zeros for the initial state, no state written. ``out`` and the written slots are
    the recurrence's with those entries -1; every other slot, the spare one and sequence 1's own included
    where it writes, keeps its bits or holds what its own sequence wrote."""
    from tileops_cpu_ref.chunk_gdr import chunk_gated_delta_rule

    inputs = _case([70, 5, 130, 64], cuda_device[0], gen, NK=1, NV=2, DK=64, DV=64)
    inputs["has_initial_state"][:] = True
    slots = inputs["ssm_state_indices"].long()
    spare = next(s for s in range(inputs["state"].shape[0]) if s not in slots.tolist())
    slots[0], slots[2] = 2**32 + spare, 2**32 + slots[1]
    padded = slots.clone()
    padded[[0, 2]] = -1
    inputs["ssm_state_indices"] = slots
    with pytest.raises(IndexError, match="past the state pool"):
        chunk_gated_delta_rule(**dict(inputs, state=inputs["state"].clone()), use_qk_l2norm_in_kernel=True)
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=True, truth_slots=padded)


#: Unchecked cu_seqlens (B = 4 sequences over T = 320 tokens) and what the spec reads them as.
_UNCHECKED_CU = {
    "past_T": [20, 100, 250, 330, 1000],  # head [0, 20) uncovered; sequence 2 ends at T, 3 is empty
    "decreasing": [0, 150, 80, 260, 300],  # sequence 1 empty, 2 spans [150, 260); tail [300, 320) uncovered
    "decreasing_below_an_earlier_start": [0, 100, 200, 50, 320],  # 2 empty (50 < 100), 3 spans [200, 320)
    "negative_first": [-70, 60, 130, 200, 320],  # sequence 0 spans [0, 60)
    "all_negative": [-5, -3, -10, -1, -2],  # no sequence has a token: every output zero, no state written
}


def _unchecked_case(cu_seqlens, index_dtype, dev, gen):
    """4 sequences (slots of their own, every one with an initial state, so an empty one could read and
    write its slot) over 320 tokens, with ``cu_seqlens`` as given."""
    import torch

    inputs = _case([80] * 4, dev, gen, NK=1, NV=2, DK=64, DV=64)
    inputs["has_initial_state"][:] = True
    inputs["cu_seqlens"] = torch.tensor(cu_seqlens, dtype=getattr(torch, index_dtype), device=dev)
    inputs["ssm_state_indices"] = inputs["ssm_state_indices"].to(getattr(torch, index_dtype))
    return inputs


@pytest.mark.parametrize("name", list(_UNCHECKED_CU))
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_unchecked_cu_seqlens_are_read_as_the_reference_reads_them(name, index_dtype, arch, cuda_device, gen):
    """Contents checks off (the launcher reads no contents): the spans are ``clipped_bounds``'s, so ``out``
    (NaN-poisoned first) is the CPU reference's on the same inputs, zeros where no sequence covers a token,
    and the pool bit-identical in every slot no sequence with tokens writes (empty sequences' included)."""
    inputs = _unchecked_case(_UNCHECKED_CU[name], index_dtype, cuda_device[0], gen)
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=False)


def test_unchecked_int64_cu_seqlens_past_int32_are_clipped_not_wrapped(arch, cuda_device, gen):
    """int64 entries ``-(2**32) + 40``, ``2**32 + 120``, ``2**32 + 5``, ``2**33``: made int32 first they would
    read 40, 120, 5, 0 (sequence 0 starting at 40, sequence 1 ending at 120); clipped in int64 they are
    0 and T, so sequence 1 spans [90, 320) and sequences 2 and 3 are empty."""
    cu = [-(2**32) + 40, 90, 2**32 + 120, 2**32 + 5, 2**33]
    assert clipped_bounds(cu, "cu_seqlens", 320) == ([0, 90, 320, 320], [90, 230, 0, 0])
    inputs = _unchecked_case(cu, "int64", cuda_device[0], gen)
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=False)


def test_unchecked_cu_seqlens_of_many_sequences_are_read_as_the_reference_reads_them(arch, cuda_device, gen):
    """300 sequences (two blocks of the metadata program, whose running maximum crosses between them),
    int64 cu_seqlens with a third of the entries garbage: negative (past int32 too), decreasing, below an
    earlier start; and past T (past int32 too) near the end, where every later sequence is then empty."""
    import torch

    lengths = torch.randint(0, 24, (300,), generator=torch.Generator().manual_seed(
        int(torch.randint(1 << 30, (1,), generator=gen, device=cuda_device[0])))).tolist()
    inputs = _case(lengths, cuda_device[0], gen, NK=1, NV=2, DK=64, DV=64, padding=(3, 290))
    T = sum(lengths)
    cu = inputs["cu_seqlens"].long().cpu()
    picks = torch.randperm(296, generator=torch.Generator().manual_seed(T))[:100].tolist()
    for i, b in enumerate(picks):
        cu[b] = [-4, -(2**32) + 7, max(int(cu[b]) - 10, 0), max(int(cu[b]) - 200, 0)][i % 4]
    cu[297], cu[300] = 2**32 + 7, T + 9
    inputs["cu_seqlens"] = cu.to(cuda_device[0])
    inputs["ssm_state_indices"] = inputs["ssm_state_indices"].long()
    _check(inputs, {"use_qk_l2norm_in_kernel": True}, arch, by_recurrence=False)
