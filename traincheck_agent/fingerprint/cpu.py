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


def _float_flags(values: torch.Tensor) -> tuple[bool, bool]:
    lo, hi = torch.aminmax(values)
    lo_f, hi_f = float(lo), float(hi)
    zero = lo_f == 0.0 and hi_f == 0.0
    nonfinite = not (math.isfinite(lo_f) and math.isfinite(hi_f))
    return zero, nonfinite


def _flags(t: torch.Tensor, flat: torch.Tensor) -> tuple[bool, bool]:
    """(zero, nonfinite) of the tensor whose contiguous bytes are ``flat``."""
    if flat.numel() == 0:
        return True, False
    dtype = t.dtype
    if dtype in _PLAIN_DTYPES and not t.is_quantized:
        return not bool(flat.any()), False
    if dtype in _MINMAX_DTYPES:
        return _float_flags(flat.view(dtype))
    if dtype in _COMPLEX_DTYPES:
        return _float_flags(torch.view_as_real(flat.view(dtype)))
    spec = device_hash.flag_spec(dtype)
    fp = device_hash.make_fingerprint(0, 0, device_hash.flag_bits(flat, spec), flat.numel(), spec)
    return fp["zero"], fp["nonfinite"]


def fingerprint_cpu(t: torch.Tensor) -> dict:
    """Fingerprint one strided CPU tensor; reads it, never writes it."""
    with torch.no_grad():
        flat = device_hash.raw_bytes(t)
        zero, nonfinite = _flags(t, flat)
        return {"h": f"{PREFIX}:{_digest(flat)}", "zero": zero, "nonfinite": nonfinite}
