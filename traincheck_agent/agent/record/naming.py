"""Names for models and optimizers, found without user code.

The user's script never tells the agent what its model is called. The name a user would
recognise is the variable that holds the object in the frame that uses it (``model``,
``self.optimizer`` -> ``optimizer``). Frames of torch, wrapt and the agent are skipped; when no
binding is found the class name is used. The same script gives the same names on every rank
and in every run, which is what makes names comparable across traces.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

import wrapt

import traincheck_agent

_EXAMPLES_DIR = os.sep + os.path.join("traincheck_agent", "examples") + os.sep
MAX_FRAMES = 12
# Training frameworks whose frames sit between the user's code and torch: their variables
# (``self.module`` inside DeepSpeed's engine) are never the user's names for a model.
FRAMEWORKS = ("deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning")
_skip: dict[tuple[str, ...], tuple[str, ...]] = {}
_NOT_NAMES = frozenset({"self", "cls"})  # what a method calls its instance is nobody's name for it


def _package_dir(module: object) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep  # type: ignore[attr-defined]


def _skip_dirs() -> tuple[str, ...]:
    """The directories of torch, wrapt, this package and the frameworks imported so far."""
    loaded = tuple(name for name in FRAMEWORKS if getattr(sys.modules.get(name), "__file__", None))
    dirs = _skip.get(loaded)
    if dirs is None:
        import torch

        dirs = tuple(_package_dir(m) for m in (torch, wrapt, traincheck_agent, *(sys.modules[n] for n in loaded)))
        _skip[loaded] = dirs
    return dirs


def _is_library_frame(filename: str, skip: tuple[str, ...]) -> bool:
    # The bundled examples live inside our package but are user code.
    return filename.startswith(skip) and _EXAMPLES_DIR not in filename


def first_user_frame(depth: int = 1) -> FrameType | None:
    frame: FrameType | None = sys._getframe(depth)
    skip = _skip_dirs()
    while frame is not None and _is_library_frame(frame.f_code.co_filename, skip):
        frame = frame.f_back
    return frame


def binding_name(obj: object, frame: FrameType | None) -> str | None:
    """The name bound to ``obj`` in ``frame`` or its callers (locals, ``self`` attributes,
    globals), or None.

    ``self`` is never a name: a model that builds its own optimizer (nanoGPT's
    ``model.configure_optimizers``) is named as its caller holds it, ``model``, as in a script
    that builds the optimizer itself."""
    for _ in range(MAX_FRAMES):
        if frame is None:
            return None
        local_vars = frame.f_locals
        for name, value in local_vars.items():
            if value is obj and not name.startswith("_") and name not in _NOT_NAMES:
                return name
        owner = local_vars.get("self")
        if owner is not None:
            for name, value in owner_attributes(owner):
                if value is obj and not name.startswith("_"):
                    return name
        for name, value in frame.f_globals.items():
            if value is obj and not name.startswith("_"):
                return name
        frame = frame.f_back
    return None


def owner_attributes(owner: object) -> list[tuple[str, object]]:
    """Attributes of ``owner``, including the submodules an ``nn.Module`` keeps apart in
    ``_modules`` (so ``self.model`` of a LightningModule-style wrapper is found)."""
    try:
        attrs = list(vars(owner).items())
    except TypeError:
        return []
    submodules = getattr(owner, "_modules", None)
    if isinstance(submodules, dict):
        attrs.extend(submodules.items())
    return attrs


def class_based_name(obj: object) -> str:
    return type(obj).__name__.lower()


class NameBook:
    """Hands out unique names: a second object wanting a taken name gets ``name_2``."""

    def __init__(self) -> None:
        self._owner_of: dict[str, int] = {}

    def claim(self, wanted: str, obj: object) -> str:
        name, n = wanted, 1
        while self._owner_of.get(name, id(obj)) != id(obj):
            n += 1
            name = f"{wanted}_{n}"
        self._owner_of[name] = id(obj)
        return name
