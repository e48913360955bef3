"""A steering setting with two layers: a value set by the program over one read from the environment.

Per-op overrides (:mod:`.overrides`) and the compile decomposition policy
(:mod:`.compile_policy`) are both text in an environment variable, parsed when their module
is imported, that a program (or a command's flag) may replace. A malformed environment value
must not break ``import tileops_core``: it is kept as its error and raised where the setting
is first read. Every change bumps the registry generation, so selections, op plans and
compiled graphs made under the old value are made again.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Generic, Iterator, TypeVar

from ..errors import TileOpsError
from .registry import GENERATION

__all__ = ["Setting"]

T = TypeVar("T")


class Setting(Generic[T]):
    """The value in force: the program's (:meth:`set`), else the environment variable's, else None."""

    def __init__(self, env_var: str, parse: Callable[[str, str], T]) -> None:
        self.env_var = env_var
        self.parse = parse
        self._process: T | None = None
        self._env: T | TileOpsError | None = None
        self.refresh_env()

    def set(self, text: str | None, source: str) -> T | None:
        """Parse and put ``text`` in force (None or empty: fall back to the environment)."""
        self._process = self.parse(text, source) if text else None
        GENERATION[0] += 1
        return self._process

    @contextlib.contextmanager
    def use(self, text: str | None, source: str) -> Iterator[T | None]:
        """:meth:`set` for the block (process-wide, like it); the previous value comes back after."""
        previous = self._process
        try:
            yield self.set(text, source)
        finally:
            self._process = previous
            GENERATION[0] += 1

    def refresh_env(self) -> None:
        """Read the environment variable again (a malformed value raises at the first :meth:`get`)."""
        text = os.environ.get(self.env_var)
        try:
            self._env = self.parse(text, self.env_var) if text else None
        except TileOpsError as exc:
            self._env = exc
        GENERATION[0] += 1

    def get(self) -> T | None:
        if self._process is not None:
            return self._process
        if isinstance(self._env, TileOpsError):
            raise self._env
        return self._env
