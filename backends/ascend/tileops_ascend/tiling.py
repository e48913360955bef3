"""The 310P host tiling of RecurrentGatedDeltaRule: a line-by-line port of seed 003.

Seed 003 (``op_host/recurrent_gated_delta_rule_tiling.cpp``) turns shapes and the
presence of three optional inputs into one kernel plan: a UB budget solved for a
``vStep`` (how many rows of the ``[DV, DK]`` state one pass holds) and two output
queue depths, a block dim, and the 22-field struct of :mod:`.tiling_struct`. It is
plain integer arithmetic, so it is ported as plain Python ints and runs anywhere;
the numbers must reproduce the C++ exactly (RGDR.md lists three reference rows).

Each function names the C++ function it ports. Where this port deliberately departs
from the upstream code the docstring says so and why; there are four departures,
all fixes of pitfalls RGDR.md lists:

* ``cuSeqlensIsPrefix`` is set from ``seq_lens_style`` (upstream writes 0 always) and
  ``b`` is ``len - 1`` for ``[B + 1]`` prefix sums (upstream takes ``len``);
* a scalar ``gk`` next to ``g`` keeps ``hasGamaK = 1`` (upstream clears it, silently
  dropping the ``gk`` decay; the kernel applies both when both bits are set);
* ``scale`` None means ``DK ** -0.5`` (upstream ``GetScale`` falls back to 1.0);
* after selection, the kernel's fp32 scratch carve-out is checked against
  ``ubRestBytes`` (upstream only checks ``ubRestBytes >= 0``; its ``vStep`` budget
  omits the ``2·aDk`` bytes per row of ``stateInQueue_``, seed 003 §6.5, and it bills
  a scalar ``gk`` buffer with the queues although the kernel carves it from the
  scratch).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .platform import ASCEND_310P, AscendPlatform
from .tiling_struct import RecurrentGatedDeltaRuleTilingData

__all__ = [
    "PROFILE_CANDIDATES",
    "TILING_KEY",
    "BufferProfile",
    "OptionalInputFlags",
    "ProfileSelection",
    "RgdrTiling",
    "TilingError",
    "UbBudget",
    "calc_fixed_ub_bytes",
    "calc_v_step_coeff",
    "calc_working_ub_bytes",
    "ceil_align",
    "ceil_div",
    "check_head_dims",
    "compute_tiling",
    "core_of_work_item",
    "evaluate_buffer_profile",
    "fit_ub_budget",
    "get_block_dim",
    "get_optional_inputs",
    "is_better_profile",
    "is_int64",
    "kernel_scratch_bytes",
    "select_buffer_profile",
    "v_slices",
    "work_items_by_core",
]

#: The only tiling key the 310P kernel is instantiated for (``SetTilingKey(0)``, ``RGDR<half, half>``).
TILING_KEY = 0
#: ``(stateOutBufferNum, attnOutBufferNum)`` candidates, in the order ``SelectBufferProfile`` tries them.
PROFILE_CANDIDATES: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 2))
# Queues every launch allocates: q, k, v, stateIn, beta (seed 003 01b §5.1).
_FIXED_QUEUE_COUNT = 5
_FP32_NUM_PER_BLOCK = 8


class TilingError(ValueError):
    """The shapes cannot be tiled for the 310P kernel; the message says why."""


def ceil_align(val: int, align: int) -> int:
    """Port of ``CeilAlign``: round ``val`` up to a multiple of ``align``."""
    return (val + align - 1) // align * align


def ceil_div(val: int, div: int) -> int:
    """Port of ``CeilDiv``: ``ceil(val / div)`` for non-negative ints."""
    return (val + div - 1) // div


def calc_fixed_ub_bytes(
    a_nv: int,
    a_dv: int,
    a_dk: int,
    has_gama: bool,
    has_gama_k: bool,
    gama_k_scalar: bool,
    *,
    platform: AscendPlatform = ASCEND_310P,
) -> int:
    """Port of ``CalcFixedUbBytes``: the resident input queues, billed once each.

    ``MAX_MTP·(4·aDk + 2·aDv)`` for the fp16 q, k and v queues, 128 bytes of margin,
    the fp32 ``gk`` (``MAX_MTP·4·aNv`` as a per-head scalar, ``MAX_MTP·4·aDk`` as a
    per-channel vector) and ``MAX_MTP·2·aNv`` for the fp16 beta queue. ``has_gama``
    is accepted for signature parity with the C++ and, as there, unused.
    """
    del has_gama
    mtp = platform.max_mtp
    used = mtp * (4 * a_dk + 2 * a_dv)
    used += 128
    if has_gama_k:
        used += mtp * 4 * a_nv if gama_k_scalar else mtp * 4 * a_dk
    used += mtp * 2 * a_nv
    return used


def calc_working_ub_bytes(
    a_nv: int,
    a_dv: int,
    a_dk: int,
    has_gama: bool,
    has_gama_k: bool,
    gama_k_scalar: bool,
    *,
    platform: AscendPlatform = ASCEND_310P,
) -> int:
    """Port of ``CalcWorkingUbBytes``: fixed bytes plus the fp32 copies that do not scale with vStep.

    Adds ``MAX_MTP·(8·aDk + 4·aDv + 4·aNv)`` (fp32 q, k, v and beta) and, with ``g``,
    ``MAX_MTP·4·aNv`` for the fp32 decay.
    """
    used = calc_fixed_ub_bytes(a_nv, a_dv, a_dk, has_gama, has_gama_k, gama_k_scalar, platform=platform)
    mtp = platform.max_mtp
    used += mtp * (8 * a_dk + 4 * a_dv + 4 * a_nv)
    if has_gama:
        used += mtp * 4 * a_nv
    return used


def calc_v_step_coeff(a_dk: int, state_out_buffer_num: int, attn_out_buffer_num: int) -> int:
    """Port of ``CalcVStepCoeff``: UB bytes per unit of vStep.

    ``2·s·aDk`` (fp16 state-out queue), ``2·a`` (fp16 attention-out queue) and
    ``(4 + 4)·aDk + 4`` (the fp32 state slice, its broadcast scratch and the fp32
    attention row).
    """
    coeff = 2 * state_out_buffer_num * a_dk + 2 * attn_out_buffer_num
    coeff += (4 + 4) * a_dk + 4
    return coeff


@dataclass(frozen=True)
class BufferProfile:
    """Port of the C++ ``BufferProfile`` (its ``valid`` flag is "not None" here)."""

    state_out_buffer_num: int
    attn_out_buffer_num: int
    v_step: int
    repeat_time: int

    @property
    def depth(self) -> int:
        """Total output queue depth, the second key of :func:`is_better_profile`."""
        return self.state_out_buffer_num + self.attn_out_buffer_num


def evaluate_buffer_profile(
    ub_size: int,
    used_ub_bytes: int,
    a_dk: int,
    dv: int,
    state_out_buffer_num: int,
    attn_out_buffer_num: int,
    *,
    platform: AscendPlatform = ASCEND_310P,
) -> BufferProfile | None:
    """Port of ``EvaluateBufferProfile``: solve vStep in two passes, or None if < 16.

    Pass one: the largest multiple of 16 whose bytes fit what the working set leaves
    (integer division twice is the C++ floor-to-16; like C++ it truncates toward zero,
    which matters only for a negative remainder, rejected either way). Pass two: the
    number of passes ``repeat = ceil(DV / vStep)``, then vStep re-solved as
    ``ceil16(ceil(DV / repeat))`` so the kernel runs exactly ``repeat`` passes.
    """
    block = platform.fp16_num_per_block
    coeff = calc_v_step_coeff(a_dk, state_out_buffer_num, attn_out_buffer_num)
    v_step = _c_div(_c_div(ub_size - used_ub_bytes, coeff), block) * block
    if v_step < block:
        return None
    repeat_time = ceil_div(dv, v_step)
    v_step = ceil_align(ceil_div(dv, repeat_time), block)
    if v_step < block:
        return None
    return BufferProfile(state_out_buffer_num, attn_out_buffer_num, v_step, repeat_time)


def _c_div(a: int, b: int) -> int:
    """C++ signed integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def is_better_profile(candidate: BufferProfile, current: BufferProfile | None) -> bool:
    """Port of ``IsBetterProfile``: fewer repeats, then deeper queues, then larger vStep."""
    if current is None:
        return True
    if candidate.repeat_time != current.repeat_time:
        return candidate.repeat_time < current.repeat_time
    if candidate.depth != current.depth:
        return candidate.depth > current.depth
    return candidate.v_step > current.v_step


