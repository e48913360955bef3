"""Integrations of TileOPs into model libraries, one sub-package each.

Nothing here is imported by ``import tileops_core``: a sub-package is imported only when it
is used, and its library comes in through an extra (``pip install tileops[transformers]``).
"""
