"""Index inference at the IR level: seed 000 table 1, the solve plan and its execution.

``plan_solve`` decides once which axis binds which name; ``run_solve`` executes the plan
on actual shapes. Rows of table 1: (1) a lone unknown binds; (2) ``a * M + e`` solves with
divisibility and sign checks; (3) ``*S`` binds the remaining axes; (5) anything else is
checked. (Row 4, a DType index, binds in the op layer: see ``test_op_call_steps``.)
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tileops_core.lang.parse import parse_expr
from tileops_core.lang.shapes import parse_shape
from tileops_core.lang.unify import UnifyError, plan_solve, run_solve


def patterns(**shapes: str):
    return {name: parse_shape(text) for name, text in shapes.items()}


def solve(decls, shapes, known=None, lets=None, env=None):
    """Plan and run; returns the env (names bound by unification included)."""
    plan = plan_solve(decls, set(known or ()), {n: parse_expr(t) for n, t in (lets or {}).items()})
    assert not plan.unsolved, plan.reasons
    env = dict(env or {})
    run_solve(plan, decls, shapes, env, {})
    return env


def unify_error(decls, shapes, known=None, lets=None, env=None) -> str:
    with pytest.raises(UnifyError) as info:
        solve(decls, shapes, known, lets, env)
    return info.value.message


def dims(n: int, low: int = 1, high: int = 9) -> tuple[int, ...]:
    return tuple(random.randint(low, high) for _ in range(n))


# -- row 1: a lone unknown binds ------------------------------------------------------------------

def test_lone_unknown_name_binds_to_its_axis():
    b, m, k = dims(3)
    assert solve(patterns(a="[B, M, K]"), {"a": (b, m, k)}) == {"B": b, "M": m, "K": k}


def test_lone_unknown_binds_in_a_bind_step_and_later_uses_are_checks():
    plan = plan_solve(patterns(a="[B, M, K]", b="[B, K, N]"), set())
    kinds = [(s.kind, s.tensor, s.name or s.text) for s in plan.steps if s.kind != "rank"]
    assert kinds == [("bind", "a", "B"), ("bind", "a", "M"), ("bind", "a", "K"),
                     ("check", "b", "B"), ("check", "b", "K"), ("bind", "b", "N")]
    assert plan.order == ("B", "M", "K", "N")


def test_repeated_name_that_disagrees_names_both_declarations():
    b, m, k, n = dims(4)
    message = unify_error(patterns(a="[B, M, K]", b="[B, K, N]"), {"a": (b, m, k), "b": (b, k + 1, n)})
    assert message == f"b shape [B, K, N] with B={b}, K={k + 1} does not match a shape [B, M, K] with K={k}"


def test_known_name_is_checked_not_bound():
    g, m = dims(2)
    assert solve(patterns(x="[G, M]"), {"x": (g, m)}, known={"G"}, env={"G": g}) == {"G": g, "M": m}
    message = unify_error(patterns(x="[G, M]"), {"x": (g + 1, m)}, known={"G"}, env={"G": g})
    assert message == f"x shape [G, M] with G={g + 1} does not match G={g}"


def test_mismatch_with_a_known_name_says_where_its_value_came_from():
    g, m = dims(2)
    decls = patterns(x="[G, M]")
    with pytest.raises(UnifyError) as info:
        run_solve(plan_solve(decls, {"G"}), decls, {"x": (g + 1, m)}, {"G": g}, {"G": "param G"})
    assert info.value.message == f"x shape [G, M] with G={g + 1} does not match param G with G={g}"


def test_known_expression_axis_is_checked_with_its_value():
    g, m = dims(2)
    message = unify_error(patterns(x="[2 * G, M]"), {"x": (2 * g + 1, m)}, known={"G"}, env={"G": g})
    assert message == (f"x shape [{2 * g + 1}, {m}] does not fit [2 * G, M] with G={g}: axis 0 is {2 * g + 1} "
                       f"but 2 * G = {2 * g}")


def test_rank_that_does_not_fit_is_reported_with_the_rank_wanted():
    message = unify_error(patterns(a="[B, M, K]"), {"a": (2, 3)})
    assert message == "a shape [2, 3] does not fit [B, M, K]: rank 3, got rank 2"


# -- row 2: a * M + e solves, with divisibility and sign checks ------------------------------------

def test_affine_axis_solves_for_its_name():
    m, n = dims(2)
    assert solve(patterns(x="[M, 2 * N]"), {"x": (m, 2 * n)}) == {"M": m, "N": n}


def test_affine_axis_is_a_solve_step_with_the_coefficient():
    plan = plan_solve(patterns(x="[M, 2 * N]"), set())
    (step,) = [s for s in plan.steps if s.kind == "solve"]
    assert (step.tensor, step.item, step.name, step.coeff, step.text) == ("x", 1, "N", 2, "2 * N")


def test_affine_axis_that_is_not_divisible_is_an_error():
    m, n = dims(2)
    message = unify_error(patterns(x="[M, 2 * N]"), {"x": (m, 2 * n + 1)})
    assert message == (f"x shape [{m}, {2 * n + 1}] does not fit [M, 2 * N]: axis 1 is {2 * n + 1}, "
                       f"so N = ({2 * n + 1} - 0) / 2 is not divisible by 2")


def test_offset_axis_solves_for_its_name():
    b = random.randint(0, 9)
    assert solve(patterns(cu_seqlens="[B + 1]"), {"cu_seqlens": (b + 1,)}) == {"B": b}


def test_offset_axis_that_gives_a_negative_value_is_an_error():
    message = unify_error(patterns(cu_seqlens="[B + 1]"), {"cu_seqlens": (0,)})
    assert message == "cu_seqlens shape [0] does not fit [B + 1]: axis 0 is 0, so B = (0 - 1) / 1 is negative"


def test_affine_offset_may_use_a_name_bound_earlier():
    k, n = dims(2)
    env = solve(patterns(k="[K]", x="[3 * N + K]"), {"k": (k,), "x": (3 * n + k,)})
    assert env == {"K": k, "N": n}


def test_negative_coefficient_is_not_solved():
    plan = plan_solve(patterns(x="[K - N]", k="[K]"), set())
    assert plan.unsolved == {"N"}
    assert plan.reasons["N"] == ("appears only in x [K - N] where it is not a lone name, an affine a * name + e, "
                                 "or the one unknown variadic part")


def test_product_of_two_unknowns_is_not_solved():
    plan = plan_solve(patterns(x="[M * N]"), set())
    assert plan.unsolved == {"M", "N"}


# -- row 3: *S binds the remaining axes ---------------------------------------------------------

@pytest.mark.parametrize("rank", [1, 2, 4])
def test_variadic_part_binds_the_axes_the_others_leave(rank):
    shape = dims(rank)
    assert solve(patterns(x="[*S, N]"), {"x": shape}) == {"S": shape[:-1], "N": shape[-1]}


def test_variadic_part_may_bind_no_axes():
    assert solve(patterns(x="[B, C, *R]"), {"x": (2, 3)}) == {"B": 2, "C": 3, "R": ()}


def test_variadic_part_with_too_few_axes_left_is_a_rank_error():
    message = unify_error(patterns(x="[B, C, *R]"), {"x": (2,)})
    assert message == "x shape [2] does not fit [B, C, *R]: rank at least 2, got rank 1"


def test_known_variadic_part_is_checked_and_the_unknown_one_binds_the_rest():
    shape = dims(4)
    env = solve(patterns(x="[*S, *N]"), {"x": shape}, lets={"N": "normalized_shape"}, known={"normalized_shape"},
                env={"normalized_shape": shape[2:]})
    assert env["S"] == shape[:2] and env["N"] == shape[2:]


def test_known_variadic_part_that_disagrees_is_an_error_naming_the_let():
    message = unify_error(patterns(x="[*S, *N]"), {"x": (4, 8)}, lets={"N": "normalized_shape"},
                          known={"normalized_shape"}, env={"normalized_shape": (16,)})
    assert message == "x shape [*S, *N] with N=(8,), S=(4,) does not match let N = normalized_shape with N=(16,)"


def test_two_unknown_variadic_parts_are_unsolvable():
    plan = plan_solve(patterns(x="[*S, *N]"), set())
    assert plan.unsolved == {"S", "N"}


def test_variadic_part_bound_by_one_tensor_is_checked_on_another():
    shape = dims(3)
    assert solve(patterns(x="[*S]", y="[*S]"), {"x": shape, "y": shape}) == {"S": shape}
    message = unify_error(patterns(x="[*S]", y="[*S]"), {"x": shape, "y": shape[:2]})
    assert message == f"y shape [{', '.join(map(str, shape[:2]))}] does not fit [*S] with S={_tuple(shape)}: " \
                      f"rank 3, got rank 2"


def _tuple(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


# -- row 5: anything else is checked ------------------------------------------------------------

def test_floor_division_axis_is_checked_against_the_name_bound_elsewhere():
    m, n, half = dims(3)
    k = 2 * half + 1  # odd: K // 2 == half
    assert solve(patterns(a="[M, K]", w="[N, K // 2]"), {"a": (m, k), "w": (n, half)}) == {"M": m, "K": k, "N": n}


def test_floor_division_axis_that_disagrees_says_where_the_name_came_from():
    m, n, half = dims(3)
    message = unify_error(patterns(a="[M, K]", w="[N, K // 2]"), {"a": (m, 2 * half), "w": (n, half + 1)})
    assert message == (f"w shape [{n}, {half + 1}] does not fit [N, K // 2] with K={2 * half}, N={n}: axis 1 is "
                       f"{half + 1} but K // 2 = {half} (K from a shape [M, K])")


def test_floor_division_alone_cannot_bind():
    plan = plan_solve(patterns(w="[N, K // 2]"), set())
    assert plan.unsolved == {"K"}


def test_lets_become_known_once_their_inputs_are():
    m, n = dims(2)
    plan = plan_solve(patterns(x="[M, N]", y="[MN]"), set(), {"MN": parse_expr("M * N")})
    assert [s.kind for s in plan.steps if s.kind != "rank"] == ["bind", "bind", "let", "check"]
    env = {}
    run_solve(plan, patterns(x="[M, N]", y="[MN]"), {"x": (m, n), "y": (m * n,)}, env, {})
    assert env["MN"] == m * n


def test_absent_tensor_is_skipped():
    m = random.randint(1, 9)
    decls = patterns(x="[M]", w="[M]")
    plan = plan_solve(decls, set())
    env: dict = {}
    run_solve(plan, decls, {"x": (m,)}, env, {})
    assert env == {"M": m}


# -- the solve order is independent of the declaration order ---------------------------------------

DECLS = {"x": "[*S, 2 * N]", "w": "[N]", "idx": "[B + 1]", "tab": "[B, K // 2, N]", "k": "[K]", "y": "[*S]"}


def _consistent_shapes(s: tuple[int, ...], n: int, b: int, k: int) -> dict[str, tuple[int, ...]]:
    return {"x": (*s, 2 * n), "w": (n,), "idx": (b + 1,), "tab": (b, k // 2, n), "k": (k,), "y": s}


@settings(max_examples=40, deadline=None)
@given(order=st.permutations(sorted(DECLS)), s=st.lists(st.integers(0, 5), max_size=3).map(tuple),
       n=st.integers(0, 6), b=st.integers(0, 6), k=st.integers(0, 9))
def test_every_declaration_order_solves_the_same_values(order, s, n, b, k):
    decls = patterns(**{name: DECLS[name] for name in order})
    plan = plan_solve(decls, set())
    assert plan.unsolved == frozenset()
    env: dict = {}
    run_solve(plan, decls, _consistent_shapes(s, n, b, k), env, {})
    assert env == {"S": s, "N": n, "B": b, "K": k}


@settings(max_examples=40, deadline=None)
@given(order=st.permutations(sorted(DECLS)), broken=st.sampled_from(sorted(DECLS)))
def test_every_declaration_order_rejects_an_inconsistent_call(order, broken):
    shapes = _consistent_shapes((2, 3), 4, 5, 7)
    shapes[broken] = tuple(d + 1 for d in shapes[broken]) if shapes[broken] else (1,)
    decls = patterns(**{name: DECLS[name] for name in order})
    with pytest.raises(UnifyError):
        run_solve(plan_solve(decls, set()), decls, shapes, {}, {})


def test_unsolvable_set_does_not_depend_on_declaration_order():
    decls = {"a": "[M, K // 2]", "b": "[K - N]", "c": "[*S, *T]", "d": "[2 * M + 1]"}
    results = {plan_solve(patterns(**dict(p)), set()).unsolved for p in itertools.permutations(decls.items())}
    assert results == {frozenset({"K", "N", "S", "T"})}
