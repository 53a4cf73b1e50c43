"""A predicted gain in words, the same on every surface (banner, details, diagnose, compare).

``≈ 1.8× (1.6×–2.0×, 31 → 56 steps/s), then compute-bound``; ``≈ +9 % (the pauses of up to
2.0 s every 40 steps gone)``; ``no gain: the job's CPUs are all in use``; ``up to 2.4× (the
loaders' waits gone)``; ``no figure (...)``.  The short form (no range, no reason) is what
fits a remedy line on an 80-column screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from traintop.diagnosis.model import Gain

NO_GAIN = 0.03  # within this of 1.0 a figure reads "no gain"
WORTH = 1.10  # a gain that leads the remedies (a smaller one goes after the bounds)
TIMES_FROM = 1.5  # from this ratio on a gain reads as "1.8×", below it as "+40 %"
BOUND_WORDS = {  # what bounds the job once the change is made
    "compute": "then compute-bound",
    "workers": "then worker-bound",
    "cores": "then CPU-bound",
    "quota": "then quota-bound",
    "disk": "then storage-bound",
    "peers": "then held by the other ranks",
}
HELD_WORDS = {  # why a change buys nothing: what holds the job where it is
    "compute": "compute bounds it",
    "workers": "the workers bound it",
    "cores": "the job's CPUs are all in use",
    "quota": "the job's CPU quota is spent",
    "disk": "storage is at its limit",
    "peers": "the other ranks bound it",
}


def ratio(value: float) -> str:
    """``1.8×`` from 1.5 on, ``+9 %`` or ``−12 %`` below it."""
    if value >= TIMES_FROM:
        return f"{value:.1f}×"
    change = (value - 1.0) * 100.0
    return f"{'+' if change >= 0 else '−'}{abs(change):.0f} %"


def has_figure(gain: Gain) -> bool:
    """A figure or a bound: something to say beside the remedy."""
    return gain.speedup is not None or gain.high is not None


def no_gain(gain: Gain) -> bool:
    return gain.speedup is not None and abs(gain.speedup - 1.0) < NO_GAIN


def gain_words(gain: Gain, short: bool = False) -> str:
    """The prediction in words; ``short`` leaves out the range and the reason (what a
    one-line remedy has room for: the figure, the rates, what bounds it next)."""
    if gain.speedup is None:
        return _unmodelled(gain, short)
    if no_gain(gain):
        held = (None if short else gain.reason) or HELD_WORDS.get(gain.bound_by or "")
        return f"no gain: {held}" if held else "no gain"
    inside = [] if short or not _spread(gain) else [_range(gain)]
    inside += [_rates(gain)] if _rates(gain) else []
    text = f"≈ {ratio(gain.speedup)}" + (f" ({', '.join(inside)})" if inside else "")
    if gain.reason and not short:
        text += f" ({gain.reason})"
    return text + _bounded(gain)


def _range(gain: Gain) -> str:
    speedup = gain.speedup or 1.0
    return f"{ratio(gain.low or speedup)}–{ratio(gain.high or speedup)}"


def _unmodelled(gain: Gain, short: bool) -> str:
    if gain.high is not None and gain.high < 1.0 + NO_GAIN:
        held = HELD_WORDS.get(gain.bound_by or "")
        return f"no gain: {held}" if held and not short else "no gain"
    if gain.high is not None:
        text = f"up to {ratio(gain.high)}"
        return text if short or not gain.reason else f"{text} ({gain.reason})"
    return "no figure" if short else f"no figure ({gain.reason or 'not modelled'})"


def _spread(gain: Gain) -> bool:
    """Whether the range is worth saying: its ends print differently from the figure."""
    words = {ratio(v) for v in (gain.low, gain.high, gain.speedup) if v is not None}
    return len(words) > 1


def _rates(gain: Gain) -> str:
    """``31 → 56 steps/s``, where the rate now is known."""
    now, speedup = gain.steps_per_s, gain.speedup
    if now is None or speedup is None:
        return ""
    return f"{_steps(now)} → {_steps(now * speedup)} steps/s"


def _steps(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _bounded(gain: Gain) -> str:
    words = BOUND_WORDS.get(gain.bound_by or "")
    return f", {words}" if words else ""


def remedy_line(gain: Gain) -> str:
    """One line for a remedy and its gain: the change it makes (its text where it has no
    short form) and the short prediction, ``num_workers 1 → 4: ≈ 2.9× (31 → 90 steps/s),
    then compute-bound``: under 68 cells for a change, what the details screen's list has on
    an 80-column terminal."""
    return f"{gain.change or gain.remedy}: {gain_words(gain, short=True)}"


def ordered(gains: Sequence[Gain]) -> tuple[Gain, ...]:
    """Remedies by what they buy: modelled gains largest first, then those with only a bound
    (largest first), then those with no figure, then those that buy nothing; the rule's own
    order between equals."""
    return tuple(sorted(gains, key=_buys))


def _buys(gain: Gain) -> tuple[int, float]:
    """A figure worth a restart first, then a bound worth one (the most it could buy), then
    a small figure, then no figure, then what buys nothing or loses."""
    speedup, high = gain.speedup, gain.high
    if speedup is not None and speedup >= WORTH:
        return (0, -speedup)
    if speedup is None and high is not None and high >= WORTH:
        return (1, -high)
    if speedup is not None and not no_gain(gain) and speedup > 1.0:
        return (2, -speedup)
    if speedup is None:
        return (3, 0.0)
    return (4, -speedup)
