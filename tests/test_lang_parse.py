"""The spec language's parsers: shapes, expressions and param types, as the IR they produce.

Each shape form of seed 000 / DESIGN.md is parsed into the items the unifier reads; each
rejected construct is an :class:`ExprError` whose message (and, for the legacy forms of
seed 000 table 3, rule and rewrite) is asserted exactly.
"""

from __future__ import annotations

import random

import pytest
import torch

from tileops_core.errors import ExprError
from tileops_core.lang import ir
from tileops_core.lang.parse import MAX_DEPTH, MAX_TEXT, PRIMITIVES, parse_expr
from tileops_core.lang.shapes import Axis, Variadic, affine_in, parse_shape
from tileops_core.lang.types import (
    DTypeParam, Enum, ListOf, NoneT, Prim, TupleOf, UnionT, is_maybe, parse_type,
)


def expr_error(parse, text: str) -> ExprError:
    with pytest.raises(ExprError) as info:
        parse(text)
    return info.value


# -- shapes -------------------------------------------------------------------------------------

def test_fixed_rank_shape_is_one_axis_per_name():
    pattern = parse_shape("[B, M, K]")
    assert pattern.items == (Axis(ir.Name("B")), Axis(ir.Name("M")), Axis(ir.Name("K")))
    assert pattern.fixed_rank == 3 and pattern.variadics == ()
    assert pattern.names() == {"B", "M", "K"}


def test_affine_axis_keeps_its_coefficient_for_the_solver():
    pattern = parse_shape("[M, 2 * N]")
    assert pattern.items[1] == Axis(ir.Binary("*", ir.Const(2), ir.Name("N")))
    assert affine_in(pattern.items[1].node, "N") == (2, ir.Const(0))


def test_offset_axis_solves_with_its_constant():
    (axis,) = parse_shape("[B + 1]").items
    assert affine_in(axis.node, "B") == (1, ir.Const(1))


def test_affine_axis_with_a_known_name_in_the_offset():
    (axis,) = parse_shape("[2 * N + K - 1]").items
    coeff, rest = affine_in(axis.node, "N")
    assert coeff == 2
    assert ir.unparse(rest) == "K + -1"


def test_variadic_part_and_a_trailing_axis():
    pattern = parse_shape("[*S, N]")
    assert pattern.items == (Variadic("S"), Axis(ir.Name("N")))
    assert pattern.variadics == ("S",) and pattern.fixed_rank == 1


def test_floor_division_axis_is_not_affine_so_only_checked():
    pattern = parse_shape("[N, K // 2]")
    assert affine_in(pattern.items[1].node, "K") is None


def test_two_variadic_parts_parse_and_keep_their_order():
    pattern = parse_shape("[*S, *N]")
    assert pattern.items == (Variadic("S"), Variadic("N"))


def test_shape_text_round_trips_through_str():
    for text in ("[B, M, K]", "[M, 2 * N]", "[B + 1]", "[*S, N]", "[N, K // 2]", "[*S, *N]", "[]"):
        assert str(parse_shape(text)) == text


def test_constant_axis_is_accepted_when_non_negative():
    assert parse_shape("[0, 3]").items == (Axis(ir.Const(0)), Axis(ir.Const(3)))


@pytest.mark.parametrize("text, shown", [("[-1]", "-1"), ("[1.5]", "1.5"), ("[True]", "True"), ("['a']", "'a'")])
def test_literal_axis_that_is_not_a_non_negative_int_is_rejected(text, shown):
    assert expr_error(parse_shape, text).message == f"axis length {shown} is not a non-negative integer"


def test_same_variadic_part_twice_is_rejected():
    assert expr_error(parse_shape, "[*S, N, *S]").message == "variadic part *S appears twice"


@pytest.mark.parametrize("text", ["[*S.x, N]", "[*(1, 2)]", "[*_S]"])
def test_variadic_part_must_be_a_plain_name(text):
    assert expr_error(parse_shape, text).message == "a variadic part is written *Name"


@pytest.mark.parametrize("text", ["(B, M)", "B", "{B: 1}"])
def test_shape_must_be_a_list(text):
    assert expr_error(parse_shape, text).message == 'a shape is written as a list, e.g. "[B, M, K]"'


def test_starred_item_outside_a_shape_is_rejected():
    assert expr_error(parse_expr, "(*S, N)").message == "starred items are only allowed in shapes"


# -- expressions --------------------------------------------------------------------------------

def test_expression_becomes_the_ir_tree_it_spells():
    node = parse_expr("a.shape[0] + 1 if present(w) else -b[1:]")
    assert node == ir.IfExp(
        test=ir.Call("present", (ir.Name("w"),)),
        body=ir.Binary("+", ir.Index(ir.Attr(ir.Name("a"), "shape"), ir.Const(0)), ir.Const(1)),
        orelse=ir.Unary("-", ir.Slice(ir.Name("b"), ir.Const(1), None, None)),
    )


