"""The exporter's defaults that the command line shows, importable without the exporter.

Every ``traintop`` start builds the whole command line (``cli/fleet_args.py``); importing them
from ``exporter/ended.py`` loaded the Prometheus client (and with it http.server, ssl and email)
into the monitor and into ``traintop run``.
"""

from __future__ import annotations

DEFAULT_KEEP_ENDED_S = 900.0
"""How long an ended run's state is still served (``--keep-ended``)."""
