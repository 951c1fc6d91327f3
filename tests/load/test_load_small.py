"""CI-sized load: the benchmarks' own load drivers at 3 sessions x 5 interactions, 0 errors.

The full runs (30 WebSocket sessions x 20 reruns, 10 browsers x 20 interactions, with the bare app
as baseline) are benchmarks: `python -m benchmarks.ws_load`, `python -m benchmarks.browser_load`,
or all of them with `python -m benchmarks.run_all`. These tests check that the drivers and the app
work together concurrently: every rerun finishes, no exception is shown, charts are sent, and the
browser sessions make no request off localhost (browser_load route-guards every context).
"""
from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from benchmarks import browser_load, ws_load
from benchmarks.soak import url_paths
from deploy.server import Server

pytestmark = pytest.mark.e2e


def run_async(coro):
    """asyncio.run in a fresh thread: the sync Playwright fixtures of the browser tier keep an
    event loop running in the main thread when the whole suite runs in one pytest process."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()

SESSIONS, N = 3, 5


@pytest.fixture(scope="module")
def server():
    with Server("app.py") as s:
        yield s


def test_ws_load_small(server):
    pages = ["", "overview", "causal-vs-bidirectional"]  # "" = heads, the default page
    run_async(ws_load.warm(server.url, pages[0]))
    res = run_async(ws_load.load(server.url, pages, SESSIONS, N, "Attention Lab", server.pid, timeout=120))
    assert res.errors == [], res.errors
    assert len(res.times) == SESSIONS * N, f"{len(res.times)} reruns finished, expected {SESSIONS * N}"
    # every rerun really drew the page: each of these pages shows at least one chart
    assert min(res.charts) >= 1, f"a rerun sent no chart: {res.charts}"
    # one record per finished rerun, each with the page's own charts (heads 1, overview 1,
    # causal-vs-bidirectional 2) and a non-empty delta: counts, not wall-clock bounds
    assert len(res.charts) == len(res.bytes) == SESSIONS * N, (len(res.charts), len(res.bytes))
    assert set(res.charts) <= {1, 2}, res.charts
    assert min(res.bytes) > 0, res.bytes
    assert res.rss_peak_mb > 100  # the sampler read the server's RSS (torch alone is > 100 MB)


def test_browser_load_small(server):
    if not Path(browser_load.CHROMIUM).exists():
        pytest.fail("Debian's Chromium is missing: make chromium")
    pages = url_paths()
    assert "" in pages and "overview" in pages and len(pages) >= 10, pages
    res = run_async(browser_load.load(server.url, SESSIONS, N, pages, timeout_ms=60_000))
    assert res["errors"] == [], res["errors"]
    assert res["n"] == SESSIONS * N, f"{res['n']} repaints measured, expected {SESSIONS * N}"
    # every interaction was measured to a finished repaint (a timeout is an error above); how fast
    # is the benchmark's business (python -m benchmarks.browser_load), not a CI bound
    assert math.isfinite(res["p50"]) and res["p50"] <= res["p90"] <= res["p95"], res
