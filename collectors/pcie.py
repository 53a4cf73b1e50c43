"""PCIe throughput of one GPU: NVML's byte counters each tick, NVML's own 20 ms measurement
when the counters cannot tell.

``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES`` are cumulative, but on an H100 (driver 580) they are
32-bit (``valueType`` UNSIGNED_INT): they wrap every 4 GiB, which a pinned copy at 55 GB/s does
13 times a second.  Between two ticks a 32-bit counter's increase is known only modulo its range,
so once it moved a good part of that range in one tick, the next tick's increase may hide whole
laps (the GPU check read 5 and 18 GB/s, or nothing, while nvidia-smi read 59 GB/s).  Then, and
while the link stays that busy, the direction is measured by ``nvmlDeviceGetPcieThroughput``
(what nvidia-smi and dcgm-exporter print: a 20 ms window), which blocks 21 ms (0.9 ms of CPU on
the H100) against 0.3 ms for the counters: a quiet link pays it once, on its first interval.  64-bit
counters never lap between ticks and are used as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from traintop.collectors.rates import measured, rate

# NVML valueType of a field: UNSIGNED_INT, UNSIGNED_LONG (64-bit on Linux), UNSIGNED_LONG_LONG
WIDTH_BITS = {1: 32, 2: 64, 3: 64}
LAPPABLE_BITS = 32  # a counter this narrow can lap between two ticks of a busy link
# moved this share of its range in one tick (512 MiB at 1 s ticks): the next may hide a lap.  A
# link that goes from quiet to faster than 4 GiB/s between two ticks is read low for that tick
# when its lapped increase falls under this share: one time in eight, and the next tick re-reads
LAP_RISK = 1 / 8
KIB = 1024  # nvmlDeviceGetPcieThroughput answers KB/s (1024 bytes, as nvidia-smi -q prints)
Measure = Callable[[int], int | None]
"""NVML's own measurement of one direction (0 TX, 1 RX: nvmlPcieUtilCounter_t), KB/s or None."""


def counter_value(field: Any) -> tuple[int, int]:
    """A field's counter and its width in bits, read from the union member its type names."""
    bits = WIDTH_BITS.get(field.valueType, 64)
    value = field.value.uiVal if bits == LAPPABLE_BITS else field.value.ullVal
    return int(value), bits


class PcieRates:
    """Both directions of one device, tick after tick: (tx, rx) bytes/s from field readings."""

    def __init__(self) -> None:
        self.prev: list[tuple[int, int] | None] = [None, None]  # (value, bits) per direction
        self.prev_at: float | None = None
        # the direction needs NVML's measurement this tick too; the first interval always does:
        # the monitor may start in the middle of a copy, with no history to tell a lap
        self.busy = [True, True]

    def update(
        self, counters: Sequence[tuple[int, int]], now: float, measure: Measure
    ) -> tuple[float | None, ...]:
        """(tx, rx) bytes/s for counters (tx, rx) read at ``now``; None until two readings."""
        dt = None if self.prev_at is None else now - self.prev_at
        rates = tuple(self._direction(d, counters[d], dt, measure) for d in (0, 1))
        self.prev, self.prev_at = list(counters), now
        return rates

    def _direction(
        self, d: int, counter: tuple[int, int], dt: float | None, measure: Measure
    ) -> float | None:
        prev = self.prev[d]
        if prev is None or dt is None or dt <= 0 or prev[1] != counter[1]:
            return None
        value, bits = counter
        if bits > LAPPABLE_BITS:
            return rate(prev[0], value, dt)
        span = 1 << bits
        delta = (value - prev[0]) % span
        if not self.busy[d] and delta < LAP_RISK * span:
            return measured(delta / dt)
        return self._measured(d, dt, span, measure)

    def _measured(self, d: int, dt: float, span: int, measure: Measure) -> float | None:
        """NVML's own figure; None when it has none (a lapped counter is no answer either)."""
        kbs = measure(d)
        if kbs is None:
            self.busy[d] = False
            return None
        rate = float(kbs * KIB)
        self.busy[d] = rate * dt >= LAP_RISK * span
        return rate
