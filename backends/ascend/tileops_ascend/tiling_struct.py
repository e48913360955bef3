"""The 22-field ``RecurrentGatedDeltaRuleTilingData`` of seed 003 §4, byte for byte.

The kernel reads its whole plan from this struct (``GET_TILING_DATA``), and host and
kernel each keep their own copy of the declaration (``…_tiling.h`` and
``…_tiling_data.h``). A Python copy is a third one, so the layout here is not written
by hand: it is computed from the C declaration with the C rules for
``#pragma pack(push, 8)`` (a member is aligned to ``min(its alignment, 8)``) and
``struct alignas(8)`` (the struct's alignment is at least 8, its size a multiple of
it), and the ``struct`` format is generated from that layout, explicit little-endian
(the Ascend AI core is little-endian; ``<`` also removes native padding rules).

With 21 four-byte ``uint32_t``/``float`` members plus ``reserved`` there is no interior
padding and 88 bytes is already a multiple of 8, so the size is 88; tests pin every
offset so a future edit of the field list cannot shift the kernel's view silently.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, fields

__all__ = [
    "C_FIELDS",
    "FIELD_OFFSETS",
    "PACK",
    "STRUCT_ALIGN",
    "STRUCT_FORMAT",
    "STRUCT_SIZE",
    "RecurrentGatedDeltaRuleTilingData",
]

#: ``#pragma pack(push, 8)`` caps member alignment at 8 bytes.
PACK = 8
#: ``struct alignas(8)``.
_ALIGNAS = 8

# (C type, struct code, size, natural alignment) of the member types the struct uses.
_C_TYPES = {"uint32_t": ("I", 4, 4), "float": ("f", 4, 4)}

#: The members in declaration order, as seed 003 §4 writes them: (C name, C type).
C_FIELDS: tuple[tuple[str, str], ...] = (
    ("vectorCoreNum", "uint32_t"),
    ("ubCalSize", "uint32_t"),
    ("ubRestBytes", "uint32_t"),
    ("t", "uint32_t"),
    ("nk", "uint32_t"),
    ("dk", "uint32_t"),
    ("nv", "uint32_t"),
    ("dv", "uint32_t"),
    ("sBlockNum", "uint32_t"),
    ("b", "uint32_t"),
    ("vStep", "uint32_t"),
    ("stateOutBufferNum", "uint32_t"),
    ("attnOutBufferNum", "uint32_t"),
    ("scale", "float"),
    ("hasGama", "uint32_t"),
    ("hasGamaK", "uint32_t"),
    ("hasAcceptedTokens", "uint32_t"),
    ("gamaKScalar", "uint32_t"),
    ("cuSeqlensIsPrefix", "uint32_t"),
    ("cuSeqlensIsInt64", "uint32_t"),
    ("ssmStateIndicesIsInt64", "uint32_t"),
    ("reserved", "uint32_t"),
)


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def _layout() -> tuple[dict[str, int], int, int, str]:
    """Offsets, size, alignment and ``struct`` format under the C rules above."""
    offsets: dict[str, int] = {}
    offset = 0
    struct_align = _ALIGNAS
    codes = ["<"]
    for name, ctype in C_FIELDS:
        code, size, natural = _C_TYPES[ctype]
        align = min(natural, PACK)
        struct_align = max(struct_align, align)
        padded = _align_up(offset, align)
        if padded > offset:
            codes.append(f"{padded - offset}x")
        offsets[name] = padded
        codes.append(code)
        offset = padded + size
    size = _align_up(offset, struct_align)
    if size > offset:
        codes.append(f"{size - offset}x")
    return offsets, size, struct_align, "".join(codes)


FIELD_OFFSETS, STRUCT_SIZE, STRUCT_ALIGN, STRUCT_FORMAT = _layout()
assert struct.calcsize(STRUCT_FORMAT) == STRUCT_SIZE

_UINT32_MAX = 2**32 - 1


def _to_float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


@dataclass(frozen=True)
class RecurrentGatedDeltaRuleTilingData:
    """One kernel launch's tiling, field for field the C struct (snake_case names).

    The attribute order is the C member order (checked against :data:`C_FIELDS`),
    so :meth:`pack` can serialise the fields in order directly. Values are validated
    on construction: every ``uint32_t`` must fit 32 bits (the C++ host narrows
    ``int64_t`` with ``static_cast`` and would wrap silently), and ``scale`` is stored
    already rounded to float32, which is what the kernel multiplies by.
    """

    vector_core_num: int
    ub_cal_size: int
    ub_rest_bytes: int
    t: int
    nk: int
    dk: int
    nv: int
    dv: int
    s_block_num: int
    b: int
    v_step: int
    state_out_buffer_num: int
    attn_out_buffer_num: int
    scale: float
    has_gama: int
    has_gama_k: int
    has_accepted_tokens: int
    gama_k_scalar: int
    cu_seqlens_is_prefix: int
    cu_seqlens_is_int64: int
    ssm_state_indices_is_int64: int
    reserved: int = 0

    def __post_init__(self) -> None:
        for f, (c_name, ctype) in zip(fields(self), C_FIELDS, strict=True):
            value = getattr(self, f.name)
            if ctype == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"tiling field {c_name} must be a finite float, got {value!r}")
                object.__setattr__(self, f.name, _to_float32(float(value)))
                continue
            if isinstance(value, bool):
                value = int(value)
                object.__setattr__(self, f.name, value)
            if not isinstance(value, int) or not 0 <= value <= _UINT32_MAX:
                raise ValueError(f"tiling field {c_name} must fit uint32_t, got {value!r}")

    def pack(self) -> bytes:
        """The struct's bytes as the kernel reads them (``STRUCT_SIZE`` bytes)."""
        # Fields are flat scalars: read them directly (dataclasses.astuple deep-copies, a cost on every launch).
        return struct.pack(STRUCT_FORMAT, *(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> RecurrentGatedDeltaRuleTilingData:
        """Read a packed struct back (what a kernel-side consumer would see)."""
        if len(data) != STRUCT_SIZE:
            raise ValueError(f"RecurrentGatedDeltaRuleTilingData is {STRUCT_SIZE} bytes, got {len(data)}")
        return cls(*struct.unpack(STRUCT_FORMAT, bytes(data)))

    def by_c_name(self) -> dict[str, int | float]:
        """The fields keyed by their C member names, for logs and comparisons with C++ dumps."""
        return {c_name: getattr(self, f.name) for f, (c_name, _) in zip(fields(self), C_FIELDS, strict=True)}
