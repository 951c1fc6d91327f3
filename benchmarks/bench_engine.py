"""Engine benchmark (issue 2): the cost of recording the trace.

Measures `model.trace(ids)` (every intermediate recorded) against `model.forward(ids)` (the same
code path with recording off), both in eval mode under torch.no_grad(), for d_model 128, 4 heads,
2 layers at T=16 and T=128, with 1 thread and with torch's default thread count. Also the
default-config trace time (ModelConfig(vocab_size=300, d_model=64, n_heads=4, n_layers=2), T=16).
Budgets: traced/untraced ratio <= 3; default-config trace <= 5 ms.

    .venv/bin/python benchmarks/bench_engine.py          # prints a markdown table
    from benchmarks.bench_engine import run; rows = run()  # for benchmarks/run_all.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from model import ModelConfig, Transformer  # noqa: E402

RATIO_BUDGET = 3.0
DEFAULT_TRACE_BUDGET_MS = 5.0


def median_ms(fn, *, repeats: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _ids(cfg: ModelConfig, T: int) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))


def bench_ratio(T: int, threads: int | None, repeats: int) -> dict:
    cfg = ModelConfig(vocab_size=300, d_model=128, n_heads=4, n_layers=2, max_len=max(128, T))
    model = Transformer(cfg, seed=0)
    ids = _ids(cfg, T)

    def untraced():
        with torch.no_grad():
            model(ids)

    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        # paired: each iteration times one traced and one untraced call back to back, so load
        # from other processes on this shared machine hits both sides alike
        for _ in range(5):
            model.trace(ids), untraced()
        tr_ms, fw_ms = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.trace(ids)
            t1 = time.perf_counter()
            untraced()
            t2 = time.perf_counter()
            tr_ms.append((t1 - t0) * 1e3)
            fw_ms.append((t2 - t1) * 1e3)
        traced, plain = statistics.median(tr_ms), statistics.median(fw_ms)
        best_ratio = min(tr_ms) / min(fw_ms)
        n_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(old)
    return {"benchmark": "engine: traced vs untraced", "config": "d_model=128, heads=4, layers=2",
            "T": T, "threads": n_threads, "traced_ms": round(traced, 3), "untraced_ms": round(plain, 3),
            "ratio": round(traced / plain, 2), "ratio_of_min": round(best_ratio, 2), "budget": f"ratio <= {RATIO_BUDGET:g}",
            "ok": traced / plain <= RATIO_BUDGET}


def bench_default(repeats: int, threads: int | None) -> dict:
    cfg = ModelConfig(vocab_size=300, d_model=64, n_heads=4, n_layers=2)
    model = Transformer(cfg, seed=0)
    ids = _ids(cfg, 16)
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        ms = median_ms(lambda: model.trace(ids), repeats=repeats)
        n_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(old)
    return {"benchmark": "engine: default-config trace", "config": "vocab=300, d_model=64, heads=4, layers=2",
            "T": 16, "threads": n_threads, "traced_ms": round(ms, 3), "untraced_ms": None,
            "ratio": None, "ratio_of_min": None, "budget": f"<= {DEFAULT_TRACE_BUDGET_MS:g} ms",
            "ok": ms <= DEFAULT_TRACE_BUDGET_MS}


def run(repeats: int = 100) -> list[dict]:
    """Every engine measurement as a row (dict); `ok` says whether the budget holds."""
    rows = []
    for threads in (1, None):
        for T in (16, 128):
            rows.append(bench_ratio(T, threads, repeats))
        rows.append(bench_default(repeats * 2, threads))
    return rows


def report_rows(quick: bool = False) -> list[dict]:
    """Adapter for benchmarks/run_all.py: the rows of `run()` in the benchmark table's shape (docs/benchmarks.md)
    (benchmark, metric, app, bare, ratio, target). Here the baseline ("bare") column is the
    untraced forward pass of the same model, not the bare Streamlit app."""
    out = []
    for r in run(repeats=20 if quick else 100):
        threads = f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        if r["untraced_ms"] is None:
            out.append(dict(benchmark=f"{r['benchmark']} ({r['config']}, T={r['T']}, {threads})",
                            metric="trace (ms)", app=r["traced_ms"], bare=None, ratio=None,
                            target=r["budget"], ok=r["ok"]))
        else:
            out.append(dict(benchmark=f"{r['benchmark']} ({r['config']}, T={r['T']}, {threads})",
                            metric="traced vs untraced forward (ms)", app=r["traced_ms"], bare=r["untraced_ms"],
                            ratio=r["traced_ms"] / r["untraced_ms"], target="≤ 3×", ok=r["ok"]))
    return out


def markdown(rows: list[dict]) -> str:
    cols = ["benchmark", "config", "T", "threads", "traced_ms", "untraced_ms", "ratio", "ratio_of_min",
            "budget", "ok"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import os
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, default threads {torch.get_num_threads()}, "
          f"{os.cpu_count()} CPUs, load average {load:.1f} (times are medians in ms; "
          "default-thread rows are noisy when other processes share the cores)")
    print(markdown(run()))
