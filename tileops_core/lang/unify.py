"""Index inference: a solve order computed once, then unification against actual shapes.

Seed 000 table 1, per axis of a declared shape:

1. ``M`` with ``M`` unknown: ``M := axis``;
2. ``a * M + e`` (``a`` a known positive integer, ``e`` known, ``M`` the only unknown):
   ``M := (axis - e) / a``, checking divisibility and that ``M >= 0``;
3. ``*S`` where ``S`` is the only unknown part and the other parts' lengths are known:
   ``S :=`` the remaining axes;
4. (dtypes, in :mod:`tileops_core.op`) a DType index binds to the actual dtype;
5. anything else is checked.

:func:`plan_solve` decides, before any call, which axis binds which name: it repeats passes
over the declarations in order until nothing new can be bound, so the order in which
tensors are declared never changes what is solvable. ``let`` names become known as soon
as their inputs are. What is left unknown is reported (the validator rejects such specs).
:func:`run_solve` executes a plan on actual shapes; it is only on the slow path of a call
(the first call with new shapes), so it favours clear messages over speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import ir
from .evaluate import Unbound, compile_node
from .shapes import Axis, ShapePattern, Variadic, affine_in

__all__ = ["Step", "SolvePlan", "UnifyError", "plan_solve", "run_solve", "item_spans"]


@dataclass(frozen=True)
class Step:
    """One action of a solve plan.

    ``kind`` is ``"bind"`` (lone unknown), ``"solve"`` (affine), ``"bind_shape"`` (variadic),
    ``"check"`` (an axis must equal its expression), ``"check_shape"`` (a known variadic),
    ``"rank"`` (the rank fits the declaration) or ``"let"`` (compute a let).
    """

    kind: str
    tensor: str | None
    item: int | None
    name: str | None = None
    coeff: int = 1
    fn: Callable[[Mapping[str, Any]], Any] | None = field(default=None, compare=False, repr=False)
    text: str = ""

    # The plan fills ``name``, ``item`` and ``fn`` for exactly the kinds that use them; these
    # accessors say so to the type checker (and fail loudly on a malformed step).

    @property
    def target(self) -> str:
        """The name a bind/solve/let step binds or a check_shape step checks."""
        if self.name is None:
            raise TypeError(f"a {self.kind} step binds no name")
        return self.name

    @property
    def position(self) -> int:
        """The index of the pattern item an axis step reads."""
        if self.item is None:
            raise TypeError(f"a {self.kind} step reads no axis")
        return self.item

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The value of the expression a let/solve/check step computes."""
        if self.fn is None:
            raise TypeError(f"a {self.kind} step computes nothing")
        return self.fn(env)


@dataclass(frozen=True)
class SolvePlan:
    """The ordered steps, the order names become known, and what could not be solved."""

    steps: tuple[Step, ...]
    order: tuple[str, ...]
    unsolved: frozenset[str]
    reasons: Mapping[str, str]


class UnifyError(Exception):
    """A shape that does not fit its declaration; the op layer adds op name and location."""

    def __init__(self, tensor: str, message: str) -> None:
        super().__init__(message)
        self.tensor = tensor
        self.message = message


def _unknown(names: frozenset[str], known: set[str]) -> set[str]:
    return {n for n in names if n not in known}


