"""The ``tileops`` command line: one module per sub-command, one set of conventions.

Conventions every sub-command follows: ``--help`` everywhere; exit code 0 when all is
well, 1 for findings or failures, 2 for usage errors; ``--format json`` where the output is
data; a user error (a :class:`TileOpsError`) prints one clear message, never a traceback.

A sub-command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``, and may define ``needs_plugins(args) -> bool`` (default: true) when it
can run without the installed plugins (``tileops validate --no-conformance`` imports no
torch). Only the module of the command asked for is imported (all of them for ``--help``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import NoReturn, Sequence

from .._version import __version__
from ..errors import TileOpsError, UsageError

__all__ = ["main", "COMMANDS", "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE", "options_given", "positive_int"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS = ("ops", "validate", "bench", "calibrate", "backends", "explain", "lock", "docs", "demo")


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts: a bad value is a usage error (exit 2), not a traceback later."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def options_given(args: argparse.Namespace, defaults: dict[str, object]) -> list[str]:
    """The flags (``--name``) among ``defaults`` whose value is not the default: what a mode of a command
    that has no use for them refuses by name instead of ignoring."""
    return ["--" + name.replace("_", "-") for name, default in defaults.items() if getattr(args, name) != default]


def _command_modules(names: Sequence[str] = COMMANDS) -> list[ModuleType]:
    return [importlib.import_module(f"{__package__}.cmd_{name}") for name in names]


def _requested(argv: Sequence[str]) -> tuple[str, ...]:
    """The command named on the line (its module alone is imported), else every command."""
    first = next((token for token in argv if not token.startswith("-")), None)
    return (first,) if first in COMMANDS else COMMANDS


def _needs_plugins(args: argparse.Namespace) -> bool:
    return True


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message short and on stderr."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog="tileops", description="TileOPs: spec-driven operators for PyTorch.")
    parser.add_argument("--version", action="store_true", help="print every installed TileOPs distribution's version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in _command_modules(commands):
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _needs_plugins=getattr(module, "needs_plugins", _needs_plugins))
    return parser


def _print_version() -> None:
    from importlib import metadata
    print(f"tileops {__version__}")
    for dist in sorted(metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("tileops-") or any(ep.group == "tileops" for ep in dist.entry_points):
            if name.lower() != "tileops":
                print(f"{name} {dist.version}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tileops`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_requested(argv))
    args = parser.parse_args(argv)
    if args.version:
        _print_version()
        return EXIT_OK
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        if args._needs_plugins(args):
            from ..plugins import ensure_plugins_loaded

            ensure_plugins_loaded()  # the command sees the installed backends and the specs they ship
        return int(args._run(args) or EXIT_OK)
    except UsageError as exc:  # whichever command raised it (found in review: explain and lock exited 1)
        print(f"tileops {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TileOpsError as exc:
        print(f"tileops {args.command}: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tileops ... | head`: the reader left; not an error of ours
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
