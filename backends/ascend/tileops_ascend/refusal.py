"""When the 310P RGDR kernel must not run, and why (reasons are shown by ``tileops explain``).

Three kinds of limits, because selection sees a call spec (dtypes, head counts and
sizes, gate presence, params), not ``T``, ``B`` or data:

* :func:`signature_refusal_reasons` decides from what a call spec carries
  (:class:`RgdrSignature`), so kernel selection can cache its answer. It refuses:
  any of query/key/value/beta/state not float16 (the kernel is built only as
  ``RGDR<half, half>``); ``g``/``gk`` not float32; index tensors not int32/int64;
  ``use_qk_l2norm_in_kernel`` (the kernel has no such step); ``NV % NK != 0``; DK or
  DV that no UB buffer profile can tile.
* :func:`token_refusal_reason` needs ``T`` and ``B``: ``T > B·MAX_MTP`` means some
  sequence must be longer than 8 tokens. :func:`refusal_reason` is both, for a call
  whose tensors are at hand (the launch path).
* :func:`contents_refusal_reason` needs the metadata's values. A single sequence may
  exceed ``MAX_MTP`` even when ``T <= B·MAX_MTP`` (lengths ``[1, 9]``, ``T = 10 <= 16``),
  and the kernel meets such a sequence with a bare ``return``: that sequence and every
  later work item of that core are silently left uncomputed. A negative slot
  (vLLM's padding) becomes a huge unsigned offset: an out-of-pool write. Both are
  detected by reading ``actual_seq_lengths`` and ``ssm_state_indices`` on the host,
  one device sync; the launch path does this by default. When ``T <= MAX_MTP`` no
  sequence can be too long and only the slots need reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .platform import ASCEND_310P, AscendPlatform
from .tiling import OptionalInputFlags, TilingError, check_head_dims, fit_ub_budget, get_optional_inputs

__all__ = [
    "RgdrCall",
    "RgdrSignature",
    "contents_refusal_reason",
    "refusal_reason",
    "signature_refusal_reasons",
    "token_refusal_reason",
]

_FP16_INPUTS = ("query", "key", "value", "beta")
_INDEX_DTYPES = ("int32", "int64")


def _name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


_DTYPE_FIELDS = (
    "query_dtype", "key_dtype", "value_dtype", "beta_dtype", "state_dtype", "seq_lens_dtype",
    "ssm_state_indices_dtype", "g_dtype", "gk_dtype", "num_accepted_tokens_dtype",
)


def _normalise_dtypes(obj: object) -> None:
    for name in _DTYPE_FIELDS:
        value = getattr(obj, name)
        if value is not None:
            object.__setattr__(obj, name, _name(value))


@dataclass(frozen=True)
class RgdrSignature:
    """What a kernel call spec shows of an RGDR call: dtypes, heads, gate kinds, params.

    No ``T``, ``B`` or pool size: kernels specialise on head counts and sizes only
    (``RGDRKernel.specialise_on``). ``gk_tail`` is ``G``, the axes of ``gk`` after
    ``[T, NV]``: ``()`` for a per-head scalar, ``(DK,)`` per channel, None when ``gk``
    is absent. Dtypes may be ``torch.dtype`` or names.
    """

    query_dtype: str
    key_dtype: str
    value_dtype: str
    beta_dtype: str
    state_dtype: str
    seq_lens_dtype: str
    ssm_state_indices_dtype: str
    nk: int
    dk: int
    nv: int
    dv: int
    g_dtype: str | None = None
    gk_dtype: str | None = None
    num_accepted_tokens_dtype: str | None = None
    gk_tail: tuple[int, ...] | None = None
    use_qk_l2norm_in_kernel: bool = False

    def __post_init__(self) -> None:
        _normalise_dtypes(self)

    def optional_inputs(self) -> OptionalInputFlags:
        """The presence bits the tiling will set, from ``G`` alone.

        The C++ calls ``gk`` scalar when ``numel(gk) < T·NV·DK``; with ``gk = [T, NV, *G]``
        that is ``prod(G) < DK`` for every ``T >= 1``, so one token stands for any ``T``
        (a call with no token launches nothing).
        """
        gk_shape = None if self.gk_tail is None else (1, self.nv, *self.gk_tail)
        return get_optional_inputs(
            t=1, nv=self.nv, dk=self.dk, has_g=self.g_dtype is not None, gk_shape=gk_shape,
            has_num_accepted_tokens=self.num_accepted_tokens_dtype is not None,
        )


@dataclass(frozen=True)
class RgdrCall:
    """Shapes, dtypes and params of one RGDR call, as plain values.

    Dtypes may be given as ``torch.dtype`` or name (``"float16"``); ``seq_lens_len``
    is ``len(actual_seq_lengths)`` (``B`` or ``B + 1`` by ``seq_lens_style``).
    """

    query_dtype: str
    key_dtype: str
    value_dtype: str
    beta_dtype: str
    state_dtype: str
    seq_lens_dtype: str
    ssm_state_indices_dtype: str
    t: int
    nk: int
    dk: int
    nv: int
    dv: int
    state_slots: int
    seq_lens_len: int
    seq_lens_style: str = "lengths"
    g_dtype: str | None = None
    gk_dtype: str | None = None
    num_accepted_tokens_dtype: str | None = None
    gk_shape: tuple[int, ...] | None = None
    use_qk_l2norm_in_kernel: bool = False

    def __post_init__(self) -> None:
        _normalise_dtypes(self)

    def signature(self) -> RgdrSignature:
        """The part of this call a kernel call spec would show (no T, B or pool size)."""
        return RgdrSignature(
            **{name: getattr(self, name) for name in _DTYPE_FIELDS},
            nk=self.nk, dk=self.dk, nv=self.nv, dv=self.dv,
            gk_tail=None if self.gk_shape is None else tuple(self.gk_shape[2:]),
            use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
        )

    @property
    def batch(self) -> int:
        """``B``: the number of sequences the metadata describes."""
        return self.seq_lens_len - 1 if self.seq_lens_style == "cu_seqlens" else self.seq_lens_len

    def tiling_arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`tileops_ascend.tiling.compute_tiling` (all but scale and platform)."""
        return {
            "t": self.t,
            "nk": self.nk,
            "dk": self.dk,
            "nv": self.nv,
            "dv": self.dv,
            "state_slots": self.state_slots,
            "seq_lens_len": self.seq_lens_len,
            "seq_lens_style": self.seq_lens_style,
            "seq_lens_dtype": self.seq_lens_dtype,
            "ssm_state_indices_dtype": self.ssm_state_indices_dtype,
            "has_g": self.g_dtype is not None,
            "gk_shape": self.gk_shape,
            "has_num_accepted_tokens": self.num_accepted_tokens_dtype is not None,
        }


