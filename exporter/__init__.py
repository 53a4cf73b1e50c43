"""The Prometheus exporter: the latest snapshot and verdicts as OpenMetrics, for a scrape.

Sits between ``diagnosis/`` and ``tui/``: it reads immutable snapshots and verdicts and formats
them, never samples on a scrape and never imports the UI.
"""
