"""``tileops validate``: the spec validator (seed 001's L0-L4, seed 000's eight checks, table 3).

With no path it validates the whole manifest: the core's specs and every directory a
loaded plugin contributes; a plugin that failed to load is an error. Paths (files or
directories of ``*.yaml``) validate just those.
``spec-only`` specs get the spec lint; ``implemented`` ones also the conformance pass
against their op class; ``--check-op NAME`` runs everything for one op and reports only
it. ``--no-conformance`` runs the lint alone, without loading plugins or importing torch
(also what happens, with a note, where torch is not installed). ``--fix`` applies the mechanical rewrites of table 3 in place, then validates again;
each file is replaced whole or not at all (:mod:`.output`).

Exit code: 0 when no error is left (warnings and advisories do not fail), 1 when errors
remain (or ``--fix`` cannot write a file), 2 for a usage error (a missing path, a folder
with no ``*.yaml`` file, an unknown op).
"""

from __future__ import annotations

import argparse
import sys

from ..validate.lint import DEFAULT_MAX_COMBINATIONS
from ..validate.report import render_json, render_text
from ..validate.runner import Report, UsageError, torch_available, validate
from .main import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, positive_int
from .output import replacing

__all__ = ["NAME", "HELP", "add_arguments", "needs_plugins", "run"]

NAME = "validate"
HELP = "check specs (structure, the eight checks on every discriminant combination, code conformance)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="YAML files or directories to validate (default: the whole manifest, plugins included)")
    parser.add_argument("--check-op", metavar="NAME", help="run every check, code included, on this op only")
    parser.add_argument("--fix", action="store_true",
                        help="rewrite table 3's mechanical forms (==-definitions, 'is None', x.shape == (...)) in place")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--no-conformance", dest="conformance", action="store_false",
                        help="run the spec lint alone: no op classes, no plugins loaded, torch not imported")
    parser.add_argument("--max-combinations", type=positive_int, default=DEFAULT_MAX_COMBINATIONS, metavar="N",
                        help="advisory note past N discriminant combinations (all are still checked; default "
                             f"{DEFAULT_MAX_COMBINATIONS})")


def needs_plugins(args: argparse.Namespace) -> bool:
    """Plugins (and with them torch) are loaded only for the conformance pass."""
    return bool(args.conformance) and torch_available()


def run(args: argparse.Namespace) -> int:
    try:
        def once() -> Report:
            return validate(args.paths, check_op=args.check_op, max_combinations=args.max_combinations,
                            conformance=args.conformance)

        report = once()
        unwritten = False
        if args.fix:
            changed, unwritten = _fix(report)
            if changed:
                report = once()
    except UsageError as exc:
        print(f"tileops validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render_json(report) if args.format == "json" else render_text(report))
    return EXIT_OK if report.ok and not unwritten else EXIT_FINDINGS


def _fix(report: Report) -> tuple[bool, bool]:
    """Rewrite every file with a fixable finding; say what changed on stderr (stdout keeps the report).

    Returns whether a file changed, and whether one could not be written (it is left as it was,
    the others are still fixed; found in review: a read-only file ended the command in a traceback)."""
    from ..validate.fix import FIXABLE, fix_file

    files = report.files
    targets = sorted({d.file for d in report.diagnostics if d.rule in FIXABLE and d.file in files})
    changed = unwritten = False
    for label in targets:
        try:
            result = fix_file(files[label], label, write=False)
            if result.changed:  # whole or not at all: a spec cut short would not load
                with replacing(files[label]) as temporary:
                    temporary.write_text(result.text, encoding="utf-8")
        except OSError as exc:
            print(f"tileops validate: --fix cannot write {files[label]}: {exc.strerror or exc}", file=sys.stderr)
            unwritten = True
            continue
        for line in result.applied:
            print(f"fixed {label}: {line}", file=sys.stderr)
        for line in result.skipped:
            print(f"not fixed: {line}", file=sys.stderr)
        changed |= result.changed
    return changed, unwritten
