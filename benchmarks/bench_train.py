"""Training time of each shipped preset (issue 5, budget: <= 60 s each on a 2-core CPU).

    python -m benchmarks.bench_train            # every preset, full step count, markdown table
    python -m benchmarks.bench_train --steps 50 # quick look (time scaled to the full run too)

Each preset is trained exactly as `python -m training.train --preset NAME` does (same library call,
same thread count), without saving. The load average is printed beside the time because the
machine is shared: a busy machine makes every number larger.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from training import corpus
from training import train as training

BUDGET_S = 60.0


def run(steps: int | None = None, presets: list[str] | None = None, threads: int = 1) -> list[dict]:
    """One row per preset: steps, seconds (wall), seconds per step, projected full-run seconds."""
    torch.set_num_threads(threads)
    rows = []
    data = corpus.generate().train
    for name in presets or list(training.TRAIN_PRESETS):
        p = training.TRAIN_PRESETS[name]
        n = p.steps if steps is None else steps
        tok = training.tokenizer_for(p.objective)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        res = training.train(p.config(len(tok)), tok, data, n, p.lr, p.seed, p.objective, batch_size=p.batch_size,
                    emb_scale=p.emb_scale)
        wall = time.perf_counter() - t0
        full = wall / max(1, n) * p.steps
        rows.append({"preset": name, "steps": n, "seconds": round(wall, 1), "cpu_seconds": round(res.cpu_seconds, 1),
                     "ms_per_step": round(1000 * res.seconds / max(1, n), 1),
                     "projected_full_s": round(full, 1), "budget_s": BUDGET_S,
                     "within_budget": full <= BUDGET_S, "final_loss": round(res.losses[-1], 3),
                     "load_avg_1m": round(load, 2), "threads": threads})
    return rows


def markdown(rows: list[dict]) -> str:
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_train")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--preset", action="append", choices=sorted(training.TRAIN_PRESETS))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    print(markdown(run(a.steps, a.preset, a.threads)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
