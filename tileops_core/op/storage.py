"""The identity of a tensor's storage, and step 5's rule for an out buffer passed to an op.

Why a module of its own: the call plan (step 7's fresh-output test), the generated checks and the
compile boundary all ask whether two tensors share storage, and every one must ask it the same
way, fast (a kernel's fresh output is tested on every call) and refusing a storage-less
``torch.func`` wrapper by name.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from ..errors import Location, TileOpsError, fail

__all__ = ["TRANSFORM_REFUSAL", "check_buffer_storage", "storage_address", "storage_id", "storage_ids"]


#: Why a call from inside a torch.func transform is refused.
TRANSFORM_REFUSAL = ("TileOPs ops take plain tensors, and torch.func transforms (vmap, grad, jacrev) pass "
                     "wrappers without storage: call the op outside the transform")


def _load_storage_address() -> Callable[[torch.Tensor], int]:
    """``t.untyped_storage()._cdata`` (the address of the tensor's ``StorageImpl``) without the
    Python storage object: torch's ``_storage_address`` reads it in C++, where building the
    storage object for a kernel's fresh output costs about 0.3 µs a call. Used only where it
    gives the same number as the storage object (checked here, on a tensor and a view of it)
    and refuses a storage-less wrapper as the storage object does (NotImplementedError)."""

    def through_storage(t: torch.Tensor) -> int:
        return t.untyped_storage()._cdata

    address = getattr(torch._C, "_storage_address", None)
    if address is None:
        return through_storage
    try:
        t = torch.empty(2, 3)
        same = address(t) == address(t[1:]) == t.untyped_storage()._cdata != address(torch.empty(2, 3))
    except Exception:  # another signature on this build: the storage object serves
        return through_storage
    return address if same else through_storage


#: The address of a tensor's ``StorageImpl``: what tells two storages apart (:func:`storage_id`).
storage_address = _load_storage_address()


def storage_id(t: torch.Tensor) -> int:
    """The identity of a tensor's storage (not its data pointer: every meta tensor and many
    empty ones have data pointer 0, while views keep their base's storage)."""
    try:
        return storage_address(t)
    except NotImplementedError as exc:  # a torch.func wrapper: no storage (found in review)
        raise TileOpsError(TRANSFORM_REFUSAL) from exc


def storage_ids(values: Sequence[Any]) -> set[int]:
    """The storage identities of the tensors among ``values`` (None: absent), as :func:`storage_id` gives each."""
    try:
        return {storage_address(v) for v in values if v is not None}
    except NotImplementedError as exc:  # a torch.func wrapper: no storage
        raise TileOpsError(TRANSFORM_REFUSAL) from exc


def check_buffer_storage(op: str, name: str, loc: Location, buffer: torch.Tensor, inputs: Iterable[Any]) -> None:
    """Step 5's storage rule for one passed out buffer (``name``, declared at ``loc``): it shares no
    storage with an input (None: absent). Eager calls check it at planning and on every call that
    passes a buffer; compiled calls on the trace's fake tensors and in the implementation."""
    if not buffer.numel():
        return
    sid = storage_id(buffer)
    for v in inputs:
        if v is not None and v.numel() and storage_id(v) == sid:
            fail(op, f"out buffer {name} shares storage with an input", loc)
