"""The core catalogue of op classes (one module per family); kernels come from backends."""
