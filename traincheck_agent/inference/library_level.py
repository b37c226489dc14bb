"""Which invariants speak of library behaviour only, true of any correct training loop: the rule
that decides what the built-in pack may hold (docs/checking.md).

An invariant is library-level when everything it names belongs to a library and nothing is a
fact of one script:

- its relation learns facts about the library, not the script's own choices: a threshold
  learned from an argument's values, a periodic schedule of a hyper-parameter, the order of
  the calls in its loop are facts of the script that was traced (``PER_SCRIPT_RELATIONS``);
- every API it names (``api``, ``child``, ``between``) is in a library namespace
  (``LIBRARY_NAMESPACES``), never ``__main__.`` or a user module, and is not one that runs the
  user's code (a container or wrapper module, a data loader: ``USER_CODE_RUNNERS``);
- it names no variable of the program (a parameter, a module or a model by the name the
  script gave it: ``PROGRAM_NAME_FIELDS``), in its subject or in a precondition;
- every class it names (receivers, ``self.type`` in a precondition or in its domain) is a class
  of a library;
- the argument value it expects is not one the script passes to a module's ``forward`` (a
  choice of the script, unlike ``training`` that a module passes to ``F.dropout``);
- no value anywhere in it mentions ``__main__``.

``narrowed`` turns an invariant into one that passes the rule where it can: class names of the
script's own are taken out of its domain and receivers (it then judges fewer calls, never more).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import ANY, Clause

LIBRARY_NAMESPACES = ("torch", "deepspeed", "accelerate", "transformers")
# Relations whose invariants are facts of the traced script: thresholds learned from the values
# its arguments had, schedules its hyper-parameters followed, the order of the calls its loop
# makes (which loss, whether it logs through a collective, where autocast opens).
PER_SCRIPT_RELATIONS = ("Threshold", "VarPeriodicChange", "APISequence")
API_FIELDS = ("api", "child", "between")
# APIs that run the user's code or objects: what a container, a model wrapper or a data loader
# returns is what the user's modules, dataset and collate function made, and what an engine's or
# Accelerate's wrapped optimizer calls is the optimizer the script chose: facts of one script.
USER_CODE_RUNNERS = ("torch.nn.Module.", "torch.nn.Sequential.", "torch.nn.ModuleList.", "torch.nn.ModuleDict.",
                     "torch.nn.parallel.", "torch.nn.DataParallel.", "torch.distributed.fsdp.",
                     "torch.utils.data.", "torch._dynamo.", "torch.compile", "deepspeed.runtime.engine.", "deepspeed.runtime.zero.",
                     "accelerate.")
# A module's entry points: the arguments they get are what the script passes (``is_causal``,
# ``need_weights``), its own choices, unlike those a library module passes to a function.
MODULE_ENTRIES = (".forward", ".__call__")
# Subject or precondition fields whose values are names the program chose.
PROGRAM_NAME_FIELDS = ("variable", "variables", "module", "model")
CLASS_FIELDS = ("self.type",)  # context features whose values are bare class names
RECEIVERS = "receivers"  # APISequence: the classes of the objects its API was called on
SCRIPT_MARK = "__main__"


def in_library_namespace(name: str) -> bool:
    """Whether a dotted API name lies in one of the libraries' namespaces."""
    return name.split(".", 1)[0] in LIBRARY_NAMESPACES and "." in name


def problem(invariant: Invariant) -> str:
    """Why ``invariant`` is not library-level, or "" when it is."""
    if invariant.relation in PER_SCRIPT_RELATIONS:
        return f"{invariant.relation} invariants are facts of one script"
    subject = invariant.subject
    for name in API_FIELDS:
        value = subject.get(name)
        if value is not None and not (isinstance(value, str) and in_library_namespace(value)):
            return f"subject {name} {str(value)[:80]!r} is not in a library namespace"
        if isinstance(value, str) and value.startswith(USER_CODE_RUNNERS):
            return f"subject {name} {value[:80]!r} runs the user's code"
    for name in PROGRAM_NAME_FIELDS:
        if name in subject:
            return f"subject {name} names the program's own objects"
    api = subject.get("api")
    if "argument" in subject and "value" in subject and isinstance(api, str) and api.endswith(MODULE_ENTRIES):
        return f"the {subject['argument']!s:.40} a module's {api.rsplit('.', 1)[-1]} gets is what the script passes"
    for clause in _flat(invariant.precondition):
        if clause.field in PROGRAM_NAME_FIELDS:
            return f"precondition on {clause.field} names the program's own objects"
    apis = _apis(invariant)
    for cls in _classes(invariant):
        if not is_library_class(cls, apis):
            return f"class {cls[:80]!r} is not a library class"
    for text in _strings(invariant.to_json()):
        if SCRIPT_MARK in text:
            return f"{text[:80]!r} names the script's own code"
    return ""


