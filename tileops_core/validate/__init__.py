"""The validator: a pure spec lint (no torch) and a conformance pass over op classes."""
