"""Fingerprints: the CPU path ("x3") and the device algorithm ("tw", run here through its torch-op
reference on CPU tensors) must both see every byte, keep positions apart, ignore memory layout,
flag zero / NaN / Inf content right and leave the user's tensors, autograd and RNG alone.

The Triton kernel itself runs in Triton's interpreter (CPU) in a child process when Triton and
numpy are installed; on a GPU, scripts/gpu_fingerprint_check.py compares it with the reference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import xxhash

import traincheck_agent.fingerprint as fpmod
from traincheck_agent import messages
from traincheck_agent.fingerprint import (
    ALGORITHMS,
    device_hash,
    fingerprint_tensor,
    fingerprint_tensors,
)

M32 = device_hash.M32


def _optional(*names: str) -> list[torch.dtype]:
    return [getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)]


FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
COMPLEX = [torch.complex64, torch.complex128]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT8 = _optional("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
ALL_DTYPES = (
    [torch.bool] + INTS + FLOATS + COMPLEX + FLOAT8
    + _optional("uint16", "uint32", "uint64", "complex32", "float8_e8m0fnu")
)

IMPLS = {
    "x3": fingerprint_tensors,
    "tw": device_hash.fingerprint_reference,
}


def fp(impl: str, t: torch.Tensor) -> dict:
    return IMPLS[impl]([t])[0]


def sample(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random content of any dtype, from a private generator (the global RNG is not touched)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def flip_bit(t: torch.Tensor, byte: int, bit: int = 0) -> torch.Tensor:
    """A copy of contiguous ``t`` with one bit of its raw content flipped."""
    c = t.clone()
    raw = c.reshape(-1).view(torch.uint8)
    raw[byte] ^= 1 << bit
    return c


def py_tw(data: bytes) -> str:
    """The "tw" algorithm as documented in device_hash, one word at a time in Python ints."""
    d = device_hash
    padded = data + b"\0" * (-len(data) % 4)
    sum_a = sum_b = 0
    for i in range(len(padded) // 4):
        a, b = py_mix(int.from_bytes(padded[4 * i:4 * i + 4], "little"), i)
        sum_a += a
        sum_b += b
    return d.finalize(sum_a & M32, sum_b & M32, len(data))


def py_mix(w: int, i: int) -> tuple[int, int]:
    d = device_hash
    lo, hi = i & M32, i >> 32
    x = w ^ ((lo * d.KA + hi * d.KHA) & M32)
    x ^= x >> 16
    x = (x * d.M1) & M32
    a = x ^ (x >> 15)
    a = (a * d.M2) & M32
    a ^= a >> 16
    y = (x + lo * d.KB + hi * d.KHB) & M32
    y ^= y >> 13
    y = (y * d.M3) & M32
    y ^= y >> 16
    return a, y


# --- format and API ---------------------------------------------------------------------------


def test_algorithms_table():
    assert ALGORITHMS == {"cpu": "x3", "cuda": "tw"}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5), (2, 0, 3), (1001,)], ids=str)
def test_format_every_dtype_and_shape(impl, dtype, shape):
    out = fp(impl, sample(dtype, shape))
    assert set(out) - {"amax"} == {"h", "zero", "nonfinite"}
    assert re.fullmatch(rf"{impl}:[0-9a-f]{{16}}", out["h"])
    assert isinstance(out["zero"], bool) and isinstance(out["nonfinite"], bool)
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_cpu_fingerprints_carry_the_largest_magnitude_of_finite_floats(dtype):
    gen = torch.Generator().manual_seed(3)
    t = (torch.randn(70001, generator=gen) * 5).to(dtype)  # several reduction pieces
    t[12345] = -40.0
    assert fingerprint_tensor(t)["amax"] == 40.0
    assert fingerprint_tensor(t[::3])["amax"] == float(t[::3].abs().max())  # strided view
    assert fingerprint_tensor(torch.zeros(5, dtype=dtype))["amax"] == 0.0
    t[7] = float("inf")
    assert "amax" not in fingerprint_tensor(t)  # not finite: only the flag says so
    assert "amax" not in fingerprint_tensor(torch.ones(4, dtype=torch.int64))


def test_cpu_hash_is_xxh3_of_raw_bytes():
    t = torch.arange(10, dtype=torch.int32)
    raw = b"".join(i.to_bytes(4, "little") for i in range(10))
    assert fingerprint_tensor(t)["h"] == "x3:" + xxhash.xxh3_64_hexdigest(raw)


def test_device_algorithm_known_answers():
    """Frozen values: traces written by older versions must stay comparable."""
    got = device_hash.fingerprint_reference([
        torch.arange(10, dtype=torch.int32),
        torch.zeros(3),
        torch.empty(0),
        torch.arange(7, dtype=torch.uint8),
        torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    ])
    assert [g["h"] for g in got] == [
        "tw:fb849724ba0c1cfb",
        "tw:d20173f980598bfe",
        "tw:e220a8397b1dcdaf",
        "tw:cd9a4ec4d89793b0",
        "tw:f9a2ed9a22a014ac",
    ]
    assert got[0]["h"] == py_tw(b"".join(i.to_bytes(4, "little") for i in range(10)))
    assert got[3]["h"] == py_tw(bytes(range(7)))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 257])
def test_device_reference_matches_python_oracle(dtype, n):
    t = sample(dtype, (n,), seed=n)
    data = bytes(device_hash.raw_bytes(t).tolist())
    assert device_hash.fingerprint_reference([t])[0]["h"] == py_tw(data)


def test_positions_past_2_32_use_the_high_half():
    first = (1 << 32) - 3
    words = torch.tensor([0, 1, 0xFFFFFFFF, 12345, 7, 0x80000000], dtype=torch.int64)
    a, b = device_hash.mix_words(words, first)
    expect = [py_mix(int(w), first + k) for k, w in enumerate(words.tolist())]
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == expect


def test_mix_is_a_bijection_of_the_word():
    """Per position, distinct words give distinct lane values: a one-word change always shows."""
    words = torch.arange(1 << 16, dtype=torch.int64) * 65537 % (1 << 32)
    for pos in (0, 5, 123456, (1 << 32) + 9):
        for lane in device_hash.mix(words, torch.full_like(words, pos)):
            assert torch.unique(lane).numel() == words.numel()


def test_reference_chunking_does_not_change_the_hash(monkeypatch):
    ts = [sample(torch.float32, (1000,)), sample(torch.uint8, (4097,)), sample(torch.float64, (33,))]
    whole = device_hash.fingerprint_reference(ts)
    monkeypatch.setattr(device_hash, "_CHUNK_WORDS", 8)
    assert device_hash.fingerprint_reference(ts) == whole


# --- every byte counts ------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_single_bit_anywhere_changes_the_hash(impl, dtype):
    t = sample(dtype, (257,), seed=1)
    size = t.element_size()
    base = fp(impl, t)["h"]
    nbytes = t.numel() * size
    positions = sorted({0, size * 128, nbytes - size, nbytes - 1})  # first, middle, last element
    seen = {base}
    for byte in positions:
        for bit in (0, 7) if dtype != torch.bool else (0,):
            h = fp(impl, flip_bit(t, byte, bit))["h"]
            assert h != base, (byte, bit)
            seen.add(h)
    assert len(seen) == 1 + len(positions) * (1 if dtype == torch.bool else 2)


@pytest.mark.parametrize("impl", IMPLS)
def test_lowest_mantissa_bit_of_large_tensor(impl):
    t = sample(torch.float32, (300_001,), seed=2)
    changed = t.clone()
    bits = changed.view(torch.int32)
    bits[150_000] ^= 1
    assert fp(impl, t)["h"] != fp(impl, changed)["h"]
    assert fp(impl, t)["h"] == fp(impl, t.clone())["h"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32], ids=str)
def test_equal_content_equal_hash(impl, dtype):
    t = sample(dtype, (4, 33), seed=3)
    same = t.clone()
    rebuilt = sample(dtype, (4, 33), seed=3)
    assert fp(impl, t) == fp(impl, same) == fp(impl, rebuilt)


@pytest.mark.parametrize("impl", IMPLS)
def test_position_matters(impl):
    t = sample(torch.float32, (100,), seed=4)
    swapped = t.clone()
    swapped[[3, 70]] = t[[70, 3]]
    hashes = {fp(impl, x)["h"] for x in (t, t.roll(1), t.flip(0), swapped)}
    assert len(hashes) == 4
    # Same multiset of words at different places within one word-sized dtype, and across rows.
    m = sample(torch.int32, (8, 8), seed=5)
    assert fp(impl, m)["h"] != fp(impl, m.t().contiguous())["h"]


@pytest.mark.parametrize("impl", IMPLS)
def test_trailing_zero_bytes_change_the_hash(impl):
    """Content padded with zeros to a word is not confused with the padding."""
    hashes = {fp(impl, torch.zeros(n, dtype=torch.uint8))["h"] for n in range(0, 9)}
    assert len(hashes) == 9


# --- layout -----------------------------------------------------------------------------------


def _views(base: torch.Tensor) -> list[torch.Tensor]:
    return [
        base.t(),
        base[:, ::2],
        base[1:, 2:5],
        base[2],
        base[:, 3],
        base.unsqueeze(0).expand(3, -1, -1),
        base.reshape(3, 4, 5).permute(2, 0, 1),
        base.reshape(-1)[1:],
        base.reshape(-1)[3:7],
    ]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.bfloat16, torch.float32,
                                   torch.float64, torch.complex64], ids=str)
def test_non_contiguous_equals_contiguous(impl, dtype):
    base = sample(dtype, (6, 10), seed=6)
    for view in _views(base):
        assert fp(impl, view) == fp(impl, view.contiguous())


@pytest.mark.parametrize("impl", IMPLS)
def test_conj_and_neg_views_hash_their_values(impl):
    z = sample(torch.float32, (5, 2), seed=7).view(torch.complex64).reshape(5)
    z = torch.complex(z.real.nan_to_num(), z.imag.nan_to_num().clamp(-1, 1) + 2)
    assert fp(impl, z.conj()) == fp(impl, z.conj().resolve_conj())
    assert fp(impl, z.conj())["h"] != fp(impl, z)["h"]
    neg = z.conj().imag  # a negative view
    assert neg.is_neg()
    assert fp(impl, neg) == fp(impl, neg.resolve_neg())


@pytest.mark.parametrize("impl", IMPLS)
def test_unaligned_storage_offsets(impl):
    raw = sample(torch.uint8, (64,), seed=8)
    for start in range(4):
        for stop in (start + 1, start + 6, 64):
            view = raw[start:stop]
            assert fp(impl, view) == fp(impl, view.clone())
    halves = sample(torch.float16, (33,), seed=9)
    assert fp(impl, halves[1:]) == fp(impl, halves[1:].clone())


# --- flags ------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_zero_flag(impl, dtype):
    if dtype == getattr(torch, "float8_e8m0fnu", None):
        assert fp(impl, torch.zeros(4, dtype=torch.uint8).view(dtype))["zero"] is False
        return
    zeros = torch.zeros(4, 3, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 else None
    zeros = torch.zeros(4, 3, dtype=dtype) if zeros is None else zeros
    out = fp(impl, zeros)
    assert out["zero"] is True and out["nonfinite"] is False
    one = zeros.clone()
    one.reshape(-1).view(torch.uint8)[-1 if dtype != torch.bool else -1] = 1
    assert fp(impl, one)["zero"] is False


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=str)
def test_negative_zero_counts_as_zero(impl, dtype):
    t = -torch.zeros(7, dtype=dtype)
    if dtype.is_complex:
        t = torch.complex(-torch.zeros(7), -torch.zeros(7)).to(dtype)
    assert fp(impl, t)["zero"] is True
    assert fp(impl, t)["h"] != fp(impl, torch.zeros(7, dtype=dtype))["h"]
    tiny = torch.zeros(7, dtype=dtype)
    tiny.view(torch.uint8)[0] = 1  # smallest subnormal: not zero
    assert fp(impl, tiny)["zero"] is False


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=str)
@pytest.mark.parametrize("where", [0, 6])
def test_nonfinite_flag(impl, dtype, bad, where):
    t = torch.ones(7, dtype=dtype)
    t[where] = bad
    out = fp(impl, t)
    assert out["nonfinite"] is True and out["zero"] is False
    if dtype.is_complex:
        t = torch.ones(7, dtype=dtype)
        t[where] = complex(0.0, bad)
        assert fp(impl, t)["nonfinite"] is True


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=str)
def test_largest_finite_values_are_finite(impl, dtype):
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    info = torch.finfo(dtype if not dtype.is_complex else real)
    t = torch.tensor([info.max, -info.max, info.max], dtype=dtype)
    assert fp(impl, t)["nonfinite"] is False


@pytest.mark.parametrize("impl", IMPLS)
def test_float8_flags(impl):
    if not FLOAT8:
        pytest.fail("this torch has no float8 dtypes")
    e4 = torch.tensor([1.0, 448.0], dtype=torch.float8_e4m3fn)
    assert fp(impl, e4)["nonfinite"] is False
    nan = e4.clone()
    nan.view(torch.uint8)[1] = 0x7F
    assert fp(impl, nan)["nonfinite"] is True
    e5 = torch.tensor([1.0, 57344.0], dtype=torch.float8_e5m2)
    assert fp(impl, e5)["nonfinite"] is False
    inf = e5.clone()
    inf.view(torch.uint8)[0] = 0xFC
    assert fp(impl, inf)["nonfinite"] is True
    negzero = torch.tensor([0x80, 0x00], dtype=torch.uint8).view(torch.float8_e4m3fn)
    assert fp(impl, negzero)["zero"] is True


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bool] + INTS, ids=str)
def test_integers_are_never_nonfinite(impl, dtype):
    ones = torch.full((9 * dtype.itemsize,), 0xFF, dtype=torch.uint8)
    t = ones.view(dtype) if dtype != torch.bool else torch.ones(9, dtype=torch.bool)
    out = fp(impl, t)
    assert out["nonfinite"] is False and out["zero"] is False


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_and_scalar_flags(impl):
    assert fp(impl, torch.empty(0))["zero"] is True
    assert fp(impl, torch.empty(0))["nonfinite"] is False
    assert fp(impl, torch.tensor(float("nan")))["nonfinite"] is True
    assert fp(impl, torch.tensor(0.0))["zero"] is True
    assert fp(impl, torch.tensor(False))["zero"] is True


# --- leaves the user's state alone ------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_no_mutation_no_autograd_no_rng(impl):
    p = torch.nn.Parameter(sample(torch.float32, (16, 8), seed=10).nan_to_num())
    loss = (p * 2).sum()
    loss.backward()
    grad_before = p.grad.clone()
    data_before = p.detach().clone()
    versions = (p._version, p.grad._version)
    rng = torch.get_rng_state()
    views = [p, p.grad, p.t(), p[:, 1], p.detach()]
    with torch.enable_grad():
        IMPLS[impl](views)
    assert torch.equal(torch.get_rng_state(), rng)
    assert (p._version, p.grad._version) == versions
    assert torch.equal(p.detach(), data_before) and torch.equal(p.grad, grad_before)
    assert p.requires_grad and p.grad_fn is None and p.grad.grad_fn is None
    assert torch.is_grad_enabled()


def test_public_entry_leaves_grad_mode_and_rng():
    rng = torch.get_rng_state()
    x = torch.ones(3, requires_grad=True)
    y = x * 3  # non-leaf with a graph
    out = fingerprint_tensors([x, y, y.t() if y.dim() > 1 else y])
    assert out[1] == out[2]
    assert torch.is_grad_enabled()
    assert torch.equal(torch.get_rng_state(), rng)
    assert y.grad_fn is not None and x.grad is None


# --- batching, markers, layouts, fallback -----------------------------------------------------


def test_batch_equals_one_by_one_in_order():
    ts = [sample(d, (5, 3), seed=k) for k, d in enumerate(ALL_DTYPES)]
    ts.insert(3, torch.empty(2, device="meta"))
    batch = fingerprint_tensors(ts)
    assert batch == [fingerprint_tensor(t) for t in ts]
    ref = device_hash.fingerprint_reference([t for t in ts if not t.is_meta])
    assert ref == [fp("tw", t) for t in ts if not t.is_meta]
    assert fingerprint_tensors([]) == []


def test_all_cpu_batch_equals_the_general_path():
    """The all-CPU fast batch (floats, views, ints, Parameters, a grad) gives what each tensor
    gets on its own through the general path."""
    from traincheck_agent.fingerprint import cpu

    p = torch.nn.Parameter(sample(torch.float32, (6, 4), seed=1))
    p.grad = sample(torch.float32, (6, 4), seed=2)
    ts = [p, p.grad, sample(torch.float64, (8, 8), seed=3).t(), sample(torch.int64, (7,), seed=4),
          sample(torch.bfloat16, (3, 5), seed=5), torch.zeros(0), torch.tensor(float("nan")),
          torch.tensor([-0.0, 0.0]), torch.tensor([2.0, float("-inf")]), torch.tensor([0.5, -3.0])]
    cpu._fingerprint_memo.clear()
    expected = [cpu.fingerprint_cpu(t.detach()) for t in ts]
    cpu._fingerprint_memo.clear()
    assert fingerprint_tensors(ts) == expected
    assert fingerprint_tensors(ts) == expected  # second time from the memo


@pytest.mark.parametrize("dtype", FLOATS)
def test_memoised_fingerprints_follow_content_changes_in_place(dtype):
    """Fingerprints are reused only while the hash is unchanged: an in-place write to the same memory
    (no new tensor, no version bump through .data) shows in both the hash and the flags."""
    w = torch.nn.Parameter(torch.ones(64, dtype=dtype))
    first = fingerprint_tensor(w)
    assert not first["zero"] and not first["nonfinite"]
    w.data[7] = float("inf")
    second = fingerprint_tensor(w)
    assert second["h"] != first["h"] and second["nonfinite"]
    w.data.zero_()
    third = fingerprint_tensor(w)
    assert third["zero"] and not third["nonfinite"]
    w.data.fill_(1.0)
    assert fingerprint_tensor(w) == first


def test_markers():
    assert fingerprint_tensor(torch.empty(3, 4, device="meta")) == {
        "h": "meta:", "zero": False, "nonfinite": False,
    }
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(3)
    assert fingerprint_tensor(fake)["h"] == "nostorage:"
    lazy = torch.nn.LazyLinear(3).weight
    assert fingerprint_tensor(lazy)["h"] == "uninitialized:"


def test_sparse_hashes_like_dense(monkeypatch):
    dense = torch.zeros(6, 5)
    dense[1, 2] = 3.0
    dense[4, 0] = float("inf")
    want = fingerprint_tensor(dense)
    assert fingerprint_tensor(dense.to_sparse()) == want
    assert fingerprint_tensor(dense.to_sparse_csr()) == want
    monkeypatch.setattr(fpmod, "SPARSE_DENSE_LIMIT", 10)
    assert fingerprint_tensor(dense.to_sparse())["h"] == "sparse_coo:"


def test_quantized_uses_integer_representation():
    q = torch.quantize_per_tensor(torch.tensor([0.0, 1.0, 2.0]), 0.5, 1, torch.quint8)
    assert fingerprint_tensor(q)["h"] == fingerprint_tensor(q.int_repr())["h"]


def test_kernel_failure_falls_back_to_reference_and_warns_once(monkeypatch, capsys):
    class Broken:
        calls = 0

        @staticmethod
        def fingerprint_batch(tensors):
            Broken.calls += 1
            raise RuntimeError("no kernel today")

    monkeypatch.setattr(messages, "_seen", set())
    monkeypatch.setattr(fpmod, "_kernel", {"module": Broken, "failed": False})
    ts = [sample(torch.float32, (10,)), sample(torch.uint8, (3,))]
    want = device_hash.fingerprint_reference(ts)
    for _ in range(2):
        assert fpmod._device_batch(torch.device("cuda"), ts) == want
    err = capsys.readouterr().err
    assert Broken.calls == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("[traincheck] warning:")]
    assert len(lines) == 1 and "no kernel today" in lines[0]


@pytest.mark.slow
def test_fingerprint_package_does_not_import_orjson_or_triton():
    code = (
        "import sys, torch; import traincheck_agent.fingerprint as f; "
        "f.fingerprint_tensors([torch.ones(3)]); "
        "print('orjson' in sys.modules, 'triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


# --- the Triton kernel, in Triton's interpreter -----------------------------------------------

_INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import torch
    from traincheck_agent.fingerprint import device_hash as dh, triton_kernel as tk

    tk.BLOCK, tk.ITERS, tk.MAX_TENSORS = 32, 2, 4  # many programs, tails, several launches
    g = torch.Generator().manual_seed(0)

    def rnd(dtype, n):
        size = torch.empty((), dtype=dtype).element_size()
        raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
        return raw.view(dtype)

    ts = []
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.uint8,
                  torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn,
                  torch.float8_e5m2]:
        for n in (1, 3, 64, 64 * 3 + 5, 257):
            t = rnd(dtype, n) if dtype != torch.bool else torch.rand(n, generator=g) > 0.5
            ts.append(t)
    base = rnd(torch.float32, 40).reshape(5, 8)
    ts += [base.t(), base[:, ::3], rnd(torch.uint8, 50)[1:8], rnd(torch.float16, 31)[1:],
           torch.zeros(70), -torch.zeros(9, dtype=torch.bfloat16), torch.empty(0),
           torch.tensor(float("nan")), torch.tensor([1.0, float("inf")], dtype=torch.float16),
           torch.full((7,), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)]
    got = tk.fingerprint_batch(ts)
    want = dh.fingerprint_reference(ts)
    bad = [(k, g_, w_) for k, (g_, w_) in enumerate(zip(got, want)) if g_ != w_]
    print("MISMATCH", bad if bad else "none", len(ts))
    """
)


# CI installs Triton here (.ci/run), outside the venv, so that torch never sees it.
TRITON_SITE = Path(__file__).resolve().parent.parent / ".triton-site"


@pytest.mark.slow
def test_triton_kernel_in_interpreter_matches_reference():
    env = dict(os.environ, TRITON_INTERPRET="1")
    if TRITON_SITE.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TRITON_SITE), env.get("PYTHONPATH")) if p)
    elif importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton: .ci/run installs it into .triton-site (Triton's CPU interpreter)")
    if importlib.util.find_spec("numpy") is None:
        pytest.skip("needs numpy (Triton's CPU interpreter)")
    out = subprocess.run([sys.executable, "-c", _INTERPRETER_SCRIPT], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "MISMATCH none" in out.stdout, out.stdout[-4000:]
