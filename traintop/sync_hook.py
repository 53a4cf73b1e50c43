"""Where the host waits for the GPU: each sync's line in the user's code, counted, zero-code.

``torch.cuda.set_sync_debug_mode("warn")`` makes torch raise a ``UserWarning`` ("called a
synchronizing CUDA operation") from every sync it checks (``.item()``, ``.cpu()``, ``nonzero``,
``if cuda_tensor:``, ``Stream.synchronize()``...), attributed to the Python line that made it.
The check sits on the sync paths only, so a step with no sync pays nothing.  What it does not
cover (``torch.cuda.synchronize()``, ``Event.synchronize()``, ``torch.accelerator.
synchronize()``) is wrapped here, a Python call each.

The warning must never reach the user: not printed, never turned into an exception by ``-W
error``, ``warnings.simplefilter("error")`` or pytest, and never swallowed by someone's
``catch_warnings(record=True)`` before we see it.  Python decides a warning's fate in its
filter list, first match wins, *before* any ``showwarning`` hook.  So the hook is a filter:
``("ignore", matcher, UserWarning, None, 0)`` kept first in ``warnings.filters``, whose
``matcher.match(text)`` (Python calls it on every filter's message pattern) records the sync and
says "match", so the warning is dropped there.  Every other warning does not match it and goes
on through the user's filters and ``showwarning``, unchanged.  It stays first because
``simplefilter``/``filterwarnings`` (through ``_add_filter``, which both call) and
``resetwarnings`` are wrapped to put it back, and the helper thread re-asserts it every 2 s
(``keep_first``) for code that edits the list directly; ``catch_warnings`` copies the list with
it in front and restores that list on exit.

A user's own ``set_sync_debug_mode`` is kept as theirs: ``get_sync_debug_mode`` returns what
they set; their "warn" lets the warnings through to them (still counted), their "error" raises as
it would, and their "default" keeps ours counting silently.

Only CUDA jobs: installed by the helper thread once the process has initialised CUDA.
``TRAINTOP_SYNC_HOOK=0`` turns it off.  Sites are keyed by code object and line on the hot path
(no file is read there); names, kinds and source lines are worked out by the helper thread.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import warnings
from collections.abc import Callable
from types import CodeType, FrameType, ModuleType
from typing import Any, cast

ENV = "TRAINTOP_SYNC_HOOK"
SYNC_TEXT = "called a synchronizing CUDA operation"
OWN = os.path.dirname(os.path.abspath(__file__)) + os.sep
MAX_SITES = 256  # distinct sites kept (a loop making new code objects must not grow us)
MAX_WALK = 64
MAX_CODE = 160
# The kind of a sync, read off the line that made it (the innermost Python frame): the warning
# text is the same for all of them.
KINDS = (
    ("item", re.compile(r"\.item\(\)")),
    ("copy", re.compile(r"\.(cpu|numpy|tolist)\(|\.to\(\s*['\"]cpu|device\s*=\s*['\"]cpu")),
    ("nonzero", re.compile(r"nonzero|argwhere|masked_select|unique|repeat_interleave|\bwhere\(")),
    ("stream", re.compile(r"\.synchronize\(")),
    ("item", re.compile(r"^\s*(if|elif|while|assert)\b|\b(bool|float|int)\(")),
)
WRAPPED = {"synchronize": "synchronize", "event": "event", "accelerator": "synchronize"}
Key = tuple[CodeType, int, "CodeType | str", int]


def skipped_prefixes(torch: ModuleType) -> tuple[str, ...]:
    """Frames of torch and of traintop are walked out of: the site is the user's line."""
    return (os.path.dirname(os.path.abspath(str(torch.__file__))) + os.sep, OWN)


