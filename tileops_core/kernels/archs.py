"""Arch patterns: what a kernel's ``supported_archs`` entries mean, and when two of them overlap.

An entry is one of

* ``"*"``: every arch;
* an exact name: ``"sm_90"``, ``"sm_90a"``, ``"ascend310p"``: that arch alone;
* a range: ``"sm_90+"``: the same family (the letters before the number, ``sm_``) with a
  number at least 90, whatever its suffix (``sm_90a``, ``sm_100``, ``sm_120`` are in,
  ``sm_89`` is not);
* a family: ``"sm_8x"``: the same family with a number of the digits before the ``x``
  followed by one digit per ``x`` (``sm_80`` .. ``sm_89``, ``sm_86`` too; ``sm_10xx`` is
  ``sm_1000`` .. ``sm_1099``).

A new compute capability is then served by a kernel that declared the range it was written
for, without a new release naming it (FlashInfer's exact list rejected one). Patterns are
parsed when a kernel is registered, so a malformed entry fails the backend's load, not a
call. :func:`patterns_overlap` is what the contradiction checks reason with: two general
kernels for one device type contradict each other only where their arch sets meet.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import PluginError

__all__ = ["ArchPattern", "parse_arch_pattern", "arch_matches", "patterns_overlap",
           "check_supported_archs"]

_NAME = re.compile(r"^([A-Za-z_]*?)(\d+)([A-Za-z]*)$")
_RANGE = re.compile(r"^([A-Za-z_]*?)(\d+)\+$")
_FAMILY = re.compile(r"^([A-Za-z_]*?)(\d+)(x+)$")


@dataclass(frozen=True)
class ArchPattern:
    """One ``supported_archs`` entry as a set of archs: ``family`` plus a number interval ``[lo, hi]``.

    ``exact`` holds the name of an exact entry (which also needs its suffix to match); a
    name without a number (``"cpu"``) is exact with no interval; ``"*"`` has ``any``.
    """

    text: str
    family: str = ""
    lo: int = 0
    hi: int | None = None  # None: no upper bound
    exact: str | None = None
    any: bool = False

    def matches(self, arch: str) -> bool:
        """Whether ``arch`` (a device's exact arch name) is in this pattern's set."""
        if self.any:
            return True
        if self.exact is not None:
            return arch == self.exact
        parsed = _split(arch)
        if parsed is None:
            return False
        family, number, _suffix = parsed
        return family == self.family and number >= self.lo and (self.hi is None or number <= self.hi)

    def overlaps(self, other: "ArchPattern") -> bool:
        """Whether some arch is in both sets."""
        if self.any or other.any:
            return True
        if self.exact is not None:
            return other.matches(self.exact) if other.exact is None else other.exact == self.exact
        if other.exact is not None:
            return self.matches(other.exact)
        if self.family != other.family:
            return False
        hi_a = float("inf") if self.hi is None else self.hi
        hi_b = float("inf") if other.hi is None else other.hi
        return max(self.lo, other.lo) <= min(hi_a, hi_b)


def _split(arch: str) -> tuple[str, int, str] | None:
    found = _NAME.match(arch)
    return None if found is None else (found.group(1), int(found.group(2)), found.group(3))


@functools.lru_cache(maxsize=1024)
def parse_arch_pattern(text: str) -> ArchPattern:
    """Parse one ``supported_archs`` entry (module docstring); a malformed one raises ``ValueError``."""
    if not isinstance(text, str) or not text.strip() or text != text.strip():
        raise ValueError(f"arch pattern {text!r} is empty or padded")
    if text == "*":
        return ArchPattern(text, any=True)
    ranged = _RANGE.match(text)
    if ranged:
        return ArchPattern(text, ranged.group(1), int(ranged.group(2)), None)
    family = _FAMILY.match(text)
    if family:
        digits, width = family.group(2), len(family.group(3))
        base = int(digits) * 10 ** width
        return ArchPattern(text, family.group(1), base, base + 10 ** width - 1)
    if all(c.isalnum() or c in "_-." for c in text):
        return ArchPattern(text, exact=text)
    raise ValueError(f"arch pattern {text!r} is not an arch name, 'name+' or a family like 'sm_8x'")


def arch_matches(patterns: Iterable[str], arch: str) -> bool:
    """Whether a device of ``arch`` is in any of ``patterns`` (a kernel's ``supported_archs``)."""
    return any(parse_arch_pattern(p).matches(arch) for p in patterns)


def patterns_overlap(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two ``supported_archs`` declarations share an arch."""
    pa, pb = [parse_arch_pattern(p) for p in a], [parse_arch_pattern(p) for p in b]
    return any(x.overlaps(y) for x in pa for y in pb)



def check_supported_archs(qualname: str, patterns: Iterable[str]) -> None:
    """Refuse a kernel whose ``supported_archs`` has an entry that is not a pattern (at registration)."""
    if isinstance(patterns, str):
        raise PluginError(f"{qualname}.supported_archs is the string {patterns!r}; declare a tuple, e.g. "
                          f"({patterns!r},)")
    for p in patterns:
        try:
            parse_arch_pattern(p)
        except (ValueError, TypeError) as exc:
            raise PluginError(f"{qualname}.supported_archs: {exc}") from None
