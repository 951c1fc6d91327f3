"""A live class under load: one lecturer and N students speaking Streamlit's own protocol
(benchmarks/stclient.py), against one server (the default room store: SQLite, in a fresh data folder),
2 replicas on this machine behind nginx sharing that SQLite file, or 2 replicas sharing a Redis room
store (deploy/replicas.py, deploy/redis_local.py). The store's own cost per check, without Streamlit:
benchmarks/bench_room_store.py.

Each student opens the join link (?room=CODE), then does what its browser does: its follow
fragment asks for a fragment rerun at the interval the server registered (st.fragment(run_every=...):
every second, or every 3 s when the lecturer is on the same server); when the lecturer's view
changed, the server answers with a full rerun that applies it. The lecturer's own server also starts
its followers' full reruns itself at each change; the students read those as they come. The lecturer types a new sentence
(ROUNDS times, a pause between); for each round we record, per student, the time from the
lecturer's keystroke being sent to that student's run that shows the sentence (the Sentence box's
new value and the URL's text=) having finished. Reported: p50, p90 and max over students and
rounds, on the toy model and on SmolLM2-135M (the lecturer's link picks it: ?src=smollm2-135m, and
the students follow the model too). Then idle following: with nothing changing, the server
processes' CPU time over a window, per student and in all (% of one core).

    python -m benchmarks.bench_live                         # 100 students, toy + SmolLM2, every setup
    python -m benchmarks.bench_live --students 20 --rounds 3 --only toy --setups single
    python -m benchmarks.bench_live --quick                 # 10 students, 2 rounds (smoke test)

The client runs on the same 2 cores as the servers; the load average is printed with the rows.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.server import Server  # noqa: E402
from benchmarks.stclient import StClient  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

CODE_RE = re.compile(r"Room \*\*([A-Z0-9]{4,6})\*\*")
POLL_EVERY = 1.0  # what ui/live.POLL_EVERY registers (the client follows the server's auto_rerun interval)
TARGET_P90 = {"toy": 2.0, "smollm2": 3.0}
TARGET_IDLE_CORE_PCT = 20.0
MODELS = {"toy": "", "smollm2": "src=smollm2-135m"}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children) in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def sentence_of(c: StClient) -> str | None:
    w = c.widgets.get("Sentence")
    if not w or w[0] not in c.widget_values:
        return None
    return c.widget_values[w[0]].string_value


@dataclass
class Student:
    c: StClient
    seen: dict[str, float] = field(default_factory=dict)  # sentence -> time its run finished
    errors: list[str] = field(default_factory=list)
    full_runs: int = 0
    ticks: int = 0

    def note(self, r) -> None:
        if r.exceptions:
            self.errors.append(r.exceptions[0])
        if not r.fragment:
            self.full_runs += 1
        s = sentence_of(self.c)
        if s is not None and s not in self.seen and "text=" in self.c.query:
            self.seen[s] = time.perf_counter()


class PushbackWS:
    """The client's WebSocket with one message put back: a run the server started by itself (the
    lecturer's server reruns its followers' pages, ui/live._rerun_followers) is read by
    StClient.receive from its first message on."""

    def __init__(self, ws):
        self.ws, self.back = ws, []

    async def recv(self):
        return self.back.pop() if self.back else await self.ws.recv()

    def __getattr__(self, name):
        return getattr(self.ws, name)


async def follow_loop(st: Student, stop: asyncio.Event) -> None:
    """What the browser does: each fragment's timer (the interval the server registered) asks for
    a fragment rerun; in between, runs the server starts by itself (pushed) are read as they come."""
    c = st.c
    if not isinstance(c.ws, PushbackWS):
        c.ws = PushbackWS(c.ws)
    due: dict[str, float] = {}
    while not stop.is_set():
        now = time.perf_counter()
        for fid, interval in c.auto_reruns.items():
            due.setdefault(fid, now + interval)
        for fid in [f for f in due if f not in c.auto_reruns]:
            del due[fid]
        wait = max(0.0, min(due.values(), default=now + POLL_EVERY) - now)
        try:
            raw = await asyncio.wait_for(c.ws.recv(), min(wait, 0.5))
        except asyncio.TimeoutError:
            raw = None
        except Exception as exc:  # noqa: BLE001
            st.errors.append(f"{type(exc).__name__}: {exc}")
            return
        try:
            if raw is not None:
                fm = ForwardMsg()
                fm.ParseFromString(raw)
                if fm.WhichOneof("type") == "new_session":  # a run the server started (pushed)
                    c.ws.back.append(raw)
                    st.note(await c.receive())
                continue  # anything else between runs: nothing to read
            now = time.perf_counter()
            for fid in [f for f, t in due.items() if t <= now]:
                due[fid] = now + c.auto_reruns.get(fid, POLL_EVERY)
                if fid in c.auto_reruns:
                    st.note(await c.rerun(fid, auto=True))
                    st.ticks += 1
        except Exception as exc:  # noqa: BLE001
            st.errors.append(f"{type(exc).__name__}: {exc}")
            return


async def lecturer_loop(c: StClient, stop: asyncio.Event, lock: asyncio.Lock) -> None:
    """The lecturer's own panel fragment (students connected, the poll) ticking as in a browser."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), POLL_EVERY)
        except asyncio.TimeoutError:
            pass
        async with lock:
            for fid in list(c.auto_reruns):
                await c.rerun(fid, auto=True)


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] if xs else float("nan")


