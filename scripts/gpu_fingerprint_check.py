#!/usr/bin/env python3
"""Check the CUDA fingerprint kernel on a real GPU and measure what it costs.

* correctness: the Triton kernel equals the torch-op reference bit for bit (many dtypes, odd
  sizes, block edges, non-contiguous and unaligned views, flag cases, positions past 2**32
  words), also under other launch shapes, and a single flipped bit anywhere changes the hash;
* cost: bandwidth on 400M fp32 values, GPT-2-small's 122 tensors batched vs one by one, and
  params + grads of a ~160M-parameter transformer as a share of its training step.

Runs anywhere: without CUDA it checks the CPU parts and reports the rest as unavailable.
Prints the results as JSON and writes them to $OUT/gpu_fingerprint.json when OUT is set
(after every section, so a run cut short still reports what it did).

    PYTHONUNBUFFERED=1 python3 scripts/gpu_fingerprint_check.py

``--dry-cpu`` (with TRITON_INTERPRET=1, Triton and numpy installed) runs every section on CPU
tensors through Triton's interpreter at toy sizes: a rehearsal of the script, not a measurement.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import traincheck_agent.fingerprint as fpmod  # noqa: E402
from traincheck_agent.fingerprint import device_hash as dh  # noqa: E402
from traincheck_agent.fingerprint import fingerprint_tensor, fingerprint_tensors  # noqa: E402

DRY = "--dry-cpu" in sys.argv
START = time.monotonic()
BUDGET_S = float(os.environ.get("FP_CHECK_BUDGET_S", "230"))
RESULTS: dict = {"sections": {}, "errors": {}}


def log(msg: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {msg}", flush=True)


def save() -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_fingerprint.json").write_text(json.dumps(RESULTS, indent=1, default=str))


def left() -> float:
    return BUDGET_S - (time.monotonic() - START)


def section(name: str, need_s: float) -> Callable:
    """Run a section if time allows; record its result or its error, then save."""

    def wrap(fn: Callable) -> Callable:
        def run() -> None:
            only = os.environ.get("FP_CHECK_ONLY")
            if only and name not in only.split(","):
                RESULTS["sections"][name] = "skipped: not in FP_CHECK_ONLY"
                return
            if left() < need_s:
                RESULTS["sections"][name] = f"skipped: {left():.0f}s left, needs {need_s:.0f}s"
                log(f"skip {name}")
                save()
                return
            log(f"start {name}")
            try:
                RESULTS["sections"][name] = fn()
            except Exception:
                RESULTS["errors"][name] = traceback.format_exc()[-3000:]
                log(f"ERROR in {name}:\n{RESULTS['errors'][name]}")
            log(f"done {name}")
            save()

        return run

    return wrap


def sync() -> None:
    if torch.cuda.is_available() and not DRY:
        torch.cuda.synchronize()


def size(n: int) -> int:
    """``n``, or a toy size in a dry run."""
    return max(1, n // 1000) if DRY else n


def wall(fn: Callable, reps: int, warmup: int = 2) -> list[float]:
    """Wall-clock seconds of ``fn`` (synchronised before and after), one per repetition."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def gpu_time(fn: Callable, reps: int, warmup: int = 2) -> list[float]:
    """GPU seconds between CUDA events around ``fn``, one per repetition."""
    if DRY:
        return wall(fn, reps, warmup)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return times


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def gen(seed: int, device: str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def rand_bytes_as(dtype: torch.dtype, n: int, g: torch.Generator, device: str) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, device=device, dtype=torch.uint8).bool()
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), generator=g, device=device, dtype=torch.uint8)
    return raw.view(dtype)


def dtypes() -> list[torch.dtype]:
    names = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
             "uint8", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
             "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "uint16", "uint32"]
    return [getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)]


