"""Choose torch's thread settings for a multi-user Streamlit server, by measurement.

One Streamlit process runs every session's script in its own Python thread. Each `model.trace()`
call may itself fan out over torch's intra-op pool (default: one thread per core). With S sessions
rerunning at once that is S x cores runnable threads on `cores` cores: they preempt each other,
and the OpenMP workers spin-wait between ops. The question is whether intra-op parallelism still
pays when sessions are concurrent. This script measures, in one process, exactly what the server
does: C Python threads each tracing the model R times, for each torch thread setting, at the
default config (d_model 64, 4 heads, 2 layers, T = 64) and a large one (d_model 128, 8 heads,
4 layers, T = 128; issue 3's large case).

    python -m benchmarks.threads            # prints a table and the recommendation

The recommendation is applied in ui/runtime.py (imported by app.py), overridable with the
environment variable ATTN_LAB_TORCH_THREADS.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import torch

from model.config import ModelConfig
from model.transformer import Transformer

CONFIGS = {
    "default (d64 h4 L2 T64)": (ModelConfig(vocab_size=512, d_model=64, n_heads=4, n_layers=2, max_len=256), 64),
    "large (d128 h8 L4 T128)": (ModelConfig(vocab_size=512, d_model=128, n_heads=8, n_layers=4, max_len=256), 128),
}


def measure(model: Transformer, T: int, concurrency: int, reps: int) -> tuple[float, float]:
    """(median seconds per trace, traces per second) with `concurrency` Python threads."""
    ids = torch.randint(0, model.cfg.vocab_size, (1, T))
    model.trace(ids)  # warm
    lat: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def worker() -> None:
        start.wait()
        mine = []
        for _ in range(reps):
            t0 = time.perf_counter()
            model.trace(ids)
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return statistics.median(lat), len(lat) / wall


def sweep(settings: list[int], concurrencies: list[int], reps: int, rounds: int = 3) -> list[dict]:
    """Every (config, threads, concurrency) cell measured in `rounds` interleaved rounds (the
    settings alternate order each round) and summarised by the median: on a shared machine the
    background load drifts, and measuring one setting after the other would bias the comparison."""
    cells: dict[tuple, list[tuple[float, float]]] = {}
    models = {name: (Transformer(cfg, seed=0).eval(), T) for name, (cfg, T) in CONFIGS.items()}
    for k in range(rounds):
        order = settings if k % 2 == 0 else settings[::-1]
        for name, (model, T) in models.items():
            for n in order:
                torch.set_num_threads(n)
                for c in concurrencies:
                    cells.setdefault((name, n, c), []).append(measure(model, T, c, reps))
    torch.set_num_threads(os.cpu_count() or 1)
    return [dict(config=name, threads=n, concurrency=c,
                 median_ms=statistics.median(m for m, _ in v) * 1e3, per_s=statistics.median(t for _, t in v))
            for (name, n, c), v in sorted(cells.items(), key=lambda kv: (list(CONFIGS).index(kv[0][0]), kv[0][1], kv[0][2]))]


def recommend(results: list[dict]) -> int:
    """The thread count with the best throughput under the highest measured concurrency, summed
    over configs (ties -> fewer threads: less contention with the server's own threads)."""
    cmax = max(r["concurrency"] for r in results)
    score: dict[int, float] = {}
    for r in results:
        if r["concurrency"] == cmax:
            score[r["threads"]] = score.get(r["threads"], 0) + r["per_s"]
    best = max(score.values())
    return min(n for n, s in score.items() if s >= 0.97 * best)


def run(quick: bool = False) -> list[dict]:
    cores = os.cpu_count() or 1
    settings = sorted({1, 2, cores})
    res = sweep(settings, [1, 4] if quick else [1, 4, 8], 4 if quick else 10, rounds=2 if quick else 3)
    print("| config | torch threads | concurrent sessions | median trace (ms) | traces/s |")
    print("|---|---:|---:|---:|---:|")
    for r in res:
        print(f"| {r['config']} | {r['threads']} | {r['concurrency']} | {r['median_ms']:.1f} | {r['per_s']:.1f} |")
    n = recommend(res)
    print(f"recommendation: torch.set_num_threads({n}) (best throughput with concurrent sessions)")
    rows = []
    cmax = max(r["concurrency"] for r in res)
    for name in CONFIGS:
        get = {(r["threads"], r["concurrency"]): r for r in res if r["config"] == name}
        chosen, dflt = get[(n, cmax)], get[(cores, cmax)]
        rows.append(dict(benchmark=f"torch threads, {cmax} concurrent traces, {name}",
                         metric=f"traces/s: chosen {n} thread(s) vs default {cores}",
                         app=chosen["per_s"], bare=dflt["per_s"], ratio=chosen["per_s"] / dflt["per_s"], target="≥ 1×",
                         ok=chosen["per_s"] >= 0.97 * dflt["per_s"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    run(ap.parse_args().quick)


if __name__ == "__main__":
    main()