@dataclass(frozen=True)
class OptionalInputFlags:
    """The presence bits of ``GetOptionalInputs`` (the C++ ``OptionalInputs``)."""

    has_gama: bool
    has_gama_k: bool
    has_accepted_tokens: bool
    gama_k_scalar: bool

    @property
    def vector_gama_k(self) -> bool:
        """A per-channel ``gk``: the only case that costs a sixth fixed queue."""
        return self.has_gama_k and not self.gama_k_scalar


def get_optional_inputs(
    *, t: int, nv: int, dk: int, has_g: bool, gk_shape: tuple[int, ...] | None, has_num_accepted_tokens: bool
) -> OptionalInputFlags:
    """Port of ``GetOptionalInputs``, without its rule that drops a scalar ``gk`` next to ``g``.

    ``gk`` is a per-head scalar when it has fewer elements than ``T·NV·DK`` (the C++ test;
    ``[T, NV]`` and ``[T, NV, 1]`` both qualify and mean the same thing). Upstream then
    clears ``hasGamaK`` when ``g`` is also present, so that decay is silently lost; the
    kernel's ``Compute`` multiplies by ``gama_`` and then ``gamaK_`` when both bits are
    set, and the UB budget bills both buffers, so here both bits stay set.
    """
    has_gama_k = gk_shape is not None
    gama_k_scalar = False
    if gk_shape is not None:
        total = 1
        for dim in gk_shape:
            total *= dim
        gama_k_scalar = total < t * nv * dk
    return OptionalInputFlags(
        has_gama=has_g,
        has_gama_k=has_gama_k,
        has_accepted_tokens=has_num_accepted_tokens,
        gama_k_scalar=gama_k_scalar,
    )


