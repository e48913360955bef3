"""The installed version of the core (read from the distribution's metadata)."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("tileops")
except metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

#: Backends declare the core major version they were built for; another major is refused.
CORE_MAJOR = int(__version__.split(".")[0].split("+")[0])
