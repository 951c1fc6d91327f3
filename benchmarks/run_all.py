"""Every benchmark in one command; prints machine info and the benchmark table (docs/benchmarks.md).

    python -m benchmarks.run_all                  # full runs (make bench); ~15-25 min on 2 cores
    python -m benchmarks.run_all --quick          # small versions of everything (a smoke test)
    python -m benchmarks.run_all --only ws_load,soak
    python -m benchmarks.run_all --write-docs     # also replace the table in docs/benchmarks.md

What runs: every `benchmarks/bench_*.py` (found at run time, so a new benchmark is picked up
without touching this file), then the torch thread sweep, the WebSocket load, the browser load and
the soak. Each module exposes `run(quick=False) -> list[dict]` with rows of
(benchmark, metric, app, bare, ratio, target[, ok]). Two older modules have other signatures:
bench_engine.py offers `report_rows(quick)` (preferred when present) and bench_train.py is adapted
below. A module that fails is reported in the table as an error row and makes the exit code 1;
the others still run.

`--write-docs` replaces what lies between `<!-- bench:start -->` and `<!-- bench:end -->` in docs/benchmarks.md with the machine info and the table.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import machine_info, table  # noqa: E402

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
# Run after the bench_*.py modules, in this order: in-process measurements first, then the ones
# that start servers and browsers (heaviest last).
SERVER_MODULES = ["threads", "ws_load", "browser_load", "soak"]


def bench_modules() -> list[str]:
    """bench_*.py in benchmarks/, sorted by name, then the load/soak/threads modules."""
    found = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    return found + SERVER_MODULES


def _train_rows(mod, quick: bool) -> list[dict]:
    """bench_train.run(steps, presets, threads) -> one row per preset (projected full-run time)."""
    rows = mod.run(steps=20 if quick else None)
    out = []
    for r in rows:
        proj = "projected from {} steps".format(r["steps"]) if quick else f"{r['steps']} steps"
        out.append(dict(benchmark=f"training preset {r['preset']} ({proj}, {r['threads']} thread)",
                        metric="wall time (s)", app=r["projected_full_s"], bare=None, ratio=None,
                        target=f"≤ {r['budget_s']:g} s", ok=bool(r["within_budget"])))
    return out


ADAPTERS: dict[str, Callable] = {"bench_train": _train_rows}


def runner(name: str) -> Callable[[bool], list[dict]]:
    mod = importlib.import_module(f"benchmarks.{name}")
    if name in ADAPTERS:
        return lambda quick: ADAPTERS[name](mod, quick)
    if hasattr(mod, "report_rows"):
        return mod.report_rows
    run = getattr(mod, "run", None)
    if run is None:
        raise TypeError(f"benchmarks/{name}.py has no run(quick=False) -> list[dict]")
    if "quick" in inspect.signature(run).parameters:
        return lambda quick: run(quick=quick)
    raise TypeError(f"benchmarks/{name}.py: run() takes no `quick`; add report_rows(quick) or an adapter in run_all.py")


def check_rows(name: str, rows) -> list[dict]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"{name}: run() must return a list of dicts, got {type(rows).__name__}")
    for r in rows:
        missing = {"benchmark", "metric", "app"} - set(r)
        if missing:
            raise TypeError(f"{name}: row {r} lacks {sorted(missing)}")
    return rows


def run_all(quick: bool = False, only: list[str] | None = None,
            skip: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """Every selected module's rows, and the names of the modules that failed."""
    rows: list[dict] = []
    failed: list[str] = []
    names = [n for n in bench_modules() if (not only or n in only) and n not in (skip or [])]
    for name in names:
        print(f"\n=== {name}{' (quick)' if quick else ''} ===", flush=True)
        t0 = time.perf_counter()
        try:
            got = check_rows(name, runner(name)(quick))
            rows.extend(got)
            print(f"--- {name}: {len(got)} rows in {time.perf_counter() - t0:.0f} s", flush=True)
        except Exception as exc:  # noqa: BLE001  one broken benchmark must not hide the others
            traceback.print_exc()
            failed.append(name)
            rows.append(dict(benchmark=f"{name} (FAILED)", metric=f"{type(exc).__name__}: {str(exc)[:120]}",
                             app=None, bare=None, ratio=None, target="", ok=False))
    return rows, failed


def block(info: str, tbl: str, quick: bool) -> str:
    when = time.strftime("%Y-%m-%d")
    note = " (`--quick`: small versions, not the budgets' scale)" if quick else ""
    return (f"{START}\nMeasured {when} with `python -m benchmarks.run_all`{note} on: {info}\n\n"
            "Baseline = the bare Streamlit app (`benchmarks/bare_app.py`, one heatmap) measured under the same "
            "load in the same run, unless the row names another baseline. Ratios are Attention Lab / baseline.\n\n"
            f"{tbl}\n{END}")


DOC = ROOT / "docs" / "benchmarks.md"  # where the table lives (the README links to it)


def write_docs(text: str, path: Path = DOC) -> None:
    """Replace the table block of `path` (between START and END, markers included) with `text`."""
    s = path.read_text()
    i, j = s.find(START), s.find(END)
    if i < 0 or j < i:
        raise SystemExit(f"{path} has no {START} ... {END} block under '## The full run'")
    path.write_text(s[:i] + text + s[j + len(END):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small versions of every benchmark (smoke test)")
    ap.add_argument("--only", default="", help="comma-separated module names (e.g. bench_engine,ws_load)")
    ap.add_argument("--skip", default="", help="comma-separated module names to leave out")
    ap.add_argument("--write-docs", action="store_true", help="replace the table block in docs/benchmarks.md")
    ap.add_argument("--list", action="store_true", help="list the modules that would run, and exit")
    a = ap.parse_args(argv)
    only = [x for x in a.only.split(",") if x]
    skip = [x for x in a.skip.split(",") if x]
    if a.list:
        print("\n".join(n for n in bench_modules() if (not only or n in only) and n not in skip))
        return 0
    unknown = set(only + skip) - set(bench_modules())
    if unknown:
        ap.error(f"unknown module(s) {sorted(unknown)}; known: {bench_modules()}")
    info = machine_info()
    print(f"Machine: {info}", flush=True)
    t0 = time.perf_counter()
    rows, failed = run_all(a.quick, only, skip)
    tbl = table(rows)
    print(f"\nMachine: {info}\nTotal {time.perf_counter() - t0:.0f} s\n")
    print(tbl)
    if a.write_docs:
        write_docs(block(info, tbl, a.quick), DOC)
        print(f"\n{DOC} table updated ({len(rows)} rows).")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
