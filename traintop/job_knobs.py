"""What the job already does, seen zero-code, so that no remedy it follows is offered.

Read where each knob lives, at the least cost to the training thread:

* DataLoaders and optimizers register themselves: ``DataLoader.__init__`` and
  ``Optimizer.__init__`` are wrapped (once per object, never per step), and
  ``DataLoader._get_iterator`` (once per epoch) marks the loaders the loop really iterates.
  Their settings (``num_workers``, ``pin_memory``, ``fused``/``foreach`` in ``param_groups``...)
  are read by the helper thread when it writes the facts file.
* Autocast is thread-local and on only *inside* the ``with autocast()`` block, so it is sampled
  there: every so often the helper asks for one sample, and at the next step boundary the
  training thread puts a one-shot forward pre-hook on the outermost modules the probe found
  (``traintop.module_samples``); it reads the autocast state and the parameters' device in that
  forward and removes itself.  A model compiled in place (``model.compile()``) is not hooked:
  adding a hook there would make dynamo recompile.
* The model is scanned once, by the helper thread: convolutions and their weights' memory
  format (channels_last).  torch.compile: an ``OptimizedModule`` or dynamo's frame counters
  (never importing dynamo).  TF32: torch's own flags, read through the C getters that warn about
  nothing.

``None`` always means "could not tell", never "off".
"""

from __future__ import annotations

import functools
import sys
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from traintop.module_samples import _HooksWithout, evaluating
from traintop.patches import Patches

MAX_LISTED = 8  # loaders and optimizers listed at most
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
KIND = "facts"  # the hook site of the constructor wrappers in ``Patches``