def signature_refusal_reasons(sig: RgdrSignature, *, platform: AscendPlatform = ASCEND_310P) -> list[str]:
    """Every reason the 310P kernel cannot take a call with this signature (empty: it can).

    Decided from dtypes, head counts and sizes, gate kinds and params only, so the
    answer holds for every ``T`` and ``B``; kernel selection calls it through
    ``AscendRGDR310P.refusal``.
    """
    reasons: list[str] = []
    for name in _FP16_INPUTS:
        dtype = getattr(sig, f"{name}_dtype")
        if dtype != "float16":
            reasons.append(f"{name} is {dtype}, not float16: the 310P kernel is built only as RGDR<half, half>")
    state = sig.state_dtype
    if state != "float16":
        reasons.append(f"state is {state}, not float16: the 310P kernel reads and writes the state pool as fp16")
    for name in ("g", "gk"):
        dtype = getattr(sig, f"{name}_dtype")
        if dtype is not None and dtype != "float32":
            reasons.append(f"{name} is {dtype}, not float32: the 310P kernel reads {name} as float")
    for name in ("seq_lens", "ssm_state_indices", "num_accepted_tokens"):
        dtype = getattr(sig, f"{name}_dtype")
        if dtype is not None and dtype not in _INDEX_DTYPES:
            reasons.append(f"{name} is {dtype}, not int32 or int64")
    if sig.use_qk_l2norm_in_kernel:
        reasons.append(
            "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)"
        )
    if sig.nk > 0 and sig.nv % sig.nk != 0:
        reasons.append(f"NV={sig.nv} is not a multiple of NK={sig.nk}: value head h reads key head h // (NV // NK)")
    try:
        check_head_dims(nk=sig.nk, dk=sig.dk, nv=sig.nv, dv=sig.dv)
        fit_ub_budget(nv=sig.nv, dv=sig.dv, dk=sig.dk, inputs=sig.optional_inputs(), platform=platform)
    except TilingError as exc:
        reasons.append(str(exc))
    return reasons


