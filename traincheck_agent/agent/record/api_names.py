"""Readable, stable names for classes and their methods (``torch.nn.Linear`` rather than
``torch.nn.modules.linear.Linear``)."""

from __future__ import annotations

import sys

_public_names: dict[type, str] = {}


def public_class_name(cls: type) -> str:
    """The shortest importable path under which ``cls`` is exposed, found among modules that
    are already imported (never imports anything)."""
    cached = _public_names.get(cls)
    if cached is not None:
        return cached
    module = cls.__module__ or ""
    qualname = cls.__qualname__
    name = f"{module}.{qualname}"
    if "." not in qualname:
        parts = module.split(".")
        for i in range(1, len(parts)):
            candidate = sys.modules.get(".".join(parts[:i]))
            if candidate is not None and getattr(candidate, qualname, None) is cls:
                name = f"{'.'.join(parts[:i])}.{qualname}"
                break
    _public_names[cls] = name
    return name


def defining_class(cls: type, attr: str) -> type | None:
    for klass in cls.__mro__:
        if attr in vars(klass):
            return klass
    return None
