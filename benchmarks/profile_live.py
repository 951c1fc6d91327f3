"""Where a live class's server time goes: py-spy on one server while benchmarks/bench_live.py's
scenario runs (one lecturer, N protocol-level students following), sampled apart for the rounds
(the lecturer changes the sentence, every follower reruns its page) and for idle following (every
follower's watch fragment checks the room each second).

Reported per phase: the server's CPU time from /proc, and the share of py-spy's samples under each
of a list of frames (inclusive: a sample counts once for every listed frame on its stack), scaled to
core-ms per follower run (rounds) or per check (idle). On a loaded machine py-spy also samples
threads that wait for a core, hence the scaling by /proc's CPU.

    .venv/bin/python -m benchmarks.profile_live --students 30 --rounds 4
    .venv/bin/python -m benchmarks.profile_live --students 30 --src smollm2 --top 30

py-spy is a dev tool (requirements-dev.txt); it needs ptrace on the server (root here).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_live import cpu_seconds, scenario, warm  # noqa: E402
from deploy.server import Server  # noqa: E402

# (name, substring of a frame "function (file:line)")
FRAMES = [
    ("page script (pages/*.py)", "/pages/"),
    ("sidebar.render (ui/sidebar.py)", "render (" + str(ROOT / "ui/sidebar.py")),
    ("live.render (ui/live.py)", "render (" + str(ROOT / "ui/live.py")),
    ("live watch fragment", "_watch ("),
    ("live.begin_run", "begin_run (" + str(ROOT / "ui/live.py")),
    ("state.begin_run", "begin_run (" + str(ROOT / "ui/state.py")),
    ("state.sync_url", "sync_url ("),
    ("st.navigation", "navigation ("),
    ("ui.show.show_fig", "show_fig ("),
    ("viz figure build", "/viz/"),
    ("st.plotly_chart", "plotly_chart ("),
    ("plotly.io.to_json", "to_json ("),
    ("return_figure_from_figure_or_data", "return_figure_from_figure_or_data ("),
    ("compute_and_register_element_id", "compute_and_register_element_id ("),
    ("current_run (ui/runs.py)", "current_run ("),
    ("head labels (sink.labels_of)", "labels_of ("),
    ("describe_fig", "describe_fig ("),
    ("present_fonts", "present_fonts ("),
    ("example_buttons", "example_buttons ("),
    ("register_widget", "register_widget ("),
    ("_enqueue (Streamlit deltas)", "_enqueue ("),
    ("script runner _run_script", "_run_script ("),
    ("widget state handling (on_script_will_rerun / WidgetManager)", "widget"),
    ("forward msg serialize / send", "SerializeToString"),
    ("tornado / websocket", "tornado/"),
]
IDLE = ("EpollSelector.select (", "Condition.wait (", "Event.wait (", "_worker (", "Thread.start (",
        "Queue.get (", "Lock.acquire (", "sleep (")


class Spy:
    def __init__(self, pid: int, rate: int, tmp: str):
        self.pid, self.rate, self.tmp = pid, rate, tmp
        self.extra: list[str] = []
        self.proc = None
        self.out = {}
        self.cpu = {}

    def __call__(self, name: str) -> None:
        if name in ("rounds", "idle"):
            self.cur = name
            path = Path(self.tmp) / f"{name}.txt"
            self.out[name] = path
            self.proc = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid",
                                          str(self.pid), "--rate", str(self.rate), "--format", "raw",
                                          "--full-filenames", "--nonblocking", "--output", str(path), *self.extra],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            self.cpu[name] = [cpu_seconds(self.pid), time.perf_counter()]
        else:
            self.cpu[self.cur] += [cpu_seconds(self.pid), time.perf_counter()]
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)


def parse(path: Path):
    incl: collections.Counter = collections.Counter()
    leaves: collections.Counter = collections.Counter()
    total = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        leaf = stack.rsplit(";", 1)[-1]
        if leaf.startswith(IDLE):
            continue
        total += k
        for name, sub in FRAMES:
            if sub in stack:
                incl[name] += k
        leaves[leaf.split(" (")[0] + " (" + leaf.split("/")[-1]] += k
    return total, incl, leaves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--src", default="toy", choices=["toy", "smollm2"])
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--gil", action="store_true",
                    help="sample only the thread holding the interpreter lock (py-spy --gil): where the CPU goes, "
                         "without the threads that wait for the lock or a core")
    ap.add_argument("--raw", help="a folder to keep py-spy's raw stacks in (rounds.txt, idle.txt)")
    a = ap.parse_args()
    os.environ.pop("ROOM_STORE", None)
    with tempfile.TemporaryDirectory() as tmp, Server("app.py", extra=["--runner.postScriptGC", "false"]) as srv:
        asyncio.run(warm(srv.url, a.src))
        spy = Spy(srv.pid, a.rate, tmp)
        if a.gil:
            spy.extra = ["--gil"]
        res = asyncio.run(scenario(srv.url, srv.url, a.students, a.rounds, a.src, [srv.pid], a.idle, 3.0, phase=spy))
        print(f"{a.students} students, {a.src}: p50 {res['p50']:.2f} s, p90 {res['p90']:.2f} s, max {res['max']:.2f} s, "
              f"missed {res['missed']}, errors {len(res['errors'])}; idle {res['idle_core_pct']:.1f} % of a core, "
              f"{res['idle_ms_per_check']:.2f} ms per check; load average {os.getloadavg()[0]:.1f}")
        if a.raw:
            Path(a.raw).mkdir(parents=True, exist_ok=True)
            for name, path in spy.out.items():
                if path.exists():
                    shutil.copy(path, Path(a.raw) / path.name)
        for name, per in (("rounds", a.students * a.rounds), ("idle", None)):
            c0, w0, c1, w1 = spy.cpu[name]
            total, incl, leaves = parse(spy.out[name])
            cpu_ms = 1000 * (c1 - c0)
            if per is None:
                per = max(1, round(res["idle_checks_per_s"] * (w1 - w0)))
            unit = "follower run" if name == "rounds" else "check"
            print(f"\n## {name}: server CPU {cpu_ms / 1000:.1f} s over {w1 - w0:.1f} s; "
                  f"{cpu_ms / per:.2f} core-ms per {unit} ({per} {unit}s); {total} samples")
            print(f"| frame (inclusive) | share | core-ms per {unit} |\n|---|---:|---:|")
            for fname, _ in FRAMES:
                k = incl.get(fname, 0)
                if k:
                    print(f"| {fname} | {100 * k / total:.1f} % | {k / total * cpu_ms / per:.2f} |")
            if a.top:
                print("hottest leaves:")
                for f, k in leaves.most_common(a.top):
                    print(f"  {k:6d}  {f}")


if __name__ == "__main__":
    main()
