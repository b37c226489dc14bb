"""The "tw" device fingerprint as one fused Triton kernel, batched over many tensors.

The algorithm is defined in ``device_hash`` (the torch-op reference); this kernel must agree with
it bit for bit. Importing this module imports Triton, so callers import it lazily and fall back
to the reference when that fails.

One launch covers every tensor of a *group*: tensors of one device that share the load width
(32-bit words when address and size allow, else 16- or 8-bit pieces put together into words),
16-byte alignment and flag masks. A table of (address, byte count, output row) per tensor and
the first program of each tensor are passed in; each program finds its tensor with a vector
compare over that list, hashes up to ``ITERS`` blocks of ``BLOCK`` words and adds its lane sums
and flags to the tensor's output row with atomics. Sums mod 2**32 and bitwise ors commute, so
the result does not depend on the order in which programs finish.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence
from contextlib import nullcontext

import torch
import triton
import triton.language as tl

from traincheck_agent.fingerprint import device_hash as dh

# Launch shape; the GPU check script may sweep these. A program hashes up to ITERS blocks of
# BLOCK words: long enough to hide its start (finding its tensor), short enough to spread.
BLOCK = 2048
ITERS = 16
NUM_WARPS = 8
MAX_TENSORS = 1024  # tensors per launch, a power of 2 >= 32 (programs search this many starts)

_KA = tl.constexpr(dh.KA)
_KHA = tl.constexpr(dh.KHA)
_KB = tl.constexpr(dh.KB)
_KHB = tl.constexpr(dh.KHB)
_M1 = tl.constexpr(dh.M1)
_M2 = tl.constexpr(dh.M2)
_M3 = tl.constexpr(dh.M3)


@triton.jit
def _load_words(addr, idx, nbytes, MASKED: tl.constexpr, LOAD: tl.constexpr,
                ALIGNED: tl.constexpr):
    """Little-endian 32-bit words ``idx`` of the content at ``addr``, zero past ``nbytes``."""
    if LOAD == 4:
        ptrs = addr.to(tl.pointer_type(tl.uint32)) + idx
        if ALIGNED:
            ptrs = tl.multiple_of(ptrs, 16)
        if MASKED:  # noqa: SIM108 (constexpr branches read clearer in kernels)
            w = tl.load(ptrs, mask=idx * 4 < nbytes, other=0)
        else:
            w = tl.load(ptrs)
    elif LOAD == 2:
        p16 = addr.to(tl.pointer_type(tl.uint16)) + idx * 2
        if MASKED:
            lo = tl.load(p16, mask=idx * 4 < nbytes, other=0)
            hi = tl.load(p16 + 1, mask=idx * 4 + 2 < nbytes, other=0)
        else:
            lo = tl.load(p16)
            hi = tl.load(p16 + 1)
        w = lo.to(tl.uint32) | (hi.to(tl.uint32) << 16)
    else:
        p8 = addr.to(tl.pointer_type(tl.uint8)) + idx * 4
        if MASKED:
            b0 = tl.load(p8, mask=idx * 4 < nbytes, other=0)
            b1 = tl.load(p8 + 1, mask=idx * 4 + 1 < nbytes, other=0)
            b2 = tl.load(p8 + 2, mask=idx * 4 + 2 < nbytes, other=0)
            b3 = tl.load(p8 + 3, mask=idx * 4 + 3 < nbytes, other=0)
        else:
            b0 = tl.load(p8)
            b1 = tl.load(p8 + 1)
            b2 = tl.load(p8 + 2)
            b3 = tl.load(p8 + 3)
        w = (b0.to(tl.uint32) | (b1.to(tl.uint32) << 8) | (b2.to(tl.uint32) << 16)
             | (b3.to(tl.uint32) << 24))
    return w


@triton.jit
def _block(addr, nbytes, blk, j, j_ka, j_kb, odd, acc_a, acc_b, f1, f2,
           BLOCK: tl.constexpr, MASKED: tl.constexpr, LOAD: tl.constexpr, ALIGNED: tl.constexpr,
           E: tl.constexpr, ZMASK: tl.constexpr, NMASK: tl.constexpr, NVAL: tl.constexpr,
           IEEE: tl.constexpr):
    """Fold block ``blk`` (words ``blk*BLOCK ...``) into the lane sums and flag accumulators."""
    base = tl.cast(blk, tl.int64) * BLOCK
    idx = base + j
    w = _load_words(addr, idx, nbytes, MASKED, LOAD, ALIGNED)
    # Position keys: BLOCK divides 2**32 and base is a multiple of BLOCK, so lo(base + j) is
    # lo(base) + j without carry and hi is the same for the whole block.
    lo = base.to(tl.uint32)
    hi = (base >> 32).to(tl.uint32)
    ka = (lo * _KA + hi * _KHA) + j_ka
    kb = (lo * _KB + hi * _KHB) + j_kb
    x = w ^ ka
    x = x ^ (x >> 16)
    x = x * _M1
    a = x ^ (x >> 15)
    a = a * _M2
    a = a ^ (a >> 16)
    y = x + kb
    y = y ^ (y >> 13)
    y = y * _M3
    y = y ^ (y >> 16)
    if MASKED:
        valid = idx * 4 < nbytes
        a = tl.where(valid, a, 0)
        y = tl.where(valid, y, 0)
    acc_a += a
    acc_b += y
    # Flags; padding and masked-off words read as 0, which never looks non-finite (NVAL != 0).
    if IEEE:
        if E == 32:
            f1 = tl.maximum(f1, w & 0x7FFFFFFF)
        else:  # both halves in one running max: fewer registers than two
            f1 = tl.maximum(f1, tl.maximum(w & 0x7FFF, (w >> 16) & 0x7FFF))
    else:
        if E == 64:
            f1 = f1 | (w & tl.where(odd, ZMASK, 0xFFFFFFFF).to(tl.uint32))
            bad = odd & ((w & NMASK) == NVAL)
        else:
            f1 = f1 | (w & ZMASK)
            if E == 32:
                bad = (w & NMASK) == NVAL
            elif E == 16:
                bad = ((w & NMASK) == NVAL) | (((w >> 16) & NMASK) == NVAL)
            elif E == 8:
                bad = (((w & NMASK) == NVAL) | (((w >> 8) & NMASK) == NVAL)
                       | (((w >> 16) & NMASK) == NVAL) | (((w >> 24) & NMASK) == NVAL))
            else:
                bad = w != w  # no non-finite values in this format
        f2 = f2 | bad.to(tl.uint32)
    return acc_a, acc_b, f1, f2


@triton.jit(do_not_specialize=["n_tensors", "iters"])
def _tw_kernel(meta_ptr, starts_ptr, out_ptr, n_tensors, iters,
               BLOCK: tl.constexpr, TP: tl.constexpr,
               LOAD: tl.constexpr, ALIGNED: tl.constexpr, E: tl.constexpr,
               ZMASK: tl.constexpr, NMASK: tl.constexpr, NVAL: tl.constexpr,
               IEEE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    # Which tensor: the last one whose first program is <= pid.
    t_idx = tl.arange(0, TP)
    starts = tl.load(starts_ptr + t_idx, mask=t_idx < n_tensors, other=0x7FFFFFFFFFFFFFFF)
    tid = tl.sum((starts <= pid).to(tl.int32), axis=0) - 1
    addr = tl.load(meta_ptr + tid * 3)
    nbytes = tl.load(meta_ptr + tid * 3 + 1)
    row = tl.load(meta_ptr + tid * 3 + 2)
    prog = pid - tl.load(starts_ptr + tid)
    nwords = (nbytes + 3) // 4
    n_blocks = (nwords + BLOCK - 1) // BLOCK
    n_full = nbytes // (4 * BLOCK)
    b0 = prog * iters
    b1 = tl.minimum(b0 + iters, n_blocks)
    bf = tl.minimum(b1, n_full)

    j = tl.arange(0, BLOCK)
    ju = j.to(tl.uint32)
    j_ka = ju * _KA
    j_kb = ju * _KB
    odd = (j & 1) == 1
    acc_a = tl.zeros([BLOCK], dtype=tl.uint32)
    acc_b = tl.zeros([BLOCK], dtype=tl.uint32)
    f1 = tl.zeros([BLOCK], dtype=tl.uint32)
    f2 = tl.zeros([BLOCK], dtype=tl.uint32)
    for blk in range(b0, bf):
        acc_a, acc_b, f1, f2 = _block(addr, nbytes, blk, j, j_ka, j_kb, odd, acc_a, acc_b, f1, f2,
                                      BLOCK, False, LOAD, ALIGNED, E, ZMASK, NMASK, NVAL, IEEE)
    if bf < b1:
        acc_a, acc_b, f1, f2 = _block(addr, nbytes, bf, j, j_ka, j_kb, odd, acc_a, acc_b, f1, f2,
                                      BLOCK, True, LOAD, ALIGNED, E, ZMASK, NMASK, NVAL, IEEE)

    sum_a = tl.sum(acc_a, axis=0)
    sum_b = tl.sum(acc_b, axis=0)
    m1 = tl.max(f1, axis=0)
    m2 = tl.max(f2, axis=0)
    if IEEE:
        nonfinite = m1 >= NVAL
        nonzero = m1 != 0
    else:
        nonzero = m1 != 0
        nonfinite = m2 != 0
    flags = nonzero.to(tl.int32) | (nonfinite.to(tl.int32) << 1)
    out = out_ptr + row * 4
    tl.atomic_add(out, sum_a.to(tl.int32, bitcast=True))
    tl.atomic_add(out + 1, sum_b.to(tl.int32, bitcast=True))
    tl.atomic_or(out + 2, flags)


_QUANTIZED = frozenset({torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4})
# Dtypes that always take the careful path (conj bit, integer representation).
_SLOW_DTYPES = _QUANTIZED | {torch.complex64, torch.complex128} | (
    {torch.complex32} if hasattr(torch, "complex32") else set()
)
_LENGTH_KEYS: dict[int, int] = {}


def _length_key(nbytes: int) -> int:
    key = _LENGTH_KEYS.get(nbytes)
    if key is None:
        if len(_LENGTH_KEYS) > 4096:
            _LENGTH_KEYS.clear()
        key = _LENGTH_KEYS[nbytes] = dh.length_key(nbytes)
    return key


def _table_width(n: int) -> int:
    """Two widths of the program->tensor search only, so few kernel variants compile."""
    return 32 if n <= 32 else MAX_TENSORS


# Load codes: 32-bit words at a 16-byte aligned address, 32-bit words, 16-bit halves, bytes.
_LOADS = ((4, True), (4, False), (2, False), (1, False))


class Plan:
    """What one batch launches: the content read (kept alive until the results are back), the
    host table and, per launch, its constexprs and offsets into that table.

    Built for speed: for the usual contiguous tensor it reads five attributes and appends to
    lists; everything else happens in bulk per launch group.
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.device = tensors[0].device
        self.keep: list[torch.Tensor] = []
        self.nbytes: list[int] = []
        self.dtypes: list[torch.dtype] = []
        keep, nbytes, dtypes = self.keep, self.nbytes, self.dtypes
        groups: dict[torch.dtype, list[list[int]]] = {}
        slow = _SLOW_DTYPES
        for k, t in enumerate(tensors):
            dtype = t.dtype
            if dtype in slow or not t.is_contiguous() or t.is_neg():
                t = dh.raw_bytes(t)
            n = t.nbytes
            keep.append(t)
            nbytes.append(n)
            dtypes.append(dtype)
            if n:
                addr = t.data_ptr()
                if not (addr | n) & 3:
                    code = 1 if addr & 15 else 0
                elif not (addr | n) & 1:
                    code = 2
                else:
                    code = 3
                group = groups.get(dtype)
                if group is None:
                    group = groups[dtype] = [[], [], [], []]
                group[code] += (addr, n, k)

        self.iters = ITERS
        chunk_bytes = 4 * BLOCK * ITERS
        table = array.array("q")
        self.launches: list[tuple] = []
        for dtype, group in groups.items():
            spec = dh.flag_spec(dtype)
            for code, rows in enumerate(group):
                for c in range(0, len(rows), 3 * MAX_TENSORS):
                    part = rows[c:c + 3 * MAX_TENSORS]
                    count = len(part) // 3
                    table.extend([0] * (len(table) % 2))  # 16-byte aligned: one kernel variant
                    meta_off = len(table)
                    table.extend(part)
                    table.extend([0] * (len(table) % 2))
                    starts_off = len(table)
                    programs = list(itertools.accumulate(
                        [(n + chunk_bytes - 1) // chunk_bytes for n in part[1::3]], initial=0))
                    table.extend(programs[:-1])
                    load, aligned = _LOADS[code]
                    self.launches.append((load, aligned, spec, count, meta_off, starts_off,
                                          programs[-1]))
        self.table = table
        self.never_zero = any(dh.flag_spec(d).never_zero for d in groups)

    def launch(self, out: torch.Tensor) -> None:
        """Queue the kernels; they add into ``out`` (int32, one row of 4 per tensor, zeroed)."""
        if not self.launches:
            return
        dev_table = torch.frombuffer(self.table, dtype=torch.int64).to(self.device)
        ctx = torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext()
        with ctx:
            for load, aligned, spec, count, meta_off, starts_off, programs in self.launches:
                _tw_kernel[(programs,)](
                    dev_table[meta_off:], dev_table[starts_off:], out, count, self.iters,
                    BLOCK=BLOCK, TP=_table_width(count), LOAD=load, ALIGNED=aligned, E=spec.e,
                    ZMASK=spec.zmask, NMASK=spec.nmask, NVAL=spec.nval, IEEE=spec.ieee,
                    num_warps=NUM_WARPS,
                )

    def results(self, flat: list[int]) -> list[dict]:
        """Fingerprints from the output read back as unsigned 64-bit pairs per tensor:
        ``B << 32 | A`` (the int32 lanes, little-endian) and the flags."""
        keys = _LENGTH_KEYS
        out: list[dict] = []
        append = out.append
        pairs = iter(flat)
        for h, flags, n in zip(pairs, pairs, self.nbytes, strict=True):
            key = keys.get(n)
            if key is None:
                key = _length_key(n)
            hexed = "tw:%016x" % (h ^ key)  # noqa: UP031 ("%" is the fastest form here)
            append({"h": hexed, "zero": not flags & 1, "nonfinite": flags > 1})
        if self.never_zero:
            for fp, n, dtype in zip(out, self.nbytes, self.dtypes, strict=True):
                if n and dh.flag_spec(dtype).never_zero:
                    fp["zero"] = False
        return out


def fingerprint_batch(tensors: Sequence[torch.Tensor]) -> list[dict]:
    """Fingerprint strided tensors that all live on one device (CUDA, or CPU under the Triton
    interpreter): a few launches, one host-to-device table copy, one device-to-host copy."""
    if not tensors:
        return []
    with torch.no_grad():
        plan = Plan(tensors)
        out = torch.zeros((len(tensors), 4), dtype=torch.int32, device=plan.device)
        plan.launch(out)
        flat = out.cpu().view(torch.uint64).reshape(-1).tolist()
    return plan.results(flat)
