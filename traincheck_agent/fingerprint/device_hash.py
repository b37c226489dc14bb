"""The device fingerprint algorithm ("tw"), written with plain torch ops.

This module *defines* the algorithm. The fused Triton kernel (``triton_kernel``) must agree with
it bit for bit; it is tested against this code, and this code is what runs when Triton is missing
or fails, and on device types other than CUDA.

Algorithm, for a tensor whose logical content (row-major, conj/neg views resolved) is ``n`` bytes:

1. The bytes are zero-padded to a multiple of 4 and read as little-endian 32-bit words ``w[i]``.
2. Each word is mixed with its position ``i`` (64-bit, split into ``lo``/``hi`` halves)::

       x  = w ^ (lo * KA + hi * KHA)          position key, lane A
       x ^= x >> 16;  x *= M1                 shared first round
       a  = x ^ (x >> 15);  a *= M2;  a ^= a >> 16
       y  = x + (lo * KB + hi * KHB)          position key, lane B
       y ^= y >> 13;  y *= M3;  y ^= y >> 16

   All arithmetic is modulo 2**32. For a fixed position each step is a bijection of ``w``, so
   changing any single word always changes both ``a`` and ``b``.
3. ``A = sum(a) mod 2**32`` and ``B = sum(b) mod 2**32``: sums are order-free, so blocks of a
   tensor may be reduced in any order (atomics included) and still give one answer.
4. ``h = (B << 32 | A) ^ K(n)`` with ``K`` a splitmix64 key of the byte count ``n``, printed
   as ``tw:<16 hex>``. For one ``n`` this is a bijection of ``(A, B)``, so it adds no collision,
   and ``n`` tells apart tensors that only differ by the zero padding.

Flags: ``zero`` is "every element is zero" (sign bits of floats masked off, so -0.0 counts) and
``nonfinite`` is "some element has an all-ones exponent" for the float formats that have one.
Both are computed on the words with dtype-aware masks (``FlagSpec``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

PREFIX = "tw"

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF

# Position keys: odd 32-bit constants (golden-ratio and other well-spread values).
KA = 0x9E3779B1
KHA = 0xC2B2AE3D
KB = 0x85EBCA77
KHB = 0x27D4EB2F
# Multipliers of the mixing rounds (odd, so each multiply is a bijection mod 2**32).
M1 = 0x7FEB352D
M2 = 0x846CA68B
M3 = 0x21F0AAAD

GOLDEN64 = 0x9E3779B97F4A7C15

# Words per chunk of the torch reference: bounds its int64 temporaries (8 MiB each).
_CHUNK_WORDS = 1 << 20


class FlagSpec(NamedTuple):
    """How to read the zero / non-finite flags out of 32-bit words of one dtype.

    ``e`` is the element width in bits the non-finite test works on (0: no such test;
    64: only the odd, high words of each 64-bit element are tested). ``zmask`` is and-ed with
    each word before the zero test (odd words only when ``e`` is 64). An element is non-finite
    when ``element & nmask == nval``. ``never_zero`` marks formats that cannot hold a zero.
    """

    e: int = 0
    zmask: int = M32
    nmask: int = 0
    nval: int = 0
    never_zero: bool = False

    @property
    def ieee(self) -> bool:
        """True when the flags follow from the largest sign-less element (32/16-bit floats)."""
        if self.e == 32:
            return self.zmask == 0x7FFFFFFF and self.nmask == self.nval
        if self.e == 16:
            return self.zmask == 0x7FFF7FFF and self.nmask == self.nval
        return False

    def key(self) -> tuple[int, int, int, int]:
        return (self.e, self.zmask, self.nmask, self.nval)


_INT_SPEC = FlagSpec()
_F32 = FlagSpec(32, 0x7FFFFFFF, 0x7F800000, 0x7F800000)
_F64 = FlagSpec(64, 0x7FFFFFFF, 0x7FF00000, 0x7FF00000)
_F16 = FlagSpec(16, 0x7FFF7FFF, 0x7C00, 0x7C00)
_BF16 = FlagSpec(16, 0x7FFF7FFF, 0x7F80, 0x7F80)


def _build_specs() -> dict[torch.dtype, FlagSpec]:
    specs = {
        torch.float32: _F32,
        torch.complex64: _F32,
        torch.float64: _F64,
        torch.complex128: _F64,
        torch.float16: _F16,
        torch.bfloat16: _BF16,
    }
    optional = {
        "complex32": _F16,
        "float8_e5m2": FlagSpec(8, 0x7F7F7F7F, 0x7C, 0x7C),
        "float8_e4m3fn": FlagSpec(8, 0x7F7F7F7F, 0x7F, 0x7F),
        # The "fnuz" formats have no -0: 0x80 is their only NaN and there is no Inf.
        "float8_e4m3fnuz": FlagSpec(8, M32, 0xFF, 0x80),
        "float8_e5m2fnuz": FlagSpec(8, M32, 0xFF, 0x80),
        # Powers of two only: no zero, 0xFF is NaN.
        "float8_e8m0fnu": FlagSpec(8, M32, 0xFF, 0xFF, never_zero=True),
        # Two 4-bit e2m1 values per byte, sign bits 0x08 and 0x80; no NaN or Inf.
        "float4_e2m1fn_x2": FlagSpec(0, 0x77777777),
    }
    for name, spec in optional.items():
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype):
            specs[dtype] = spec
    return specs


_SPECS = _build_specs()


def flag_spec(dtype: torch.dtype) -> FlagSpec:
    """Flag masks for ``dtype``; integers, bool and unknown dtypes get the plain all-bits test."""
    return _SPECS.get(dtype, _INT_SPEC)


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The logical content of ``t`` as a 1-D contiguous uint8 tensor, in row-major order.

    Copies only when it must (non-contiguous, conjugate or negative views); never writes to
    ``t``. Quantized tensors are read through their integer representation.
    """
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8)


