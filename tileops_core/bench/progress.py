"""A one-line progress bar on stderr, for runs long enough to wonder whether they hang.

It draws only when asked to (``--progress``) or when stderr is a terminal, so piped and
captured output (CI logs, ``--format json``) never contains carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``start(total)``, then ``step(label)`` before each item, then ``close()``."""

    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None, width: int = 24) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.total = 0
        self.done = 0
        self.t0 = time.monotonic()
        self._last_len = 0

    def start(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()

    def step(self, label: str) -> None:
        """Show that item ``done + 1`` (``label``) is starting."""
        if self.enabled and self.total:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "-" * (self.width - filled)
            text = f"[{bar}] {self.done + 1}/{self.total} {time.monotonic() - self.t0:5.1f}s {label}"[:120]
            pad = " " * max(0, self._last_len - len(text))
            self.stream.write(f"\r{text}{pad}")
            self.stream.flush()
            self._last_len = len(text)
        self.done += 1

    def close(self) -> None:
        if self.enabled and self._last_len:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self.stream.flush()
            self._last_len = 0
