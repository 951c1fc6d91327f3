"""Model view first paint (issue 19): MiniLM-L6's 6 × 12 heads as line views for a 32-token
sentence, in Chromium: page open → every panel's lines drawn. A second session on the same server
(model and trace cached) shows the browser's share.

    .venv/bin/python -m benchmarks.bench_model_view [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import time
import urllib.parse

from benchmarks.bench_pages import ARGS, CHROMIUM, _guard
from benchmarks.report import table
from deploy.server import Server

TEXT = ("The animal didn't cross the street because it was too tired, and the old dog slept "
        "by the warm fire while the children played outside.")  # 32 WordPiece tokens with [CLS]/[SEP]


def _paint(browser, url: str, offsite: list[str]) -> float:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1400})
    ctx.route("**/*", _guard(offsite))
    page = ctx.new_page()
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_function("() => document.querySelectorAll('#mv-grid .p').length === 72", timeout=180_000)
    dt = time.perf_counter() - t0
    ctx.close()
    return dt


def run(quick: bool = False) -> list[dict]:
    from model.pretrained import PRETRAINED
    if not PRETRAINED["minilm-l6"].installed():
        return [dict(benchmark="model view first paint", metric="skipped", app=None, bare=None, ratio=None,
                     target="MiniLM package not installed", ok=None)]
    from playwright.sync_api import sync_playwright
    offsite: list[str] = []
    q = urllib.parse.urlencode({"src": "minilm-l6", "text": TEXT})
    with Server("app.py") as app, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            cold = _paint(browser, f"{app.url}/model-view?{q}", offsite)
            warm = [_paint(browser, f"{app.url}/model-view?{q}", offsite) for _ in range(2 if quick else 5)]
        finally:
            browser.close()
    rows = [dict(benchmark="model view, MiniLM-L6 6 × 12 heads, 32 tokens: first paint on a fresh server (Chromium)",
                 metric="s (page open → 72 panels of lines)", app=round(cold, 2), bare=None, ratio=None,
                 target="(reported)", ok=None),
            dict(benchmark="model view, the same page in a new session (model and trace cached)",
                 metric=f"s, median of {len(warm)}", app=round(statistics.median(warm), 2), bare=None, ratio=None,
                 target="(reported)", ok=None)]
    if offsite:
        rows.append(dict(benchmark="requests off localhost", metric="count", app=len(offsite), bare=None,
                         ratio=None, target="0", ok=False))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print(table(run(quick=ap.parse_args().quick)))
