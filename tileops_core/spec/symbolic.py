"""Evaluating spec expressions when only the discriminants are known.

On a discriminant combination the validator knows which optional inputs are present,
which Maybe params are given and the values of bool/enum/ADT params, but no axis length.
Everything known to exist but of unknown value is bound to :data:`UNKNOWN`, a value on
which every operation raises :class:`Undecided`; absent things are ``None`` exactly as at
a call (``present(x)`` reads ``x is not None``). Evaluating an expression through the
language's own closures then has three outcomes: a definite value (``requires`` excludes
the combination, a shape rule is false on every call of it), *undecided* (it depends on
axis lengths, as it should), or a failure caused by reading something absent (a missing
guard). :data:`OTHER` stands for "any value not named by a type family's cases".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import ExprError
from ..lang.evaluate import Unbound

__all__ = ["Undecided", "AbsentUse", "UNKNOWN", "OTHER", "Outcome", "attempt"]


class Undecided(Exception):
    """The value depends on something not known on a combination (an axis length, a float)."""


class AbsentUse(Exception):
    """An operation combined an absent value (``None``) with a present one."""


class _Unknown:
    """A present value of unknown content: every operation on it is undecided."""

    __slots__ = ()

    def _undecided(self, *args: Any) -> Any:
        for other in args:
            if other is None:
                raise AbsentUse("an absent value (None) is used in arithmetic or a comparison")
        raise Undecided()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _undecided
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _undecided
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _undecided
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _undecided
    __bool__ = __len__ = __iter__ = __getitem__ = __contains__ = __index__ = __int__ = __float__ = _undecided
    __hash__ = object.__hash__

    def __getattr__(self, name: str) -> Any:
        raise Undecided()

    def __repr__(self) -> str:
        return "<unknown>"


class _Other:
    """"Any other value": equal to nothing, so only a family's ``_`` case matches it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<other>"


#: A present value whose content is not known on a combination.
UNKNOWN: Any = _Unknown()
#: A value that none of a family's explicit cases names.
OTHER: Any = _Other()


@dataclass(frozen=True)
class Outcome:
    """The result of :func:`attempt`: ``decided`` with ``value``, or why it is not."""

    decided: bool
    value: Any = None
    absent: str | None = None  # what absent thing broke the evaluation (a missing guard)
    unbound: str | None = None  # the name that had no value


def attempt(fn: Callable[[Mapping[str, Any]], Any], env: Mapping[str, Any]) -> Outcome:
    """Evaluate a compiled expression on a partially known ``env``."""
    try:
        value = fn(env)
        if value is UNKNOWN:
            return Outcome(False)
        return Outcome(True, value)
    except Undecided:
        return Outcome(False)
    except Unbound as exc:
        return Outcome(False, unbound=exc.name)
    except AbsentUse as exc:
        return Outcome(False, absent=str(exc))
    except (TypeError, AttributeError) as exc:
        # Python raises these only when an operand is None here: every present value is
        # UNKNOWN (which raises Undecided first) or a real param value of the right type.
        return Outcome(False, absent=str(exc))
    except (ExprError, ArithmeticError, ValueError, IndexError, KeyError, RecursionError):  # (OverflowError: review)
        return Outcome(False)
