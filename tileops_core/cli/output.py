"""The files commands write (``bench --json``, ``calibrate --out``, ``lock -o``, ``validate --fix``).

A path given for output is checked before the work that fills it (a bench run can take
minutes): an existing part of it that says it cannot be written there (a file where a
folder goes, a folder where the file goes) is a usage error naming that part. The file is
then written to a temporary file beside it that ``os.replace`` puts in its place, so a
failure half-way (a full disk, an exception while serialising, Ctrl-C) leaves the previous
file whole and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator

from ..errors import UsageError

__all__ = ["check_output_path", "replacing"]


def check_output_path(flag: str, path: str | Path) -> Path:
    """``path`` as a file ``flag`` can create or replace; a :class:`UsageError` when a file stands where one
    of its folders goes, or a folder where the file goes (found in review: "File exists" after the run)."""
    target = Path(path)
    blocked = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UsageError(f"{flag} {target}: {blocked} is a file, not a folder")
    if target.is_dir():
        raise UsageError(f"{flag} {target} is a folder; give the name of a file")
    return target


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A new, empty temporary file beside ``path`` for the block to write; when the block ends it replaces
    ``path`` (taking its permissions), and when the block raises it is removed and ``path`` stays as it was.

    A symbolic link's target is what is replaced, not the link; a file its owner made read-only is
    refused (``PermissionError``) as a write in place would be, not replaced under them.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # 0o666 less the umask, as open()
    try:
        if target.exists():
            shutil.copymode(target, temporary)
        yield temporary
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
