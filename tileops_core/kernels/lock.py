"""Lock files: the kernel chosen for each call spec, recorded once and followed later.

``tileops lock`` writes one (``tileops.lock``); ``TILEOPS_LOCK=path`` (or :func:`set_lock`)
makes selection follow it. The format is JSON Lines, so that an error can name the line:

* line 1, the header: ``{"tileops_lock": 1, "distributions": {name: version}, "fingerprint": ...}``
  (the distributions of the core, torch and every backend at the time of locking);
* each further line, one call spec: ``{"op", "interface", "call": CallSpec.as_dict(),
  "kernel": "module:QualName", "backend", "workload"}``.

Following a lock: a call spec found in the lock is served by the locked kernel and no other;
a locked kernel that is not installed, or that drops out for that call (an arch it does not
support, a refusal, a deny rule, a target), is a :class:`SelectionError` naming the lock
line, never a quiet fallback. A call spec the lock does not hold is selected by the rule as
usual (the lock records the workload rows it was made from, not every possible call). A
distribution whose version differs from the lock's is warned about once, naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..errors import SelectionError, TileOpsError
from .interface import CallSpec
from .registry import GENERATION

__all__ = ["LockEntry", "KernelLock", "call_key", "read_lock", "write_lock", "set_lock", "use_lock", "active_lock", "warn_version_drift",
           "refresh_env_lock", "ENV_VAR", "FORMAT"]

ENV_VAR = "TILEOPS_LOCK"
FORMAT = 1


@dataclass(frozen=True)
class LockEntry:
    """One locked call spec: the kernel (``module:QualName``) and backend that serve it, and where."""

    where: str  # "path:line"
    op: str
    interface: str
    kernel: str
    backend: str
    workload: str = ""


def call_key(call: CallSpec) -> str:
    """A call spec as a canonical string: what a lock line is looked up by."""
    return json.dumps(call.as_dict(), sort_keys=True, default=str, separators=(",", ":"))


@dataclass(frozen=True)
class KernelLock:
    """A read lock file: entries by :func:`call_key`, and the distributions it was made with."""

    path: str
    entries: Mapping[str, LockEntry]
    distributions: Mapping[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    digest: str = ""  # of the file's text: part of the selection fingerprint

    def entry_for(self, call: CallSpec) -> LockEntry | None:
        return self.entries.get(call_key(call))

    def version_drift(self, installed: Mapping[str, str]) -> list[str]:
        """Distributions installed at another version than the lock records (or missing)."""
        out = []
        for name, version in sorted(self.distributions.items()):
            now = installed.get(name)
            if now != version:
                out.append(f"{name} {version} (installed: {now or 'not installed'})")
        return out


def write_lock(path: str | Path, rows: Iterable[Mapping[str, Any]], distributions: Mapping[str, str],
               fingerprint: str) -> int:
    """Write a lock file: the header and one line per row (rows as documented above); returns the row count."""
    header = {"tileops_lock": FORMAT, "distributions": dict(sorted(distributions.items())), "fingerprint": fingerprint}
    lines = [json.dumps(header, sort_keys=True)]
    seen: set[str] = set()
    for row in rows:
        key = json.dumps(row["call"], sort_keys=True, default=str, separators=(",", ":"))
        if key in seen:  # two workload rows can make one call spec; one line locks it
            continue
        seen.add(key)
        lines.append(json.dumps(dict(row), sort_keys=True, default=str))
    Path(path).write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def read_lock(path: str | Path) -> KernelLock:
    """Read and check a lock file; a malformed line raises naming ``path:line``."""
    import hashlib

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:  # (not text at all: found in review, a bare traceback)
        raise TileOpsError(f"lock file {path}: cannot be read: {exc}") from None
    entries: dict[str, LockEntry] = {}
    header: dict[str, Any] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TileOpsError(f"{where}: not a JSON line: {exc}") from None
        if header is None:
            if not isinstance(data, dict) or data.get("tileops_lock") != FORMAT:
                raise TileOpsError(f"{where}: not a tileops lock header (expected {{\"tileops_lock\": {FORMAT}, "
                                   "...}); write one with `tileops lock`")
            header = data
            continue
        try:
            key = json.dumps(data["call"], sort_keys=True, default=str, separators=(",", ":"))
            entry = LockEntry(where, data["op"], data["interface"], data["kernel"], data["backend"],
                              data.get("workload", ""))
        except (KeyError, TypeError) as exc:
            raise TileOpsError(f"{where}: a lock line needs op, interface, call, kernel and backend ({exc!r} "
                               "is missing)") from None
        if key in entries:
            raise TileOpsError(f"{where}: locks the call spec of {entries[key].where} again")
        entries[key] = entry
    if header is None:
        raise TileOpsError(f"lock file {path} is empty; write one with `tileops lock`")
    distributions, fingerprint = header.get("distributions", {}), header.get("fingerprint", "")
    if (not isinstance(distributions, dict) or not all(isinstance(v, str) for v in distributions.values())
            or not isinstance(fingerprint, str)):
        raise TileOpsError(f"{path}:1: the header's distributions must map names to version strings and its "
                           "fingerprint be a string; write the lock again with `tileops lock`")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return KernelLock(str(path), entries, dict(distributions), fingerprint, digest)


_path: list[str | None] = [None]
_loaded: list[KernelLock | TileOpsError | None] = [None]
_warned: set[tuple[str, str]] = set()


def set_lock(path: str | Path | None) -> KernelLock | None:
    """Follow the lock at ``path`` from now on (None: follow none); it is read at once."""
    _path[0] = None if path is None else str(path)
    _loaded[0] = None if path is None else read_lock(path)
    GENERATION[0] += 1  # selections and plans made under the old lock are made again
    return _loaded[0] if isinstance(_loaded[0], KernelLock) else None


@contextlib.contextmanager
def use_lock(path: str | Path | None) -> Iterator[KernelLock | None]:
    """:func:`set_lock` for the block (process-wide, like it); the previous lock comes back after."""
    previous = (_path[0], _loaded[0])
    try:
        yield set_lock(path)
    finally:
        _path[0], _loaded[0] = previous
        GENERATION[0] += 1


def refresh_env_lock() -> None:
    """Read ``TILEOPS_LOCK`` again (read at import; the file is read at the first selection)."""
    _path[0] = os.environ.get(ENV_VAR) or None
    _loaded[0] = None
    GENERATION[0] += 1


refresh_env_lock()


def active_lock() -> KernelLock | None:
    """The lock selection follows (None: none); read on first use, its error raised at each use."""
    path = _path[0]
    if path is None:
        return None
    loaded = _loaded[0]
    if loaded is None:
        try:
            loaded = read_lock(path)
        except TileOpsError as exc:
            loaded = SelectionError(f"{ENV_VAR}: {exc}")
        _loaded[0] = loaded
    if isinstance(loaded, TileOpsError):
        raise loaded
    return loaded


def warn_version_drift(lock: KernelLock, installed: Mapping[str, str]) -> None:
    """Warn, once per distribution, that it is installed at another version than ``lock`` records."""
    for drift in lock.version_drift(installed):
        if (lock.path, drift) not in _warned:
            _warned.add((lock.path, drift))
            warnings.warn(f"lock {lock.path}:1 was made with {drift}; its kernels are followed as locked",
                          RuntimeWarning, stacklevel=5)
