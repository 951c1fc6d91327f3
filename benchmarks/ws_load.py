"""Server-side load: N concurrent sessions speaking Streamlit's own WebSocket protocol.

Each session opens `/_stcore/stream`, runs the page once (like a browser opening it), waits until
every session has loaded, then re-runs the page R times, each time with a new sentence in the
sidebar's "Sentence" box (a real cache miss every time). No rendering cost: the client only parses
the ForwardMsgs. The same load runs against the bare app (benchmarks/bare_app.py: one heatmap) in
the same invocation, and the report puts them side by side. The full run (benchmarks.run_all) also
loads the bare app drawing as many heatmaps as the heads page shows (BARE_APP_PANELS), reported
without a target: the same number of heatmaps, without the model and the sidebar.

    python -m benchmarks.ws_load                      # 30 sessions x 20 reruns, the default page (heads)
    python -m benchmarks.ws_load --sessions 3 --reruns 5 --pages heads,overview
    python -m benchmarks.ws_load --src smollm2-135m   # heads page: the toy model, then SmolLM2-135M

With --src, the same load runs on the heads page with the default (toy) model and then with the
pretrained model picked by the link's query (`?src=smollm2-135m`, as a shared link would), one fresh
server each, in the same invocation; no bare app. The model's cold load is done by the warm-up
session before the timed phase (what a rerun costs, not what the first visitor waits for).

Reports p50/p90 rerun time (BackMsg sent -> script_finished), throughput (reruns/s over the timed
phase), errors (exceptions shown, protocol errors, timeouts), server RSS (start, peak, end; read
from /proc) and bytes received per rerun.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field

from benchmarks.stclient import StClient, server_pid_cpu_s, server_pid_rss_kb
from deploy.server import ROOT, Server

WORDS = ["cat", "dog", "bird", "child", "teacher", "robot", "king", "queen", "river", "table",
         "keys", "book", "garden", "house", "city", "car", "door", "window", "tree", "song"]


def sentence(session: int, i: int) -> str:
    """A new sentence for every (session, rerun): cached results never answer it."""
    a, b, c = WORDS[(session * 7 + i) % len(WORDS)], WORDS[(session + 3 * i) % len(WORDS)], WORDS[(i * 11 + 5) % len(WORDS)]
    return f"the {a} saw the {b} near the {c} and {session} {i} ."


@dataclass
class LoadResult:
    label: str
    sessions: int
    reruns: int
    times: list[float] = field(default_factory=list)
    load_times: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    bytes: list[int] = field(default_factory=list)
    charts: list[int] = field(default_factory=list)  # plotly charts sent per timed rerun
    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0
    cpu_s: float = 0.0  # server CPU time (all threads) during the timed phase

    @property
    def cpu_ms_per_rerun(self) -> float:
        """Server core-milliseconds per finished rerun: what a rerun costs, whatever share of the
        cores the server got (on a shared machine wall-clock rates depend on the neighbours)."""
        return 1000 * self.cpu_s / len(self.times) if self.times else float("nan")

    def q(self, p: float) -> float:
        if not self.times:
            return float("nan")
        xs = sorted(self.times)
        return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]

    @property
    def p50(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def p90(self) -> float:
        return self.q(0.90)

    @property
    def throughput(self) -> float:
        return len(self.times) / self.wall if self.wall else 0.0

    def summary(self) -> str:
        kb = statistics.median(self.bytes) / 1024 if self.bytes else 0
        return (f"{self.label}: {self.sessions} sessions x {self.reruns} reruns: p50 {self.p50:.2f} s, "
                f"p90 {self.p90:.2f} s, {self.throughput:.1f} reruns/s, errors {len(self.errors)}, "
                f"RSS {self.rss_start_mb:.0f} -> peak {self.rss_peak_mb:.0f} -> {self.rss_end_mb:.0f} MB, "
                f"{kb:.0f} kB/rerun, server CPU {self.cpu_ms_per_rerun:.0f} core-ms/rerun")


class RssSampler:
    """Samples a process's RSS every 0.2 s in a thread; keeps the peak."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, server_pid_rss_kb(self.pid))
            except OSError:
                return
            self._stop.wait(0.2)

    def __enter__(self) -> "RssSampler":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(2)


