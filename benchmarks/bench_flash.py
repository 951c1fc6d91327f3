"""Tiled (online-softmax) attention vs plain attention (issue 20 point 3): time and peak memory.

One head, d_k = d_v = 64, float32, T = 512, 1024, 2048, 4096, key tile 64 (all queries at once),
one torch thread, in the same run:
  plain  softmax(q k^T / 8) @ v   (model.flash.plain_attention: the whole T x T matrix)
  tiled  model.flash.tiled_attention(q, k, v, tile=64)   (a T x 64 block of scores at a time)
Time: median of `repeats` calls (time.perf_counter). Peak memory: torch's profiler with
profile_memory=True (model.flash.measure_peak_bytes: running sum of every allocation and free,
operator granularity), the result tensor included.

Honest note: the tiled loop runs in Python, one small matmul per tile, so at small T it is as fast
or SLOWER than one big matmul (FlashAttention is fast on GPUs because it is one fused kernel whose
tile stays in on-chip SRAM; this is not that). At T = 4096 it measured faster here in two runs
(plain attention's 64 MB matrices no longer fit in the CPU caches and softmax over them is
memory-bound); on this shared, loaded 2-core machine the timings are noisy. What the tiling always buys is memory: linear in T instead of T².

    .venv/bin/python benchmarks/bench_flash.py            # prints a markdown table
    .venv/bin/python benchmarks/bench_flash.py --quick    # T = 512, 1024 only
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from model.flash import measure_peak_bytes, plain_attention, tiled_attention  # noqa: E402

TS = (512, 1024, 2048, 4096)
D_K = 64
TILE = 64


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(T: int, tile: int = TILE, repeats: int = 5) -> dict:
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, 1, T, D_K, generator=g) for _ in range(3))
    plain = lambda: plain_attention(q, k, v)  # noqa: E731
    tiled = lambda: tiled_attention(q, k, v, tile=tile).output  # noqa: E731
    plain_ms, tiled_ms = _median_ms(plain, repeats), _median_ms(tiled, repeats)
    plain_peak, a = measure_peak_bytes(plain)
    tiled_peak, b = measure_peak_bytes(tiled)
    return {"T": T, "tile": tile, "plain_ms": plain_ms, "tiled_ms": tiled_ms,
            "plain_peak_MB": plain_peak / 2**20, "tiled_peak_MB": tiled_peak / 2**20,
            "max_abs_diff": float((a - b).abs().max())}


def run(quick: bool = False) -> list[dict]:
    """Rows for benchmarks/run_all.py: (benchmark, metric, app = tiled, bare = plain, ratio, target)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = [measure(T, repeats=3 if quick else 5) for T in (TS[:2] if quick else TS)]
    finally:
        torch.set_num_threads(old)
    rows = []
    for r in res:
        name = f"tiled vs plain attention (T={r['T']}, d_k={D_K}, 1 head, tile {r['tile']}, 1 thread)"
        rows.append(dict(benchmark=name, metric="time (ms)", app=round(r["tiled_ms"], 2),
                         bare=round(r["plain_ms"], 2), ratio=round(r["tiled_ms"] / r["plain_ms"], 2),
                         target="none (a Python loop; see the note in bench_flash.py)"))
        rows.append(dict(benchmark=name, metric="peak memory (MB)", app=round(r["tiled_peak_MB"], 2),
                         bare=round(r["plain_peak_MB"], 2), ratio=round(r["tiled_peak_MB"] / r["plain_peak_MB"], 3),
                         target="tiled < plain", ok=r["tiled_peak_MB"] < r["plain_peak_MB"] and r["max_abs_diff"] < 1e-5))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, float32, d_k = {D_K}, one head, key tile {TILE}")
    print("| T | plain time (ms) | tiled time (ms) | plain peak (MB) | tiled peak (MB) | max |diff| |")
    print("|---|---|---|---|---|---|")
    for T in (TS[:2] if a.quick else TS):
        r = measure(T)
        print(f"| {T} | {r['plain_ms']:.2f} | {r['tiled_ms']:.2f} | {r['plain_peak_MB']:.2f} | "
              f"{r['tiled_peak_MB']:.2f} | {r['max_abs_diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