def test_chained_comparison_and_boolean_operators():
    node = parse_expr("0 <= d < n and not (x in y or x not in z)")
    assert node == ir.BoolOp("and", (
        ir.Compare(ir.Const(0), ("<=", "<"), (ir.Name("d"), ir.Name("n"))),
        ir.Unary("not", ir.BoolOp("or", (ir.Compare(ir.Name("x"), ("in",), (ir.Name("y"),)),
                                         ir.Compare(ir.Name("x"), ("not in",), (ir.Name("z"),))))),
    ))


def test_lists_are_tuples_in_the_ir():
    assert parse_expr("[1, n]") == parse_expr("(1, n)") == ir.Tuple((ir.Const(1), ir.Name("n")))


def test_is_none_is_kept_as_its_legacy_node():
    assert parse_expr("w is None") == ir.IsNone(ir.Name("w"), negated=False)
    assert parse_expr("w is not None") == ir.IsNone(ir.Name("w"), negated=True)


@pytest.mark.parametrize("text", [
    "0 <= d < n", "a.shape[0] + 1 if present(w) else -b[1:]", "(a + b) * c", "a - (b - c)", "2 ** (n ** 2)",
    "(2 ** n) ** 2", "-(a + b)", "not (a and b)", "(a,)", "s[::2]", "x // 2 % 3", "max(a, b, 1)",
    "w is not None or (w.shape == (n,))",
])
def test_unparse_gives_text_that_parses_to_the_same_tree(text):
    node = parse_expr(text)
    assert parse_expr(ir.unparse(node)) == node


def test_free_names_and_called_primitives_are_read_from_the_tree():
    node = parse_expr("product(x.shape[1:]) // max(G, 1) + len(N)")
    assert ir.free_names(node) == {"x", "G", "N"}
    assert ir.called(node) == {"product", "max", "len"}


def test_unknown_primitive_lists_the_known_ones():
    assert expr_error(parse_expr, "sqrt(x)").message == (
        "unknown primitive 'sqrt'; known: " + ", ".join(sorted(PRIMITIVES)))


def test_only_named_primitives_can_be_called():
    assert expr_error(parse_expr, "x.shape.index(1)").message == "only built-in primitives can be called"


def test_primitive_arity_is_checked():
    assert expr_error(parse_expr, "len(a, b)").message == "len() takes 1 argument(s), got 2"
    assert expr_error(parse_expr, "per_axis(s, 0)").message == "per_axis() takes 3 argument(s), got 2"
    assert expr_error(parse_expr, "min()").message == "min() takes 1 to 8 argument(s), got 0"


def test_primitives_take_positional_arguments_only():
    assert expr_error(parse_expr, "max(a, key=b)").message == "max() takes positional arguments only"


def test_present_takes_a_name():
    assert expr_error(parse_expr, "present(x.shape)").message == "present() takes the name of an input or a param"


def test_isinstance_is_the_rejected_form_t3_6_with_its_rewrite():
    error = expr_error(parse_expr, "s[0] if isinstance(s, tuple) else s")
    assert (error.message, error.rule, error.rewrite) == ("isinstance is not in the language", "T3.6",
                                                          "per_axis(s, i, n)")


def test_set_comprehension_is_the_rejected_form_t3_7_with_its_rewrite():
    error = expr_error(parse_expr, "len({d % n for d in dim}) == len(dim)")
    assert (error.message, error.rule, error.rewrite) == ("comprehensions are not in the language", "T3.7",
                                                          "unique_axes(dim, n)")


@pytest.mark.parametrize("text", ["[d for d in dim]", "(d for d in dim)", "{d: 1 for d in dim}"])
def test_other_comprehensions_are_rejected(text):
    error = expr_error(parse_expr, text)
    assert (error.message, error.rule) == ("comprehensions are not in the language", None)


@pytest.mark.parametrize("text, message", [
    ("lambda: 1", "Lambda is not in the language"),
    ("{1, 2}", "Set is not in the language"),
    ("{'a': 1}", "Dict is not in the language"),
    ("f'{x}'", "JoinedStr is not in the language"),
    ("a @ b", "operator MatMult is not in the language"),
    ("a | b", "operator BitOr is not in the language"),
    ("~a", "operator Invert is not in the language"),
    ("a is b", "comparison Is is not in the language (only 'is None' is)"),
    ("x[1, 2]", "multi-dimensional subscripts are not in the language"),
    ("b'x'", "literal of type bytes is not in the language"),
    ("1j", "literal of type complex is not in the language"),
    ("...", "literal of type ellipsis is not in the language"),
    ("__import__('os')", "unknown primitive '__import__'; known: " + ", ".join(sorted(PRIMITIVES))),
    ("__builtins__", "name '__builtins__' is not allowed (names may not start with '_')"),
    ("().__class__", "attribute '__class__' is not allowed"),
    ("x._private", "attribute '_private' is not allowed"),
    ("2 ** 64 * " + str(2**64), "integer literal out of range"),
])
def test_construct_outside_the_language_is_named(text, message):
    assert expr_error(parse_expr, text).message == message


