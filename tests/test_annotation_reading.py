"""The launch contract reads annotation strings without ``eval`` (``tileops_core.kernels.annotations``).

What it must keep: every annotation the catalogue's interfaces and the reference backend's
launchers write resolves to what ``inspect.signature(eval_str=True)`` gives (the oracle here,
on this project's own code), and a plugin's annotation string that is not an annotation
never runs: its launcher is compared without it, as one naming a ``TYPE_CHECKING`` import is.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import typing

import pytest
import torch

from tileops_core.kernels.annotations import UnreadableAnnotation, resolve_annotation, resolved_signature
from tileops_core.kernels.contract import declared_launch, mismatches
from tileops_core.ops.normalization import RMSNormKernel

from test_launch_contract import _core_interfaces

CALLS: list[str] = []


def record() -> type:
    """What an annotation ``"record()"`` would call if it were evaluated."""
    CALLS.append("ran")
    return torch.Tensor


def test_every_catalogue_declaration_and_reference_launcher_resolves_as_eval_str_would():
    from tileops_cpu_ref.kernels import KERNELS

    functions = [declared_launch(i).stub for i in _core_interfaces()]
    functions += [fn for impl in KERNELS for fn in impl.launchers().values()]
    assert len(functions) >= 40
    strings = 0
    for fn in functions:
        mine, oracle = resolved_signature(fn), inspect.signature(fn, eval_str=True)
        assert mine == oracle, fn.__qualname__
        strings += any(isinstance(p.annotation, str) for p in inspect.signature(fn).parameters.values())
    assert strings >= 20  # most are postponed (from __future__ import annotations): the strings were read


@pytest.mark.parametrize("text, want", [
    ("torch.Tensor | None", torch.Tensor | None),
    ("None | torch.Tensor", None | torch.Tensor),
    ("tuple[int, ...]", tuple[int, ...]),
    ("typing.Optional[float]", typing.Optional[float]),
    ("collections.abc.Callable[[int, str], bool]", collections.abc.Callable[[int, str], bool]),
    ("dict[str, 'torch.Tensor']", dict[str, torch.Tensor]),
    ("typing.Any", typing.Any),
    ("list[tuple[int, int]] | int | None", list[tuple[int, int]] | int | None),
    ("typing.Literal['lengths', 'cu_seqlens']", typing.Literal["lengths", "cu_seqlens"]),
    ("typing.Literal[-1, 0, True]", typing.Literal[-1, 0, True]),
    ("typing.Annotated[torch.Tensor, 'state pool', 3]", typing.Annotated[torch.Tensor, "state pool", 3]),
])
def test_the_forms_annotations_are_made_of_resolve(text, want):
    namespace = {"torch": torch, "typing": typing, "collections": collections}
    assert resolve_annotation(text, namespace) == want


@pytest.mark.parametrize("text", ["record()", "typing.Annotated[int, record()]", "typing.Literal[record]",
                                  "torch.Tensor + 1", "[x for x in ()]", "(lambda: torch.Tensor)()",
                                  "torch.Tensor if record else None", "record.__call__()", "torch.ones(2)[0]"])
def test_an_expression_that_is_no_annotation_is_refused_without_running(text):
    CALLS.clear()
    with pytest.raises(UnreadableAnnotation):
        resolve_annotation(text, {"torch": torch, "record": record, "typing": typing})
    assert CALLS == []


class _RecordingMeta(type):
    def __or__(cls, other):
        CALLS.append("or")
        return cls

    __ror__ = __or__


class PluginGeneric:
    """A plugin's class whose subscript and union run its own code."""

    def __class_getitem__(cls, item):
        CALLS.append("getitem")
        return cls


class PluginUnion(metaclass=_RecordingMeta):
    pass


class _Indexable:
    def __getitem__(self, item):
        CALLS.append("item")
        return torch.Tensor


@pytest.mark.parametrize("text", ["PluginGeneric[int]", "PluginUnion | None", "None | PluginUnion",
                                  "indexable[int]", "tuple[PluginGeneric[int], ...]"])
def test_a_subscript_or_union_that_would_run_a_plugin_s_code_is_refused(text):
    """Only the standard library's generics are subscripted and only the language's ``|`` applied."""
    CALLS.clear()
    namespace = {"PluginGeneric": PluginGeneric, "PluginUnion": PluginUnion, "indexable": _Indexable()}
    with pytest.raises(UnreadableAnnotation):
        resolve_annotation(text, namespace)
    assert CALLS == []


def test_a_standard_generic_given_the_wrong_arguments_is_an_unreadable_annotation():
    with pytest.raises(UnreadableAnnotation, match="Optional"):
        resolve_annotation("typing.Optional[int, str]", {"typing": typing})


def test_a_name_not_in_the_module_raises_name_error_as_eval_str_would():
    with pytest.raises(NameError, match="'Missing'"):
        resolve_annotation("Missing | None", {})


def test_a_plugin_launcher_whose_annotation_is_code_is_compared_without_it_and_never_runs_it():
    """Its names and order are still checked; the annotation string is never executed."""
    CALLS.clear()

    def launcher(x, weight, normalized_shape, eps):
        raise AssertionError("never called")

    launcher.__annotations__ = {"x": "record()", "weight": "torch.Tensor | None"}
    declared = declared_launch(RMSNormKernel)
    assert mismatches(declared, launcher) == []
    assert CALLS == []

    def misordered(weight, x, normalized_shape, eps):
        raise AssertionError("never called")

    misordered.__annotations__ = {"x": "record()"}
    assert mismatches(declared, misordered) == [
        "parameters in the order (weight, x, normalized_shape, eps) where the interface has "
        "(x, weight, normalized_shape, eps)"]
    assert CALLS == []


def test_the_module_of_a_bound_method_partial_or_callable_object_is_the_one_read():
    class Launcher:
        def __call__(self, x: "torch.Tensor") -> "torch.Tensor":
            return x

        def run(self, x: "torch.Tensor") -> "torch.Tensor":
            return x

    def plain(x: "torch.Tensor", y: "int") -> "torch.Tensor":
        return x

    want = inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
    for fn in (Launcher(), Launcher().run, functools.partial(plain, y=1), functools.wraps(plain)(lambda *a: a)):
        assert resolved_signature(fn).parameters["x"] == want, fn


def test_an_unreadable_annotation_is_left_out_and_the_others_are_still_compared():
    """A launcher annotated with another library's generic (its own ``__class_getitem__``) keeps the type
    check of its other parameters: here ``x`` annotated ``int`` where the interface has a tensor."""

    def launcher(x, weight, normalized_shape, eps):
        raise AssertionError("never called")

    launcher.__annotations__ = {"x": "int", "weight": "PluginGeneric[int]"}  # the name resolves, the form does not
    CALLS.clear()
    assert mismatches(declared_launch(RMSNormKernel), launcher) == [
        "'x' is annotated int where the interface has torch.Tensor"]
    assert CALLS == []


def test_an_interface_declaring_an_unreadable_annotation_still_declares_the_rest():
    from tileops_core.kernels.interface import launch_signature

    def launch(x: "PluginGeneric[int]", eps: "float | None") -> "torch.Tensor":
        raise NotImplementedError

    resolved = launch_signature(launch).resolved()
    assert resolved.parameters["x"].annotation is inspect.Parameter.empty
    assert resolved.parameters["eps"].annotation == (float | None) and resolved.return_annotation is torch.Tensor
    with pytest.raises(UnreadableAnnotation):
        resolved_signature(launch)  # without omit_unreadable: the strict reading the CUDA contract test uses
