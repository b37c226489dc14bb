"""Tensor fingerprints: a 64-bit content hash plus "all zero" and "some NaN/Inf" flags.

A fingerprint is ``{"h": "<algo>:<16 hex>", "zero": bool, "nonfinite": bool}`` (CPU float
fingerprints add ``"amax"``, the largest magnitude). Checks compare
``h`` of tensors of one device type to tell whether the content changed, without keeping the
content. CPU tensors are hashed with xxHash3 (``x3``); tensors on an accelerator are hashed
where they live (``tw``, a fused Triton kernel on CUDA, the same algorithm in torch ops
elsewhere), so only a few scalars per tensor reach the host.

Tensors without plain data get a marker ``h`` with nothing after the colon and both flags False:
``meta:`` for meta tensors, ``uninitialized:`` for lazy modules' parameters, ``nostorage:`` for
``__torch_dispatch__`` subclasses (FakeTensor, functional tensors, ...), and the layout name
(``sparse_coo:``, ...) for sparse tensors with more than ``SPARSE_DENSE_LIMIT`` elements.
Smaller sparse and mkldnn tensors are hashed through ``to_dense()``, so they fingerprint like
their dense equivalent, and a DTensor (FSDP2) is hashed through ``to_local()``: its local shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from traincheck_agent import faults, messages
from traincheck_agent.exception_text import exception_text
from traincheck_agent.fingerprint import cpu, device_hash
from traincheck_agent.user_tensor_hooks import hooks_off

__all__ = ["ALGORITHMS", "fingerprint_tensor", "fingerprint_tensors"]

ALGORITHMS: dict[str, str] = {"cpu": cpu.PREFIX, "cuda": device_hash.PREFIX}

SPARSE_DENSE_LIMIT = 1 << 26

_kernel: dict[str, Any] = {"module": None, "failed": False}
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided


def _marker(kind: str) -> dict:
    return {"h": f"{kind}:", "zero": False, "nonfinite": False}


def _is_dispatch_subclass(t: torch.Tensor) -> bool:
    """True for tensor subclasses that intercept every op (their data is not plain storage)."""
    try:
        return torch._C._dispatch_keys(t).has(torch._C.DispatchKey.Python)
    except Exception:  # private API moved: treat as a plain tensor
        return False


def _prepare(t: torch.Tensor) -> torch.Tensor | dict:
    """The strided tensor to hash in place of ``t``, or the marker to record instead."""
    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):  # type: ignore[attr-defined]
        return _marker("uninitialized")
    if _is_dispatch_subclass(t):
        to_local = getattr(t, "to_local", None)  # DTensor
        if not callable(to_local):
            return _marker("nostorage")
        try:
            t = to_local()
        except Exception:
            return _marker("nostorage")
        if not isinstance(t, torch.Tensor) or _is_dispatch_subclass(t):
            return _marker("nostorage")
    if t.is_meta:
        return _marker("meta")
    if t.layout != torch.strided:
        layout = str(t.layout).replace("torch.", "")
        if t.numel() > SPARSE_DENSE_LIMIT:
            return _marker(layout)
        try:
            t = t.to_dense()
        except (RuntimeError, NotImplementedError):
            return _marker(layout)
    try:
        t.data_ptr()
    except (RuntimeError, NotImplementedError):
        return _marker("nostorage")
    return t


def _disable_kernel(reason: str) -> None:
    _kernel["failed"] = True
    messages.warn_once(
        "fingerprint-kernel",
        f"fingerprint kernel unavailable ({reason}); hashing CUDA tensors with the torch-op "
        "reference instead (same hashes, slower)",
    )


def _kernel_module() -> Any:
    if _kernel["failed"]:
        return None
    if _kernel["module"] is None:
        try:
            from traincheck_agent.fingerprint import triton_kernel
        except Exception as exc:  # Triton missing or broken: the reference gives the same hashes
            _disable_kernel(exception_text(exc))
            return None
        _kernel["module"] = triton_kernel
    return _kernel["module"]


def _device_batch(device: torch.device, tensors: list[torch.Tensor]) -> list[dict]:
    if device.type == "cuda":
        module = _kernel_module()
        if module is not None:
            try:
                return module.fingerprint_batch(tensors)
            except Exception as exc:  # compile or launch failure: fall back for good
                _disable_kernel(exception_text(exc))
    return device_hash.fingerprint_reference(tensors)


def _fingerprint_group(device: torch.device, tensors: list[torch.Tensor]) -> list[dict]:
    kind = device.type
    if kind == "cpu":
        return cpu.fingerprint_cpu_batch(tensors)
    if kind == "meta":
        return [_marker("meta") for _ in tensors]
    return _device_batch(device, tensors)


def fingerprint_tensors(tensors: Sequence[torch.Tensor]) -> list[dict]:
    """Fingerprint many tensors at once, in input order (an error is tagged with this stage).

    Tensors of one accelerator are done together: a few kernel launches and one device-to-host
    copy for the whole batch, which is what keeps a per-step snapshot of a model cheap. The
    per-tensor host work is kept to a few attribute reads (it dominates for small tensors).
    """
    try:
        if faults.armed:
            faults.fire("fingerprint")
        with hooks_off():  # the user's op counters and subclass hooks never see these ops
            return _fingerprint_batch(tensors)
    except Exception as exc:
        faults.tag(exc, "fingerprint")
        raise


def _fingerprint_batch(tensors: Sequence[torch.Tensor]) -> list[dict]:
    n = len(tensors)
    with torch.no_grad():
        if all(type(t) in _PLAIN_TYPES and t.is_cpu and t.layout is _STRIDED for t in tensors):
            return cpu.fingerprint_cpu_batch(list(tensors))  # the common case: one host batch
    results: list[dict | None] = [None] * n
    groups: dict[torch.device, tuple[list[int], list[torch.Tensor]]] = {}
    with torch.no_grad():
        for k, t in enumerate(tensors):
            if type(t) not in _PLAIN_TYPES or t.layout is not _STRIDED:
                prepared = _prepare(t)
                if isinstance(prepared, dict):
                    results[k] = prepared
                    continue
                t = prepared
            device = t.device
            group = groups.get(device)
            if group is None:
                group = groups[device] = ([], [])
            group[0].append(k)
            group[1].append(t)
        if len(groups) == 1:
            ((device, (index, group_tensors)),) = groups.items()
            if len(index) == n:
                return _fingerprint_group(device, group_tensors)
        for device, (index, group_tensors) in groups.items():
            fps = _fingerprint_group(device, group_tensors)
            for k, fp in zip(index, fps, strict=True):
                results[k] = fp
    return results  # type: ignore[return-value]


def fingerprint_tensor(t: torch.Tensor) -> dict:
    """Fingerprint one tensor (see ``fingerprint_tensors``)."""
    return fingerprint_tensors([t])[0]