def library_level(invariant: Invariant) -> bool:
    return not problem(invariant)


def narrowed(invariant: Invariant) -> Invariant | None:
    """``invariant`` with the script's own class names taken out of its domain and receivers
    (so that it judges library classes only), or None when nothing of it is left."""
    apis = _apis(invariant)
    domain = dict(invariant.domain)
    for name in CLASS_FIELDS:
        if name in domain:
            kept = [v for v in domain[name] if not isinstance(v, str) or is_library_class(v, apis)]
            if not kept:
                return None
            domain[name] = kept
    subject = dict(invariant.subject)
    receivers = subject.get(RECEIVERS)
    if isinstance(receivers, list):
        kept = [v for v in receivers if isinstance(v, str) and is_library_class(v, apis)]
        if not kept:
            return None
        subject[RECEIVERS] = kept
    if domain == invariant.domain and subject == invariant.subject:
        return invariant
    return dataclasses.replace(invariant, subject=subject, domain=domain)


def _apis(invariant: Invariant) -> tuple[str, ...]:
    return tuple(v for f in API_FIELDS if isinstance(v := invariant.subject.get(f), str))


def _classes(invariant: Invariant) -> Iterator[str]:
    """The bare class names an invariant names: receivers, and the class features of its
    precondition and domain."""
    receivers = invariant.subject.get(RECEIVERS)
    if isinstance(receivers, list):
        yield from (str(v) for v in receivers)
    for clause in _flat(invariant.precondition):
        if clause.field in CLASS_FIELDS:
            values = clause.value if isinstance(clause.value, (list, tuple)) else [clause.value]
            yield from (v for v in values if isinstance(v, str))
    for name in CLASS_FIELDS:
        yield from (v for v in invariant.domain.get(name, ()) if isinstance(v, str))


def _flat(clauses: Iterable[Clause]) -> Iterator[Clause]:
    """The clauses of a precondition, those inside a disjunction (``ANY``) included."""
    for clause in clauses:
        if clause.kind == ANY:
            yield from _flat(c for c in clause.value if isinstance(c, Clause))
        else:
            yield clause


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _strings(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _strings(inner)


_LIBRARY_CLASSES: dict[int, frozenset[str]] = {}


def is_library_class(name: str, apis: tuple[str, ...] = ()) -> bool:
    """Whether ``name`` is the name of a class that a library module defines. The modules of the
    APIs in ``apis`` are imported first (a receiver's class lives next to its API); the classes
    are looked up among the library modules imported in this process."""
    for api in apis:
        _import_module_of(api)
    return name in _library_classes()


def _import_module_of(api: str) -> None:
    """Import the longest module prefix of a library API (``torch.optim.Adam.step`` ->
    ``torch.optim``), if it is not imported yet."""
    if not in_library_namespace(api):
        return
    parts = api.split(".")
    for end in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:end])
        if module in sys.modules:
            return
        try:
            importlib.import_module(module)
            return
        except Exception:  # not a module, or a library that cannot be imported here
            continue


def _library_classes() -> frozenset[str]:
    """The names of the classes defined by the library modules imported so far (recomputed
    when more modules have been imported)."""
    count = len(sys.modules)
    found = _LIBRARY_CLASSES.get(count)
    if found is None:
        names: set[str] = set()
        with warnings.catch_warnings():  # reading a deprecated attribute warns
            warnings.simplefilter("ignore")
            _add_classes(names)
        _LIBRARY_CLASSES.clear()
        found = _LIBRARY_CLASSES[count] = frozenset(names)
    return found


def _add_classes(names: set[str]) -> None:
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".", 1)[0] not in LIBRARY_NAMESPACES:
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if isinstance(value, type) and str(getattr(value, "__module__", "")).split(".", 1)[0] in LIBRARY_NAMESPACES:
                names.add(attr)
