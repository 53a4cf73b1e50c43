"""Name the bottleneck: pure functions over windows of snapshots (no I/O, no UI).

The public surface is ``traintop.diagnosis.api``; the package re-exports it unchanged.
"""

from traintop.diagnosis.api import *  # noqa: F403
from traintop.diagnosis.api import __all__  # noqa: F401