async def scenario(lecturer_url: str, student_url: str, n: int, rounds: int, model: str, pids: list[int],
                   idle_s: float, pause: float, phase=None) -> dict:
    """phase(name), if given, is called as each measured phase starts and ends ("rounds", "rounds
    end", "idle", "idle end"): benchmarks/profile_live.py profiles each apart."""
    phase = phase or (lambda name: None)
    lec = StClient(lecturer_url, query=MODELS[model], timeout=300)
    await lec.connect()
    r = await lec.rerun()
    if not r.ok:
        raise RuntimeError(f"lecturer page: {r.exceptions[:1]}")
    r = await lec.click("Start a live class")
    m = next((CODE_RE.search(t) for t in r.markdown if CODE_RE.search(t)), None)
    if m is None:
        raise RuntimeError("no room code on the lecturer's page")
    code = m.group(1)
    students = [Student(StClient(student_url, query=f"room={code}", timeout=300)) for _ in range(n)]

    async def join(st: Student) -> None:
        await st.c.connect()
        st.note(await st.c.rerun())

    for i in range(0, n, 20):  # a class arriving, 20 at a time
        await asyncio.gather(*[join(s) for s in students[i:i + 20]])
    stop = asyncio.Event()
    lock = asyncio.Lock()
    tasks = [asyncio.create_task(follow_loop(s, stop)) for s in students]
    tasks.append(asyncio.create_task(lecturer_loop(lec, stop, lock)))
    await asyncio.sleep(3)
    lat: list[float] = []
    phase("rounds")
    change_cpu = 0.0  # server CPU from each keystroke until every student shows it
    per_round_max: list[float] = []
    missed = 0
    for k in range(rounds):
        text = f"the lecturer writes sentence number {k} for the class ."
        async with lock:
            lec.set_value("Sentence", text)
            c0 = sum(cpu_seconds(p) for p in pids)
            t0 = await lec.send()
            r = await lec.receive(t0)
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline and not all(text in s.seen for s in students):
            await asyncio.sleep(0.05)
        change_cpu += sum(cpu_seconds(p) for p in pids) - c0
        got = [s.seen[text] - t0 for s in students if text in s.seen]
        missed += n - len(got)
        lat += got
        per_round_max.append(max(got) if got else float("nan"))
        await asyncio.sleep(pause)
    phase("rounds end")
    # idle following: nothing changes; every student's fragment keeps checking
    await asyncio.sleep(2)
    phase("idle")
    c0, w0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
    ticks0 = sum(s.ticks for s in students)
    await asyncio.sleep(idle_s)
    c1, w1 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
    ticks = sum(s.ticks for s in students) - ticks0
    phase("idle end")
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for s in students:
        await s.c.close()
    await lec.close()
    core_pct = 100 * (c1 - c0) / (w1 - w0)
    errors = [e for s in students for e in s.errors]
    return dict(code=code, p50=statistics.median(lat) if lat else float("nan"), p90=q(lat, 0.9),
                max=max(lat) if lat else float("nan"), missed=missed, errors=errors, idle_core_pct=core_pct,
                idle_ms_per_check=1000 * (c1 - c0) / max(1, ticks), idle_checks_per_s=ticks / (w1 - w0),
                rounds_max=per_round_max, change_ms_per_student=1000 * change_cpu / (n * rounds))


def idle_baseline(pids: list[int], seconds: float = 5.0) -> float:
    c0, w0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
    time.sleep(seconds)
    return 100 * (sum(cpu_seconds(p) for p in pids) - c0) / (time.perf_counter() - w0)


async def warm(url: str, model: str) -> None:
    async with StClient(url, query=MODELS[model], timeout=300) as c:
        await c.rerun()


SETUPS = {"single": "1 server, SQLite rooms", "replicas-sqlite": "2 replicas + nginx, one SQLite file",
          "replicas": "2 replicas + nginx + Redis"}


