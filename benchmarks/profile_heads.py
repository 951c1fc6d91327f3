"""Where a heads-page rerun's CPU goes, on a real server under load (issue 31, step 1).

Starts the app (deploy/server.py), warms it with the model picked by the link (?src=...), then
samples the server process with py-spy (a sampling profiler that reads the process from outside:
nothing in the app changes) while N sessions speaking Streamlit's WebSocket protocol
(benchmarks/ws_load.py) each type R new sentences into the heads page. Every CPU sample (threads
on a core; threads waiting for the GIL or a lock are not counted) is put in one part of the rerun
by the frames on its stack (PARTS), and the parts are reported as shares of the samples and in
core-ms per rerun: the share times the server's own CPU time per rerun from /proc. (py-spy counts a
thread as active when it is running or runnable, so on a loaded machine it samples threads that
wait for a core too: its counts are wall time of busy threads, hence the scaling by /proc's CPU.)

    .venv/bin/python -m benchmarks.profile_heads --src smollm2-135m --sessions 1 --reruns 30
    .venv/bin/python -m benchmarks.profile_heads --src smollm2-135m --sessions 30 --reruns 20
    .venv/bin/python -m benchmarks.profile_heads --src smollm2-135m --top 40   # also the hottest frames

py-spy is a dev tool (requirements-dev.txt); it needs ptrace on the server (root here).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stclient import server_pid_cpu_s
from benchmarks.ws_load import load, warm
from deploy.server import ROOT, Server

# (part, substrings any of which in a frame puts the sample there). A sample belongs to the
# innermost frame of its stack that names a part (torch's Linear.forward under model/layers.py is
# the forward; under model/patterns.py, the head labels).
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("tokenize", ("model/bpe.py", "model/tokenizer.py", "model/wordpiece.py", "tokenize (")),
    ("cut out of the batch (model.batching.unbatch: copies)", ("model/batching.py",)),
    ("batcher wait/hand-off", ("model/batcher.py", "ui/batcher.py")),
    ("numpy view (trace.numpy)", ("_to_numpy_tree",)),
    ("trace cache bookkeeping (byte count)", ("budget_cache.py",)),
    ("derived trace fields (first read)", ("model/trace.py",)),
    ("trace (forward)", ("model/transformer.py", "model/layers.py", "model/attention.py")),
    ("head labels (model/patterns.py)", ("model/patterns.py",)),
    ("figure to JSON (plotly to_json, Streamlit's chart proto)", ("plotly/io/_json.py", "to_plotly_json",
                                                                   "elements/plotly_chart.py")),
    ("figure build (viz + plotly objects)", ("/viz/",)),
    ("other ui/show.py (tables, downloads)", ("ui/show.py",)),
    ("sidebar and state (app.py, ui/sidebar.py, ui/state.py)", ("/app.py", "ui/sidebar.py", "ui/state.py",
                                                                 "ui/models.py")),
    ("page script, other", ("pages/heads.py", "ui/runs.py")),
    ("Streamlit: messages out (protobuf, websocket, tornado)", ("tornado/", "websocket", "forward_msg",
                                                               "SerializeToString", "app_session.py")),
    ("Streamlit: script runner, widgets, other", ("streamlit/",)),
]
OTHER = "other (interpreter, threads, GC, unattributed)"
# Leaf frames that block (sleep, select, lock and queue waits): py-spy sometimes samples a thread
# there as active; such samples are dropped.
IDLE = ("EpollSelector.select (", "PollingPathWatcher._schedule.<locals>.task (", "Condition.wait (",
        "Event.wait (", "_worker (", "Thread.start (", "Queue.get (", "Lock.acquire (")


def part_of(stack: str) -> str:
    """The part of the innermost frame (leaf first) that names one; within a frame, PARTS' order."""
    for frame in reversed(stack.split(";")):
        for name, keys in PARTS:
            if any(k in frame for k in keys):
                return name
    return OTHER


def py_spy() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else "py-spy"


