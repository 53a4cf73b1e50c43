"""A "torch" lacking the APIs the shim patches: the shim must warn once and change nothing."""

__version__ = "0.0-fake"


def answer() -> int:
    return 42
