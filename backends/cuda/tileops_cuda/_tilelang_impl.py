"""What every TileLang kernel class declares: CUDA devices, the archs written for, outputs written
by the launch function, and how a call spec becomes a build key, a refusal and a kernel entry
(see :mod:`.registered` for the launch contract)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from tileops_core.kernels import CallSpec, KernelEntry

from .kernels._common import SUPPORTED_ARCHS
from .launch_policy import registered_key, with_dependent_launch

__all__ = ["TileLangImpl", "rows_of"]


class TileLangImpl:
    """Declarations shared by every TileLang kernel: CUDA devices, the archs written for."""

    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    supported_archs: ClassVar[tuple[str, ...]] = SUPPORTED_ARCHS
    general: ClassVar[bool] = False
    #: The launch functions write the outputs the core allocates (see the module docstring).
    writes_outputs: ClassVar[bool] = True
    #: Whether :func:`.launch_policy.registered_key` applies to this class's keys. The policy was
    #: measured on the decode step's graph; a class outside that step whose dependent program
    #: measured slower says False, and why, in its body.
    launches_as_dependent: ClassVar[bool] = True

    @classmethod
    def key(cls, call: CallSpec) -> Any:
        """The build key ``call`` runs: :meth:`program_key` as the registered kernels launch
        (:func:`.launch_policy.registered_key`: as programmatic dependents), launched plainly where
        the key's program has no dependent form (MoE routing's ``rounds`` program refuses one) or
        the class opts out (:attr:`launches_as_dependent`)."""
        key = cls.program_key(call)
        if not cls.launches_as_dependent:
            return with_dependent_launch(key, False)
        launched = registered_key(key)
        if launched != key and cls.reason(call, launched) is not None:
            return with_dependent_launch(key, False)
        return launched

    @classmethod
    def program_key(cls, call: CallSpec) -> Any:
        """The class's build key for ``call``: dtypes, sizes, presence flags, arch, block shape."""
        raise NotImplementedError

    #: The kernel module's refusal of a build key (``rmsnorm_refusal``, ...): what ``reason`` asks
    #: unless a class also refuses on the call itself.
    refuse_key: ClassVar[staticmethod[[Any], str | None]]

    @classmethod
    def reason(cls, call: CallSpec, key: Any) -> str | None:
        return cls.refuse_key(key)

    @classmethod
    def launcher(cls, key: Any) -> Callable[..., Any]:
        """Compile (tilelang is imported here) and return the interface-shaped kernel."""
        raise NotImplementedError

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        try:
            key = cls.key(call)
        except ValueError as exc:  # a build key that cannot even be formed names why
            return str(exc)
        return cls.reason(call, key)

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        key = cls.key(call)
        return KernelEntry((cls.__name__, key), lambda: cls.launcher(key))


def rows_of(t: Any, width: int) -> Any:
    """``t`` as ``[rows, width]`` (a view; ``t`` itself when it already is 2-D that way)."""
    return t if t.dim() == 2 and t.shape[1] == width else t.view(-1, width)
