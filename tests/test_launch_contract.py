"""The kernel-interface contract: an interface declares its launch signature, and a kernel that does
not accept it is refused when it is registered (or, for a launcher made per build, when it is built),
with a message naming the kernel, the interface and the parameters that differ."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from typing import Any, Callable

import pytest
import torch

import tileops_core.ops
from tileops_core import PluginError
from tileops_core.kernels import ContractWarning, KernelEntry, KernelInterface, launch_signature, registry
from tileops_core.kernels.call_view import CallView, dim, flag
from tileops_core.kernels.contract import check_registered, declared_launch, mismatches, suggested_declaration
from tileops_core.kernels.interface import CallSpec
from tileops_core.ops.normalization import RMSNormCall, RMSNormFwdOp, RMSNormKernel

pytestmark = pytest.mark.usefixtures("fake_backend")


class NormKernel(KernelInterface):
    op = "ProbeNormOp"

    @launch_signature
    def launch(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        raise NotImplementedError


def kernel_of(interface: type[KernelInterface], launcher: Callable[..., Any], name: str = "ProbeNorm",
              **declarations: Any) -> type[KernelInterface]:
    """An implementation class whose one static launcher is ``launcher`` (and whose build returns it)."""
    attrs: dict[str, Any] = {
        "devices": ("cpu",), "__module__": "probes", "__qualname__": name, **declarations,
        "launchers": classmethod(lambda cls: {"fn": launcher}),
        "entry_for": classmethod(lambda cls, call: KernelEntry((name,), lambda: launcher)),
    }
    return type(name, (interface,), attrs)


def register(impl: type[KernelInterface]) -> None:
    registry.register_kernel(impl, "fake")


HEAD = ("kernel probes:ProbeNorm does not conform to the launch signature of interface "
        f"{__name__}:NormKernel (its fn): ")
TAIL = "\n  interface: launch(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor\n  kernel:    "


def test_a_conforming_kernel_is_registered():
    def norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return x

    impl = kernel_of(NormKernel, norm)
    register(impl)
    assert registry.implementations(NormKernel) == [impl]


def test_trailing_parameters_with_defaults_are_allowed():
    def norm(x: Any, weight: Any, eps: Any, out: Any = None, *, stream: Any = None) -> Any:
        return out

    register(kernel_of(NormKernel, norm))


def test_a_missing_parameter_is_refused_naming_kernel_interface_and_parameter():
    def norm(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        return x

    with pytest.raises(PluginError) as info:
        register(kernel_of(NormKernel, norm))
    assert str(info.value) == (HEAD + "missing parameter 'eps'" + TAIL
                               + "(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor")
    assert registry.implementations(NormKernel) == []


def test_an_extra_required_parameter_is_refused():
    def norm(x: Any, weight: Any, eps: Any, out: Any) -> Any:
        return out

    with pytest.raises(PluginError) as info:
        register(kernel_of(NormKernel, norm))
    assert str(info.value) == (HEAD + "extra required parameter 'out' (only parameters with a default, e.g. "
                               "out=None, may follow the interface's)" + TAIL + "(x: Any, weight: Any, eps: Any, "
                               "out: Any) -> Any")


def test_a_renamed_parameter_is_refused_as_missing_and_extra():
    def norm(x: Any, w: Any, eps: Any) -> Any:
        return x

    with pytest.raises(PluginError) as info:
        register(kernel_of(NormKernel, norm))
    assert str(info.value) == (HEAD + "missing parameter 'weight'; extra required parameter 'w' (only parameters "
                               "with a default, e.g. out=None, may follow the interface's)" + TAIL
                               + "(x: Any, w: Any, eps: Any) -> Any")


def test_reordered_parameters_are_refused():
    def norm(x: Any, eps: Any, weight: Any) -> Any:
        return x

    with pytest.raises(PluginError) as info:
        register(kernel_of(NormKernel, norm))
    assert str(info.value) == (HEAD + "parameters in the order (x, eps, weight) where the interface has "
                               "(x, weight, eps)" + TAIL + "(x: Any, eps: Any, weight: Any) -> Any")


def test_a_parameter_the_op_cannot_pass_by_position_is_refused():
    def norm(x: Any, weight: Any, *, eps: Any) -> Any:
        return x

    assert mismatches(NormKernel.launch, norm) == [
        "parameter 'eps' cannot be passed by position, as Op.forward passes it"]


def test_an_annotation_that_does_not_accept_the_declared_type_is_refused():
    def norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x

    assert mismatches(NormKernel.launch, norm) == [
        "'weight' is annotated torch.Tensor where the interface has torch.Tensor | None"]


def test_unannotated_any_and_wider_union_annotations_accept_the_declared_ones():
    def norm(x, weight: Any, eps: float | int | None):
        return x

    assert mismatches(NormKernel.launch, norm) == []


def test_a_writes_outputs_kernel_must_take_the_outputs_after_the_declared_parameters():
    def norm(x: Any, weight: Any, eps: Any) -> Any:
        return x

    with pytest.raises(PluginError, match=r"it declares writes_outputs but takes 0 parameter\(s\) after the "
                                          r"interface's for the 1 output\(s\) the core passes \(add out=None for "
                                          r"each\)"):
        register(kernel_of(NormKernel, norm, writes_outputs=True))


def test_a_writes_outputs_kernel_takes_one_parameter_per_declared_output():
    class PairKernel(KernelInterface):
        @launch_signature
        def launch(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            raise NotImplementedError

    def one(a: Any, g: Any = None) -> Any:
        return g

    def both(a: Any, g: Any = None, beta: Any = None) -> Any:
        return g, beta

    assert PairKernel.launch is not None
    assert mismatches(PairKernel.launch, one, writes_outputs=True) == [
        "it declares writes_outputs but takes 1 parameter(s) after the interface's for the 2 output(s) the core "
        "passes (add out=None for each)"]
    assert mismatches(PairKernel.launch, both, writes_outputs=True) == []


def test_a_c_function_is_refused_because_its_signature_cannot_be_read():
    assert mismatches(NormKernel.launch, torch.relu) == [
        "its signature cannot be read (a C function?): wrap it in a def taking the interface's parameters, "
        "or return the torch.ops overload (torch.ops.ns.op.default), whose schema names them"]


def test_a_torch_ops_overload_is_read_from_its_schema():
    class AddKernel(KernelInterface):
        @launch_signature
        def launch(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError

    assert AddKernel.launch is not None
    assert mismatches(AddKernel.launch, torch.ops.aten.add.Tensor) == []  # (self, other, *, alpha=1)
    assert mismatches(NormKernel.launch, torch.ops.aten.add.Tensor) == [
        "missing parameters 'x', 'weight', 'eps'",
        "extra required parameters 'self', 'other' (only parameters with a default, e.g. out=None, may follow the "
        "interface's)"]


def test_a_launcher_made_per_build_is_checked_when_built_and_selection_falls_back():
    def good(x: Any, weight: Any, eps: Any) -> Any:
        return "reference"

    def bad(x: Any, eps: Any) -> Any:
        return "fast"

    fallback = kernel_of(NormKernel, good, "ProbeRef", general=True)
    fast = type("ProbeFast", (NormKernel,), {
        "devices": ("cpu",), "__module__": "probes", "__qualname__": "ProbeFast",
        "entry_for": classmethod(lambda cls, call: KernelEntry(("fast",), lambda: bad))})
    register(fallback)
    register(fast)  # nothing static to check: its launcher exists only once built
    call = CallSpec("ProbeNormOp", "NormKernel", "cpu", "cpu", {"x": "float32"}, {}, {})
    from tileops_core.kernels.select import kernel_for
    with pytest.warns(RuntimeWarning) as caught:
        kernel = kernel_for(NormKernel, call)
    assert kernel(None, None, 0.0) == "reference"
    assert ("build failed for ('fast',): PluginError: kernel probes:ProbeFast does not conform to the launch "
            f"signature of interface {__name__}:NormKernel (the launcher its build returned): missing "
            "parameter 'weight'") in str(caught[0].message)


def test_an_interface_without_a_declaration_is_accepted_with_a_warning_saying_what_to_add():
    class Undeclared(KernelInterface):
        op = "ProbeUndeclaredOp"

    def relu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return x

    impl = kernel_of(Undeclared, relu, "ProbeUndeclared")
    with pytest.warns(ContractWarning) as caught:
        register(impl)
    assert str(caught[0].message) == (
        f"interface {__name__}:test_an_interface_without_a_declaration_is_accepted_with_a_warning_"
        "saying_what_to_add.<locals>.Undeclared declares no launch signature, so kernel probes:ProbeUndeclared and "
        "every other kernel of it are registered unchecked. Add to class Undeclared, with the parameters its op's "
        "forward passes to self.launch(Undeclared, ...), in order:\n"
        "    @launch_signature  # from tileops_core.kernels\n"
        "    def launch(x: torch.Tensor) -> torch.Tensor: ...")
    assert registry.implementations(Undeclared) == [impl]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register(kernel_of(Undeclared, relu, "ProbeUndeclaredToo"))  # once per interface


def test_a_declaration_with_a_default_is_refused_where_it_is_written():
    with pytest.raises(TypeError, match=r"launch signature .*launch: parameter 'eps' must be a plain positional "
                                        r"parameter without a default \(Op.forward passes every one, in order\)"):
        class Defaulted(KernelInterface):
            @launch_signature
            def launch(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
                raise NotImplementedError


def _core_interfaces() -> list[type[KernelInterface]]:
    found = []
    for info in pkgutil.iter_modules(tileops_core.ops.__path__):
        module = importlib.import_module(f"tileops_core.ops.{info.name}")
        found += [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, KernelInterface)
                  and v.is_interface() and v.__module__ == module.__name__]
    return found


def test_every_core_interface_declares_a_launch_signature_that_resolves():
    interfaces = _core_interfaces()
    assert len(interfaces) >= 18
    from tileops_cpu_ref.kernels import KERNELS

    reference = {impl.interface(): impl for impl in KERNELS}
    undeclared = [i for i in interfaces if declared_launch(i) is None]
    assert undeclared == [], "add to each, with the parameters its op's forward passes to self.launch(...), in " \
        "order, named as the spec names them (plugins/README.md, 'The launch contract'):\n" + "\n".join(
            f"  {i.qualname()}:\n    @launch_signature\n    "
            + (suggested_declaration(reference[i]) if i in reference else "def launch(<parameters>) -> <result>: ...")
            for i in undeclared)
    for interface in interfaces:
        launch = declared_launch(interface)
        assert launch is not None and launch.resolved().parameters


def test_every_reference_kernel_conforms_to_its_interface():
    from tileops_cpu_ref.kernels import KERNELS

    for impl in KERNELS:
        assert impl.launchers(), impl
        check_registered(impl, set())


def test_the_launch_signature_is_what_forward_passes():
    """RMSNorm's forward passes (x, weight, normalized_shape, eps): the declared names, in order."""
    seen: list[tuple[Any, ...]] = []

    def rms_norm(x: Any, weight: Any, normalized_shape: Any, eps: Any) -> Any:
        seen.append((x, weight, normalized_shape, eps))
        return torch.nn.functional.rms_norm(x, normalized_shape, weight, 1e-6 if eps is None else eps)

    register(kernel_of(RMSNormKernel, rms_norm, "ProbeRMSNorm", devices=("*",), general=True))
    x, w = torch.randn(3, 8), torch.randn(8)
    RMSNormFwdOp((8,), eps=1e-5)(x, w)
    assert RMSNormKernel.launch is not None
    assert [p for p in RMSNormKernel.launch.names] == ["x", "weight", "normalized_shape", "eps"]
    assert seen[0][0] is x and seen[0][1] is w and seen[0][2:] == ((8,), 1e-5)


def test_a_typed_call_view_reads_the_call_spec_by_attribute():
    call = CallSpec("RMSNormFwdOp", "RMSNormKernel", "cuda", "sm_90", {"x": "bfloat16", "output": "bfloat16"},
                    {"N": (4, 64)}, {"has_weight": False, "has_eps": True})
    view = RMSNormCall.of(call)
    assert (view.x_dtype, view.normalized_shape, view.has_weight, view.device_type, view.arch) == (
        "bfloat16", (4, 64), False, "cuda", "sm_90")


def test_a_typed_call_view_names_the_entry_a_call_spec_lacks():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class ProbeView(CallView):
        heads: int = dim("H")
        causal: bool | None = flag("causal", optional=True)

    call = CallSpec("ProbeOp", "ProbeKernel", "cpu", "cpu", {}, {"N": 1}, {})
    with pytest.raises(KeyError, match=r"ProbeView: the call spec of ProbeOp.ProbeKernel has no dims entry 'H' "
                                       r"\(fields: \['N'\]\)"):
        ProbeView.of(call)
    assert ProbeView.of(CallSpec("ProbeOp", "ProbeKernel", "cpu", "cpu", {}, {"H": 4}, {})).causal is None
