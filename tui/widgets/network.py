"""The network panel (key 5): per-interface rates, link utilization and errors.

Interfaces of a job's own network namespace (a container, ``ip netns``) are listed after the
monitor's, tagged with the job: ``eth0 @llama-7b``.  The name column widens to show the tag,
up to a third of the panel, the rest still going to the history graph.
"""

from __future__ import annotations

from textual.content import Content

from traintop.collectors.snapshot import NicSnapshot, Snapshot
from traintop.tui.widgets.device_table import RateHistory, scale, table, total
from traintop.tui.widgets.panel import Panel
from traintop.views.format import NA, fmt_count, fmt_pct, fmt_rate, level_style

HEADER = (("iface", 8), ("speed", 7), ("rx", 10), ("tx", 10), ("link", 5), ("err/drop", 9))
NAME_MIN = HEADER[0][1]


class NetworkPanel(Panel):
    """One row per NIC; a link near its speed or any errors/drops is coloured."""

    KEY = "5"
    TITLE = "Network"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history = RateHistory()

    def record(self, snapshot: Snapshot) -> None:
        for nic in snapshot.nics:
            self._history.add(history_key(nic), total(nic.rx_bytes_per_s, nic.tx_bytes_per_s))

    def build_lines(self, snapshot: Snapshot, width: int) -> list[Content]:
        if not snapshot.nics:
            return [Content.styled("no network interfaces", "dim")]
        rows = []
        for nic in snapshot.nics:
            history = self._history.get(history_key(nic))
            rows.append((nic_cells(nic), history, full_scale(nic, history)))
        return table(header_for(snapshot.nics, width), rows, width)


def nic_label(nic: NicSnapshot) -> str:
    """The interface's name, and the job whose namespace it belongs to."""
    return f"{nic.name} @{nic.job}" if nic.job else nic.name


def history_key(nic: NicSnapshot) -> str:
    """Two namespaces may both have an ``eth0``: their histories must not mix."""
    return f"{nic.name}#{nic.netns_inode}" if nic.netns_inode is not None else nic.name


def header_for(nics: tuple[NicSnapshot, ...], width: int) -> tuple[tuple[str, int], ...]:
    """The header with a name column as wide as the longest label, within a third of ``width``."""
    longest = max(len(nic_label(nic)) for nic in nics)
    name_width = max(NAME_MIN, min(longest, width // 3))
    return (("iface", name_width), *HEADER[1:])


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
    label = nic_label(nic)
    if not nic.is_up:
        return [Content.styled(label, "dim"), Content.styled("down", "dim"), "", "", "", ""]
    faults = (nic.errors_per_s or 0) + (nic.drops_per_s or 0)
    fault_text = f"{fmt_count(nic.errors_per_s)}/{fmt_count(nic.drops_per_s)}"
    return [
        Content.assemble(nic.name, (f" @{nic.job}", "$accent")) if nic.job else label,
        fmt_speed(nic.speed_mbps),
        fmt_rate(nic.rx_bytes_per_s),
        fmt_rate(nic.tx_bytes_per_s),
        Content.styled(fmt_pct(nic.link_util_pct), level_style(nic.link_util_pct, 70, 90)),
        Content.styled(fault_text, "$error" if faults > 0 else ""),
    ]
