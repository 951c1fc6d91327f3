"""Soak: 300 reruns in one session (new sentence each time, cycling over the pages); server RSS
growth must stay <= 50 MB. RSS is read from /proc after a warm-up that fills the caches once
(first runs import torch and build models: that is not growth).

    python -m benchmarks.soak [--reruns 300] [--pages heads,overview,...]
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import time

from benchmarks.stclient import StClient, server_pid_rss_kb
from benchmarks.ws_load import sentence
from deploy.server import ROOT, Server

BUDGET_MB = 50.0


def app_constant(name: str):
    """A literal assigned at the top level of app.py (read with ast: importing app.py would run
    Streamlit)."""
    for node in ast.parse((ROOT / "app.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"app.py assigns no {name}")


def url_paths() -> list[str]:
    """url paths of the pages in app.PAGES that exist; the default page (app.DEFAULT_URL) as "",
    its real address ("/heads" only switches to "/", an extra run)."""
    try:
        default, pages = app_constant("DEFAULT_URL"), app_constant("PAGES")
    except LookupError:
        return [""]
    return ["" if e[3] == default else e[3] for e in pages if (ROOT / e[1]).exists()]


async def soak(url: str, pid: int, reruns: int, pages: list[str]) -> dict:
    errors: list[str] = []
    samples: list[tuple[int, float]] = []
    async with StClient(url, page="") as c:
        await c.rerun()
        # warm-up: every page once, so caches and imports are in place before the baseline
        for p in pages:
            r = await c.goto(p)
            if not r.ok or r.not_found:
                errors.append(f"warm-up {p!r}: {r.exceptions[:1] or 'page not found'}")
        await c.goto(pages[0])
        base = server_pid_rss_kb(pid) / 1024
        t0 = time.perf_counter()
        for i in range(reruns):
            if i and i % 25 == 0:
                r = await c.goto(pages[(i // 25) % len(pages)])  # move around like a student
            else:
                r = await c.set_widget("Sentence", sentence(1000 + i % 97, i))
            if not r.ok:
                errors.append(f"rerun {i}: {r.exceptions[:1] or r.status}")
            if i % 10 == 0 or i == reruns - 1:
                samples.append((i, server_pid_rss_kb(pid) / 1024))
        wall = time.perf_counter() - t0
    end = server_pid_rss_kb(pid) / 1024
    peak = max(m for _, m in samples)
    return dict(reruns=reruns, base_mb=base, end_mb=end, peak_mb=peak, growth_mb=end - base,
                errors=errors, wall=wall, samples=samples)


def run(quick: bool = False, reruns: int | None = None, pages: list[str] | None = None) -> list[dict]:
    n = reruns or (60 if quick else 300)
    pages = pages or url_paths()
    with Server("app.py") as s:
        res = asyncio.run(soak(s.url, s.pid, n, pages))
    with Server("benchmarks/bare_app.py") as s:
        bare = asyncio.run(soak(s.url, s.pid, n, [""]))
    print(f"soak: {n} reruns over {len(pages)} pages in {res['wall']:.0f} s; RSS {res['base_mb']:.0f} -> "
          f"{res['end_mb']:.0f} MB (growth {res['growth_mb']:+.1f} MB, peak {res['peak_mb']:.0f}); "
          f"errors {len(res['errors'])}; bare app growth {bare['growth_mb']:+.1f} MB")
    for e in res["errors"][:5]:
        print("  error:", e)
    name = f"Soak, {n} reruns in one session"
    return [dict(benchmark=name, metric="server RSS growth (MB)", app=res["growth_mb"], bare=bare["growth_mb"],
                 ratio=None, target=f"≤ {BUDGET_MB:.0f} MB", ok=res["growth_mb"] <= BUDGET_MB),
            dict(benchmark=name, metric="errors", app=len(res["errors"]), bare=len(bare["errors"]), ratio=None, target="0",
                 ok=not res["errors"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reruns", type=int, default=300)
    ap.add_argument("--pages", default="", help="comma-separated url paths (default: every page)")
    a = ap.parse_args()
    rows = run(reruns=a.reruns, pages=a.pages.split(",") if a.pages else None)
    from benchmarks.report import table
    print(table(rows))
    growth = rows[0]["app"]
    raise SystemExit(0 if growth <= BUDGET_MB and rows[1]["app"] == 0 else 1)


if __name__ == "__main__":
    main()