async def _session(url: str, page: str, k: int, reruns: int, loaded: asyncio.Barrier,
                   res: LoadResult, timeout: float, query: str = "") -> None:
    client = StClient(url, page=page, query=query, timeout=timeout)
    try:
        await client.connect()
        r = await client.rerun()
        res.load_times.append(r.seconds)
        if r.not_found:
            res.errors.append(f"session {k} load: page not found: {r.not_found!r}")
        if not r.ok:
            res.errors.append(f"session {k} load: {r.exceptions[:1] or r.status}")
    except Exception as exc:  # connection refused, timeout, protocol error
        res.errors.append(f"session {k} load: {type(exc).__name__}: {exc}")
        await loaded.wait()
        await client.close()
        return
    await loaded.wait()  # every session has loaded: now the timed phase
    try:
        for i in range(reruns):
            try:
                r = await client.set_widget("Sentence", sentence(k, i))
            except Exception as exc:
                res.errors.append(f"session {k} rerun {i}: {type(exc).__name__}: {exc}")
                break
            res.times.append(r.seconds)
            res.bytes.append(r.bytes)
            res.charts.append(r.elements.get("plotly_chart", 0))
            if not r.ok:
                res.errors.append(f"session {k} rerun {i}: {r.exceptions[:1] or r.status}")
    finally:
        await client.close()


async def load(url: str, pages: list[str], sessions: int, reruns: int, label: str, pid: int | None,
               timeout: float = 300.0, query: str = "") -> LoadResult:
    """`query`: the URL's query string every session opens with (e.g. "src=smollm2-135m")."""
    res = LoadResult(label, sessions, reruns)
    if pid:
        res.rss_start_mb = server_pid_rss_kb(pid) / 1024
    loaded = asyncio.Barrier(sessions + 1)
    tasks = [asyncio.create_task(_session(url, pages[k % len(pages)], k, reruns, loaded, res, timeout, query))
             for k in range(sessions)]
    sampler = RssSampler(pid) if pid else None
    if sampler:
        sampler.__enter__()
    try:
        await loaded.wait()
        t0 = time.perf_counter()
        c0 = server_pid_cpu_s(pid) if pid else 0.0
        await asyncio.gather(*tasks)
        res.wall = time.perf_counter() - t0
        res.cpu_s = server_pid_cpu_s(pid) - c0 if pid else 0.0
    finally:
        if sampler:
            sampler.__exit__()
            res.rss_peak_mb = sampler.peak / 1024
    if pid:
        res.rss_end_mb = server_pid_rss_kb(pid) / 1024
    return res


async def warm(url: str, page: str, query: str = "", timeout: float = 300.0) -> None:
    """One session opens the root first, then the page: the server imports torch and builds the
    model before the timed load starts (that cold start is not what a rerun costs)."""
    async with StClient(url, page="", query=query, timeout=timeout) as c:
        r = await c.rerun()
        if query and (not r.ok or any("not available" in a for a in r.alerts)):
            # the sidebar falls back to the default model when the link's model cannot load
            raise RuntimeError(f"warm-up with ?{query} failed: {r.exceptions[:1] or r.alerts[:1] or r.status}")
    async with StClient(url, page=page, query=query, timeout=timeout) as c:
        await c.rerun()


def run_pair(sessions: int = 30, reruns: int = 20, pages: list[str] | None = None,
             app_env: dict[str, str] | None = None) -> tuple[LoadResult, LoadResult]:
    """The same load on the bare app and on the real app, one after the other, same run."""
    pages = pages or [""]  # "" = the default page (heads, app.DEFAULT_URL)
    out = []
    for label, app, pg, env in (("bare app", "benchmarks/bare_app.py", [""], None),
                                ("Attention Lab", "app.py", pages, app_env)):
        with Server(app, env=env) as s:
            asyncio.run(warm(s.url, pg[0]))
            out.append(asyncio.run(load(s.url, pg, sessions, reruns, label, s.pid)))
    return out[0], out[1]


def default_heads() -> int:
    """Heads of the model the app opens with (checkpoints/<ui.models.DEFAULT_SOURCE>/config.json,
    read as JSON: importing ui would need Streamlit's runtime); 4 if it cannot be read."""
    import json
    try:
        src = re.search(r'^DEFAULT_SOURCE = "([^"]+)"', (ROOT / "ui" / "models.py").read_text(), re.M).group(1)
        return int(json.loads((ROOT / "checkpoints" / src / "config.json").read_text())["config"]["n_heads"])
    except (AttributeError, OSError, KeyError, ValueError):
        return 4


