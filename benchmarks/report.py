"""Formatting for the benchmark table (docs/benchmarks.md): machine info and rows of (benchmark, metric, app, bare, ratio, target)."""
from __future__ import annotations

import math
import os
import platform


def machine_info() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.0f} GB"
    except OSError:
        pass
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    import numpy
    import streamlit
    import torch
    return (f"{cpu}, {os.cpu_count()} cores, {mem} RAM, load average {load} at start; "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"(default threads here {torch.get_num_threads()}; the app sets its own, ui/runtime.py), Streamlit {streamlit.__version__}, numpy {numpy.__version__}")


def _fmt(x) -> str:
    if x is None or x == "":
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"
    return str(x)


def table(rows: list[dict]) -> str:
    """The benchmark table (docs/benchmarks.md). `bare` is the baseline: the bare Streamlit app unless the row says otherwise.
    A row with `ok` False gets a cross after its target (a budget missed, or a benchmark that failed)."""
    out = ["| benchmark | metric | Attention Lab | baseline | ratio | target |",
           "|---|---|---:|---:|---:|---|"]
    for r in rows:
        ratio = r.get("ratio")
        target = str(r.get("target", "") or "")
        if r.get("ok") is False:
            target = (target + " ✗").strip()
        elif r.get("ok") is True and target:
            target += " ✓"
        out.append(f"| {_cell(r.get('benchmark', ''))} | {_cell(r.get('metric', ''))} | {_fmt(r.get('app'))} | "
                   f"{_fmt(r.get('bare'))} | {(_fmt(ratio) + '×') if isinstance(ratio, (int, float)) and not math.isnan(ratio) else '–'} | "
                   f"{_cell(target)} |")
    return "\n".join(out)


def _cell(x) -> str:
    """Table-safe text: a pipe or newline would break the Markdown row."""
    return str(x).replace("|", "\\|").replace("\n", " ")