class KnobWatch:
    """The registries and samples that make up ``JobFacts`` (``facts``)."""

    def __init__(self, torch: ModuleType, finder: Any = None) -> None:
        self._torch = torch
        self._finder = finder  # traintop.module_samples.ModelFinder: its ``_found`` models
        # Each loader's last iteration: when, and whether it was an evaluation's (``_evaluating``)
        self._loaders: weakref.WeakKeyDictionary[Any, tuple[float, bool]] = (
            weakref.WeakKeyDictionary()
        )
        self._optimizers: list[weakref.ref[Any]] = []
        self.autocast: str | None = None
        self.device: str | None = None
        self.compiled_in_place = False
        self.threads: int | None = None  # torch's intra-op threads, read in the sampled forward
        self.sampled_at: float | None = None  # monotonic s of the last forward sample
        self._scanned: dict[int, tuple[bool, bool | None]] = {}  # id(model): conv, chl. last
        self._last: dict[str, list[dict[str, Any]]] = {"optimizers": [], "loaders": []}

    def install(self, patches: Patches) -> None:
        """Wrap the constructors through ``patches`` (so the cost harness's "off" takes them
        out too); raises (patching nothing) when torch lacks one."""
        loader_class = self._torch.utils.data.DataLoader
        optimizer_class = self._torch.optim.Optimizer
        originals = (loader_class.__init__, loader_class._get_iterator, optimizer_class.__init__)
        wrapped = (self._registering(originals[0], self._add_loader),
                   self._iterating(originals[1]),
                   self._registering(originals[2], self._add_optimizer))  # fmt: skip
        patches.swap(KIND, loader_class, "__init__", wrapped[0])
        patches.swap(KIND, loader_class, "_get_iterator", wrapped[1])
        patches.swap(KIND, optimizer_class, "__init__", wrapped[2])

    @staticmethod
    def _registering(init: Callable[..., None], add: Callable[[Any], None]) -> Callable:
        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            add(self)  # after: an exception in the user's arguments is theirs, unchanged

        return __init__

    def _iterating(self, get_iterator: Callable[[Any], Any]) -> Callable[[Any], Any]:
        loaders, evaluating = self._loaders, self._evaluating

        @functools.wraps(get_iterator)
        def _get_iterator(self: Any) -> Any:
            if self in loaders:
                loaders[self] = (time.monotonic(), evaluating())
            return get_iterator(self)

        return _get_iterator

    def _evaluating(self) -> bool:
        """Whether a loader iterated now is an evaluation's (``module_samples.evaluating``).
        Once an epoch or an evaluation pass, when its iterator is made: nothing per batch."""
        return evaluating(self._torch.is_grad_enabled, self._models())

    def _add_loader(self, loader: Any) -> None:
        if len(self._loaders) < 64:
            self._loaders[loader] = (0.0, False)

    def _add_optimizer(self, optimizer: Any) -> None:
        self._optimizers = [r for r in self._optimizers if r() is not None][-63:]
        self._optimizers.append(weakref.ref(optimizer))

    # ---- the forward sample (training thread) ----------------------------------------------

    def arm_forward_sample(self) -> bool:
        """Hook the found models for one forward; False when there is nothing to hook yet."""
        finder = self._finder
        models = list(getattr(finder, "_found", ())) if finder is not None else []
        if finder is None or finder.searching or not models:
            return False
        armed = False
        for model in models:
            if getattr(model, "_compiled_call_impl", None) is not None:
                self.compiled_in_place = True
                continue
            armed = _hook_once(model, self._sample) or armed
        return armed

    def _sample(self, module: Any) -> None:
        """Inside the outermost forward: where the weights are, what autocast does there, and
        torch's intra-op threads (OpenMP keeps the count per thread: only the training
        thread's is the one its step runs with)."""
        device = _parameter_device(module)
        if device is not None:
            self.device = device
            self.autocast = autocast_state(self._torch, device)
        self.threads = _threads(self._torch)
        self.sampled_at = time.monotonic()

    # ---- read by the helper thread ---------------------------------------------------------

    def facts(self, profiled: dict[str, Any]) -> dict[str, Any]:
        """The ``JobFacts`` fields, as the facts file carries them; ``profiled``: what the
        sampled profiles showed (cuda_graphs, attention, pinned_copies)."""
        conv, channels_last = self._scan()
        return {
            "device": self.device or self._optimizer_device(),
            "autocast": self.autocast,
            "compiled": self._compiled(),
            "optimizers": self._optimizer_facts(),
            "loaders": self._loader_facts(),
            "has_conv": conv,
            "channels_last": channels_last,
            **tf32_flags(self._torch),
            "threads": self.threads,
            "sharing_strategy": _sharing_strategy(self._torch),
            **profiled,
        }

    def _models(self) -> list[Any]:
        return list(getattr(self._finder, "_found", ()) or ())

    def _compiled(self) -> bool | None:
        eval_frame = sys.modules.get(f"{self._torch.__name__}._dynamo.eval_frame")
        optimized = getattr(eval_frame, "OptimizedModule", None)
        models = self._models()
        if self.compiled_in_place or (optimized and any(isinstance(m, optimized) for m in models)):
            return True
        if _dynamo_frames(self._torch) > 0:
            return True
        return False if self.sampled_at is not None or models else None

    def _optimizer_facts(self) -> list[dict[str, Any]]:
        """The live optimizers; once none lives (the script returned, its objects went), the
        last ones seen: what the job did to the end."""
        alive = [o for o in (r() for r in self._optimizers) if o is not None][:MAX_LISTED]
        if alive:
            self._last["optimizers"] = [optimizer_facts(o) for o in alive]
        return self._last["optimizers"]

    def _optimizer_device(self) -> str | None:
        for ref in self._optimizers:
            optimizer = ref()
            for group in getattr(optimizer, "param_groups", ()):
                for param in group.get("params", ())[:1]:
                    return str(param.device.type)
        return None

    def _loader_facts(self) -> list[dict[str, Any]]:
        """The loaders the loop iterated, the training ones first, each kind the latest first
        (the last seen, as above): a validation loader made each time it runs would otherwise
        stand for the loop's (its batch size, its workers, in ``compare`` and the gains)."""
        used = sorted(((not ev, t, id(dl), dl) for dl, (t, ev) in list(self._loaders.items())
                       if t), reverse=True)  # fmt: skip
        if used:
            self._last["loaders"] = [loader_facts(entry[3]) for entry in used[:MAX_LISTED]]
        return self._last["loaders"]

    def _scan(self) -> tuple[bool | None, bool | None]:
        """Convolutions and channels_last over the found models, each scanned once."""
        found = []
        for model in self._models():
            if id(model) not in self._scanned:
                try:
                    self._scanned[id(model)] = scan_model(self._torch, model)
                except Exception:  # its modules changed under us: scanned again next time
                    continue
            found.append(self._scanned[id(model)])
        if not found:
            return None, None
        conv = any(c for c, _ in found)
        formats = [cl for c, cl in found if c and cl is not None]
        return conv, (all(formats) if formats else None)