def token_refusal_reason(t: int, batch: int, *, platform: AscendPlatform = ASCEND_310P) -> str | None:
    """``T > B·MAX_MTP``: then some sequence is longer than the kernel takes, whatever the lengths say.

    The shape-visible half of the per-sequence limit; the other half (one sequence over
    the limit while ``T <= B·MAX_MTP``) is :func:`contents_refusal_reason`. A call spec
    carries neither ``T`` nor ``B``, so both are checked at launch.
    """
    limit = batch * platform.max_mtp
    if t <= limit:
        return None
    return (
        f"T={t} tokens exceed B*MAX_MTP={limit} (B={batch}, MAX_MTP={platform.max_mtp}): "
        f"some sequence is longer than the {platform.max_mtp} tokens the 310P kernel takes"
    )


def refusal_reason(call: RgdrCall, *, platform: AscendPlatform = ASCEND_310P) -> str | None:
    """Why the 310P kernel cannot take ``call`` (every reason, ``"; "``-joined), or None.

    The signature's reasons, then the token limit. Decided from shapes, dtypes and
    params only; see the module docstring for what needs contents.
    """
    reasons = signature_refusal_reasons(call.signature(), platform=platform)
    tokens = token_refusal_reason(call.t, call.batch, platform=platform)
    if tokens is not None:
        reasons.append(tokens)
    return "; ".join(reasons) if reasons else None


def contents_refusal_reason(
    actual_seq_lengths: Any,
    ssm_state_indices: Any,
    *,
    seq_lens_style: str = "lengths",
    platform: AscendPlatform = ASCEND_310P,
    pool_slots: int | None = None,
    tokens: int | None = None,
) -> str | None:
    """Why these metadata values would make the 310P kernel go wrong silently, or None.

    Takes the values as lists, or reads tensors' (``.tolist()``: a device sync on an NPU; the
    launcher reads both in one transfer). Refuses a sequence
    longer than ``MAX_MTP``, sequences that do not tile the ``tokens`` of the call (lengths
    negative or not summing to T; prefix sums not from 0, decreasing or not ending at T), and
    a slot that is padding (negative) or past the ``pool_slots``: the kernel has no padding
    path and no clipping, so each would stop it silently, run it past T, or write outside the
    pool. The other backends follow unchecked metadata by clipping it (``clipped_bounds``); this
    one cannot, so it refuses (found in review: a slot of S and lengths past T reached the
    kernel with the core's contents checks off, their default). Accepted counts are clipped on
    the device before launch (``launch.prepare_kernel_inputs``).
    """
    reasons: list[str] = []
    slots = [int(s) for s in (ssm_state_indices.tolist() if hasattr(ssm_state_indices, "tolist")
                              else ssm_state_indices)]
    meta = [int(x) for x in (actual_seq_lengths.tolist() if hasattr(actual_seq_lengths, "tolist")
                             else actual_seq_lengths)]
    cu = seq_lens_style == "cu_seqlens"
    lengths = [meta[i + 1] - meta[i] for i in range(len(meta) - 1)] if cu else meta
    for b, length in enumerate(lengths):
        if length > platform.max_mtp:
            reasons.append(
                f"sequence {b} has {length} tokens, more than MAX_MTP={platform.max_mtp}: the 310P kernel would "
                "stop at it silently, leaving it and the rest of its core's work uncomputed"
            )
            break
    if tokens is not None:
        tiles = (meta[:1] == [0] and meta[-1:] == [tokens] and all(n >= 0 for n in lengths)) if cu else (
            all(n >= 0 for n in lengths) and sum(lengths) == tokens)
        if not tiles:
            reasons.append(
                f"actual_seq_lengths {meta[:16]}{' ...' if len(meta) > 16 else ''} ({seq_lens_style}) do not tile the "
                f"{tokens} tokens: the 310P kernel follows them as given and would run past T or leave tokens out"
            )
    for i, slot in enumerate(slots):
        if slot < 0 or (pool_slots is not None and slot >= pool_slots):
            what = "a padding slot: the 310P kernel has no padding path and" if slot < 0 else (
                f"past the pool of {pool_slots} slots: the 310P kernel")
            reasons.append(f"ssm_state_indices[{i}] = {slot} is {what} would write outside the state pool")
            break
    return "; ".join(reasons) if reasons else None
