"""Kernel interfaces, implementations' declarations, and the hashable call spec.

An op declares *interfaces*: the places where it calls a kernel. A kernel is a class that
inherits an interface and declares, on itself, where it can run (``devices``,
``supported_archs``), what it refuses (``refusal``), whether it is the ``general`` fallback,
and which implementations it is ``preferred_over``. :meth:`KernelInterface.entry_for` gives a
:class:`KernelEntry`: the build identity (what gets compiled; many call specs can share one)
and the function that builds the launchable kernel.

Each interface also declares its launch signature with :func:`launch_signature`: the
parameters ``Op.forward`` passes to ``self.launch(Interface, ...)``, in order, annotated,
which every launcher of every implementation must accept. :mod:`.contract` checks it when
a kernel is registered and when a kernel is built.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Hashable, Mapping

from .annotations import resolved_signature

__all__ = ["CallSpec", "KernelEntry", "KernelInterface", "LaunchSignature", "launch_signature"]


class CallSpec:
    """What a kernel may specialise on, as hashable data (never tensors).

    ``dtypes`` maps tensor names to dtype names; ``dims`` holds the index values the
    interface specialises on; ``flags`` the discriminants (optional-input presence, bool
    and enum params, out buffers passed); ``device_type`` and ``arch`` the calling device.
    """

    __slots__ = ("op", "interface", "device_type", "arch", "dtypes", "dims", "flags", "_hash")

    def __init__(self, op: str, interface: str, device_type: str, arch: str, dtypes: Mapping[str, str],
                 dims: Mapping[str, Hashable], flags: Mapping[str, Hashable]) -> None:
        self.op = op
        self.interface = interface
        self.device_type = device_type
        self.arch = arch
        self.dtypes: dict[str, str] = dict(dtypes)
        # Values are hashable ints, tuples of ints, strs, bools, None: what a kernel reads with
        # int(), math.prod() or a comparison, so they are typed as what they are read as.
        self.dims: dict[str, Any] = dict(dims)
        self.flags: dict[str, Any] = dict(flags)
        self._hash = hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        return (self.op, self.interface, self.device_type, self.arch, tuple(sorted(self.dtypes.items())),
                tuple(sorted(self.dims.items())), tuple(sorted(self.flags.items())))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallSpec) and self._hash == other._hash and self._key() == other._key()

    def __repr__(self) -> str:
        return (f"CallSpec({self.op}.{self.interface} on {self.device_type}/{self.arch}, dtypes={self.dtypes}, "
                f"dims={self.dims}, flags={self.flags})")

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (``tileops explain``)."""
        return {"op": self.op, "interface": self.interface, "device_type": self.device_type, "arch": self.arch,
                "dtypes": self.dtypes, "dims": {k: list(v) if isinstance(v, tuple) else v for k, v in self.dims.items()},
                "flags": self.flags}


class LaunchSignature:
    """An interface's declared launch: what ``Op.forward`` passes and what a launcher accepts.

    Made by :func:`launch_signature` from a stub function in the interface's class body. It
    is a declaration, never called: reading it on the class gives this object, whose
    :attr:`signature` is the stub's (annotations resolved lazily, the first time a kernel is
    checked against it, so that they may name classes defined later in the module).
    """

    __slots__ = ("stub", "signature", "_resolved")

    def __init__(self, stub: Callable[..., Any]) -> None:
        self.stub = stub
        self.signature = inspect.signature(stub)
        self._resolved: inspect.Signature | None = None
        for p in self.signature.parameters.values():
            if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or p.default is not inspect.Parameter.empty:
                raise TypeError(f"launch signature {stub.__qualname__}: parameter {p.name!r} must be a plain "
                                "positional parameter without a default (Op.forward passes every one, in order)")

    def resolved(self) -> inspect.Signature:
        """The signature with its annotations resolved (:mod:`.annotations`, no ``eval``; one outside the
        forms it reads is left out); a TypeError naming the stub where a name does not resolve."""
        if self._resolved is None:
            try:
                self._resolved = resolved_signature(self.stub, omit_unreadable=True)
            except Exception as exc:  # an annotation naming nothing is the declaration's error
                raise TypeError(f"launch signature {self.stub.__qualname__}: an annotation does not resolve "
                                f"({type(exc).__name__}: {exc})") from exc
        return self._resolved

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.signature.parameters)

    def __repr__(self) -> str:
        return f"LaunchSignature{self.signature}"