def run_setup(setup: str, n: int, rounds: int, models: list[str], idle_s: float, pause: float) -> list[dict]:
    """setup: "single" (one server, the default room store: SQLite in a fresh data folder),
    "replicas-sqlite" (2 replicas on this machine sharing that SQLite file, behind nginx) or
    "replicas" (2 replicas sharing a local Redis)."""
    import tempfile
    rows = []
    label = f"{n} students, {SETUPS[setup]}"
    saved = {k: os.environ.get(k) for k in ("ROOM_STORE", "ATTN_LAB_DATA_DIR")}
    os.environ.pop("ROOM_STORE", None)
    os.environ["ATTN_LAB_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-live-data-")  # inherited by the servers
    try:
        if setup == "single":
            with Server("app.py", extra=["--runner.postScriptGC", "false"]) as srv:
                for m in models:
                    asyncio.run(warm(srv.url, m))
                    base = idle_baseline([srv.pid])
                    res = asyncio.run(scenario(srv.url, srv.url, n, rounds, m, [srv.pid], idle_s, pause))
                    rows += _rows(label, m, n, res, base)
            return rows
        from contextlib import nullcontext

        from deploy.redis_local import LocalRedis
        from deploy.replicas import Deployment
        with (LocalRedis() if setup == "replicas" else nullcontext()) as red:
            if red is not None:
                os.environ["ROOM_STORE"] = red.url
            with Deployment(replicas=2) as d:
                pids = [s.pid for s in d.replicas]
                for m in models:
                    for s in d.replicas:
                        asyncio.run(warm(s.url, m))
                    base = idle_baseline(pids)
                    # the lecturer through nginx too (any replica); students spread over both
                    res = asyncio.run(scenario(d.url, d.url, n, rounds, m, pids + ([red.proc.pid] if red else []),
                                               idle_s, pause))
                    rows += _rows(label, m, n, res, base)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rows


def _rows(label: str, model: str, n: int, res: dict, base_pct: float) -> list[dict]:
    name = {"toy": "toy causal-lm", "smollm2": "SmolLM2-135M"}[model]
    b = f"live class, {label}, {name}"
    p90_ok = res["p90"] <= TARGET_P90[model] and res["missed"] == 0 and not res["errors"]
    idle = res["idle_core_pct"] - base_pct
    return [
        dict(benchmark=b, metric="lecturer's new sentence -> student's page shows it, p50 (s)", app=res["p50"],
             bare=None, ratio=None, target="(reported)", ok=None),
        dict(benchmark=b, metric="the same, p90 (s)", app=res["p90"], bare=None, ratio=None,
             target=f"≤ {TARGET_P90[model]:g} s", ok=p90_ok),
        dict(benchmark=b, metric="the same, max (s)", app=res["max"], bare=None, ratio=None,
             target=f"(reported; {res['missed']} missed, {len(res['errors'])} errors)", ok=None),
        dict(benchmark=b, metric="server CPU per change and student (core-ms: the trace, the lecturer's and every "
             "student's run, the checks meanwhile)", app=res["change_ms_per_student"], bare=None, ratio=None,
             target="(reported)", ok=None),
        dict(benchmark=b, metric="idle following: server CPU, % of one core (above an idle server)", app=idle,
             bare=None, ratio=None, target=f"≤ {TARGET_IDLE_CORE_PCT:g} %", ok=idle <= TARGET_IDLE_CORE_PCT),
        dict(benchmark=b, metric="idle following: server CPU per student check (ms)", app=res["idle_ms_per_check"],
             bare=None, ratio=None, target=f"(reported; {res['idle_checks_per_s']:.0f} checks/s)", ok=None),
    ]


def run(quick: bool = False, students: int | None = None, rounds: int | None = None,
        models: list[str] | None = None, setups: list[str] | None = None, idle_s: float | None = None) -> list[dict]:
    n = students or (10 if quick else 100)
    rounds = rounds or (2 if quick else 5)
    models = models or (["toy"] if quick else ["toy", "smollm2"])
    setups = setups or (["single"] if quick else list(SETUPS))
    idle_s = idle_s or (5.0 if quick else 15.0)
    rows = []
    for setup in setups:
        rows += run_setup(setup, n, rounds, models, idle_s, pause=2.0 if quick else 4.0)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_live", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--students", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--only", default="", help="models: toy,smollm2")
    ap.add_argument("--setups", default="", help=",".join(SETUPS))
    ap.add_argument("--idle", type=float, help="seconds of idle following measured")
    a = ap.parse_args(argv)
    from benchmarks.report import table
    load0 = os.getloadavg()
    t0 = time.time()
    rows = run(a.quick, a.students, a.rounds, [m for m in a.only.split(",") if m] or None,
               [s for s in a.setups.split(",") if s] or None, a.idle)
    print(table(rows))
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}; {time.time() - t0:.0f} s; "
          f"{time.strftime('%H:%M')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
