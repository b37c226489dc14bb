"""State snapshots: the data and grads of parameters, optimizer state and module modes at
the points the policy names (``before:optimizer.step``, ``after:backward`` ...).

All tensors of one snapshot are fingerprinted in one batched call (one kernel launch group on
CUDA). Snapshots are taken on the training thread because the state changes right after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from traincheck_agent import faults
from traincheck_agent.agent import runtime
from traincheck_agent.agent.process.groups import GroupWatch
from traincheck_agent.agent.record.clock import TrainingClock
from traincheck_agent.agent.record.descriptors import device_name, dtype_name
from traincheck_agent.agent.record.model_registry import ModelRegistry
from traincheck_agent.fingerprint import fingerprint_tensors
from traincheck_agent.policy.model import Policy, StateRule
from traincheck_agent.trace.snapshot import SnapshotBuilder, variables_in

Emit = Callable[..., None]  # (record, weight): ``TraceWriter.emit``
_MISSING = object()


def _optimizer_params(optimizer: torch.optim.Optimizer) -> list[tuple[int, int, torch.Tensor]]:
    out = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group.get("params", ())):
            if isinstance(p, torch.Tensor):
                out.append((gi, pi, p))
    return out


def _scalar_hyperparams(group: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in group.items():
        if key == "params":
            continue
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value
        elif isinstance(value, torch.Tensor) and value.numel() == 1:
            out[key] = value.item() if value.device.type == "cpu" else None
        elif isinstance(value, (tuple, list)) and all(isinstance(v, (int, float)) for v in value):
            out[key] = list(value)
    return out


def _one_or_each(values: list[Any]) -> Any:
    """One value when every entry is the same (a column written once), else the list; None
    for a column of Nones."""
    first = values[0] if values else None
    if all(v == first for v in values):
        return first
    return values


class StateProbe:
    def __init__(self, policy: Policy, registry: ModelRegistry, clock: TrainingClock, emit: Emit) -> None:
        self.policy = policy
        self.registry = registry
        self.clock = clock
        self.emit = emit
        self._unnamed_seen = False
        self.groups = GroupWatch(emit)  # cross-rank relations compare within these groups
        # Per parameter class: whether the class itself can answer for a policy attribute
        # (a property, a class attribute, ``__getattr__``). Where it cannot, only an instance
        # attribute can, so a parameter with an empty ``__dict__`` (plain PyTorch) has none.
        self._declared: dict[type, bool] = {}

    def _declares(self, cls: type) -> bool:
        known = self._declared.get(cls)
        if known is None:
            names = (*self.policy.param_attributes, "__getattr__")
            known = self._declared[cls] = any(hasattr(cls, name) for name in names)
        return known

    def wants(self, when: str, event: str) -> StateRule | None:
        rule = self.policy.state_rule(when, event)
        if rule is None or not self.policy.sampling.wants(max(self.clock.step, 0)):
            return None
        return rule

    # -- entry points used by the probes ---------------------------------------------------
    def snapshot(
        self,
        when: str,
        event: str,
        call_id: int | None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        module: torch.nn.Module | None = None,
        hyperparams_of: Any = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record the state the policy names at ``when:event``. ``hyperparams_of`` is the
        optimizer whose hyper-parameters and settings are recorded when the parameters are the
        ``module``'s (a DeepSpeed engine's step); ``extra`` are fields every record of the
        snapshot carries (``closure_calls``). An error here is the agent's: it is counted and
        reported (the call around it is still recorded) and never reaches the training."""
        try:
            self._snapshot(when, event, call_id, optimizer, module, hyperparams_of, extra)
        except Exception as exc:
            runtime.report_agent_error("snapshot", exc)

    def _snapshot(self, when: str, event: str, call_id: int | None, optimizer: torch.optim.Optimizer | None,
                  module: torch.nn.Module | None, hyperparams_of: Any = None,
                  extra: dict[str, Any] | None = None) -> None:
        rule = self.wants(when, event)
        if rule is None:
            return
        if faults.armed:
            faults.fire("snapshot")
        self.groups.poll(self.clock.step)
        where = f"{when}:{event}"
        base = {
            "where": where,
            "call": call_id,
            "step": self.clock.step,
            "phase": self.clock.phase(torch.is_grad_enabled()),
            "t_ns": time.time_ns(),
        }
        if event == "backward" and not self.registry.ddp_grad_sync():
            base["grad_sync"] = False  # inside DDP's no_sync: grads stay local to the rank
        if extra:
            base.update(extra)
        snap = SnapshotBuilder(base)
        items = rule.items
        if "params.data" in items or "params.grad" in items:
            self._params(snap, items, self._select_params(optimizer, module))
        if "optimizer.hyperparams" in items and (optimizer is not None or hyperparams_of is not None):
            self._hyperparams(snap, optimizer if optimizer is not None else hyperparams_of)
        if optimizer is not None and "optimizer.state" in items:
            self._optimizer_state(snap, optimizer)
        if "module.mode" in items:
            self._module_modes(snap, module)
        if "buffers" in items:
            self._buffers(snap, module)
        record = snap.built()
        if record is not None:
            self.emit(record, variables_in(record))

    # -- what to look at -------------------------------------------------------------------
    def _select_params(
        self, optimizer: torch.optim.Optimizer | None, module: torch.nn.Module | None
    ) -> list[tuple[str, torch.Tensor]]:
        registry = self.registry
        if optimizer is not None:
            opt_name = registry.optimizer_name(optimizer)
            selected = []
            for gi, pi, p in _optimizer_params(optimizer):
                name = registry.param_name(p)
                if name is None and not self._unnamed_seen:
                    self._unnamed_seen = True
                    registry.refresh()
                    name = registry.param_name(p)
                selected.append((name or f"{opt_name}.param_groups.{gi}.{pi}", p))
            return selected
        if module is not None:
            return [(registry.param_name(p) or n, p) for n, p in module.named_parameters()]
        seen: set[int] = set()
        selected = []
        for root_name, root in registry.roots(threading.get_ident()):
            for n, p in root.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    selected.append((registry.param_name(p) or f"{root_name}.{n}", p))
        return selected

    def _params(self, snap: SnapshotBuilder, items: Iterable[str], params: list[tuple[str, torch.Tensor]]) -> None:
        want_data = "params.data" in items
        want_grad = "params.grad" in items
        # Each grad is read once: another thread training the same parameters may replace it.
        grads = [p.grad if want_grad else None for _, p in params]
        tensors: list[torch.Tensor] = []  # read in place (fingerprints only read, under no_grad)
        for (_, p), grad in zip(params, grads, strict=True):
            if want_data:
                tensors.append(p)
            if grad is not None:
                tensors.append(grad)
        fps = iter(fingerprint_tensors(tensors))
        cols: dict[str, list[Any]] = {
            "dtype": [dtype_name(p.dtype) for _, p in params],
            "shape": [list(p.shape) for _, p in params],
            "device": [device_name(p.device) for _, p in params],
            "requires_grad": [p.requires_grad for _, p in params],
        }
        if want_data or want_grad:
            data_col, grad_col = [], []
            for grad in grads:
                if want_data:
                    data_col.append(next(fps))
                if want_grad:
                    grad_col.append(next(fps) if grad is not None else None)
            if want_data:
                cols["data"] = data_col
            if want_grad:
                cols["grad"] = grad_col
        snap.add_columns([name for name, _ in params], _one_or_each([type(p).__name__ for _, p in params]),
                         self._owners(params), cols, self._extra_attributes(params))

    def _owners(self, params: list[tuple[str, torch.Tensor]]) -> str | list[str | None] | None:
        owners = self.registry.param_owner
        return _one_or_each([owners.get(id(p)) for _, p in params])

    def _extra_attributes(self, params: list[tuple[str, torch.Tensor]]) -> list[list[Any]] | None:
        """The policy's parameter attributes (``tensor_model_parallel`` ...) that parameters
        hold, as ``[index, {attribute: value}]`` pairs."""
        extra_attrs = self.policy.param_attributes
        if not extra_attrs:
            return None
        declared = self._declared
        out: list[list[Any]] = []
        for i, (_, p) in enumerate(params):
            known = declared.get(type(p))  # None until the class was looked at
            if p.__dict__ or known or (known is None and self._declares(type(p))):
                found = {}
                for attr in extra_attrs:
                    value = getattr(p, attr, None)
                    if value is not None and isinstance(value, (bool, int, float, str)):
                        found[attr] = value
                if found:
                    out.append([i, found])
        return out or None

    def _hyperparams(self, snap: SnapshotBuilder, optimizer: torch.optim.Optimizer) -> None:
        opt_name = self.registry.optimizer_name(optimizer)
        for gi, group in enumerate(optimizer.param_groups):
            snap.add_row(f"{opt_name}.param_groups.{gi}", "param_group", opt_name, _scalar_hyperparams(group))
        # Settings the optimizer keeps outside its param groups (ZeRO's clip_grad, ...).
        held = {name: getattr(optimizer, name, _MISSING) for name in self.policy.optimizer_attributes}
        settings = _scalar_hyperparams({name: value for name, value in held.items() if value is not _MISSING})
        if settings:
            snap.add_row(f"{opt_name}.settings", "optimizer_settings", opt_name, settings)

    def _optimizer_state(self, snap: SnapshotBuilder, optimizer: torch.optim.Optimizer) -> None:
        opt_name = self.registry.optimizer_name(optimizer)
        entries: list[tuple[str, str, torch.Tensor]] = []
        scalars: dict[str, dict[str, Any]] = {}
        for gi, pi, p in _optimizer_params(optimizer):
            pstate = optimizer.state.get(p)
            if not pstate:
                continue
            pname = self.registry.param_name(p) or f"param_groups.{gi}.{pi}"
            for key, value in pstate.items():
                if isinstance(value, torch.Tensor) and value.numel() > 1:
                    entries.append((pname, key, value.detach()))
                elif isinstance(value, torch.Tensor):
                    scalars.setdefault(pname, {})[key] = value.item() if value.device.type == "cpu" else None
                elif isinstance(value, (int, float, bool)):
                    scalars.setdefault(pname, {})[key] = value
        fps = fingerprint_tensors([t for _, _, t in entries])
        snap.add_columns([f"{opt_name}.state.{pname}.{key}" for pname, key, _ in entries], "optimizer_state", opt_name,
                         {"data": fps, "dtype": [dtype_name(t.dtype) for _, _, t in entries],
                          "shape": [list(t.shape) for _, _, t in entries]})
        for pname, values in scalars.items():
            snap.add_row(f"{opt_name}.state.{pname}", "optimizer_state", opt_name, values)

    def _modules_in_scope(self, module: torch.nn.Module | None) -> list[tuple[str, torch.nn.Module]]:
        if module is None:
            return self.registry.roots()
        return [(self.registry.module_names.get(id(module), type(module).__name__.lower()), module)]

    def _buffers(self, snap: SnapshotBuilder, module: torch.nn.Module | None) -> None:
        named: list[tuple[str, torch.Tensor]] = []
        for root_name, root in self._modules_in_scope(module):
            named.extend((f"{root_name}.{name}", buf.detach()) for name, buf in root.named_buffers())
        buffers = [b for _, b in named]
        snap.add_columns([name for name, _ in named], "buffer", None, {
            "data": fingerprint_tensors(buffers), "dtype": [dtype_name(b.dtype) for b in buffers],
            "shape": [list(b.shape) for b in buffers], "device": [str(b.device) for b in buffers]})

    def _module_modes(self, snap: SnapshotBuilder, module: torch.nn.Module | None) -> None:
        names: list[str] = []
        vtypes: list[str] = []
        modes: list[bool] = []
        for root_name, root in self._modules_in_scope(module):
            for sub_name, sub in root.named_modules():
                names.append(self.registry.module_names.get(id(sub))
                             or (f"{root_name}.{sub_name}" if sub_name else root_name))
                vtypes.append(type(sub).__name__)
                modes.append(sub.training)
        snap.add_columns(names, _one_or_each(vtypes), None, {"training": modes})
