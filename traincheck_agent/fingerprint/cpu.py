"""CPU fingerprints ("x3"): xxHash3-64 over the raw bytes, read in place.

A contiguous tensor is hashed straight from its memory through a ctypes buffer (no copy, no
numpy); other views are made contiguous first. The flags come from one ``aminmax`` reduction
for the common float dtypes (NaN propagates into both results, an Inf shows in one of them, and
-0.0 compares equal to 0), from a byte reduction for integers and bool, and from the device
algorithm's word masks for the rare dtypes torch cannot reduce.
"""

from __future__ import annotations

import ctypes
import math

import torch
import xxhash

from traincheck_agent.fingerprint import device_hash

PREFIX = "x3"

_MINMAX_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_COMPLEX_DTYPES = frozenset({torch.complex64, torch.complex128})
_PLAIN_DTYPES = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
    | {getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)}
)


def _digest(flat: torch.Tensor) -> str:
    """xxh3-64 of a contiguous uint8 tensor, reading its memory in place."""
    n = flat.numel()
    if n == 0:
        return xxhash.xxh3_64_hexdigest(b"")
    buf = (ctypes.c_char * n).from_address(flat.data_ptr())
    return xxhash.xxh3_64_hexdigest(buf)


# torch runs a reduction on its intra-op thread pool once a tensor passes its grain size
# (32768 elements). For the small and medium tensors of a snapshot, waking that pool costs far
# more than the work, and on a busy machine it competes with the training threads (measured on 2
# cores: 7.8 ms for one 50k-element aminmax vs 12 us in two serial pieces). So tensors up to
# SERIAL_LIMIT elements are reduced in pieces below the grain, on the calling thread.
_GRAIN = 32768
SERIAL_LIMIT = 1 << 22


def _pieces(values: torch.Tensor) -> list[torch.Tensor] | tuple[torch.Tensor, ...]:
    flat = values.reshape(-1)
    if flat.numel() <= _GRAIN or flat.numel() > SERIAL_LIMIT:
        return [flat]
    return flat.split(_GRAIN)


def _float_flags(values: torch.Tensor) -> tuple[bool, bool, float]:
    """(zero, nonfinite, largest magnitude) of a float tensor."""
    zero, nonfinite, amax = True, False, 0.0
    # aminmax reduces a tensor of any shape: only a tensor to be split needs flattening first.
    for piece in (values,) if values.numel() <= _GRAIN else _pieces(values):
        lo, hi = torch.aminmax(piece)
        lo_f, hi_f = float(lo), float(hi)
        zero = zero and lo_f == 0.0 and hi_f == 0.0
        nonfinite = nonfinite or not (math.isfinite(lo_f) and math.isfinite(hi_f))
        amax = max(amax, -lo_f, hi_f)
    return zero, nonfinite, amax


def _any_nonzero(flat: torch.Tensor) -> bool:
    return any(bool(piece.any()) for piece in _pieces(flat))


def _flags(t: torch.Tensor, flat: torch.Tensor) -> tuple[bool, bool, float | None]:
    """(zero, nonfinite, largest magnitude or None) of the tensor whose contiguous bytes are
    ``flat``; the magnitude is known for the common float dtypes only."""
    if flat.numel() == 0:
        return True, False, None
    dtype = t.dtype
    if dtype in _PLAIN_DTYPES and not t.is_quantized:
        return not _any_nonzero(flat), False, None
    if dtype in _MINMAX_DTYPES:
        return _float_flags(flat.view(dtype))
    if dtype in _COMPLEX_DTYPES:
        return *_float_flags(torch.view_as_real(flat.view(dtype)))[:2], None
    spec = device_hash.flag_spec(dtype)
    fp = device_hash.make_fingerprint(0, 0, device_hash.flag_bits(flat, spec), flat.numel(), spec)
    return fp["zero"], fp["nonfinite"], None