def plan_solve(patterns: Mapping[str, ShapePattern], known: set[str] | frozenset[str],
               lets: Mapping[str, ir.Node] | None = None,
               indices: set[str] | frozenset[str] | None = None) -> SolvePlan:
    """Compute the solve order for ``patterns`` (tensor -> declared shape).

    ``known`` are names with values before unification (params, static dims, lets of
    params); ``lets`` may become known on the way; ``indices`` (default: every other name
    in the patterns) are what must end up known.
    """
    known = set(known)
    lets = dict(lets or {})
    steps: list[Step] = []
    order: list[str] = []
    ranked: set[str] = set()
    done: set[tuple[str, int]] = set()
    pending_lets = {n: e for n, e in lets.items() if n not in known}

    def settle_lets() -> bool:
        progressed = False
        for name, node in list(pending_lets.items()):
            if ir.free_names(node) <= known:
                steps.append(Step("let", None, None, name, fn=compile_node(node), text=ir.unparse(node)))
                known.add(name)
                order.append(name)
                del pending_lets[name]
                progressed = True
        return progressed

    settle_lets()
    progressed = True
    while progressed:
        progressed = False
        for tensor, pattern in patterns.items():
            unknown_variadics = [v for v in pattern.variadics if v not in known]
            if len(unknown_variadics) > 1:
                continue
            if tensor not in ranked:
                steps.append(Step("rank", tensor, None, text=pattern.text))
                ranked.add(tensor)
            for i, item in enumerate(pattern.items):
                if (tensor, i) in done:
                    continue
                if isinstance(item, Variadic):
                    if item.name in known:
                        steps.append(Step("check_shape", tensor, i, item.name, text=item.text))
                    else:
                        steps.append(Step("bind_shape", tensor, i, item.name, text=item.text))
                        known.add(item.name)
                        order.append(item.name)
                    done.add((tensor, i))
                    progressed = True
                    continue
                missing = _unknown(ir.free_names(item.node), known)
                if not missing:
                    steps.append(Step("check", tensor, i, fn=compile_node(item.node), text=item.text))
                    done.add((tensor, i))
                    progressed = True
                    continue
                if len(missing) != 1:
                    continue
                (name,) = missing
                if isinstance(item.node, ir.Name):
                    steps.append(Step("bind", tensor, i, name, text=item.text))
                else:
                    form = affine_in(item.node, name)
                    if form is None or form[0] <= 0:
                        continue
                    coeff, rest = form
                    steps.append(Step("solve", tensor, i, name, coeff=coeff, fn=compile_node(rest), text=item.text))
                known.add(name)
                order.append(name)
                done.add((tensor, i))
                progressed = True
            if settle_lets():
                progressed = True
    wanted = set(indices) if indices is not None else set().union(*(p.names() for p in patterns.values())) \
        if patterns else set()
    unsolved = frozenset(n for n in wanted if n not in known)
    reasons = {}
    for name in unsolved:
        uses = [f"{t} {p.text}" for t, p in patterns.items() if name in p.names()]
        reasons[name] = ("appears only in " + "; ".join(uses) + " where it is not a lone name, an affine "
                         "a * name + e, or the one unknown variadic part") if uses else "appears in no input shape"
    return SolvePlan(tuple(steps), tuple(order), unsolved, reasons)


def item_spans(pattern: ShapePattern, rank: int, env: Mapping[str, Any]) -> list[tuple[int, int]] | None:
    """Where each item of ``pattern`` sits in a shape of ``rank`` (None: rank does not fit).

    Known variadic parts take their length from ``env``; at most one unknown variadic part
    takes whatever is left.
    """
    lengths: list[int | None] = []
    for item in pattern.items:
        if isinstance(item, Axis):
            lengths.append(1)
        else:
            value = env.get(item.name)
            lengths.append(None if value is None else len(value))
    free = rank - sum(n for n in lengths if n is not None)
    unknown = [i for i, n in enumerate(lengths) if n is None]
    if len(unknown) > 1 or free < 0 or (not unknown and free != 0):
        return None
    if unknown:
        lengths[unknown[0]] = free
    spans, pos = [], 0
    for n in lengths:
        width = free if n is None else n  # the one unknown length is the free rank
        spans.append((pos, pos + width))
        pos += width
    return spans


