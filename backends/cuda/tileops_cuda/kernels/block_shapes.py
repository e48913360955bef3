"""The block shapes the registered layer-op kernels launch with: one table, by row width.

A block shape is the fields of a build key after ``arch`` (threads, rows or tokens per
program, passes, a persistent grid, register bounds; each kernel module documents its own).
The registered kernel forms its build key from the call (dtypes, sizes, flags) and then takes
the first entry of its row here whose bound holds for the row width in bytes, a rule on
shapes only (the batch and token counts never enter a build key). ``bench/layer_ops_sweep.py``
prints each candidate's block shape in exactly this form: a measured winner is copied into
the table as it was printed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["BLOCK_SHAPES", "block_shape_of", "with_block_shape"]

#: Registered kernel class -> ((largest row width in bytes the entry serves, or None for any
#: width; build-key fields), ...): the first entry that holds wins; fields left out keep the
#: build key's defaults. Row widths: hidden (norms), D (gated norm), NV (gating; a/b rows),
#: D (conv; channels), times the element size.
BLOCK_SHAPES: dict[str, tuple[tuple[int | None, dict[str, Any]], ...]] = {
    "TileLangZeroCentredRMSNorm": ((None, {"passes": 1, "programs": 0, "early_weight": True, "registers": 56}),),
    "TileLangFusedAddZeroCentredRMSNorm": ((None, {"passes": 1, "programs": 0, "early_weight": True,
                                                   "registers": 56}),),
    "TileLangGatedRMSNorm": ((None, {"programs": 0, "early_weight": True, "registers": 64}),),
    "TileLangGDNGating": ((None, {"threads": 256, "vectors": 2}),),
    "TileLangCausalConv1dUpdate": ((None, {"threads": 128, "registers": 64}),),
    "TileLangCausalConv1dVarlen": ((None, {"threads": 128, "tokens": 8, "registers": 0}),),
}


def block_shape_of(key: Any) -> dict[str, Any]:
    """The block-shape fields of a build key (those after ``arch``) with their values."""
    names = [f.name for f in dataclasses.fields(key)]
    return {n: getattr(key, n) for n in names[names.index("arch") + 1:]}


def with_block_shape(kernel: str, key: Any, row_bytes: int) -> Any:
    """``key`` with the block shape the table gives ``kernel`` at rows of ``row_bytes``."""
    for bound, fields in BLOCK_SHAPES[kernel]:
        if bound is None or row_bytes <= bound:
            return dataclasses.replace(key, **fields)
    raise LookupError(f"block_shapes.BLOCK_SHAPES[{kernel!r}] has no entry for rows of {row_bytes} bytes; "
                      f"end its entries with a None bound")
