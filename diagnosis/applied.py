"""What the job already does, as its probe saw it, so that no remedy it follows is offered.

"Use mixed precision" to a job in bf16 autocast, or "pin_memory=True" to a loader that pins,
costs the tool the user's trust.  The probe records the knobs it can read without a code change
(``JobFacts``: autocast inside forward, torch.compile, the optimizers' fused/foreach, each
DataLoader's settings, channels_last, TF32, the attention kernel, pinned copies), and each remedy
that turns such a knob names it (:class:`Remedy`).  A knob is on (the remedy is dropped), does
not apply to this model or device (dropped too: channels_last without a convolution, pinning
on a CPU job), off (offered), or unknown: ``None`` is "could not tell", never "off", so the
remedy is offered with that said.  The evidence says what was seen (``facts_seen``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from traintop.collectors.snapshot import JobFacts
from traintop.diagnosis.context import Context
from traintop.diagnosis.model import Evidence, Gain

ON, OFF, NA = "on", "off", "n/a"  # and None: the probe could not tell
UNSURE = "(if not already: the probe could not tell)"
FAST_ATTENTION = frozenset({"flash", "efficient", "cudnn"})
GPU_ONLY = frozenset({"pin_memory", "tf32", "attention"})  # no GPU on the box: they do not apply


@dataclass(frozen=True, slots=True)
class Remedy:
    """A remedy that turns ``knob`` on (None: one no setting of the job can show)."""

    text: str
    knob: str | None = None
    unsure: str = field(init=False)  # the text for a job whose probe could not tell

    def __post_init__(self) -> None:
        object.__setattr__(self, "unsure", f"{self.text} {UNSURE}")


def facts_of(ctx: Context) -> JobFacts | None:
    return ctx.job.job.facts if ctx.job else None


def _gpu_job(ctx: Context, facts: JobFacts) -> bool | None:
    """Whether the model runs on a GPU: the probe's word, else whether the box has GPUs."""
    if facts.device is not None:
        return facts.device == "cuda"
    return ctx.box.has_gpus


def _on_off(value: bool | None) -> str | None:
    return None if value is None else ON if value else OFF


def _autocast(_: Context, f: JobFacts) -> str | None:
    return None if f.autocast is None else OFF if f.autocast == "off" else ON


def _fused(_: Context, f: JobFacts) -> str | None:
    if not f.optimizers:
        return None  # none seen: a job may step a hand-written one
    return ON if any(o.fused for o in f.optimizers) else OFF


def _pinned(ctx: Context, f: JobFacts) -> str | None:
    """Pinned host memory and non_blocking copies only matter for copies to a GPU."""
    if not _gpu_job(ctx, f):
        return NA
    if f.pinned_copies or any(loader.pin_memory for loader in f.loaders):
        return ON
    if f.pinned_copies is False or f.loaders:
        return OFF
    return None


def _persistent(_: Context, f: JobFacts) -> str | None:
    """``persistent_workers`` needs workers; a job without a DataLoader seen: unknown."""
    forked = [loader for loader in f.loaders if loader.num_workers > 0]
    if not forked:
        return NA if f.loaders else None
    return ON if all(loader.persistent_workers for loader in forked) else OFF


def _channels_last(_: Context, f: JobFacts) -> str | None:
    if f.has_conv is False:
        return NA
    if f.channels_last is not None:
        return _on_off(f.channels_last)
    return None


def _tf32(ctx: Context, f: JobFacts) -> str | None:
    """TF32 speeds fp32 matmuls on a GPU; under autocast the matmuls are bf16/fp16 already."""
    if not _gpu_job(ctx, f) or f.autocast in ("bf16", "fp16"):
        return NA
    return _on_off(f.tf32_matmul)


def _attention(ctx: Context, f: JobFacts) -> str | None:
    if not _gpu_job(ctx, f) or f.attention is None:
        return NA if not _gpu_job(ctx, f) else None
    return ON if f.attention in FAST_ATTENTION else OFF


def _shared_by_name(_: Context, f: JobFacts) -> str | None:
    """Tensors shared by name need workers; torch's default on Linux shares by descriptor."""
    if f.loaders and not any(loader.num_workers > 0 for loader in f.loaders):
        return NA
    return None if f.sharing_strategy is None else _on_off(f.sharing_strategy == "file_system")


KNOBS: dict[str, Callable[[Context, JobFacts], str | None]] = {
    "autocast": _autocast,
    "compile": lambda _, f: _on_off(f.compiled),
    "cuda_graphs": lambda _, f: _on_off(f.cuda_graphs),
    "fused_optimizer": _fused,
    "pin_memory": _pinned,
    "persistent_workers": _persistent,
    "channels_last": _channels_last,
    "tf32": _tf32,
    "attention": _attention,
    "sharing_strategy": _shared_by_name,
}


