"""The network panel (key 5): per-interface rates, link utilization and errors."""

from __future__ import annotations

from textual.content import Content

from collectors.snapshot import NicSnapshot, Snapshot
from tui.format import NA, fmt_count, fmt_pct, fmt_rate, level_style
from tui.widgets.device_table import RateHistory, scale, table, total
from tui.widgets.panel import Panel

HEADER = (("iface", 8), ("speed", 7), ("rx", 10), ("tx", 10), ("link", 5), ("err/drop", 9))


class NetworkPanel(Panel):
    """One row per NIC; a link near its speed or any errors/drops is coloured."""

    KEY = "5"
    TITLE = "Network"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history = RateHistory()

    def record(self, snapshot: Snapshot) -> None:
        for nic in snapshot.nics:
            self._history.add(nic.name, total(nic.rx_bytes_per_s, nic.tx_bytes_per_s))

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        if not snapshot.nics:
            return [Content.styled("no network interfaces", "dim")]
        rows = []
        for nic in snapshot.nics:
            history = self._history.get(nic.name)
            rows.append((nic_cells(nic), history, full_scale(nic, history)))
        return table(HEADER, rows, width)


def full_scale(nic: NicSnapshot, history: tuple[float | None, ...]) -> float:
    """Draw traffic against the link speed (both directions), so the graph reads as link use."""
    if nic.speed_mbps:
        return nic.speed_mbps * 1e6 / 8 * 2
    return scale(history, 1e6)


def fmt_speed(mbps: int | None) -> str:
    """Link speed as ethtool users say it: 25000 -> "25G", 100 -> "100M"."""
    if mbps is None or mbps <= 0:
        return NA
    return f"{mbps / 1000:g}G" if mbps >= 1000 else f"{mbps}M"


def nic_cells(nic: NicSnapshot) -> list[Content | str]:
    if not nic.is_up:
        return [Content.styled(nic.name, "dim"), Content.styled("down", "dim"), "", "", "", ""]
    faults = (nic.errors_per_s or 0) + (nic.drops_per_s or 0)
    fault_text = f"{fmt_count(nic.errors_per_s)}/{fmt_count(nic.drops_per_s)}"
    return [
        nic.name,
        fmt_speed(nic.speed_mbps),
        fmt_rate(nic.rx_bytes_per_s),
        fmt_rate(nic.tx_bytes_per_s),
        Content.styled(fmt_pct(nic.link_util_pct), level_style(nic.link_util_pct, 70, 90)),
        Content.styled(fault_text, "$error" if faults > 0 else ""),
    ]