def is_int64(dtype: object) -> bool:
    """Port of ``GetIndexTypes`` for one tensor: 1 for int64, 0 for int32.

    Takes a dtype or its name (``torch.int64``, ``"int64"``) so this module needs no torch.
    Any other dtype is an error here rather than the C++'s silent "treat as int32".
    """
    name = str(dtype).removeprefix("torch.")
    if name == "int64":
        return True
    if name == "int32":
        return False
    raise TilingError(f"index tensors must be int32 or int64, got {name}")


@dataclass(frozen=True)
class ProfileSelection:
    """What ``SelectBufferProfile`` decided, with the budget numbers that led there.

    ``considered`` records every candidate and its outcome, so a refusal or an
    ``explain`` can say why each profile lost.
    """

    fixed_ub_bytes: int
    working_ub_bytes: int
    profile: BufferProfile | None
    ub_rest_bytes: int | None
    considered: tuple[tuple[tuple[int, int], str], ...]


def select_buffer_profile(
    ub_size: int,
    *,
    nv: int,
    dv: int,
    dk: int,
    inputs: OptionalInputFlags,
    platform: AscendPlatform = ASCEND_310P,
) -> ProfileSelection:
    """Port of ``SelectBufferProfile``: try (1,1), (1,2), (2,2); keep the best; size the rest.

    A candidate is skipped when ``5 + [vector gk] + s + a`` queues exceed
    ``MAX_TQUE_BUFFER_NUM_310P``. The remainder handed to the kernel as its fp32
    scratch is ``ub - fixed - ((2 + 2·s)·aDk + 2·a)·vStep``. The C++ returns false when
    nothing fits or the remainder is negative; here ``profile`` or ``ub_rest_bytes`` is
    None and :func:`compute_tiling` turns that into a :class:`TilingError`.
    """
    block = platform.fp16_num_per_block
    a_nv, a_dv, a_dk = ceil_align(nv, block), ceil_align(dv, block), ceil_align(dk, block)
    flags = (inputs.has_gama, inputs.has_gama_k, inputs.gama_k_scalar)
    fixed = calc_fixed_ub_bytes(a_nv, a_dv, a_dk, *flags, platform=platform)
    working = calc_working_ub_bytes(a_nv, a_dv, a_dk, *flags, platform=platform)
    fixed_queues = _FIXED_QUEUE_COUNT + (1 if inputs.vector_gama_k else 0)
    selected: BufferProfile | None = None
    considered: list[tuple[tuple[int, int], str]] = []
    for s, a in PROFILE_CANDIDATES:
        queues = fixed_queues + s + a
        if queues > platform.max_tque_buffer_num:
            considered.append(((s, a), f"needs {queues} TQue buffers > {platform.max_tque_buffer_num}"))
            continue
        profile = evaluate_buffer_profile(ub_size, working, a_dk, dv, s, a, platform=platform)
        if profile is None:
            considered.append(((s, a), f"vStep below {block}"))
            continue
        better = is_better_profile(profile, selected)
        considered.append(((s, a), f"vStep {profile.v_step}, repeat {profile.repeat_time}"))
        if better:
            selected = profile
    if selected is None:
        return ProfileSelection(fixed, working, None, None, tuple(considered))
    queue_coeff = (2 + 2 * selected.state_out_buffer_num) * a_dk + 2 * selected.attn_out_buffer_num
    ub_rest = ub_size - fixed - queue_coeff * selected.v_step
    return ProfileSelection(fixed, working, selected, ub_rest if ub_rest >= 0 else None, tuple(considered))