class SyncLedger:
    """Syncs counted per (user frame, line, innermost frame or wrapper, line)."""

    def __init__(self, skip: tuple[str, ...]) -> None:
        self.counts: dict[Key, int] = {}
        self.paused = False  # traintop's own syncs (the profiler's) are not the user's
        self.user_warns = False  # the user asked for sync warnings: they see them too
        self._skip = skip
        self._meta: dict[Key, tuple[str, int, str, str, str]] = {}

    def record(self, frame: FrameType | None, inner: CodeType | str, inner_line: int) -> None:
        """Count one sync made at ``frame`` (the innermost Python frame, or a wrapper's caller)."""
        if self.paused or frame is None:
            return
        for _ in range(MAX_WALK):
            if not frame.f_code.co_filename.startswith(self._skip) or frame.f_back is None:
                break
            frame = frame.f_back
        key = (frame.f_code, frame.f_lineno or 0, inner, inner_line)
        counts = self.counts
        if key in counts or len(counts) < MAX_SITES:
            counts[key] = counts.get(key, 0) + 1

    def sites(self) -> list[dict[str, Any]]:
        """Every site with its count, merged by (file, line, function, kind); for the helper."""
        merged: dict[tuple, int] = {}
        for key, count in list(self.counts.items()):
            meta = self._meta.get(key) or self._describe(key)
            merged[meta] = merged.get(meta, 0) + count
        return [
            {"file": f, "line": n, "function": fn, "kind": kind, "count": count, "code": code}
            for (f, n, fn, kind, code), count in merged.items()
        ]

    def _describe(self, key: Key) -> tuple[str, int, str, str, str]:
        code, line, inner, inner_line = key
        kind = WRAPPED[inner] if isinstance(inner, str) else sync_kind(inner, inner_line)
        text = linecache.getline(code.co_filename, line).strip()[:MAX_CODE]
        meta = self._meta[key] = (code.co_filename, line, code.co_name, kind, text)
        return meta


def sync_kind(code: CodeType, line: int) -> str:
    """ "item", "copy", "nonzero", "stream" or "other", from the line that made the sync."""
    text = linecache.getline(code.co_filename, line)
    return next((kind for kind, pattern in KINDS if pattern.search(text)), "other")


class SyncMatcher:
    """The message pattern of our warnings filter: ``match`` records a sync and claims it."""

    pattern = SYNC_TEXT  # what code that inspects filters expects of a compiled pattern

    def __init__(self, ledger: SyncLedger) -> None:
        self._ledger = ledger

    def match(self, text: str) -> bool | None:
        if not text.startswith(SYNC_TEXT):
            return None
        frame = sys._getframe(1)  # the frame whose call synced (the warning's own frame)
        self._ledger.record(frame, frame.f_code, frame.f_lineno or 0)
        return None if self._ledger.user_warns else True

    def __repr__(self) -> str:
        return f"traintop.sync_hook({SYNC_TEXT!r})"


class FilterKeeper:
    """Keeps ``entry`` first in ``warnings.filters``, whoever edits the list."""

    def __init__(self, entry: tuple) -> None:
        self.entry = entry

    def resolve(self) -> None:
        """Find what ``install`` wraps (KeyError/AttributeError on a Python without it)."""
        self._home = warnings.simplefilter.__globals__  # where simplefilter finds _add_filter
        self._add, self._reset = self._home["_add_filter"], warnings.resetwarnings
        _mutated()  # keep_first needs it (CPython's private hook, 3.10 to 3.13)

    def install(self) -> None:
        add, reset = self._add, self._reset

        def _add_filter(*item: Any, append: bool) -> None:
            add(*item, append=append)
            self.keep_first()

        def resetwarnings() -> None:
            reset()
            self.keep_first()

        self._home["_add_filter"] = _add_filter
        warnings.resetwarnings = resetwarnings
        self.keep_first()

    def keep_first(self) -> None:
        """Put the entry back in front if it is not there (cheap when it is)."""
        filters = cast("list[Any]", warnings.filters)  # typeshed: Sequence; CPython: a list
        if filters and filters[0] is self.entry:
            return
        while self.entry in filters:
            filters.remove(self.entry)
        filters.insert(0, self.entry)
        _mutated()