def _hook_once(model: Any, sample: Callable[[Any], None]) -> bool:
    """A forward pre-hook that runs once, invisible to pickling like the probe's own."""
    dicts = _private_hook_dicts(model)
    handle: Any = None  # torch's RemovableHandle, set below before the hook can run

    def once(module: Any, _args: tuple, _kwargs: dict) -> None:
        handle.remove()  # torch iterates a copy of the hooks: removing ours here is safe
        for d in dicts:
            d.ours.discard(handle.id)
        try:
            sample(module)
        except Exception:  # a model whose parameters misbehave: no sample, no harm
            return

    handle = model.register_forward_pre_hook(once, with_kwargs=True)
    for d in dicts:
        d.ours.add(handle.id)
    return True


def _private_hook_dicts(model: Any) -> tuple[Any, Any]:
    """The model's pre-hook dicts as ``module_samples._HooksWithout`` (which pickle without
    our hooks), set straight into its ``__dict__``: an ``OptimizedModule`` (torch.compile)
    would pass an attribute set on to the module it wraps, leaving its own dicts plain."""
    state = vars(model)
    for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"):
        if not isinstance(state[name], _HooksWithout):
            state[name] = _HooksWithout(state[name])
    return state["_forward_pre_hooks"], state["_forward_pre_hooks_with_kwargs"]


def _parameter_device(module: Any) -> str | None:
    for param in module.parameters():
        return str(param.device.type)
    return None


def autocast_state(torch: ModuleType, device: str) -> str:
    """ "bf16", "fp16" (...) when autocast is on for ``device`` on this thread, else "off"."""
    try:
        enabled, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    except (TypeError, AttributeError, RuntimeError):  # before torch 2.4: per-device functions
        cpu = device == "cpu"
        enabled = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()
    if not enabled:
        return "off"
    name = str(dtype).removeprefix("torch.")
    return DTYPES.get(name, name)


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """Its class and the kernels asked for: the first group's (None: torch's default)."""
    groups = getattr(optimizer, "param_groups", None) or [{}]
    return {
        "name": type(optimizer).__name__,
        "fused": groups[0].get("fused"),
        "foreach": groups[0].get("foreach"),
    }


def loader_facts(loader: Any) -> dict[str, Any]:
    batch = getattr(loader, "batch_size", None)
    if batch is None:  # a batch_sampler given: its size, when it says
        batch = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    workers = int(loader.num_workers)
    return {
        "num_workers": workers,
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor if workers else None,
        "batch_size": batch if isinstance(batch, int) else None,
    }


def scan_model(torch: ModuleType, model: Any) -> tuple[bool, bool | None]:
    """(has a convolution, its weights are channels_last): None when no weight tells (a
    convolution's 1x1 weights are contiguous both ways)."""
    conv_class = torch.nn.modules.conv._ConvNd
    weights = [m.weight for m in model.modules() if isinstance(m, conv_class)]
    if not weights:
        return False, None
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    verdicts = []
    for weight in weights:
        fmt = formats.get(weight.dim())
        if fmt is not None:
            last, plain = weight.is_contiguous(memory_format=fmt), weight.is_contiguous()
            if last != plain:
                verdicts.append(last)
    return True, (all(verdicts) if verdicts else None)


def _threads(torch: ModuleType) -> int | None:
    """torch's intra-op thread count, as set process-wide by ``torch.set_num_threads``."""
    try:
        return int(torch.get_num_threads())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def _sharing_strategy(torch: ModuleType) -> str | None:
    """How the workers share tensors with the trainer, where torch's multiprocessing is loaded
    (a DataLoader loads it; nothing is imported here, on the helper thread)."""
    found = sys.modules.get(f"{torch.__name__}.multiprocessing")
    try:
        return str(found.get_sharing_strategy()) if found is not None else None
    except Exception:  # a torch without it: could not tell
        return None


def tf32_flags(torch: ModuleType) -> dict[str, bool | None]:
    """TF32 allowed for matmuls and for cuDNN convolutions (what ``allow_tf32`` and
    ``set_float32_matmul_precision`` or ``fp32_precision`` set)."""
    c = torch._C
    return {
        "tf32_matmul": _flag(getattr(c, "_get_cublas_allow_tf32", None)),
        "tf32_cudnn": _flag(getattr(c, "_get_cudnn_allow_tf32", None)),
    }


def _flag(getter: Callable[[], bool] | None) -> bool | None:
    try:
        return bool(getter()) if getter is not None else None
    except Exception:
        return None


def _dynamo_frames(torch: ModuleType) -> int:
    """Frames dynamo compiled so far (0 when dynamo was never imported: nothing compiled)."""
    utils = sys.modules.get(f"{torch.__name__}._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0
    return int(counters.get("frames", {}).get("ok", 0)) + int(
        counters.get("stats", {}).get("unique_graphs", 0)
    )
