"""The engine's forward against the machine's own limit (issue 31): SmolLM2-135M traced one sentence
at a time and B sentences in one forward (what model/batcher.py does for concurrent sessions),
achieved FLOP/s against a float32 matmul peak measured in the same run.

    .venv/bin/python -m benchmarks.bench_batching [--quick] [--T 16]
    from benchmarks.bench_batching import run; rows = run()   # for benchmarks/run_all.py

Rows:
  - matmul peak: torch.mm of two 2048 x 2048 float32 matrices (1 thread: the app's setting), the
    best of several rounds; the FLOP/s a core reaches on the engine's own kernel library.
  - trace, T = 16 (an ordinary sentence), B = 1, 2, 4, 8, 16 sentences of one length in one forward:
    CPU ms per sentence and achieved FLOP/s (the forward's
    matmul FLOPs: every Linear of every block, q k^T and weights v; not the output layer, which the
    trace leaves to first read), medians of interleaved rounds, and the cut of each sentence out of
    the batch (model.batching.unbatch: a copy of its row) per sentence.
  - exact batching on this machine: whether each B's rows are bit for bit each sentence's own
    forward on this CPU's kernels, and the first-use probe's verdict (model.batcher.ExactBatching:
    where a bit differs, ATTN_LAB_BATCH=exact traces the model alone).
Times are CPU time of this process (time.process_time: one torch thread, so CPU time is the
forward's own work, which other processes on a shared machine do not inflate the way they inflate
wall time); the wall-clock medians are given beside them.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.bench_pretrained import load_average  # noqa: E402


def forward_flops(model, B: int, T: int) -> float:
    """Matmul FLOPs of one traced forward of B sentences of T tokens: 2 * in * out per token for
    every Linear in the blocks, and per layer 2 * H * T * T * d for q k^T and again for weights v."""
    per_token = sum(2 * m.in_features * m.out_features for blk in model.blocks for m in blk.modules()
                    if isinstance(m, torch.nn.Linear))
    cfg = model.cfg
    attn = len(model.blocks) * 2 * (2 * cfg.n_heads * T * T * cfg.d_k)
    return B * (T * per_token + attn)


def matmul_peak(n: int = 2048, rounds: int = 7) -> dict:
    """Best float32 torch.mm FLOP/s on this process's threads: CPU time and wall time."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    cpu, wall = [], []
    for _ in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        torch.mm(a, b)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    flops = 2 * n ** 3
    return {"cpu_gflops": flops / min(cpu) / 1e9, "wall_gflops": flops / min(wall) / 1e9}


def measure(T: int = 16, Bs=(1, 2, 4, 8, 16), rounds: int = 7) -> dict:
    from model.batching import unbatch
    from model.pretrained import load_pretrained
    model, _ = load_pretrained("smollm2-135m")
    g = torch.Generator().manual_seed(0)
    batches = {B: torch.randint(100, 40000, (B, T), generator=g) for B in Bs}
    for B in Bs:  # warm up
        model.trace(batches[B])
    cpu = {B: [] for B in Bs}
    wall = {B: [] for B in Bs}
    cut = []
    peaks = []
    for r in range(rounds):  # interleaved: the machine's load hits every size alike
        peaks.append(matmul_peak(rounds=2))
        for B in (Bs if r % 2 == 0 else tuple(reversed(Bs))):
            c0, w0 = time.process_time(), time.perf_counter()
            tr = model.trace(batches[B])
            cpu[B].append(time.process_time() - c0)
            wall[B].append(time.perf_counter() - w0)
            if B == max(Bs):
                c0 = time.process_time()
                for row in range(B):
                    unbatch(tr, row, T)
                cut.append((time.process_time() - c0) / B)
            del tr
    peak_cpu = max(p["cpu_gflops"] for p in peaks)
    # exact batching on this machine (model.batcher.ExactBatching): each B's batch, row by row,
    # against each row's own forward, and the first-use probe's verdict
    from model.batcher import ExactBatching
    from model.batching import same_bits
    same = {B: all(same_bits(unbatch(tb, row, T), model.trace(batches[B][row:row + 1])) for row in range(B))
            for B in Bs if B > 1 for tb in [model.trace(batches[B])]}
    probe = ExactBatching().usable(model, True)
    out = {"T": T, "threads": torch.get_num_threads(), "peak_gflops": peak_cpu, "same_bits": same, "probe": probe,
           "peak_wall_gflops": max(p["wall_gflops"] for p in peaks), "load": load_average(),
           "cut_ms": 1e3 * statistics.median(cut), "rows": []}
    for B in Bs:
        c, w = statistics.median(cpu[B]), statistics.median(wall[B])
        f = forward_flops(model, B, T)
        out["rows"].append({"B": B, "cpu_ms_per_sentence": 1e3 * c / B, "wall_ms_per_sentence": 1e3 * w / B,
                            "gflops": f / c / 1e9, "wall_gflops": f / w / 1e9})
    return out


