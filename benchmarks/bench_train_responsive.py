"""Does the app stay responsive while a training runs? (issue 5 §5)

Starts the real app server (deploy/server.py) and drives it with the browser's own WebSocket
protocol (benchmarks/stclient.py):
  - session A opens the Train page, picks d_model 64, 4 heads, 2 layers, 300 steps and presses
    "Start training"; while the training runs in its background thread, A reruns the Train page
    once a second (the page's fragment polls like that; a full rerun is heavier, so this errs on
    the pessimistic side);
  - session B, on the Attention heads page, types a new sentence again and again (each one a new
    trace: no cache hit) and we time each rerun, BackMsg sent -> script_finished received.
The same B measurement is taken without any training before and after (the "bare" column: median
of both). The ratio is the slow-down a user of another page feels while someone trains.

    .venv/bin/python -m benchmarks.bench_train_responsive [--quick] [--no-yield-compare]
    from benchmarks.bench_train_responsive import run; rows = run(quick=True)

Without --no-yield-compare (and not quick) it repeats the measurement on a second server with
ATTN_LAB_TRAIN_YIELD_S=0 (no pause between training steps) to show what ui.train.py's pause
buys. The machine is shared: the load average is printed, and a busy machine inflates every time.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

from benchmarks.report import table  # noqa: E402
from benchmarks.stclient import StClient  # noqa: E402
from deploy.server import Server  # noqa: E402

TARGET_RATIO = 2.0
TRAIN_SETTINGS = {"d_model": "64", "Heads": "4", "Layers": 2, "Steps": 300}


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def click(c: StClient, label: str):
    """Press a button seen in an earlier run (a one-shot trigger, as the frontend sends it)."""
    wid, etype = c.widgets[label]
    if etype != "button":
        raise RuntimeError(f"{label!r} is a {etype}, not a button")
    ws = WidgetState(id=wid)
    ws.trigger_value = True
    build = c._back_msg

    def with_trigger() -> bytes:  # only in this one BackMsg; StClient keeps no button state
        c.widget_values[wid] = ws
        try:
            return build()
        finally:
            c.widget_values.pop(wid, None)

    c._back_msg = with_trigger
    try:
        return await c.rerun()
    finally:
        del c._back_msg


async def time_reruns(c: StClient, n: int, tag: str) -> list[float]:
    times = []
    for i in range(n):
        r = await c.set_widget("Sentence", f"the keys to the {tag} cabinet {i} are on the table .")
        if not r.ok:
            raise RuntimeError(f"heads page rerun failed: {r.exceptions}")
        times.append(r.seconds * 1e3)
    return times


async def _measure(url: str, n: int) -> dict:
    other = StClient(url, page="")  # the heads page is the default page at "/"
    trainer = StClient(url, page="train")
    async with other, trainer:
        await other.rerun()
        await time_reruns(other, 3, "warm")  # first traces, imports, caches
        bare_a = await time_reruns(other, n, "bare-a")

        r = await trainer.rerun()
        for label, value in TRAIN_SETTINGS.items():
            r = await trainer.set_widget(label, value)
        r = await click(trainer, "Start training")
        if r.elements.get("progress", 0) == 0:
            raise RuntimeError(f"the training did not start: {r.alerts}")
        stop = asyncio.Event()
        polls: list[float] = []
        still_running = [True]

        async def poll():
            while not stop.is_set():
                rr = await trainer.rerun()
                polls.append(rr.seconds * 1e3)
                still_running[0] = rr.elements.get("progress", 0) > 0
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass

        poller = asyncio.create_task(poll())
        await asyncio.sleep(1.5)  # let the training get going
        with_training = await time_reruns(other, n, "train")
        running_at_end = still_running[0]
        stop.set()
        await poller
        if running_at_end:  # stop it so the next measurement is bare again
            await click(trainer, "Cancel training")
            for _ in range(60):
                rr = await trainer.rerun()
                if rr.elements.get("progress", 0) == 0:
                    break
                await asyncio.sleep(0.5)
        bare_b = await time_reruns(other, n, "bare-b")
    return {"bare": bare_a + bare_b, "train": with_training, "polls": polls, "running_at_end": running_at_end}


def measure(n: int, env: dict[str, str] | None = None) -> dict:
    with Server("app.py", env=env or {}) as s:
        return asyncio.run(_measure(s.url, n))


def rows_from(m: dict, label: str) -> list[dict]:
    rows = []
    for metric, fn in (("median rerun ms", statistics.median), ("p90 rerun ms", lambda x: _pct(x, 0.9))):
        app, bare = fn(m["train"]), fn(m["bare"])
        rows.append({"benchmark": f"other page while a training runs{label}",
                     "metric": f"{metric} (heads page, new sentence; n={len(m['train'])})",
                     "app": round(app, 1), "bare": round(bare, 1), "ratio": round(app / bare, 2),
                     "target": f"≤ {TARGET_RATIO:g}× (app = with training, bare = none)"
                               + ("" if m["running_at_end"] else "; training ENDED before the last rerun")})
    return rows


def run(quick: bool = False, yield_compare: bool | None = None) -> list[dict]:
    n = 8 if quick else 30
    load = os.getloadavg()[0]
    rows = rows_from(measure(n), "")
    if yield_compare if yield_compare is not None else not quick:
        rows += rows_from(measure(n, {"ATTN_LAB_TRAIN_YIELD_S": "0"}), " (no pause between steps)")
    for r in rows:
        r["load_avg_1m"] = round(load, 2)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_train_responsive")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-yield-compare", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run(a.quick, yield_compare=False if a.no_yield_compare else None)
    print(table(rows))
    print(f"\nload average (1 min) at start: {rows[0]['load_avg_1m']}; took {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