def case_list(device: str) -> list[tuple[str, torch.Tensor]]:
    """Tensors that reach every kernel variant, edge and flag."""
    from traincheck_agent.fingerprint import triton_kernel as tk

    g = gen(1, device)
    chunk = tk.BLOCK * tk.ITERS
    sizes = [0, 1, 2, 3, 5, 7, 17, 1023, chunk - 1, chunk, chunk + 1, 3 * chunk + 5,
             size(1_000_003)]
    cases = []
    for dt in dtypes():
        for n in sizes:
            cases.append((f"{dt}-{n}", rand_bytes_as(dt, n, g, device)))
    f32 = torch.randn(257, 129, device=device, generator=g)
    bf = torch.randn(6, 70, 33, device=device, generator=g).bfloat16()
    u8 = rand_bytes_as(torch.uint8, size(100_003), g, device)
    f16 = torch.randn(size(50_001_000), device=device, generator=g).half()
    z = torch.randn(1000, device=device, generator=g, dtype=torch.complex64)
    cases += [
        ("f32.t", f32.t()), ("f32[:, ::3]", f32[:, ::3]), ("f32[5]", f32[5]), ("f32[:, 7]", f32[:, 7]),
        ("f32.expand", f32[0].expand(40, -1)), ("bf16.permute", bf.permute(2, 0, 1)),
        ("u8[1:]", u8[1:]), ("u8[2:99]", u8[2:99]), ("u8[3:4]", u8[3:4]),
        ("f16[1:]", f16[1:]), ("f16[1:-3]", f16[1:-3]),
        ("f32 flat[1:]", f32.reshape(-1)[1:]), ("f32 flat[2:]", f32.reshape(-1)[2:]),
        ("c64.conj", z.conj()), ("c64.conj.imag", z.conj().imag), ("0-dim", torch.tensor(3.5, device=device)),
        ("empty", torch.empty(0, device=device)), ("empty2d", torch.empty(3, 0, device=device)),
    ]
    big = 5 * chunk + 3
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64):
        cases.append((f"{dt} zeros", torch.zeros(big, dtype=dt, device=device)))
        cases.append((f"{dt} -zeros", -torch.zeros(big, dtype=dt, device=device)))
        for bad in (float("nan"), float("inf"), float("-inf")):
            for pos in (0, big // 2, big - 1):
                t = torch.ones(big, dtype=dt, device=device)
                t[pos] = bad
                cases.append((f"{dt} {bad}@{pos}", t))
        info = torch.finfo(dt if not dt.is_complex else torch.float32)
        cases.append((f"{dt} max", torch.full((big,), info.max, dtype=dt, device=device)))
    for dt in (torch.int8, torch.int64, torch.bool, torch.uint8):
        cases.append((f"{dt} zeros", torch.zeros(big, dtype=dt, device=device)))
        one = torch.zeros(big, dtype=dt, device=device)
        one[-1] = 1
        cases.append((f"{dt} last=1", one))
    if hasattr(torch, "float8_e4m3fn"):
        nan8 = torch.full((77,), 0x7F, dtype=torch.uint8, device=device)
        cases.append(("e4m3 nan bytes", nan8.view(torch.float8_e4m3fn)))
        cases.append(("e5m2 inf bytes", torch.full((77,), 0x7C, dtype=torch.uint8,
                                                   device=device).view(torch.float8_e5m2)))
    return cases


def compare(names: list[str], got: list[dict], want: list[dict]) -> list[str]:
    return [f"{n}: {g} != {w}" for n, g, w in zip(names, got, want, strict=True) if g != w]


def main() -> None:
    info = {"torch": torch.__version__, "python": sys.version.split()[0],
            "cuda_available": torch.cuda.is_available()}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:
        info["triton"] = f"unavailable: {exc}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device=p.name, sms=p.multi_processor_count,
                    memory_gib=round(p.total_memory / 2**30, 1))
    RESULTS["info"] = info
    log(json.dumps(info))

    @section("cpu_sanity", 5)
    def cpu_sanity() -> dict:
        ts = [torch.arange(10, dtype=torch.int32), torch.zeros(3), torch.tensor([1.0, float("nan")])]
        fps = fingerprint_tensors(ts)
        ref = dh.fingerprint_reference(ts)
        ok = ref[0]["h"] == "tw:fb849724ba0c1cfb" and fps[2]["nonfinite"] and fps[1]["zero"]
        return {"ok": bool(ok), "x3": fps, "tw_ref": ref}

    cpu_sanity()
    if not torch.cuda.is_available() and not DRY:
        RESULTS["cuda"] = "unavailable: no CUDA device; kernel checks and timings not run"
        log(RESULTS["cuda"])
        save()
        print(json.dumps(RESULTS, indent=1, default=str))
        return

    from traincheck_agent.fingerprint import triton_kernel as tk

    if DRY:
        tk.BLOCK, tk.ITERS = 64, 2  # the interpreter is slow: small blocks, same code paths
    default_cfg = (tk.BLOCK, tk.ITERS, tk.NUM_WARPS)
    dev = "cpu" if DRY else "cuda"

    @section("correctness", 20)
    def correctness() -> dict:
        cases = case_list(dev)
        names = [n for n, _ in cases]
        ts = [t for _, t in cases]
        t0 = time.monotonic()
        got = tk.fingerprint_batch(ts)
        compile_s = time.monotonic() - t0
        want = dh.fingerprint_reference(ts)
        want_cpu = dh.fingerprint_reference([t.cpu() for t in ts])
        one_by_one = [tk.fingerprint_batch([t])[0] for t in ts]
        public = got if DRY else fingerprint_tensors(ts)  # CPU tensors take the "x3" path
        out = {
            "cases": len(ts),
            "first_batch_incl_compile_s": round(compile_s, 2),
            "kernel_vs_reference_mismatches": compare(names, got, want)[:20],
            "kernel_vs_cpu_reference_mismatches": compare(names, got, want_cpu)[:20],
            "batch_vs_single_mismatches": compare(names, got, one_by_one)[:20],
            "public_api_mismatches": compare(names, got, public)[:20],
            "kernel_fallback_used": bool(fpmod._kernel["failed"]),
            "launch_groups": len(tk.Plan(ts).launches),
        }
        # Another launch shape must give the same answers (many programs, short loops); a
        # subset of dtypes keeps the number of kernel variants to compile down.
        keep = [k for k, t in enumerate(ts) if t.dtype in (torch.float32, torch.bfloat16,
                                                           torch.uint8, torch.float16)]
        tk.BLOCK, tk.ITERS, tk.NUM_WARPS = 256, 2, 4
        try:
            other = tk.fingerprint_batch([ts[k] for k in keep])
        finally:
            tk.BLOCK, tk.ITERS, tk.NUM_WARPS = default_cfg
        out["other_launch_shape_cases"] = len(keep)
        out["other_launch_shape_mismatches"] = compare([names[k] for k in keep], other,
                                                       [got[k] for k in keep])[:20]
        out["ok"] = not any(out[k] for k in out if k.endswith("mismatches")) and not out[
            "kernel_fallback_used"]
        return out

    @section("single_change", 15)
    def single_change() -> dict:
        g = gen(2, dev)
        out = {}
        for name, x in [("f32_100M", torch.randn(size(100_000_000), device=dev, generator=g)),
                        ("bf16_10M", torch.randn(size(10_000_001), device=dev,
                                                 generator=g).bfloat16()),
                        ("u8_odd", rand_bytes_as(torch.uint8, size(12_345_677), g, dev))]:
            words = x.view(torch.uint8)
            n = words.numel()
            h0 = fingerprint_tensor(x)["h"]
            seen = {h0}
            detected = 0
            positions = [0, 1, n // 2, n - 1] + torch.randint(0, n, (8,), device=dev,
                                                              generator=g).tolist()
            for pos in positions:
                words[pos] ^= 1
                h = fingerprint_tensor(x)["h"]
                detected += h not in seen
                seen.add(h)
                words[pos] ^= 1
            restored = fingerprint_tensor(x)["h"] == h0
            out[name] = {"flips": len(positions), "detected_distinct": detected,
                         "restored_same": restored}
            del x, words
        out["ok"] = all(v["detected_distinct"] == v["flips"] and v["restored_same"]
                        for v in out.values() if isinstance(v, dict))
        return out

    def bandwidth_of(x: torch.Tensor) -> dict:
        nbytes = x.numel() * x.element_size()
        plan = tk.Plan([x])
        buf = torch.zeros((1, 4), dtype=torch.int32, device=dev)
        kern = med(gpu_time(lambda: plan.launch(buf), 20))
        e2e = med(wall(lambda: fingerprint_tensors([x]), 20))
        return {"bytes": nbytes, "kernel_ms": round(kern * 1e3, 4), "end_to_end_ms": round(e2e * 1e3, 4),
                "kernel_TBps": round(nbytes / kern / 1e12, 3), "end_to_end_TBps": round(nbytes / e2e / 1e12, 3)}

    @section("bandwidth", 20)
    def bandwidth() -> dict:
        x = torch.randn(size(400_000_000), device=dev, generator=gen(3, dev))
        out = {"f32_400M": bandwidth_of(x), **baselines(x)}
        x = x.bfloat16()
        out["bf16_400M"] = bandwidth_of(x)
        return out

    def baselines(x: torch.Tensor) -> dict:
        nbytes = x.numel() * x.element_size()
        s = med(gpu_time(lambda: x.sum(), 20))
        c = med(gpu_time(lambda: x.clone(), 10))
        return {"torch_sum_TBps": round(nbytes / s / 1e12, 3),
                "torch_clone_TBps_read_plus_write": round(2 * nbytes / c / 1e12, 3)}

    @section("launch_shape_sweep", 25)
    def sweep() -> dict:
        g = gen(4, dev)
        x = torch.randn(size(400_000_000), device=dev, generator=g)
        nbytes = x.numel() * 4
        ref = tk.fingerprint_batch([x])[0]
        rows = []
        configs = [(2048, 16, 8), (2048, 32, 8), (2048, 64, 8), (2048, 8, 8), (1024, 32, 4),
                   (1024, 64, 4), (4096, 16, 8), (4096, 32, 8), (2048, 32, 4), (1024, 128, 4)]
        try:
            for block, iters, warps in configs:
                if left() < 10:
                    break
                tk.BLOCK, tk.ITERS, tk.NUM_WARPS = block, iters, warps
                same = tk.fingerprint_batch([x])[0] == ref
                plan = tk.Plan([x])
                buf = torch.zeros((1, 4), dtype=torch.int32, device=dev)
                kern = med(gpu_time(lambda plan=plan, buf=buf: plan.launch(buf), 10))
                rows.append({"block": block, "iters": iters, "warps": warps, "same_hash": same,
                             "TBps": round(nbytes / kern / 1e12, 3)})
                log(f"  sweep {rows[-1]}")
        finally:
            tk.BLOCK, tk.ITERS, tk.NUM_WARPS = default_cfg
        return {"default": default_cfg, "f32_400M": rows}

    def gpt2_small_shapes() -> list[tuple[int, ...]]:
        """GPT-2 small (124M): wte, wpe and 12 blocks of 10 tensors = 122 tensors."""
        d, v, ctx = (16, 503, 32) if DRY else (768, 50257, 1024)
        shapes: list[tuple[int, ...]] = [(v, d), (ctx, d)]
        for _ in range(12):
            shapes += [(d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d, 4 * d), (4 * d,),
                       (4 * d, d), (d,)]
        return shapes

    @section("gpt2_small_122", 20)
    def gpt2() -> dict:
        g = gen(5, dev)
        ts = [torch.randn(s, device=dev, generator=g) for s in gpt2_small_shapes()]
        nbytes = sum(t.numel() * 4 for t in ts)
        batched = wall(lambda: fingerprint_tensors(ts), 50, warmup=3)
        single = wall(lambda: [fingerprint_tensor(t) for t in ts], 10)
        plan_s = med(wall(lambda: tk.Plan(ts), 50))
        plan = tk.Plan(ts)
        buf = torch.zeros((len(ts), 4), dtype=torch.int32, device=dev)
        kern = med(gpu_time(lambda: plan.launch(buf), 30))
        fallback = wall(lambda: dh.fingerprint_reference(ts), 2, warmup=1)
        same = tk.fingerprint_batch(ts) == dh.fingerprint_reference(ts)
        bf = [t.bfloat16() for t in ts]
        batched_bf16 = wall(lambda: fingerprint_tensors(bf), 30, warmup=3)
        return {
            "tensors": len(ts), "params": sum(t.numel() for t in ts), "bytes_fp32": nbytes,
            "batched_ms_median": round(med(batched) * 1e3, 4),
            "batched_ms_min": round(min(batched) * 1e3, 4),
            "per_tensor_loop_ms_median": round(med(single) * 1e3, 4),
            "host_plan_ms": round(plan_s * 1e3, 4),
            "kernel_gpu_ms": round(kern * 1e3, 4),
            "torch_reference_fallback_ms": round(med(fallback) * 1e3, 2),
            "batched_bf16_ms_median": round(med(batched_bf16) * 1e3, 4),
            "launches_fp32": len(plan.launches),
            "kernel_equals_reference": same,
        }

    @section("transformer_160M_step_share", 45)
    def transformer() -> dict:
        import torch.nn as nn

        class GPT(nn.Module):
            def __init__(self, vocab: int = 32000, d: int = 1024, layers: int = 10,
                         heads: int = 16, ctx: int = 1024) -> None:
                super().__init__()
                self.emb = nn.Embedding(vocab, d)
                self.pos = nn.Embedding(ctx, d)
                layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                                   activation="gelu", batch_first=True,
                                                   norm_first=True)
                self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
                self.norm = nn.LayerNorm(d)

            def forward(self, idx: torch.Tensor) -> torch.Tensor:
                t = idx.shape[1]
                x = self.emb(idx) + self.pos(torch.arange(t, device=idx.device))
                mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
                x = self.blocks(x, mask=mask, is_causal=True)
                return self.norm(x) @ self.emb.weight.t()

        torch.manual_seed(0)
        dims = dict(vocab=500, d=64, layers=2, heads=4, ctx=32) if DRY else {}
        model = GPT(**dims).to(dev)
        params = list(model.parameters())
        n_params = sum(p.numel() for p in params)
        try:
            opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
        except Exception:
            opt = torch.optim.AdamW(params, lr=1e-4)
        seq = 31 if DRY else 1024
        vocab = model.emb.weight.shape[0]
        data = torch.randint(0, vocab, (16, seq + 1), device=dev, generator=gen(6, dev))
        batch = 8

        def step() -> None:
            with torch.autocast(dev, dtype=torch.bfloat16):
                logits = model(data[:batch, :-1])
                loss = nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                   data[:batch, 1:].reshape(-1))
            loss.backward()
            opt.step()

        def zero() -> None:
            opt.zero_grad(set_to_none=False)

        def fp_all() -> list[dict]:
            return fingerprint_tensors([p.detach() for p in params] +
                                       [p.grad for p in params if p.grad is not None])

        for _ in range(3):
            zero()
            step()
        sync()
        step_times = wall(lambda: (zero(), step()), 10, warmup=1)
        fp_times = wall(fp_all, 20, warmup=2)
        both = wall(lambda: (zero(), step(), fp_all()), 10, warmup=1)
        tensors = [p.detach() for p in params] + [p.grad for p in params]
        plan = tk.Plan(tensors)
        buf = torch.zeros((len(tensors), 4), dtype=torch.int32, device=dev)
        kern = med(gpu_time(lambda: plan.launch(buf), 20))
        step_ms = med(step_times) * 1e3
        fp_ms = med(fp_times) * 1e3
        plan_ms = med(wall(lambda: tk.Plan(tensors), 20)) * 1e3
        batch = 16
        for _ in range(2):
            zero()
            step()
        step16_ms = med(wall(lambda: (zero(), step()), 6, warmup=1)) * 1e3
        return {
            "params": n_params, "tensors_fingerprinted": len(tensors),
            "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "config": f"GPT {dims or 'd=1024 layers=10 heads=16 ffn=4096 vocab=32000'}, "
                      f"tied head, batch 8x{seq} (and 16x{seq}), bf16 autocast, AdamW",
            "step_ms_median": round(step_ms, 3),
            "fingerprint_ms_median": round(fp_ms, 4),
            "fingerprint_kernel_gpu_ms": round(kern * 1e3, 4),
            "fingerprint_pct_of_step": round(100 * fp_ms / step_ms, 3),
            "step_plus_fingerprint_ms_median": round(med(both) * 1e3, 3),
            "host_plan_ms": round(plan_ms, 4),
            "batch16_step_ms_median": round(step16_ms, 3),
            "fingerprint_pct_of_batch16_step": round(100 * fp_ms / step16_ms, 3),
            "launches": len(plan.launches),
        }

    @section("positions_past_2_32", 25)
    def huge() -> dict:
        if DRY:
            return "skipped: dry run"
        free, _ = torch.cuda.mem_get_info()
        n = (1 << 34) + 4099  # bytes: more than 2**32 words, with a ragged tail
        if free < n + 12 * 2**30:
            return f"skipped: {free / 2**30:.0f} GiB free"
        torch.cuda.empty_cache()
        x = torch.empty(n, dtype=torch.uint8, device=dev)
        x.random_(0, 256, generator=gen(7, dev))
        t0 = time.perf_counter()
        got = tk.fingerprint_batch([x, x[3:]])
        kern_s = time.perf_counter() - t0
        old = dh._CHUNK_WORDS
        dh._CHUNK_WORDS = 1 << 26
        try:
            t0 = time.perf_counter()
            want = dh.fingerprint_reference([x, x[3:]])
            ref_s = time.perf_counter() - t0
        finally:
            dh._CHUNK_WORDS = old
        x[n - 7] ^= 1
        changed = tk.fingerprint_batch([x])[0]["h"] != got[0]["h"]
        return {"bytes": n, "kernel_equals_reference": got == want, "late_flip_detected": changed,
                "kernel_s": round(kern_s, 3), "reference_s": round(ref_s, 3)}

    correctness()
    single_change()
    bandwidth()
    gpt2()
    transformer()
    sweep()
    huge()
    RESULTS["elapsed_s"] = round(time.monotonic() - START, 1)
    save()
    print(json.dumps(RESULTS, indent=1, default=str))


if __name__ == "__main__":
    main()
