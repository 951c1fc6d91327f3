"""Why this token (classroom/attribution.py) on SmolLM2-135M at 16 tokens, each as a ratio against
one traced forward (`model.trace`) measured in the same run. Targets on this 2-core machine:
logit_attribution ≤ 2× one traced forward; patch_residual ≤ 10 s; patch_heads ≤ 10 s.

    .venv/bin/python -m benchmarks.bench_attribution [--quick] [--profile]

--profile prints torch's profiler table of one patch_residual and one patch_heads (what the time
goes to).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import table  # noqa: E402

# the names pair (the page's first ready pair) with two words more: 16 SmolLM2 tokens each
CLEAN = "Later, when Mary and John went to the store, John gave a drink to"
CORRUPT = "Later, when John and Mary went to the store, Mary gave a drink to"


def _best(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _inputs():
    import torch

    from model.pretrained import load_pretrained
    model, tok = load_pretrained("smollm2-135m")
    a, b = tok.encode(CLEAN).ids, tok.encode(CORRUPT).ids
    assert len(a) == len(b) == 16, (len(a), len(b))
    mary, john = tok.encode(" Mary").ids[-1], tok.encode(" John").ids[-1]
    return model, torch.tensor([a]), a, b, mary, john


def run(quick: bool = False) -> list[dict]:
    from classroom.attribution import logit_attribution, patch_heads, patch_residual
    from model.pretrained import PRETRAINED
    if not PRETRAINED["smollm2-135m"].installed():
        return [dict(benchmark="why this token, SmolLM2-135M", metric="skipped", app=None, bare=None, ratio=None,
                     target=f"{PRETRAINED['smollm2-135m'].package} not installed", ok=None)]
    model, x, a, b, mary, john = _inputs()
    n = 1 if quick else 3
    model.trace(x).logits  # warm-up
    trace_s = _best(lambda: model.trace(x).logits, 5 if quick else 10)
    tr = model.trace(x)
    logit_attribution(model, tr, mary)
    dla_s = _best(lambda: logit_attribution(model, tr, mary), 5 if quick else 10)
    res_s = _best(lambda: patch_residual(model, a, b, mary, john), n)
    heads_s = _best(lambda: patch_heads(model, a, b, mary, john), n)
    name = "SmolLM2-135M, 16 tokens (names pair)"
    row = dict(bare=round(trace_s, 4), metric="s (best of runs); baseline: one model.trace")
    return [
        dict(benchmark=f"one traced forward, {name}", metric="s (best of runs)", app=round(trace_s, 4), bare=None,
             ratio=None, target="(the unit of the rows below)"),
        dict(benchmark=f"logit_attribution, {name}", app=round(dla_s, 4), ratio=round(dla_s / trace_s, 3),
             target="≤ 2× one traced forward", ok=dla_s <= 2 * trace_s, **row),
        dict(benchmark=f"patch_residual (30 layers × 16 positions), {name}", app=round(res_s, 2),
             ratio=round(res_s / trace_s, 1), target="≤ 10 s", ok=res_s <= 10, **row),
        dict(benchmark=f"patch_heads (30 layers × 9 heads), {name}", app=round(heads_s, 2),
             ratio=round(heads_s / trace_s, 1), target="≤ 10 s", ok=heads_s <= 10, **row),
    ]


def profile() -> None:
    from torch.profiler import ProfilerActivity, profile as tprofile

    from classroom.attribution import patch_heads, patch_residual
    model, x, a, b, mary, john = _inputs()
    for fn in (patch_residual, patch_heads):
        with tprofile(activities=[ProfilerActivity.CPU]) as prof:
            fn(model, a, b, mary, john)
        print(f"== {fn.__name__}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.profile:
        profile()
    else:
        print(table(run(quick=args.quick)))
