"""The ``tileops`` command line (see :mod:`tileops_core.cli.main`)."""
