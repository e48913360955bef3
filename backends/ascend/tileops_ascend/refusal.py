"""When the 310P RGDR kernel must not run, and why (reasons are shown by ``tileops explain``).

Two kinds of limits, because selection sees shapes and dtypes, not data:

* :func:`refusal_reason` decides from shapes, dtypes and params alone, so its answer
  can be cached per call spec. It refuses: any of query/key/value/beta/state not
  float16 (the kernel is built only as ``RGDR<half, half>``); ``g``/``gk`` not float32;
  index tensors not int32/int64; ``use_qk_l2norm_in_kernel`` (the kernel has no such
  step); ``NV % NK != 0``; ``T > B·MAX_MTP`` (then some sequence must be longer than
  8 tokens); DK or DV that no UB buffer profile can tile.
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
from .tiling import TilingError, compute_tiling

__all__ = ["RgdrCall", "contents_refusal_reason", "refusal_reason"]

_FP16_INPUTS = ("query", "key", "value", "beta")
_INDEX_DTYPES = ("int32", "int64")


def _name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


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
        for name in (
            "query_dtype", "key_dtype", "value_dtype", "beta_dtype", "state_dtype", "seq_lens_dtype",
            "ssm_state_indices_dtype", "g_dtype", "gk_dtype", "num_accepted_tokens_dtype",
        ):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _name(value))

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


def refusal_reason(call: RgdrCall, *, platform: AscendPlatform = ASCEND_310P) -> str | None:
    """Why the 310P kernel cannot take ``call`` (every reason, ``"; "``-joined), or None.

    Decided from shapes, dtypes and params only; see the module docstring for what
    needs contents.
    """
    reasons: list[str] = []
    for name in _FP16_INPUTS:
        dtype = getattr(call, f"{name}_dtype")
        if dtype != "float16":
            reasons.append(f"{name} is {dtype}, not float16: the 310P kernel is built only as RGDR<half, half>")
    state = call.state_dtype
    if state != "float16":
        reasons.append(f"state is {state}, not float16: the 310P kernel reads and writes the state pool as fp16")
    for name in ("g", "gk"):
        dtype = getattr(call, f"{name}_dtype")
        if dtype is not None and dtype != "float32":
            reasons.append(f"{name} is {dtype}, not float32: the 310P kernel reads {name} as float")
    for name in ("seq_lens", "ssm_state_indices", "num_accepted_tokens"):
        dtype = getattr(call, f"{name}_dtype")
        if dtype is not None and dtype not in _INDEX_DTYPES:
            reasons.append(f"{name} is {dtype}, not int32 or int64")
    if call.use_qk_l2norm_in_kernel:
        reasons.append(
            "use_qk_l2norm_in_kernel=True: the 310P kernel has no q/k l2 normalisation (normalise before the call)"
        )
    if call.nk > 0 and call.nv % call.nk != 0:
        reasons.append(f"NV={call.nv} is not a multiple of NK={call.nk}: value head h reads key head h // (NV // NK)")
    limit = call.batch * platform.max_mtp
    if call.t > limit:
        reasons.append(
            f"T={call.t} tokens exceed B*MAX_MTP={limit} (B={call.batch}, MAX_MTP={platform.max_mtp}): "
            f"some sequence is longer than the {platform.max_mtp} tokens the 310P kernel takes"
        )
    # The tiling reads the index dtypes; with one already refused its error would repeat that reason.
    if call.seq_lens_dtype in _INDEX_DTYPES and call.ssm_state_indices_dtype in _INDEX_DTYPES:
        try:
            compute_tiling(**call.tiling_arguments(), platform=platform)
        except TilingError as exc:
            reasons.append(str(exc))
    return "; ".join(reasons) if reasons else None


def contents_refusal_reason(
    actual_seq_lengths: Any,
    ssm_state_indices: Any,
    *,
    seq_lens_style: str = "lengths",
    platform: AscendPlatform = ASCEND_310P,
) -> str | None:
    """Why these metadata values would make the 310P kernel go wrong silently, or None.

    Reads the tensors' values (``.tolist()``: a device sync on an NPU). Refuses a
    sequence longer than ``MAX_MTP`` and a negative (padding) slot. Other contents
    errors (lengths not summing to T, slots past the pool, accepted counts out of
    range) are the core's contents checks, shared with every backend.
    """
    reasons: list[str] = []
    slots = [int(s) for s in ssm_state_indices.tolist()]
    if len(slots) > platform.max_mtp:
        meta = [int(x) for x in actual_seq_lengths.tolist()]
        if seq_lens_style == "cu_seqlens":
            lengths = [meta[i + 1] - meta[i] for i in range(len(meta) - 1)]
        else:
            lengths = meta
        for b, length in enumerate(lengths):
            if length > platform.max_mtp:
                reasons.append(
                    f"sequence {b} has {length} tokens, more than MAX_MTP={platform.max_mtp}: the 310P kernel would "
                    "stop at it silently, leaving it and the rest of its core's work uncomputed"
                )
                break
    for i, slot in enumerate(slots):
        if slot < 0:
            reasons.append(
                f"ssm_state_indices[{i}] = {slot} is a padding slot: the 310P kernel has no padding path and "
                "would write outside the state pool"
            )
            break
    return "; ".join(reasons) if reasons else None
