"""Settings for every test directory: metadata contents are always checked in the test suite."""

import os

# RGDR.md: the checks that read tensor contents are off by default and always on in tests.
os.environ.setdefault("TILEOPS_CHECK_CONTENTS", "1")
