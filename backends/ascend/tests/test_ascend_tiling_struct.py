"""The 22-field tiling struct: layout under pack(8)/alignas(8), and its bytes."""

from __future__ import annotations

import dataclasses
import re
import struct

import pytest

from tileops_ascend.tiling import compute_tiling
from tileops_ascend.tiling_struct import (
    C_FIELDS,
    FIELD_OFFSETS,
    STRUCT_ALIGN,
    STRUCT_FORMAT,
    STRUCT_SIZE,
    RecurrentGatedDeltaRuleTilingData,
)

# Seed 003 §4, member by member.
SEED_FIELDS = [
    ("vectorCoreNum", "uint32_t"), ("ubCalSize", "uint32_t"), ("ubRestBytes", "uint32_t"), ("t", "uint32_t"),
    ("nk", "uint32_t"), ("dk", "uint32_t"), ("nv", "uint32_t"), ("dv", "uint32_t"), ("sBlockNum", "uint32_t"),
    ("b", "uint32_t"), ("vStep", "uint32_t"), ("stateOutBufferNum", "uint32_t"), ("attnOutBufferNum", "uint32_t"),
    ("scale", "float"), ("hasGama", "uint32_t"), ("hasGamaK", "uint32_t"), ("hasAcceptedTokens", "uint32_t"),
    ("gamaKScalar", "uint32_t"), ("cuSeqlensIsPrefix", "uint32_t"), ("cuSeqlensIsInt64", "uint32_t"),
    ("ssmStateIndicesIsInt64", "uint32_t"), ("reserved", "uint32_t"),
]


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", name).lower()


def _row1():
    return compute_tiling(t=3, nk=16, dk=128, nv=32, dv=128, state_slots=5, seq_lens_len=3, has_g=True).data


def test_members_are_the_seed_declaration():
    assert list(C_FIELDS) == SEED_FIELDS


def test_dataclass_fields_follow_the_c_member_order():
    assert [f.name for f in dataclasses.fields(RecurrentGatedDeltaRuleTilingData)] == [_snake(n) for n, _ in SEED_FIELDS]


def test_struct_is_88_bytes_aligned_to_8():
    assert (STRUCT_SIZE, STRUCT_ALIGN) == (88, 8)
    assert struct.calcsize(STRUCT_FORMAT) == 88
    assert STRUCT_FORMAT.startswith("<")


@pytest.mark.parametrize("index, name", list(enumerate(n for n, _ in SEED_FIELDS)))
def test_field_offset(index, name):
    assert FIELD_OFFSETS[name] == 4 * index


def test_every_field_is_at_its_offset_in_the_packed_bytes():
    data = _row1()
    packed = data.pack()
    assert len(packed) == 88
    for (name, ctype), value in zip(SEED_FIELDS, dataclasses.astuple(data)):
        code = "<f" if ctype == "float" else "<I"
        assert struct.unpack_from(code, packed, FIELD_OFFSETS[name])[0] == value, name


def test_reference_row_bytes_are_little_endian():
    packed = _row1().pack()
    assert packed[FIELD_OFFSETS["ubCalSize"] : FIELD_OFFSETS["ubCalSize"] + 4] == (262144).to_bytes(4, "little")
    assert packed[FIELD_OFFSETS["ubRestBytes"] : FIELD_OFFSETS["ubRestBytes"] + 4] == (189312).to_bytes(4, "little")
    assert packed[FIELD_OFFSETS["scale"] : FIELD_OFFSETS["scale"] + 4] == struct.pack("<f", 128**-0.5)


def test_unpack_inverts_pack():
    data = _row1()
    assert RecurrentGatedDeltaRuleTilingData.unpack(data.pack()) == data


def test_unpack_rejects_a_wrong_length():
    with pytest.raises(ValueError) as err:
        RecurrentGatedDeltaRuleTilingData.unpack(b"\0" * 80)
    assert str(err.value) == "RecurrentGatedDeltaRuleTilingData is 88 bytes, got 80"


def test_value_that_does_not_fit_uint32_is_rejected_with_its_c_name():
    with pytest.raises(ValueError) as err:
        dataclasses.replace(_row1(), ub_rest_bytes=2**32)
    assert str(err.value) == "tiling field ubRestBytes must fit uint32_t, got 4294967296"


def test_non_finite_scale_is_rejected():
    with pytest.raises(ValueError) as err:
        dataclasses.replace(_row1(), scale=float("nan"))
    assert str(err.value) == "tiling field scale must be a finite float, got nan"


def test_by_c_name_keys_are_the_c_members():
    assert list(_row1().by_c_name()) == [n for n, _ in SEED_FIELDS]