def length_key(nbytes: int) -> int:
    """64-bit key of the byte count (splitmix64), xor-ed into the hash."""
    h = (nbytes + GOLDEN64) & M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & M64
    return h ^ (h >> 31)


def finalize(a: int, b: int, nbytes: int) -> str:
    """The printed hash: lane sums ``B`` (high half) and ``A``, xor the byte count's key."""
    return f"{PREFIX}:{(((b & M32) << 32) | (a & M32)) ^ length_key(nbytes):016x}"


def make_fingerprint(a: int, b: int, flags: int, nbytes: int, spec: FlagSpec) -> dict:
    """Build the JSON-ready fingerprint from the per-tensor results of a kernel or the reference.

    ``flags`` bit 0: some element is non-zero; bit 1: some element is non-finite.
    """
    zero = not (flags & 1) and not (spec.never_zero and nbytes > 0)
    return {"h": finalize(a, b, nbytes), "zero": zero, "nonfinite": bool(flags & 2)}


def _signed(c: int) -> int:
    """``c`` as a signed 32-bit value, so ``x * c`` stays inside int64 for ``0 <= x < 2**32``."""
    return c - (1 << 32) if c >= (1 << 31) else c


def _mulc(x: torch.Tensor, c: int) -> torch.Tensor:
    return (x * _signed(c)).bitwise_and_(M32)


def _xorshift(x: torch.Tensor, s: int) -> torch.Tensor:
    return x.bitwise_xor_(x >> s)