def test_syntax_error_keeps_the_column_and_the_text():
    error = expr_error(parse_expr, "a + * b")
    assert error.message == "syntax error: invalid syntax"
    assert (error.text, error.col) == ("a + * b", 5)
    assert str(error) == "syntax error: invalid syntax (in 'a + * b')"


def test_text_longer_than_the_limit_is_rejected_before_parsing():
    error = expr_error(parse_expr, "1+" * MAX_TEXT + "1")
    assert error.message == f"expression longer than {MAX_TEXT} characters"


def test_nesting_deeper_than_the_limit_is_rejected():
    text = "-" * (MAX_DEPTH + 1) + "x"
    assert expr_error(parse_expr, text).message == f"expression nested deeper than {MAX_DEPTH}"
    assert ir.free_names(parse_expr("-" * MAX_DEPTH + "x")) == {"x"}


def test_non_string_input_is_an_expression_error():
    assert expr_error(parse_expr, 42).message == "expected a string, got int"  # type: ignore[arg-type]


def test_surrounding_whitespace_is_ignored():
    assert parse_expr("  n + 1\n") == parse_expr("n + 1")


# -- param types --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, accepted, rejected", [
    ("bool", [True, False], [1, 0, "true", None]),
    ("int", [0, -3, 2**40], [True, 1.0, "1", None]),
    ("float", [1.5, 2, -0.0], [True, "1.5", None]),
    ("str", ["a", ""], [1, None]),
    ('"lengths" | "cu_seqlens"', ["lengths", "cu_seqlens"], ["other", 1, None]),
    ("list[int]", [[1, 2], (3,), []], [[1.5], "12", 3, [True]]),
    ("tuple[int, ...]", [(1, 2, 3), [4], ()], [(1, "a"), 1]),
    ("tuple[int, float]", [(1, 2.5), [1, 2]], [(1,), (1, 2.5, 3), (1.5, 2.5)]),
    ("float | None", [None, 1e-6, 3], ["x", True]),
    ("list[int] | tuple[int, ...]", [[4096], (8, 8)], [4096, [1.0]]),
])
def test_param_type_accepts_exactly_its_values(text, accepted, rejected):
    ptype = parse_type(text)
    assert all(ptype.accepts(v) for v in accepted), [v for v in accepted if not ptype.accepts(v)]
    assert not any(ptype.accepts(v) for v in rejected), [v for v in rejected if ptype.accepts(v)]


def test_param_types_parse_to_their_structure():
    assert parse_type("bool") == Prim("bool")
    assert parse_type('"a" | "b"') == Enum(("a", "b"))
    assert parse_type("list[int]") == ListOf(Prim("int"))
    assert parse_type("tuple[int, ...]") == TupleOf((Prim("int"),), variadic=True)
    assert parse_type("tuple[int, float]") == TupleOf((Prim("int"), Prim("float")), variadic=False)
    assert parse_type("float | None") == UnionT((Prim("float"), NoneT()))
    assert parse_type("dtype") == DTypeParam(None)


def test_maybe_is_a_union_with_none():
    assert is_maybe(parse_type("float | None")) and is_maybe(parse_type("dtype[float16] | None"))
    assert not is_maybe(parse_type("float")) and not is_maybe(parse_type("int | float"))


def test_normalisation_gives_one_spelling_per_value():
    assert parse_type("list[int]").normalise([1, 2]) == (1, 2)
    assert parse_type("float").normalise(2) == 2.0 and type(parse_type("float").normalise(2)) is float
    assert parse_type("float | None").normalise(None) is None
    assert parse_type("dtype").normalise(torch.bfloat16) == "bfloat16"
    n = random.randint(1, 64)
    assert parse_type("list[int] | tuple[int, ...]").normalise([n]) == (n,)


def test_declared_adt_names_become_types():
    assert str(parse_type("Pad | None", frozenset({"Pad"}))) == "Pad | None"


@pytest.mark.parametrize("text, message", [
    ("complex", "unknown type 'complex' (known: bool, int, float, str, device, dtype, list[...], tuple[...], "
                "string enums, declared types)"),
    ('"a" | "a"', "an enum value is listed twice"),
    ("3", "literal 3 is not a type"),
    ("dict[int]", "Subscript is not a type"),
    ("dtype[int]", "dtype[...] takes dtype names, e.g. dtype[float16 | bfloat16]"),
    ("list[int, int]", "Tuple is not a type"),
])
def test_malformed_param_type_is_named(text, message):
    assert expr_error(parse_type, text).message == message


def test_unknown_type_lists_the_declared_adts_too():
    error = expr_error(lambda t: parse_type(t, frozenset({"Pad", "Mode"})), "Other")
    assert error.message.endswith("declared types: Mode, Pad)")