def kernel_scratch_bytes(
    *,
    nv: int,
    dv: int,
    dk: int,
    v_step: int,
    inputs: OptionalInputFlags,
    platform: AscendPlatform = ASCEND_310P,
) -> int:
    """Bytes the kernel carves out of ``tmpBuff`` (its ``InitLocalBuffers``), which is ``ubRestBytes`` long.

    Not in the C++ host: it is the check that the remainder really holds the fp32
    scratch. In order: attention row ``4·vStep``, v ``4·MTP·aDv``, q and k
    ``4·MTP·aDk`` each, state slice and broadcast scratch ``4·aDk·vStep`` each, beta
    ``4·ceil16(MTP·NV)``, with ``g`` the decay ``4·MTP·NV``, with a scalar ``gk``
    ``4·ceil8(MTP·NV)`` (the part its ``Exp`` touches).
    """
    block = platform.fp16_num_per_block
    mtp = platform.max_mtp
    a_dv, a_dk = ceil_align(dv, block), ceil_align(dk, block)
    need = 4 * v_step + 4 * mtp * a_dv + 2 * 4 * mtp * a_dk + 2 * 4 * a_dk * v_step
    need += 4 * ceil_align(mtp * nv, block)
    if inputs.has_gama:
        need += 4 * mtp * nv
    if inputs.has_gama_k and inputs.gama_k_scalar:
        need += 4 * ceil_align(mtp * nv, _FP32_NUM_PER_BLOCK)
    return need


def check_head_dims(*, nk: int, dk: int, nv: int, dv: int) -> None:
    """Every head count and head dim must be positive (the kernel divides and aligns by them)."""
    for name, value in (("NK", nk), ("DK", dk), ("NV", nv), ("DV", dv)):
        if value <= 0:
            raise TilingError(f"{name}={value}: the 310P kernel needs every head count and head dim positive")


@dataclass(frozen=True)
class UbBudget:
    """A buffer profile that fits the UB, with the scratch it leaves and the scratch the kernel needs."""

    selection: ProfileSelection
    profile: BufferProfile
    ub_rest_bytes: int
    scratch_bytes: int


