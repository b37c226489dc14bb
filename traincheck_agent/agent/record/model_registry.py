"""The models and optimizers of the run, found from what the framework sees.

Roots are registered when an optimizer is built (modules in the caller's frame that hold its
parameters), when a wrapper such as DistributedDataParallel is built, and at the first
outermost call of a module. Wrappers (DDP, DataParallel, DeepSpeed engines, compiled modules)
are unwrapped so that parameter names are the same with and without them:
``model.fc1.weight`` on every rank.
"""

from __future__ import annotations

import threading
import weakref
from types import FrameType
from typing import Any

import torch

from traincheck_agent.agent.record.naming import (
    NameBook,
    binding_name,
    class_based_name,
    owner_attributes,
)

WRAPPER_ATTRS = ("module", "_orig_mod")
# Class names of the modules that wrap a user's model, added by each integration when its
# framework is imported (``agent.integrations``).
WRAPPER_CLASS_NAMES: set[str] = set()


def add_wrapper_classes(names: tuple[str, ...]) -> None:
    WRAPPER_CLASS_NAMES.update(names)


def unwrap_module(module: torch.nn.Module) -> torch.nn.Module:
    for _ in range(8):
        if type(module).__name__ not in WRAPPER_CLASS_NAMES:
            return module
        inner = None
        for attr in WRAPPER_ATTRS:
            candidate = getattr(module, attr, None)
            if isinstance(candidate, torch.nn.Module):
                inner = candidate
                break
        if inner is None:
            return module
        module = inner
    return module


def _frame_values(frame: FrameType) -> list[object]:
    values = list(frame.f_locals.values())
    owner = frame.f_locals.get("self")
    if owner is not None:
        values.extend(v for _, v in owner_attributes(owner))
    values.extend(frame.f_globals.values())
    return values


def _accumulating(engine: Any) -> bool:
    try:
        if hasattr(engine, "is_gradient_accumulation_boundary"):  # DeepSpeed
            return not engine.is_gradient_accumulation_boundary()
        return getattr(engine, "sync_gradients", True) is False  # Accelerate
    except Exception:  # an engine in a state we cannot read: not accumulating
        return False


