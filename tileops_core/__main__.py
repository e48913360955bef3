"""``python -m tileops_core`` is the ``tileops`` command."""

from .cli.main import main

raise SystemExit(main())