def fit_ub_budget(
    *,
    nv: int,
    dv: int,
    dk: int,
    inputs: OptionalInputFlags,
    platform: AscendPlatform = ASCEND_310P,
) -> UbBudget:
    """``SelectBufferProfile`` plus this port's scratch check; raises :class:`TilingError` saying why not.

    Depends only on head counts, head dims, the presence bits and the platform, never on
    ``T``, ``B`` or the pool size: it is the part of the tiling that kernel selection can
    decide from a call spec, and :func:`compute_tiling` runs the same function at launch.
    """
    ub = platform.ub_bytes
    selection = select_buffer_profile(ub, nv=nv, dv=dv, dk=dk, inputs=inputs, platform=platform)
    profile = selection.profile
    if profile is None:
        why = "; ".join(f"{s}x{a}: {outcome}" for (s, a), outcome in selection.considered)
        raise TilingError(
            f"no UB buffer profile tiles DK={dk}, DV={dv}: {ub} UB bytes less the {selection.working_ub_bytes}-byte "
            f"working set leave no vStep >= {platform.fp16_num_per_block} ({why})"
        )
    if selection.ub_rest_bytes is None:
        raise TilingError(
            f"profile {profile.state_out_buffer_num}x{profile.attn_out_buffer_num} with vStep {profile.v_step} "
            f"leaves a negative UB remainder for DK={dk}, DV={dv} in {ub} UB bytes"
        )
    scratch = kernel_scratch_bytes(nv=nv, dv=dv, dk=dk, v_step=profile.v_step, inputs=inputs, platform=platform)
    if scratch > selection.ub_rest_bytes:
        causes = "the vStep budget omits stateInQueue_'s 2*aDk bytes per row"
        if inputs.has_gama_k and inputs.gama_k_scalar:
            causes += ", and the scalar gk buffer is billed with the queues but carved from the scratch"
        raise TilingError(
            f"the kernel's fp32 scratch needs {scratch} bytes but profile {profile.state_out_buffer_num}x"
            f"{profile.attn_out_buffer_num} with vStep {profile.v_step} leaves {selection.ub_rest_bytes} "
            f"(DK={dk}, DV={dv}, UB {ub} bytes): {causes}"
        )
    return UbBudget(selection, profile, selection.ub_rest_bytes, scratch)


def get_block_dim(b: int, nv: int, core_num: int) -> int:
    """Port of ``GetBlockDim``: ``min(B·NV, cores)``, never 0 (the kernel recomputes the same)."""
    task_units = b * nv
    if task_units == 0:
        task_units = 1
    block_dim = task_units if task_units < core_num else core_num
    return 1 if block_dim == 0 else block_dim


def core_of_work_item(b: int, h: int, nv: int, block_dim: int) -> int:
    """The core that runs sequence ``b``, value head ``h``: ``(b·NV + h) % blockDim`` (kernel ``Process``)."""
    return (b * nv + h) % block_dim


def work_items_by_core(batch: int, nv: int, block_dim: int) -> list[list[tuple[int, int]]]:
    """Every core's ``(b, h)`` work items, in the order its ``Process`` loop visits them."""
    cores: list[list[tuple[int, int]]] = [[] for _ in range(block_dim)]
    for b in range(batch):
        for h in range(nv):
            cores[core_of_work_item(b, h, nv, block_dim)].append((b, h))
    return cores


def v_slices(dv: int, v_step: int) -> list[tuple[int, int]]:
    """``(first row, rows)`` of each pass over DV, as ``ProcessHead``'s ``v_i`` loop makes them."""
    return [(v, min(v_step, dv - v)) for v in range(0, dv, v_step)]


@dataclass(frozen=True)
class RgdrTiling:
    """One launch's plan: the packed struct plus what the host also decides (block dim, key, workspace).

    ``fixed_ub_bytes``, ``working_ub_bytes``, ``profile`` and ``scratch_bytes`` are not
    in the struct; they are kept for tests and ``explain``.
    """

    data: RecurrentGatedDeltaRuleTilingData
    block_dim: int
    tiling_key: int
    workspace_bytes: int
    fixed_ub_bytes: int
    working_ub_bytes: int
    profile: BufferProfile
    scratch_bytes: int
    considered: tuple[tuple[tuple[int, int], str], ...]

    @property
    def v_step(self) -> int:
        """Rows of the state one pass holds."""
        return self.profile.v_step

    @property
    def repeat(self) -> int:
        """Passes over DV per work item."""
        return self.profile.repeat_time

    @property
    def ub_rest_bytes(self) -> int:
        """The kernel's fp32 scratch size (``tmpBuff``)."""
        return self.data.ub_rest_bytes

    @cached_property
    def packed(self) -> bytes:
        """``data.pack()``, computed once: the launch path reuses a cached tiling across calls."""
        return self.data.pack()