def _mutated() -> None:
    """Tell the C warnings module its filters changed (it caches them); an AttributeError on
    a Python without the hook turns the sync hook off, as any failure of ours does."""
    warnings._filters_mutated()  # pyright: ignore[reportAttributeAccessIssue] (private API)


class SyncHook:
    """The installed hook: the ledger, the filter, the wrapped calls and the user's mode."""

    def __init__(self, torch: ModuleType) -> None:
        self.ledger = SyncLedger(skipped_prefixes(torch))
        self.keeper = FilterKeeper(("ignore", SyncMatcher(self.ledger), UserWarning, None, 0))
        self._torch = torch
        self.user_mode = 0

    def install(self) -> None:
        """Wrap, filter, then switch torch's sync warnings on.  Everything is looked up first,
        so a torch (or Python) lacking one API raises with nothing patched."""
        cuda = self._torch.cuda
        set_mode, get_mode = cuda.set_sync_debug_mode, cuda.get_sync_debug_mode
        targets = [(cuda, "synchronize", "synchronize"), (cuda.Event, "synchronize", "event")]
        accelerator = getattr(self._torch, "accelerator", None)
        if callable(getattr(accelerator, "synchronize", None)):
            targets.append((accelerator, "synchronize", "accelerator"))
        originals = [getattr(owner, name) for owner, name, _ in targets]
        self.keeper.resolve()
        self.user_mode = get_mode()
        self.ledger.user_warns = self.user_mode == 1
        self.keeper.install()
        for (owner, name, kind), original in zip(targets, originals, strict=True):
            setattr(owner, name, self._wrapped(original, kind))
        cuda.set_sync_debug_mode = self._user_setter(set_mode)
        cuda.get_sync_debug_mode = lambda: self.user_mode
        set_mode(self._mode_under(self.user_mode))

    def _wrapped(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        ledger = self.ledger

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not ledger.paused:
                ledger.record(sys._getframe(1), kind, 0)
                ledger.paused = True  # torch.accelerator may call torch.cuda's: count one
                try:
                    return original(*args, **kwargs)
                finally:
                    ledger.paused = False
            return original(*args, **kwargs)

        synchronize.__wrapped__ = original  # type: ignore[attr-defined]
        synchronize.__name__ = getattr(original, "__name__", "synchronize")
        synchronize.__doc__ = getattr(original, "__doc__", None)
        return synchronize

    def _user_setter(self, set_mode: Callable[[Any], None]) -> Callable[[Any], None]:
        def set_sync_debug_mode(debug_mode: int | str) -> None:
            set_mode(debug_mode)  # the user's errors (a bad value) are raised as before
            named = {"default": 0, "warn": 1, "error": 2}
            mode = named.get(debug_mode, -1) if isinstance(debug_mode, str) else debug_mode
            self.user_mode = int(mode)
            self.ledger.user_warns = self.user_mode == 1
            set_mode(self._mode_under(self.user_mode))

        set_sync_debug_mode.__doc__ = set_mode.__doc__
        return set_sync_debug_mode

    @staticmethod
    def _mode_under(user_mode: int) -> int:
        """What torch runs with: warn (ours, silent) unless the user asked for errors."""
        return 2 if user_mode == 2 else 1


def switched_off() -> bool:
    return os.environ.get(ENV, "1").strip().lower() in ("0", "off", "no", "false", "none")


def install(torch: ModuleType) -> SyncHook | None:
    """The hook for a process whose CUDA is initialised; None when switched off or when torch
    lacks the API (one stderr line: this part is off, the rest of the probe goes on)."""
    if switched_off():
        return None
    hook = SyncHook(torch)
    try:
        hook.install()
    except Exception as exc:
        print(f"traintop: sync hook disabled ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    return hook