def knob(ctx: Context, name: str) -> str | None:
    """``ON``, ``OFF``, ``NA`` or None (could not tell) for one knob of the job.  Without the
    probe's facts every knob is unknown, except what the box alone settles (no GPU: pinning,
    TF32 and attention kernels do not apply)."""
    facts = facts_of(ctx)
    if facts is None:
        return NA if name in GPU_ONLY and not ctx.box.has_gpus else None
    return KNOBS[name](ctx, facts)


@functools.lru_cache(maxsize=256)
def _turns(text: str, knob: str) -> Gain:
    """A remedy that turns ``knob``, its figure for the rule to give (one object per text)."""
    return Gain(text, knob=knob)


def offer(ctx: Context, items: Iterable[Remedy | str | Gain]) -> tuple[str | Gain, ...]:
    """The remedies the job does not already follow and that apply to it, in order; one whose
    knob traintop could not read says so.  A remedy with its prediction (``Gain``) passes; one
    that turns a knob comes as a ``Gain`` naming it, its figure for the rule to give."""
    found: dict[str, str | Gain] = {}
    for item in items:
        if isinstance(item, str | Gain):
            found.setdefault(item if isinstance(item, str) else item.remedy, item)
            continue
        state = knob(ctx, item.knob) if item.knob else OFF
        if state in (ON, NA):
            continue
        text = item.text if state == OFF else item.unsure
        found.setdefault(text, _turns(text, item.knob or ""))
    return tuple(found.values())


def _optimizer_words(f: JobFacts) -> str | None:
    """``fused AdamW``, ``AdamW (foreach)``, ``SGD (for-loop)`` for the optimizers seen."""
    words = []
    for o in f.optimizers:
        kind = "fused " if o.fused else ""
        tail = "" if o.fused else " (foreach)" if o.foreach is not False else " (for-loop)"
        words.append(f"{kind}{o.name}{tail}")
    return ", ".join(dict.fromkeys(words)) or None


def _loader_words(f: JobFacts) -> str | None:
    """``DataLoader num_workers=2, pin_memory=True, persistent_workers=False``."""
    if not f.loaders:
        return None
    first = f.loaders[0]
    text = f"DataLoader num_workers={first.num_workers}, pin_memory={first.pin_memory}"
    if first.num_workers:
        text += f", persistent_workers={first.persistent_workers}"
        text += f", prefetch_factor={first.prefetch_factor}"
    more = len(f.loaders) - 1
    return text + (f" (+{more} more)" if more > 0 else "")


def _attention_words(f: JobFacts) -> str | None:
    if f.attention is None:
        return None
    return {"manual": "attention written by hand (no SDPA)", "math": "SDPA on its math kernel"}.get(
        f.attention, f"{f.attention} attention"
    )


def _conv_words(f: JobFacts) -> str | None:
    if f.has_conv is False:
        return "no convolution"
    return {True: "channels_last", False: "NCHW convolutions"}.get(f.channels_last)  # type: ignore[arg-type]


_AUTOCAST = {"bf16": "bf16 autocast on", "fp16": "fp16 autocast on", "off": "no autocast (fp32)"}
_FLAGS = {  # knob: (the JobFacts field, its words when True, when False)
    "compile": ("compiled", "compiled", "not compiled"),
    "cuda_graphs": ("cuda_graphs", "CUDA graphs", "no CUDA graphs"),
    "tf32": ("tf32_matmul", "TF32 matmuls on", "TF32 matmuls off"),
    "pin_memory": ("pinned_copies", "pinned copies", "copies from pageable memory"),
}
_WORDS: dict[str, Callable[[JobFacts], str | None]] = {
    "autocast": lambda f: _AUTOCAST.get(f.autocast or ""),
    "fused_optimizer": _optimizer_words,
    "attention": _attention_words,
    "channels_last": _conv_words,
    "loader": _loader_words,
}


def _seen(f: JobFacts, name: str) -> str | None:
    """The words for what the probe saw of one knob (None: nothing)."""
    if name in _FLAGS:
        field, yes, no = _FLAGS[name]
        value = getattr(f, field)
        return None if value is None else yes if value else no
    return _WORDS[name](f)


def facts_seen(ctx: Context, names: Iterable[str]) -> tuple[Evidence, ...]:
    """``seen in the job: bf16 autocast on, fused AdamW, not compiled``, for the knobs the
    finding's remedies turn (nothing when the probe saw none of them)."""
    facts = facts_of(ctx)
    if facts is None:
        return ()
    words = [w for name in names if (w := _seen(facts, name))]
    if not words:
        return ()
    return (Evidence("seen in the job: " + ", ".join(words), "job_facts", None, "training"),)