def _describe(pattern: ShapePattern, env: Mapping[str, Any]) -> str:
    names = sorted(n for n in pattern.names() if n in env)
    bound = ", ".join(f"{n}={_fmt(env[n])}" for n in names)
    return f"{pattern.text}" + (f" with {bound}" if bound else "")


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def run_solve(plan: SolvePlan, patterns: Mapping[str, ShapePattern], shapes: Mapping[str, tuple[int, ...]],
              env: dict[str, Any], origin: dict[str, str]) -> None:
    """Execute ``plan`` on actual ``shapes``, binding into ``env``; raise UnifyError on a mismatch.

    ``origin`` records, for each bound name, which tensor and declaration bound it, so that a
    later mismatch can say what the other side was.
    """
    spans_cache: dict[str, list[tuple[int, int]]] = {}

    def spans(tensor: str) -> list[tuple[int, int]]:
        if tensor not in spans_cache:
            pattern, shape = patterns[tensor], shapes[tensor]
            got = item_spans(pattern, len(shape), env)
            if got is None:
                need = pattern.fixed_rank + sum(len(env[v]) for v in pattern.variadics if v in env)
                exact = all(v in env for v in pattern.variadics)
                want = f"rank {need}" if exact else f"rank at least {need}"
                raise UnifyError(tensor, f"{tensor} shape {list(shape)} does not fit {_describe(pattern, env)}: "
                                         f"{want}, got rank {len(shape)}")
            spans_cache[tensor] = got
        return spans_cache[tensor]

    for step in plan.steps:
        if step.kind == "let":
            try:
                env[step.target] = step.evaluate(env)
            except Unbound:
                continue
            origin.setdefault(step.target, f"let {step.target} = {step.text}")
            continue
        tensor = step.tensor
        assert tensor is not None
        if tensor not in shapes:
            continue  # an absent optional input: nothing to unify
        shape, pattern = shapes[tensor], patterns[tensor]
        if step.kind == "rank":
            spans(tensor)
            continue
        lo, hi = spans(tensor)[step.position]
        if step.kind == "bind":
            env[step.target] = shape[lo]
            origin[step.target] = f"{tensor} shape {pattern.text}"
        elif step.kind == "solve":
            rest = step.evaluate(env)
            num = shape[lo] - rest
            if num % step.coeff != 0 or num < 0:
                why = "negative" if num < 0 else f"not divisible by {step.coeff}"
                raise UnifyError(tensor, f"{tensor} shape {list(shape)} does not fit {pattern.text}: axis {lo} is "
                                         f"{shape[lo]}, so {step.target} = ({shape[lo]} - {rest}) / {step.coeff} is "
                                         f"{why}")
            env[step.target] = num // step.coeff
            origin[step.target] = f"{tensor} shape {pattern.text}"
        elif step.kind == "bind_shape":
            env[step.target] = tuple(shape[lo:hi])
            origin[step.target] = f"{tensor} shape {pattern.text}"
        elif step.kind == "check_shape":
            actual = tuple(shape[lo:hi])
            if actual != tuple(env[step.target]):
                _mismatch(tensor, pattern, shape, step.target, actual, env, origin)
        elif step.kind == "check":
            expected = step.evaluate(env)
            if shape[lo] != expected:
                item = pattern.items[step.position]
                names = ir.free_names(item.node) if isinstance(item, Axis) else frozenset()
                if isinstance(item, Axis) and isinstance(item.node, ir.Name):
                    _mismatch(tensor, pattern, shape, item.node.id, shape[lo], env, origin)
                raise UnifyError(tensor, f"{tensor} shape {list(shape)} does not fit {_describe(pattern, env)}: "
                                         f"axis {lo} is {shape[lo]} but {step.text} = {expected}"
                                         + _origins(names, origin))


def _origins(names: frozenset[str] | set[str], origin: Mapping[str, str]) -> str:
    parts = [f"{n} from {origin[n]}" for n in sorted(names) if n in origin]
    return f" ({'; '.join(parts)})" if parts else ""


def _mismatch(tensor: str, pattern: ShapePattern, shape: tuple[int, ...], name: str, actual: Any,
              env: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    mine = dict(env)
    mine[name] = actual
    source = origin.get(name, "")
    raise UnifyError(tensor, f"{tensor} shape {_describe(pattern, mine)} does not match "
                             f"{source + ' with ' if source else ''}{name}={_fmt(env[name])}")