def launch_signature(stub: Callable[..., Any]) -> LaunchSignature:
    """Declare an interface's launch signature from an annotated stub, as its ``launch`` attribute::

        class RMSNormKernel(KernelInterface):
            op = "RMSNormFwdOp"

            @launch_signature
            def launch(x: torch.Tensor, weight: torch.Tensor | None, normalized_shape: tuple[int, ...],
                       eps: float | None) -> torch.Tensor:
                ...  # a declaration: the body never runs
    """
    return LaunchSignature(stub)


@dataclass(frozen=True)
class KernelEntry:
    """A build identity and how to build it: ``build()`` returns the launchable kernel."""

    build_key: Hashable
    build: Callable[[], Callable[..., Any]]


class KernelInterface:
    """Base of every kernel interface; implementations subclass an interface.

    An interface class (a direct subclass of this one) sets ``op`` (the op class name) and
    ``specialise_on`` (names of indices/params whose values enter the call spec). Each
    implementation sets the class attributes below and overrides :meth:`entry_for` (and
    :meth:`refusal` when it does not serve every call).
    """

    #: Op class name (= manifest key) this interface belongs to.
    op: ClassVar[str] = ""
    #: Index/param/let names whose values enter the call spec (e.g. ("DK", "DV")).
    specialise_on: ClassVar[tuple[str, ...]] = ()
    #: True when kernels need contiguous tensors; the op copies (and copies back mutated ones).
    needs_contiguous: ClassVar[bool] = False

    #: Device types the implementation runs on ("cpu", "cuda", "npu", ...).
    devices: ClassVar[tuple[str, ...]] = ()
    #: Opaque backend-defined arch strings ("sm_90", "ascend310p"), or "*" for any.
    supported_archs: ClassVar[tuple[str, ...]] = ("*",)
    #: The fallback that serves everything on its devices (specialised kernels beat it).
    general: ClassVar[bool] = False
    #: Implementations this one removes when both are left (classes or "module:qualname").
    preferred_over: ClassVar[tuple[Any, ...]] = ()
    #: True when the built kernel is called ``kernel(*launch_args, *outs)`` with the op's
    #: (non-alias) outputs allocated by the core from the plan, and writes them; its return
    #: value is ignored. The core then knows the outputs are right by construction.
    writes_outputs: ClassVar[bool] = False
    #: False when the built kernel never reads the call it serves (``current_call()``, and through
    #: it ``Op.launch``, ``Op.bound``, ``Op.construction_tensor``): a function of its arguments alone.
    #: An op call that launches such a kernel directly (``tileops_core.op.one_launch``) then does not
    #: record the call on the thread for it, which costs about 0.2 µs a call. True (the default):
    #: recorded, as under ``forward``.
    reads_current_call: ClassVar[bool] = True
    #: True when the built kernel is plain torch code that torch.compile can trace: a compiled
    #: call of an op the decomposition policy names is inlined as the kernel the selection rule
    #: picks among traceable ones only (kernels/compile_policy.py).
    traceable: ClassVar[bool] = False
    #: The interface's declared launch signature (:func:`launch_signature`); None: undeclared.
    launch: ClassVar[LaunchSignature | None] = None

    @classmethod
    def interface(cls) -> type["KernelInterface"]:
        """The interface an implementation implements (the class right below KernelInterface)."""
        for klass in cls.__mro__:
            if KernelInterface in klass.__bases__:
                return klass
        raise TypeError(f"{cls.__name__} is KernelInterface itself")

    @classmethod
    def is_interface(cls) -> bool:
        return KernelInterface in cls.__bases__

    @classmethod
    def qualname(cls) -> str:
        """``module:QualName``, how selection messages and ``preferred_over`` strings name it."""
        return f"{cls.__module__}:{cls.__qualname__}"

    @classmethod
    def refusal(cls, call: CallSpec) -> str | None:
        """Why this implementation cannot serve ``call`` (None: it can)."""
        return None

    @classmethod
    def launchers(cls) -> Mapping[str, Callable[..., Any]]:
        """The launch functions this implementation's builds return that are known without
        building, by a name for messages (``{"fn": ...}``); checked against the interface's
        launch signature at registration. A launcher made per build (a closure over the
        build key) is not listed here: it is checked when it is built.
        """
        return {}

    @classmethod
    def entry_for(cls, call: CallSpec) -> KernelEntry:
        """The build identity for ``call`` and the function that builds it."""
        raise NotImplementedError(f"{cls.qualname()} does not define entry_for()")