def mix(
    words: torch.Tensor, pos: torch.Tensor, high: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lane values (int64 in [0, 2**32)) of ``words`` (int64 in [0, 2**32)) at positions ``pos``
    (non-negative int64, broadcast against ``words``). ``high``: whether some position is at or
    past 2**32 (looked up, with a host sync, when not given)."""
    lo = pos & M32
    hi = pos >> 32
    ka = _mulc(lo, KA)
    kb = _mulc(lo, KB)
    if high is None:
        high = bool((hi != 0).any())
    if high:
        ka = (ka + _mulc(hi, KHA)).bitwise_and_(M32)
        kb = (kb + _mulc(hi, KHB)).bitwise_and_(M32)
    x = words ^ ka
    x = _mulc(_xorshift(x, 16), M1)
    a = _mulc(x ^ (x >> 15), M2)
    a = _xorshift(a, 16)
    y = (x + kb).bitwise_and_(M32)
    y = _mulc(_xorshift(y, 13), M3)
    y = _xorshift(y, 16)
    return a, y


def mix_words(words: torch.Tensor, first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lane values of ``words`` at positions ``first, first + 1, ...``."""
    stop = first + words.numel()
    pos = torch.arange(first, stop, dtype=torch.int64, device=words.device)
    return mix(words, pos, high=stop > (1 << 32))


def _flags(words: torch.Tensor, first: int, spec: FlagSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(some word non-zero under the mask, some element non-finite) as 0-dim bool tensors."""
    if spec.e == 64:
        odd = (torch.arange(first, first + words.numel(), device=words.device) & 1).bool()
        zmask = torch.where(odd, spec.zmask, M32)
        nonzero = (words & zmask).ne(0).any()
        nonfinite = ((words & spec.nmask) == spec.nval).logical_and_(odd).any()
        return nonzero, nonfinite
    nonzero = (words & spec.zmask).ne(0).any()
    if spec.e == 0:
        return nonzero, torch.zeros((), dtype=torch.bool, device=words.device)
    width_mask = (1 << spec.e) - 1
    bad = torch.zeros(words.shape, dtype=torch.bool, device=words.device)
    for shift in range(0, 32, spec.e):
        bad |= ((words >> shift) & width_mask & spec.nmask) == spec.nval
    return nonzero, bad.any()


def _words(flat: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Bytes ``[start, stop)`` of ``flat`` as zero-padded little-endian words in int64."""
    part = flat[start:stop]
    pad = (-part.numel()) % 4
    if pad or part.storage_offset() % 4:
        part = torch.cat([part, part.new_zeros(pad)])
    return part.view(torch.int32).to(torch.int64).bitwise_and_(M32)


def flag_bits(flat: torch.Tensor, spec: FlagSpec) -> int:
    """The flags word (bit 0: non-zero, bit 1: non-finite) of the uint8 content ``flat``;
    synchronises with the host."""
    nonzero = nonfinite = False
    step = 4 * _CHUNK_WORDS
    for start in range(0, flat.numel(), step):
        nz, nf = _flags(_words(flat, start, min(start + step, flat.numel())), start // 4, spec)
        nonzero = nonzero or bool(nz)
        nonfinite = nonfinite or bool(nf)
    return int(nonzero) + 2 * int(nonfinite)


def lanes(flat: torch.Tensor, spec: FlagSpec) -> torch.Tensor:
    """The four per-tensor results ``[A, B, flags, 0]`` (int64, on ``flat``'s device) of the
    uint8 content ``flat``; no host synchronisation."""
    dev = flat.device
    acc_a = torch.zeros((), dtype=torch.int64, device=dev)
    acc_b = torch.zeros((), dtype=torch.int64, device=dev)
    nonzero = torch.zeros((), dtype=torch.bool, device=dev)
    nonfinite = torch.zeros((), dtype=torch.bool, device=dev)
    nbytes = flat.numel()
    step = 4 * _CHUNK_WORDS
    for start in range(0, nbytes, step):
        words = _words(flat, start, min(start + step, nbytes))
        first = start // 4
        a, b = mix_words(words, first)
        acc_a = (acc_a + a.sum()).bitwise_and_(M32)
        acc_b = (acc_b + b.sum()).bitwise_and_(M32)
        nz, nf = _flags(words, first, spec)
        nonzero |= nz
        nonfinite |= nf
    flags = nonzero.to(torch.int64) + 2 * nonfinite.to(torch.int64)
    return torch.stack([acc_a, acc_b, flags, torch.zeros_like(flags)])


def fingerprint_reference(tensors: Sequence[torch.Tensor]) -> list[dict]:
    """Fingerprint strided tensors with the torch-op algorithm; one device-to-host copy per call.

    All tensors must be on one device. Runs under ``torch.no_grad()``.
    """
    if not tensors:
        return []
    with torch.no_grad():
        flats = [raw_bytes(t) for t in tensors]
        specs = [flag_spec(t.dtype) for t in tensors]
        results = torch.stack([lanes(f, spec) for f, spec in zip(flats, specs, strict=True)])
        rows = results.cpu().tolist()
    return [
        make_fingerprint(a, b, flags, f.numel(), spec)
        for (a, b, flags, _), f, spec in zip(rows, flats, specs, strict=True)
    ]
