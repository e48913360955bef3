"""The validator (``tileops validate``): a pure spec lint and a conformance pass over op classes.

* :func:`lint_spec` checks one spec from its YAML alone (no torch): seed 001's L0 and the
  spec halves of L2-L4, seed 000 §6's eight checks on every discriminant combination (past
  a bound: projected over the params something reads, else a labelled sample; see
  :mod:`.coverage`), and the rejected forms of seed 000 table 3.
* :func:`validate` runs the lint on every spec of the manifest (or of given files) and, for
  ``implemented`` specs, the conformance pass (:mod:`.conformance`, :mod:`.inference`): the
  op class found through ``source.op``, its ``__init__``/``forward``, its generated checks
  on meta tensors of every workload row, its compile boundary, its benchmark.
* :mod:`.fix` applies table 3's mechanical rewrites (``tileops validate --fix``).

Every finding is a :class:`Diagnostic` with a rule id from :data:`RULES`.
"""

from .diagnostics import ADVISORY, ERROR, WARNING, Diagnostic
from .lint import DEFAULT_MAX_COMBINATIONS, LintResult, lint_spec
from .rules import RULES, describe
from .runner import Report, UsageError, validate

__all__ = [
    "ADVISORY", "DEFAULT_MAX_COMBINATIONS", "Diagnostic", "ERROR", "LintResult", "RULES", "Report", "UsageError",
    "WARNING", "describe", "lint_spec", "validate",
]