def _record(digest: str, zero: bool, nonfinite: bool, amax: float | None) -> dict:
    out = {"h": f"{PREFIX}:{digest}", "zero": zero, "nonfinite": nonfinite}
    if amax is not None and not nonfinite:
        out["amax"] = amax
    return out


# The last fingerprint taken at each memory span, reused while its hash is unchanged. A snapshot
# sees most tensors unchanged since the previous point of the step (the grads from after
# backward until zero_grad, the data from after one step until the next), and the hash pass is
# cheaper than the flags' reduction. The hash decides, so a reused entry is exactly as fresh as
# the "unchanged" verdict the checks draw from the same hash. Fingerprints are values: records
# share the reused dict, and nothing downstream changes one.
_fingerprint_memo: dict[tuple[int, int, torch.dtype], tuple[str, dict]] = {}
FINGERPRINT_MEMO_LIMIT = 1 << 14


def _memo_fingerprint(key: tuple[int, int, torch.dtype], digest: str, t: torch.Tensor) -> dict:
    held = _fingerprint_memo.get(key)
    if held is not None and held[0] == digest:
        return held[1]
    record = _record(digest, *_float_flags(t))
    if len(_fingerprint_memo) >= FINGERPRINT_MEMO_LIMIT:
        _fingerprint_memo.clear()
    _fingerprint_memo[key] = (digest, record)
    return record


def _fast_float(t: torch.Tensor) -> dict | None:
    """The common case without building a byte view: a contiguous float tensor, hashed from its
    memory in place (about half the per-tensor cost of the general path on small tensors)."""
    dtype = t.dtype
    if dtype not in _MINMAX_DTYPES or not t.is_contiguous() or t.is_neg() or t.numel() == 0:
        return None
    nbytes = t.numel() * t.element_size()
    address = t.data_ptr()
    digest = xxhash.xxh3_64_hexdigest((ctypes.c_char * nbytes).from_address(address))
    return _memo_fingerprint((address, nbytes, dtype), digest, t)


# ctypes array types by byte length (``c_char * n`` looks its type up on every call).
_buffer_types: dict[int, type[ctypes.Array[ctypes.c_char]]] = {}
BUFFER_TYPES_LIMIT = 1 << 12


def _buffer_type(nbytes: int) -> type[ctypes.Array[ctypes.c_char]]:
    if len(_buffer_types) >= BUFFER_TYPES_LIMIT:
        _buffer_types.clear()
    kind = _buffer_types[nbytes] = ctypes.c_char * nbytes
    return kind


def fingerprint_cpu_batch(tensors: list[torch.Tensor]) -> list[dict]:
    """``fingerprint_cpu`` of each tensor. The common case (a contiguous float tensor whose
    fingerprint is still memoised) is inlined: a snapshot fingerprints dozens of mostly small
    tensors, where the per-tensor interpreter work outweighs reading the bytes."""
    out = []
    memo = _fingerprint_memo
    hexdigest = xxhash.xxh3_64_hexdigest
    buffer_types = _buffer_types
    for t in tensors:
        dtype = t.dtype
        if dtype in _MINMAX_DTYPES and t.is_contiguous() and not t.is_neg() and (nbytes := t.nbytes):
            address = t.data_ptr()
            digest = hexdigest((buffer_types.get(nbytes) or _buffer_type(nbytes)).from_address(address))
            key = (address, nbytes, dtype)
            held = memo.get(key)
            out.append(held[1] if held is not None and held[0] == digest else _memo_fingerprint(key, digest, t))
        else:
            out.append(fingerprint_cpu(t))
    return out


def fingerprint_cpu(t: torch.Tensor) -> dict:
    """Fingerprint one strided CPU tensor; reads it, never writes it. Callers hold no_grad."""
    fast = _fast_float(t)
    if fast is not None:
        return fast
    flat = device_hash.raw_bytes(t)
    return _record(_digest(flat), *_flags(t, flat))