def rows_of(m: dict) -> list[dict]:
    th = f"{m['threads']} thread{'s' if m['threads'] != 1 else ''}"
    rows = [dict(benchmark=f"float32 matmul peak (torch.mm 2048², {th}, best of the run)",
                 metric="GFLOP/s per core-second (wall: " + f"{m['peak_wall_gflops']:.0f})", app=round(m["peak_gflops"], 1),
                 bare=None, ratio=None, target="(the machine's limit)", ok=None)]
    single = m["rows"][0]
    for r in m["rows"]:
        rows.append(dict(
            benchmark=f"SmolLM2 trace, {r['B']} sentence{'s' if r['B'] > 1 else ''} of T={m['T']} in one forward ({th})",
            metric=f"CPU ms per sentence (wall {r['wall_ms_per_sentence']:.0f}); achieved GFLOP/s "
                   f"{r['gflops']:.1f} = {r['gflops'] / m['peak_gflops']:.0%} of the matmul peak",
            app=round(r["cpu_ms_per_sentence"], 1), bare=round(single["cpu_ms_per_sentence"], 1),
            ratio=r["cpu_ms_per_sentence"] / single["cpu_ms_per_sentence"],
            target="(reported; baseline = one sentence per forward)", ok=None))
    differ = [B for B, ok in m["same_bits"].items() if not ok]
    rows.append(dict(
        benchmark=f"exact batching on this machine (SmolLM2, {th}, kernels: ATen {torch.backends.cpu.get_cpu_capability()})",
        metric="first-use probe: " + ("bit for bit" if m["probe"] else "a bit differed") + "; batches of B = "
               + ", ".join(str(B) for B in m["same_bits"]) + " at T=" + str(m["T"]) + ": "
               + ("every row bit for bit" if not differ else f"rows differ at B = {differ}"),
        app="batched" if m["probe"] else "traced alone", bare=None, ratio=None,
        target="(reported: ATTN_LAB_BATCH=exact shares forwards only where measured bit for bit)", ok=None))
    rows.append(dict(benchmark=f"cutting one sentence's trace out of a batch of {m['rows'][-1]['B']} (unbatch: a copy)",
                     metric="CPU ms per sentence", app=round(m["cut_ms"], 2), bare=None, ratio=None,
                     target="(reported)", ok=None))
    return rows


def run(quick: bool = False, T: int = 16) -> list[dict]:
    torch.set_num_threads(int(os.environ.get("ATTN_LAB_TORCH_THREADS", 1)))
    m = measure(T=T, rounds=3 if quick else 7)
    print(f"load average {m['load']}", flush=True)
    return rows_of(m)


if __name__ == "__main__":
    from benchmarks.report import table
    argv = sys.argv[1:]
    T = int(argv[argv.index("--T") + 1]) if "--T" in argv else 16
    print(table(run(quick="--quick" in argv, T=T)))
