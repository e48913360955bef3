"""The 310P RGDR kernel as TileOPs selection sees it: where it runs, what it refuses, what it builds.

Selection has a :class:`~tileops_core.kernels.CallSpec`: dtypes per tensor, the
interface's dims (``NK, NV, DK, DV, G``), presence flags and params, and no ``T``, ``B``
or tensor contents. So the refusals split as :mod:`.refusal` describes:

* here, from the call spec alone (cached per call spec by selection): non-fp16
  query/key/value/beta or state, ``use_qk_l2norm_in_kernel``, ``NV % NK != 0``, head
  dims no UB buffer profile can tile (the tiling's own ``SelectBufferProfile`` plus the
  scratch check, run on the call's NV/DV/DK and presence bits);
* at launch, by :mod:`.launcher`: more tokens than ``B·8`` (``T`` and ``B`` are not in
  the call spec), a sequence longer than 8 or a padding slot (contents; one sync).

Why the token limit is not in the call spec. ``RGDRKernel`` deliberately specialises on
head counts and sizes, never on ``B`` or ``T``: decode batches change every step, and
putting them in the call spec would make every new batch shape a new selection cache
entry for every backend, to serve a limit only this backend has. ``T > B·8`` is also
only the shape-visible shadow of the real limit (no sequence longer than 8), which needs
the lengths' values and so must be checked at launch anyway; both halves are checked
there, together, with one message. The cost: such a call raises instead of falling back
to the reference. A caller that sends them runs the op with ``target="npu@cpu_ref"``.

Importing this module imports torch (through the core's op module) but never
``torch_npu``; the build does (:func:`tileops_ascend.launcher.build`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tileops_core.kernels import CallSpec, KernelEntry
from tileops_core.ops.linear_attention import RGDRCall, RGDRKernel

from .platform import ARCH_ASCEND310P
from .refusal import RgdrSignature, signature_refusal_reasons
from .tiling import TILING_KEY

__all__ = ["BUILD", "AscendRGDR310P", "KERNELS", "KernelBuild", "signature_of"]


@dataclass(frozen=True)
class KernelBuild:
    """What the one compiled 310P kernel is: every call spec this kernel accepts maps to it.

    The AscendC kernel of seed 003 is instantiated once, as ``RGDR<half, half>`` under
    tiling key 0, for ``ascend310p``; shapes, gates and index dtypes are runtime fields of
    the tiling struct, not compile-time choices. So there is one build identity, and the
    selection layer builds (imports ``torch_npu``, resolves the binding) once per process.
    """

    arch: str
    binding: str
    tiling_key: int
    instantiation: str

    def __str__(self) -> str:
        return f"{self.binding} {self.instantiation} tiling key {self.tiling_key} for {self.arch}"


#: The build identity of every accepted call.
BUILD = KernelBuild(
    arch=ARCH_ASCEND310P,
    binding="tileops_ascend::recurrent_gated_delta_rule",
    tiling_key=TILING_KEY,
    instantiation="RGDR<half, half>",
)


def signature_of(call: CallSpec) -> RgdrSignature:
    """The refusal-relevant view of a call spec of ``RGDRKernel``, read through the core's
    typed :class:`~tileops_core.ops.linear_attention.RGDRCall`."""
    view = RGDRCall.of(call)
    return RgdrSignature(
        query_dtype=view.query_dtype,
        key_dtype=view.key_dtype,
        value_dtype=view.value_dtype,
        beta_dtype=view.beta_dtype,
        state_dtype=view.state_dtype,
        seq_lens_dtype=view.seq_lens_dtype,
        ssm_state_indices_dtype=view.slot_dtype,
        nk=int(view.num_k_heads),
        dk=int(view.head_k_dim),
        nv=int(view.num_v_heads),
        dv=int(view.head_v_dim),
        g_dtype=view.g_dtype if view.has_g else None,
        gk_dtype=view.gk_dtype if view.has_gk else None,
        num_accepted_tokens_dtype=view.accepted_dtype if view.has_num_accepted_tokens else None,
        gk_tail=tuple(view.gk_tail or ()) if view.has_gk else None,
        use_qk_l2norm_in_kernel=bool(view.use_qk_l2norm_in_kernel),
    )


def _build() -> Any:
    # Imported here so that loading the plugin and selecting never touch the launch path.
    from .launcher import build

    return build()


class AscendRGDR310P(RGDRKernel):
    """The seed-003 AscendC RGDR kernel on Ascend 310P, fp16 only, at most 8 tokens per sequence."""

    devices = ("npu",)
    supported_archs = (ARCH_ASCEND310P,)
    general = False

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        """Every call-spec reason this kernel cannot serve ``call`` (``"; "``-joined), or None.

        ``T > B·8``, over-long sequences and padding slots are refused at launch (module
        docstring).
        """
        reasons = signature_refusal_reasons(signature_of(call))
        return "; ".join(reasons) if reasons else None

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        """The one build identity, :data:`BUILD`; its build returns a :class:`~tileops_ascend.launcher.Rgdr310PLauncher`."""
        return KernelEntry(BUILD, _build)


#: What the plugin registers.
KERNELS = (AscendRGDR310P,)
