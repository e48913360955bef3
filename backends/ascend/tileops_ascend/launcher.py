"""What building the 310P RGDR kernel returns: a launcher with ``RGDRKernel``'s call signature.

The AscendC kernel itself is compiled by the Ascend kernel package, not here; "building"
in TileOPs terms means what :func:`build` does once per process: import ``torch_npu``
(the first and only place this backend does so on the TileOPs path), resolve the custom
operator's binding, and return a :class:`Rgdr310PLauncher`. The launcher does the host
side of every call: the launch-time refusals that a call spec cannot show (``T > B·8``,
and with one device sync a sequence longer than 8 or a padding slot), the seed-003
tiling for this call's ``T``, ``B`` and pool size, and the binding call with the inputs
in the kernel's order (:func:`tileops_ascend.launch.recurrent_gated_delta_rule_npu`).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Callable

import torch

from .launch import RefusedCall, recurrent_gated_delta_rule_npu, resolve_binding
from .platform import AscendPlatform, detect

__all__ = ["DevicePlatforms", "Rgdr310PLauncher", "build"]

#: Appended to a launch-time refusal: why selection did not catch it, and the way out.
_LAUNCH_TIME_NOTE = (
    " (decided at launch: kernel selection sees the call spec, which shows neither T, B nor the metadata's "
    "values; to run such calls on the reference, construct the op with target='npu@cpu_ref')"
)


class DevicePlatforms:
    """Platform facts per NPU index, detected once each (the tiling reads the core count)."""

    def __init__(self, current_device: Callable[[], int]) -> None:
        self._current_device = current_device
        self._known: dict[int, AscendPlatform] = {}
        self._lock = threading.Lock()

    def __call__(self, device: torch.device) -> AscendPlatform:
        index = device.index if device.index is not None else int(self._current_device())
        platform = self._known.get(index)
        if platform is None:
            found = detect(index)
            if found.platform is None:
                raise RuntimeError(f"npu:{index}: {found.reason}; the RGDR kernel is built only for ascend310p")
            with self._lock:
                platform = self._known.setdefault(index, found.platform)
        return platform


class Rgdr310PLauncher:
    """The built kernel: ``launcher(query, ..., num_accepted_tokens, scale, seq_lens_style, use_qk_l2norm_in_kernel)``.

    Parameters in ``RGDRKernel``'s order, which is also the kernel's input order (seed
    003 §2) followed by the three params; they are passed on by keyword, so no
    positional reordering happens here. Updates ``state`` in place and returns ``out``.
    """

    def __init__(self, binding: Callable[..., torch.Tensor], platforms: Callable[[torch.device], AscendPlatform]):
        self.binding = binding
        self.platforms = platforms

    def __call__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        beta: torch.Tensor,
        state: torch.Tensor,
        actual_seq_lengths: torch.Tensor,
        ssm_state_indices: torch.Tensor,
        g: torch.Tensor | None,
        gk: torch.Tensor | None,
        num_accepted_tokens: torch.Tensor | None,
        scale: float | None,
        seq_lens_style: str,
        use_qk_l2norm_in_kernel: bool,
    ) -> torch.Tensor:
        try:
            return recurrent_gated_delta_rule_npu(
                query=query,
                key=key,
                value=value,
                beta=beta,
                state=state,
                actual_seq_lengths=actual_seq_lengths,
                ssm_state_indices=ssm_state_indices,
                g=g,
                gk=gk,
                num_accepted_tokens=num_accepted_tokens,
                scale=scale,
                seq_lens_style=seq_lens_style,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                platform=self.platforms(query.device),
                binding=self.binding,
            )
        except RefusedCall as exc:
            raise RefusedCall(f"{exc}{_LAUNCH_TIME_NOTE}") from None


def build() -> Rgdr310PLauncher:
    """Import ``torch_npu``, resolve the binding, return the launcher (selection caches it per process).

    Raises ImportError without ``torch_npu`` and RuntimeError, naming the schema, when
    the kernel package has not registered the binding: a build that cannot launch fails
    here, at the first call, rather than handing back a launcher that fails later.
    """
    torch_npu: Any = importlib.import_module("torch_npu")
    binding = resolve_binding()
    return Rgdr310PLauncher(binding, DevicePlatforms(torch_npu.npu.current_device))