def compute_tiling(
    *,
    t: int,
    nk: int,
    dk: int,
    nv: int,
    dv: int,
    state_slots: int,
    seq_lens_len: int,
    seq_lens_style: str = "lengths",
    seq_lens_dtype: object = "int32",
    ssm_state_indices_dtype: object = "int32",
    has_g: bool = False,
    gk_shape: tuple[int, ...] | None = None,
    has_num_accepted_tokens: bool = False,
    scale: float | None = None,
    platform: AscendPlatform = ASCEND_310P,
) -> RgdrTiling:
    """Port of ``RecurrentGatedDeltaRuleTilingFunc`` on plain values; raises :class:`TilingError`.

    ``seq_lens_len`` is the length of ``actual_seq_lengths``: ``B`` for
    ``seq_lens_style="lengths"``, ``B + 1`` for ``"cu_seqlens"``. As in ``GetShapeDims``
    a batch of 0 becomes 1 (the task count must be positive). ``gk_shape`` is None when
    ``gk`` is absent.
    """
    if seq_lens_style == "lengths":
        batch, prefix = seq_lens_len, False
    elif seq_lens_style == "cu_seqlens":
        if seq_lens_len < 1:
            raise TilingError("cu_seqlens prefix sums need at least one element ([B + 1])")
        batch, prefix = seq_lens_len - 1, True
    else:
        raise TilingError(f"seq_lens_style must be 'lengths' or 'cu_seqlens', got {seq_lens_style!r}")
    if batch == 0:
        batch = 1
    check_head_dims(nk=nk, dk=dk, nv=nv, dv=dv)
    cu_int64 = is_int64(seq_lens_dtype)
    ssm_int64 = is_int64(ssm_state_indices_dtype)
    inputs = get_optional_inputs(
        t=t, nv=nv, dk=dk, has_g=has_g, gk_shape=gk_shape, has_num_accepted_tokens=has_num_accepted_tokens
    )
    budget = fit_ub_budget(nv=nv, dv=dv, dk=dk, inputs=inputs, platform=platform)
    selection, profile = budget.selection, budget.profile
    ub = platform.ub_bytes
    cores = platform.schedulable_cores
    data = RecurrentGatedDeltaRuleTilingData(
        vector_core_num=cores,
        ub_cal_size=ub,
        ub_rest_bytes=budget.ub_rest_bytes,
        t=t,
        nk=nk,
        dk=dk,
        nv=nv,
        dv=dv,
        s_block_num=state_slots,
        b=batch,
        v_step=profile.v_step,
        state_out_buffer_num=profile.state_out_buffer_num,
        attn_out_buffer_num=profile.attn_out_buffer_num,
        scale=dk**-0.5 if scale is None else scale,
        has_gama=inputs.has_gama,
        has_gama_k=inputs.has_gama_k,
        has_accepted_tokens=inputs.has_accepted_tokens,
        gama_k_scalar=inputs.gama_k_scalar,
        cu_seqlens_is_prefix=prefix,
        cu_seqlens_is_int64=cu_int64,
        ssm_state_indices_is_int64=ssm_int64,
        reserved=0,
    )
    return RgdrTiling(
        data=data,
        block_dim=get_block_dim(batch, nv, cores),
        tiling_key=TILING_KEY,
        workspace_bytes=platform.system_workspace_bytes,
        fixed_ub_bytes=selection.fixed_ub_bytes,
        working_ub_bytes=selection.working_ub_bytes,
        profile=profile,
        scratch_bytes=budget.scratch_bytes,
        considered=selection.considered,
    )
