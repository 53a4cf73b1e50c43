"""``probe.loader(loader)``: time every wait for the next batch and count its samples.

The wrapper is re-iterable (one pass per epoch, like the DataLoader itself) and forwards
``len()`` and attribute access, so ``loader.sampler.set_epoch(e)`` or ``len(loader)`` keep
working.  Creating the iterator counts as data wait: that is when DataLoader workers start.

Batch sizes are found by duck typing (the probe must not import torch or numpy): the leading
dimension of the first value with a non-empty ``shape`` inside tensors, tuples, lists and dicts,
else the loader's ``batch_size``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from traintop.phase_context import DATA, OTHER

if TYPE_CHECKING:
    from traintop.probe_state import ProbeState

_MAX_DEPTH = 4


class TimedLoader:
    """Iterable view of ``loader`` whose batches are timed by ``probe``."""

    def __init__(self, probe: ProbeState, loader: Iterable[Any]) -> None:
        self._probe = probe
        self._loader = loader
        size = getattr(loader, "batch_size", None)
        self._fallback = size if isinstance(size, int) else None

    def __iter__(self) -> Iterator[Any]:
        probe = self._probe
        resumed = probe._wait_begin()
        try:
            iterator = iter(self._loader)
        finally:
            probe._wait_end(resumed, 0)
        return _timed_batches(probe, iterator, self._fallback or 0)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_probe", "_loader", "_fallback"):
            raise AttributeError(name)
        return getattr(self._loader, name)


def _timed_batches(probe: ProbeState, iterator: Iterator[Any], fallback: int) -> Iterator[Any]:
    """Yield the batches, the wait for each one timed as the data phase.

    ``Probe._wait_begin`` and ``_wait_end`` inlined (same accounting): two calls per batch
    cost more than their work.  The phase paused by the wait (``resumed``) is resumed after it.
    """
    clock = probe._clock
    while True:
        resumed = probe._open
        if probe._on:
            try:
                now = clock()
                if resumed >= 0:
                    probe._acc[resumed] += now - probe._open_t
                else:  # the first boundary since the probe was made (traintop.probe)
                    probe._t_start = now
                    resumed = OTHER
                probe._open = DATA
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - DATA)
            except Exception as exc:
                probe._fail(exc)
        try:
            batch = next(iterator)
        except StopIteration:
            probe._wait_end(resumed, 0)
            return
        except BaseException:  # the user's exceptions pass unchanged
            probe._wait_end(resumed, 0)
            raise
        if probe._on:
            try:
                now = clock()
                probe._acc[probe._open] += now - probe._open_t
                probe._open = resumed
                probe._open_t = now
                probe._live[0] = (now | 15) - (15 - resumed)
                kind = type(batch)  # index loaders yield scalars: nothing to look into
                probe._samples += (
                    fallback if kind in _NOT_BATCHES else batch_samples(batch, fallback, probe)
                )
            except Exception as exc:
                probe._fail(exc)
        yield batch


def batch_samples(batch: Any, fallback: int, probe: ProbeState) -> int:
    """Samples in ``batch``: the leading dimension of its first tensor-like, else ``fallback``.

    Never raises: a failing ``shape`` lookup (a batch type's own bug) disables the probe.
    """
    try:
        size = infer_batch_size(batch)
    except Exception as exc:
        probe._fail(exc)
        return 0
    return fallback if size is None else size


def infer_batch_size(batch: Any, depth: int = 0) -> int | None:
    """Leading dimension of the first tensor-like in ``batch``, or None when there is none.

    Exact builtin types are tested first: this runs once per batch, and a failed ``shape``
    lookup or an ABC ``isinstance`` costs more than the rest of the probe's work on the batch.
    """
    kind = type(batch)
    if kind is tuple or kind is list:
        shape = getattr(batch[0], "shape", None) if batch else None
        if shape is not None:  # the common (inputs, targets): its first item's rows, no call
            try:
                size = int(shape[0]) if len(shape) else -1
            except (TypeError, ValueError, IndexError):
                size = -1
            if size >= 0:
                return size
        return _first_size(batch, depth)
    if kind in _NOT_BATCHES:
        return None
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return _leading_dim(shape)
    if isinstance(batch, (str, bytes)):
        return None
    if isinstance(batch, Mapping):
        return _first_size(batch.values(), depth)
    if isinstance(batch, (tuple, list)):
        return _first_size(batch, depth)
    return None


_NOT_BATCHES = frozenset({int, float, bool, str, bytes, type(None)})


def _first_size(items: Iterable[Any], depth: int) -> int | None:
    if depth >= _MAX_DEPTH:
        return None
    for item in items:
        size = infer_batch_size(item, depth + 1)
        if size is not None:
            return size
    return None


def _leading_dim(shape: Any) -> int | None:
    """``shape[0]`` as an int; a 0-d tensor (``shape == ()``) holds no batch dimension."""
    try:
        if len(shape) == 0:
            return None
        size = int(shape[0])
    except (TypeError, ValueError, IndexError):
        return None
    return size if size >= 0 else None