class ModelRegistry:
    def __init__(self) -> None:
        self._names = NameBook()
        self._roots: dict[int, tuple[str, weakref.ref]] = {}
        self._root_threads: dict[int, int] = {}  # id(root) -> thread that last ran its forward
        self._aliases: dict[int, int] = {}  # id(wrapper) -> id(root)
        # DistributedDataParallel wrappers: whether their next backward all-reduces (no_sync).
        self.ddp_wrappers: weakref.WeakSet = weakref.WeakSet()
        # Engines that accumulate gradients over micro-steps (DeepSpeed engines, Accelerators).
        self.accumulators: weakref.WeakSet = weakref.WeakSet()
        self.module_names: dict[int, str] = {}
        self.param_names: dict[int, str] = {}
        self.param_owner: dict[int, str] = {}
        self._optimizers: dict[int, str] = {}

    # -- modules ---------------------------------------------------------------------------
    def knows_module(self, module: torch.nn.Module) -> bool:
        key = id(module)
        return key in self.module_names or key in self._aliases

    def root_name_of(self, module: torch.nn.Module) -> str | None:
        key = self._aliases.get(id(module), id(module))
        entry = self._roots.get(key)
        return entry[0] if entry else None

    def ddp_grad_sync(self) -> bool:
        """False while a DDP wrapper is in ``no_sync`` (its backward will not all-reduce)."""
        if not self.ddp_wrappers:  # no DDP: spare the copy of an empty set at every backward
            return True
        return all(getattr(w, "require_backward_grad_sync", True) for w in list(self.ddp_wrappers))

    def accumulating(self) -> bool:
        """True inside a gradient-accumulation micro-step, one that ends without an update: DDP's
        ``no_sync``, a DeepSpeed engine off its accumulation boundary, an Accelerator that is
        not syncing gradients."""
        if self.ddp_wrappers and not self.ddp_grad_sync():
            return True
        return any(_accumulating(a) for a in list(self.accumulators)) if self.accumulators else False

    def register_root(self, module: torch.nn.Module, frame: FrameType | None, alias: Any = None) -> str:
        """Register ``module`` (unwrapped) as a root model; returns its name."""
        root = unwrap_module(module)
        if alias is not None and alias is not root:
            self._aliases[id(alias)] = id(root)
        if root is not module:
            self._aliases[id(module)] = id(root)
        if id(root) in self._roots:
            return self._roots[id(root)][0]
        if id(root) in self.module_names:  # a submodule of a known root: keep the root's names
            return self.module_names[id(root)]
        wanted = binding_name(module, frame) or binding_name(root, frame) or class_based_name(root)
        name = self._names.claim(wanted, root)
        self._roots[id(root)] = (name, weakref.ref(root))
        self._index(root, name)
        return name

    def _index(self, root: torch.nn.Module, name: str) -> None:
        for sub_name, sub in root.named_modules():
            self.module_names.setdefault(id(sub), f"{name}.{sub_name}" if sub_name else name)
        for p_name, param in root.named_parameters(remove_duplicate=False):
            self.param_names.setdefault(id(param), f"{name}.{p_name}")
            self.param_owner.setdefault(id(param), name)

    def refresh(self) -> None:
        """Re-index every live root (parameters added or replaced after registration)."""
        for key, (name, ref) in list(self._roots.items()):
            root = ref()
            if root is None:
                del self._roots[key]
                continue
            self._index(root, name)

    def note_thread(self, module: torch.nn.Module) -> None:
        """The thread now running ``module``'s forward (outermost module call): a snapshot
        taken by another thread must not read this model's grads while its backward runs."""
        key = self._aliases.get(id(module), id(module))
        if key in self._roots:
            self._root_threads[key] = threading.get_ident()

    def roots(self, thread: int | None = None) -> list[tuple[str, torch.nn.Module]]:
        """The root models; with ``thread``, only those last run by that thread (or never run)."""
        out = []
        for key, (name, ref) in list(self._roots.items()):  # list(): other threads register roots
            if thread is not None and self._root_threads.get(key, thread) != thread:
                continue
            root = ref()
            if root is not None:
                out.append((name, root))
        return out

    def register_roots_for_params(self, params: list[torch.Tensor], frame: FrameType | None) -> None:
        """Find the modules in the caller's frames that hold ``params`` and register the
        outermost of them as roots (so an optimizer over a head only still names
        ``model.head.weight``)."""
        wanted = {id(p) for p in params} - set(self.param_names)
        candidates: dict[int, torch.nn.Module] = {}
        depth = 0
        while frame is not None and depth < 6 and wanted and not candidates:
            for value in _frame_values(frame):
                if (
                    isinstance(value, torch.nn.Module)
                    and id(value) not in candidates
                    and any(id(p) in wanted for p in unwrap_module(value).parameters())
                ):
                    candidates[id(value)] = value
            if not candidates:
                frame, depth = frame.f_back, depth + 1
        nested = {
            id(sub)
            for cand in candidates.values()
            for sub in unwrap_module(cand).modules()
            if sub is not unwrap_module(cand)
        }
        for cand in candidates.values():
            if id(unwrap_module(cand)) not in nested:
                self.register_root(cand, frame)

    # -- parameters and optimizers ---------------------------------------------------------
    def param_name(self, param: torch.Tensor) -> str | None:
        return self.param_names.get(id(param))

    def optimizer_name(self, optimizer: object, frame: FrameType | None = None) -> str:
        name = self._optimizers.get(id(optimizer))
        if name is None:
            wanted = binding_name(optimizer, frame) if frame is not None else None
            name = self._names.claim(wanted or class_based_name(optimizer), optimizer)
            self._optimizers[id(optimizer)] = name
        return name

    def has_optimizer_name(self, optimizer: object) -> bool:
        return id(optimizer) in self._optimizers