def run_reference(sessions: int, reruns: int, panels: int) -> LoadResult:
    """The same load on the bare app drawing `panels` heatmaps (as many as the heads page shows)."""
    with Server("benchmarks/bare_app.py", env={"BARE_APP_PANELS": str(panels)}) as s:
        asyncio.run(warm(s.url, ""))
        return asyncio.run(load(s.url, [""], sessions, reruns, f"bare app, {panels} heatmaps", s.pid))


def reference_rows(ref: LoadResult, app: LoadResult, panels: int) -> list[dict]:
    """Reported only (no target): the app against a bare app drawing as many heatmaps."""
    n = f"WebSocket load, {app.sessions} sessions x {app.reruns} reruns, vs a bare app drawing {panels} heatmaps"
    return [dict(benchmark=n, metric="p90 rerun (s)", app=app.p90, bare=ref.p90, ratio=app.p90 / ref.p90,
                 target="(reported: the same number of heatmaps)"),
            dict(benchmark=n, metric="throughput (reruns/s)", app=app.throughput, bare=ref.throughput,
                 ratio=app.throughput / ref.throughput if ref.throughput else float("nan"),
                 target="(reported)"),
            dict(benchmark=n, metric="errors", app=len(app.errors), bare=len(ref.errors), ratio=None,
                 target="(reported)")]


def rows(bare: LoadResult, app: LoadResult) -> list[dict]:
    """Benchmark table rows (docs/benchmarks.md: benchmark, metric, app, bare, ratio, target)."""
    n = f"WebSocket load, {app.sessions} sessions x {app.reruns} reruns"
    return [
        dict(benchmark=n, metric="p50 rerun (s)", app=app.p50, bare=bare.p50, ratio=app.p50 / bare.p50, target=""),
        dict(benchmark=n, metric="p90 rerun (s)", app=app.p90, bare=bare.p90, ratio=app.p90 / bare.p90, target="≤ 1.5×",
             ok=app.p90 <= 1.5 * bare.p90),
        dict(benchmark=n, metric="throughput (reruns/s)", app=app.throughput, bare=bare.throughput,
             ratio=app.throughput / bare.throughput if bare.throughput else float("nan"), target=""),
        dict(benchmark=n, metric="errors", app=len(app.errors), bare=len(bare.errors), ratio=None, target="0",
             ok=not app.errors),
        dict(benchmark=n, metric="server RSS peak (MB)", app=app.rss_peak_mb, bare=bare.rss_peak_mb,
             ratio=app.rss_peak_mb / bare.rss_peak_mb if bare.rss_peak_mb else None, target=""),
        dict(benchmark=n, metric="kB received per rerun (median)", app=statistics.median(app.bytes) / 1024 if app.bytes else 0,
             bare=statistics.median(bare.bytes) / 1024 if bare.bytes else 0, ratio=None, target=""),
    ]


def run(quick: bool = False) -> list[dict]:
    """For benchmarks.run_all."""
    sessions, reruns = (3, 5) if quick else (30, 20)
    bare, app = run_pair(sessions, reruns)
    panels = default_heads()
    ref = run_reference(sessions, reruns, panels)
    for r in (bare, app, ref):
        print(r.summary())
    for e in app.errors[:5]:
        print("  app error:", e)
    return rows(bare, app) + reference_rows(ref, app, panels)


TOY = ""  # the default model (ui.models.DEFAULT_SOURCE): no src in the URL


