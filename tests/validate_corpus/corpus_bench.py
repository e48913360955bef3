"""A benchmark that hard-codes its shapes (the L4.bench corpus case): it never reads the spec's workloads."""

SHAPES = [(4, 8), (64, 128)]


def main() -> None:
    for m, k in SHAPES:
        print(m, k)
