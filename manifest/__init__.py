"""The core's operator specs (one YAML file per family), shipped inside the ``tileops`` wheel.

This package holds data only; ``tileops_core.spec.manifest`` finds it with
``importlib.resources`` so that nothing is read from a source tree at run time.
"""