def run_models(sessions: int = 30, reruns: int = 20, srcs: tuple[str, ...] = (TOY, "smollm2-135m"),
               page: str = "", batch: tuple[str, ...] = ("",), rounds: int = 1,
               layers: tuple[str, ...] = ("",)) -> list[LoadResult]:
    """The same load on one page (default: heads) with each model in `srcs`, picked by the link's
    query (?src=...; TOY = the default model), one fresh server each, one after the other in the
    same invocation. batch: the pretrained models' runs once per ATTN_LAB_BATCH mode given ("" =
    the app's default; model/batcher.py); rounds > 1 repeats the whole sequence (toy, then each
    model and mode), so that the machine's load hits every side alike; layers: the pretrained models'
    runs once per heads-page layer given (?layer=...; "" = the page's default, layer 0: the heads
    page traces only as far as its layer, so a higher layer costs more); results are in run order."""
    out = []
    for _ in range(rounds):
        for src in srcs:
            for mode, layer in [(m, y) for m in batch for y in layers] if src else [("", "")]:
                query = f"src={src}" if src else ""
                label = f"heads page, {src or 'default model (' + default_source() + ')'}"
                if layer:
                    query += f"&layer={int(layer)}"
                    label += f", layer {int(layer)}"
                if mode:
                    label += f", ATTN_LAB_BATCH={mode}"
                with Server("app.py", env={"ATTN_LAB_BATCH": mode} if mode else None) as s:
                    asyncio.run(warm(s.url, page, query))
                    out.append(asyncio.run(load(s.url, [page], sessions, reruns, label, s.pid, query=query)))
                print(out[-1].summary(), f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    return out


def default_source() -> str:
    m = re.search(r'^DEFAULT_SOURCE = "([^"]+)"', (ROOT / "ui" / "models.py").read_text(), re.M)
    return m.group(1) if m else "?"


def model_rows(results: list[LoadResult]) -> list[dict]:
    """Benchmark table rows for run_models: each model's p50/p90/errors, the first (toy) as the baseline."""
    base, out = results[0], []
    for r in results[1:]:
        n = (f"WebSocket load, {r.sessions} sessions x {r.reruns} reruns, {r.label} vs {base.label} "
             "(same run)")
        out += [
            dict(benchmark=n, metric="p50 rerun (s)", app=r.p50, bare=base.p50, ratio=r.p50 / base.p50,
                 target="(reported)"),
            dict(benchmark=n, metric="p90 rerun (s)", app=r.p90, bare=base.p90, ratio=r.p90 / base.p90,
                 target="(reported)"),
            dict(benchmark=n, metric="throughput (reruns/s)", app=r.throughput, bare=base.throughput,
                 ratio=r.throughput / base.throughput if base.throughput else float("nan"), target=""),
            dict(benchmark=n, metric="errors", app=len(r.errors), bare=len(base.errors), ratio=None, target="0",
                 ok=not r.errors and not base.errors),
            dict(benchmark=n, metric="server RSS peak (MB)", app=r.rss_peak_mb, bare=base.rss_peak_mb,
                 ratio=r.rss_peak_mb / base.rss_peak_mb if base.rss_peak_mb else None, target=""),
            dict(benchmark=n, metric="server CPU per rerun (core-ms)", app=r.cpu_ms_per_rerun,
                 bare=base.cpu_ms_per_rerun, ratio=r.cpu_ms_per_rerun / base.cpu_ms_per_rerun,
                 target="(reported: a rerun's cost, whatever the neighbours)"),
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--reruns", type=int, default=20)
    ap.add_argument("--pages", default="", help="comma-separated url paths, spread over sessions "
                    "(empty = the default page, heads)")
    ap.add_argument("--src", default="", help="a pretrained model (e.g. smollm2-135m): load the heads page "
                    "with the default model and then with this one (?src=...), instead of bare app vs app")
    ap.add_argument("--batch", default="", help="with --src: comma-separated ATTN_LAB_BATCH modes "
                    "(exact, pad, off) to run the pretrained model with, each on its own server")
    ap.add_argument("--no-baseline", action="store_true", help="with --src: skip the default model's run")
    ap.add_argument("--rounds", type=int, default=1, help="with --src: repeat the sequence (alternating sides)")
    ap.add_argument("--layers", default="", help="with --src: comma-separated heads-page layers to run the "
                    "pretrained model at, each on its own server (default: the page's default, layer 0; "
                    "SmolLM2's last is 29)")
    a = ap.parse_args()
    from benchmarks.report import table
    if a.src:
        srcs = (a.src,) if a.no_baseline else (TOY, a.src)
        results = run_models(a.sessions, a.reruns, srcs, batch=tuple(a.batch.split(",")) if a.batch else ("",),
                             rounds=a.rounds, layers=tuple(a.layers.split(",")) if a.layers else ("",))
        for r in results:
            for e in r.errors[:5]:
                print("  error:", e)
        if not a.no_baseline:
            for i in range(0, len(results), len(results) // a.rounds):
                print(table(model_rows(results[i:i + len(results) // a.rounds])))
        return
    bare, app = run_pair(a.sessions, a.reruns, a.pages.split(",") if a.pages else None)
    print(bare.summary())
    print(app.summary())
    for e in (app.errors + bare.errors)[:10]:
        print("  error:", e)
    print(table(rows(bare, app)))


if __name__ == "__main__":
    main()