def profile(src: str, sessions: int, reruns: int, rate: int = 100, env: dict | None = None,
            label: str = "", raw: str = "", layer: int | None = None) -> dict:
    """One server, one load under py-spy. Returns {parts: {part: samples}, reruns, samples, rate,
    cpu_s, wall, p50, p90, errors, frames: Counter of leaf frames}. layer: the heads page's layer
    (?layer=...; None = its default, 0)."""
    query = "&".join(q for q in (f"src={src}" if src else "", "" if layer is None else f"layer={int(layer)}") if q)
    s = Server("app.py", env=env).start()
    try:
        return _profile(s, query, src, sessions, reruns, rate, label, raw)
    finally:
        try:
            s.stop()
        except subprocess.TimeoutExpired:
            print(f"warning: the server (pid {s.pid}) did not stop in 20 s", file=sys.stderr)


def _profile(s: Server, query: str, src: str, sessions: int, reruns: int, rate: int, label: str, raw: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(warm(s.url, "", query))
        out = Path(tmp) / "spy.txt"
        spy = subprocess.Popen([py_spy(), "record", "--pid", str(s.pid), "--rate", str(rate), "--format", "raw",
                                "--full-filenames", "--nonblocking", "--output", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attached
        c0 = server_pid_cpu_s(s.pid)
        try:
            res = asyncio.run(load(s.url, [""], sessions, reruns, label or f"heads, {src or 'toy'}", s.pid,
                                   query=query))
            c1 = server_pid_cpu_s(s.pid)
        finally:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
        if raw and out.exists():
            Path(raw).write_text(out.read_text())
        parts: collections.Counter = collections.Counter()
        leaves: collections.Counter = collections.Counter()
        total = 0
        for line in out.read_text().splitlines() if out.exists() else []:
            stack, _, n = line.rpartition(" ")
            if not n.isdigit():
                continue
            k = int(n)
            if stack.rsplit(";", 1)[-1].startswith(IDLE):
                continue
            total += k
            parts[part_of(stack)] += k
            leaves[stack.rsplit(";", 1)[-1].split(" (")[0] + " (" + stack.rsplit(";", 1)[-1].split("/")[-1]] += k
    n_runs = len(res.times)
    return dict(parts=dict(parts), reruns=n_runs, samples=total, rate=rate, cpu_s=c1 - c0, wall=res.wall,
                p50=res.p50, p90=res.p90, errors=len(res.errors), leaves=leaves, label=res.label,
                throughput=res.throughput)


def report(p: dict, top: int = 0) -> str:
    n = max(1, p["reruns"])
    sampled = p["samples"] / p["rate"]
    lines = [f"{p['label']}: {p['reruns']} reruns, p50 {p['p50']:.3f} s, p90 {p['p90']:.3f} s, "
             f"{p['throughput']:.2f} reruns/s, errors {p['errors']}; server CPU {p['cpu_s']:.1f} s "
             f"= {1000 * p['cpu_s'] / n:.0f} core-ms per rerun (sampled: {1000 * sampled / n:.0f}); "
             f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}",
             "", "| part | share of samples | core-ms per rerun |", "|---|---:|---:|"]
    cpu_ms = 1000 * p["cpu_s"] / n
    for name, k in sorted(p["parts"].items(), key=lambda kv: -kv[1]):
        share = k / max(1, p["samples"])
        lines.append(f"| {name} | {100 * share:.1f} % | {share * cpu_ms:.1f} |")
    if top:
        lines += ["", "hottest leaf frames (samples):"]
        lines += [f"  {k:6d}  {f}" for f, k in p["leaves"].most_common(top)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="smollm2-135m", help="model (?src=...); '' = the default toy model")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--reruns", type=int, default=20)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=0, help="also print the N hottest leaf frames")
    ap.add_argument("--raw", default="", help="keep py-spy's collapsed stacks in this file")
    ap.add_argument("--layer", type=int, default=None, help="the heads page's layer (default: its default, 0; "
                    "the page traces that layer alone)")
    a = ap.parse_args()
    print(report(profile(a.src, a.sessions, a.reruns, a.rate, raw=a.raw, layer=a.layer), a.top))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
