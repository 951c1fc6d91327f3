"""Load with real browsers: N concurrent Chromium sessions (Playwright), each doing R interactions
after all have loaded; p50/p90/p95 repaint next to the bare app under the same load, same run.

An interaction is: type a new sentence in the "Sentence" box and commit (Ctrl+Enter); on the
Attention Lab every 5th interaction instead clicks another page in the navigation ("across
pages"; only when the session was given more than one page). Repaint time = commit -> the
server's `script_finished` for that run arrived on the page's WebSocket (read from the frames,
like benchmarks/stclient.py), stApp is "notRunning", the status widget is gone, and two animation
frames have passed (the new charts are painted). Errors = an stException on the page, a timeout,
or a request that left localhost.

    python -m benchmarks.browser_load [--sessions 10] [--interactions 20] [--pages mask-lab,contextual]

On 2 cores the browsers compete with the server, so p90/p95 are noisy; judge on p50.

The full run (`run()`, from benchmarks.run_all) adds two reported references in the same run: the
heads page alone (keystrokes only, like the bare app) and the bare app drawing as many heatmaps as
the heads page shows (BARE_APP_PANELS), as benchmarks.ws_load does for the WebSocket load.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from urllib.parse import urlparse

from benchmarks.soak import url_paths
from benchmarks.ws_load import sentence
from deploy.server import Server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
LOCAL = {"localhost", "127.0.0.1", "::1", "[::1]"}

ARM = """() => {
  window.__ran = false;
  const app = document.querySelector('[data-testid="stApp"]');
  if (window.__obs) window.__obs.disconnect();
  window.__href = location.href;
  // Evidence that the script ran after the commit: any change of the script-state attribute (a
  // fast run can go notRunning -> running -> notRunning inside one React batch, so 'running' is
  // not always seen), or the URL changing (the app writes the new sentence into the query string
  // at the end of the run; a fast run may leave no trace on the attribute at all).
  window.__obs = new MutationObserver((records) => { if (records.length) window.__ran = true; });
  window.__obs.observe(app, {attributes: true, attributeOldValue: true, attributeFilter: ['data-test-script-state']});
}"""
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


class RunWatcher:
    """Counts finished script runs of a page by reading Streamlit's own WebSocket frames
    (ForwardMsg.script_finished, as benchmarks/stclient.py does). The DOM alone is not a reliable
    signal: a fast run can leave no visible trace on stApp's script-state attribute."""

    def __init__(self, page):
        self.finished = 0
        page.on("websocket", self._on_ws)

    def _on_ws(self, ws) -> None:
        if ws.url.endswith("/_stcore/stream"):
            ws.on("framereceived", self._on_frame)

    def _on_frame(self, payload) -> None:
        if isinstance(payload, (bytes, bytearray)):
            from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
            fm = ForwardMsg()
            try:
                fm.ParseFromString(bytes(payload))
            except Exception:  # noqa: BLE001  not a ForwardMsg: ignore
                return
            if fm.WhichOneof("type") == "script_finished" and fm.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                self.finished += 1

    async def wait_after(self, n0: int, timeout_ms: float) -> None:
        deadline = time.perf_counter() + timeout_ms / 1000
        while self.finished <= n0:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no script_finished within {timeout_ms / 1000:.0f} s")
            await asyncio.sleep(0.01)


async def _idle(page, timeout_ms: float) -> None:
    await page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)
    await page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms)


SNAPSHOT = """() => { const app = document.querySelector('[data-testid="stApp"]');
  const st = document.querySelector('[data-testid="stStatusWidget"]');
  const box = document.querySelector('input[aria-label="Sentence"]');
  return {ran: window.__ran, state: app && app.getAttribute('data-test-script-state'),
          status: st ? st.innerText.slice(0, 80) : null, text: box ? box.value.slice(0, 60) : null,
          dialog: !!document.querySelector('[data-testid="stDialog"]'), url: location.pathname + location.search.slice(0, 60)}; }"""


async def _snapshot(page) -> str:
    """What the page looked like when an interaction timed out (for the error message)."""
    try:
        return str(await page.evaluate(SNAPSHOT))
    except Exception as exc:  # noqa: BLE001
        return f"unavailable ({type(exc).__name__})"


async def _session(browser, url: str, k: int, n: int, pages: list[str], loaded: asyncio.Barrier,
                   times: list[float], errors: list[str], timeout_ms: float) -> None:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 1000})
    offsite: list[str] = []

    async def guard(route):
        host = urlparse(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL:
            await route.continue_()
        else:
            offsite.append(route.request.url)
            await route.abort()

    await ctx.route("**/*", guard)
    page = await ctx.new_page()
    runs = RunWatcher(page)
    try:
        await page.goto(f"{url}/{pages[0] if pages else ''}", timeout=timeout_ms)
        await page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=timeout_ms)
        await _idle(page, timeout_ms)
    except Exception as exc:
        errors.append(f"session {k} load: {type(exc).__name__}: {str(exc)[:200]}")
        await loaded.wait()
        await ctx.close()
        return
    await loaded.wait()
    for i in range(n):
        try:
            await page.evaluate(ARM)
            n0 = runs.finished
            t0 = time.perf_counter()
            if len(pages) > 1 and i % 5 == 4:
                target = pages[(k + i) % len(pages)]
                link = page.locator(f'[data-testid="stSidebarNav"] a[href$="/{target}"]').first
                if not await link.count():
                    # the nav shows 10 links and a "View 5 more" button; the rest are not in the DOM
                    # until it is clicked (it then reads "View less": click it only when needed)
                    await page.locator('[data-testid="stSidebarNavViewButton"]').click(timeout=timeout_ms)
                    n0 = runs.finished
                    t0 = time.perf_counter()
                await link.click(timeout=timeout_ms)
            else:
                # exact: name="Sentence" alone is a case-insensitive substring match, so it also finds
                # "Sentence 1".."4" (mask lab), "Sentence A/B" (contextual), "English sentence ..."
                # (encoder-decoder), "Probe sentence" (train) -> Playwright strict-mode error there.
                # (The bare app has the same box but no sidebar, so do not scope to stSidebar.)
                box = page.get_by_role("textbox", name="Sentence", exact=True)
                await box.fill(sentence(k, i), timeout=timeout_ms)
                n0 = runs.finished
                t0 = time.perf_counter()
                await box.press("Enter")
            await runs.wait_after(n0, timeout_ms)  # the server finished the run we asked for
            await _idle(page, timeout_ms)  # and the page has drawn it
            await page.evaluate(FRAMES)
            times.append(time.perf_counter() - t0)
            if await page.locator('[data-testid="stException"]').count():
                errors.append(f"session {k} interaction {i}: stException shown")
        except Exception as exc:
            errors.append(f"session {k} interaction {i}: {type(exc).__name__}: {str(exc)[:120]} "
                          f"[page state: {await _snapshot(page)}]")
    if offsite:
        errors.append(f"session {k}: requests left localhost: {offsite[:3]}")
    await ctx.close()


async def load(url: str, sessions: int, n: int, pages: list[str], timeout_ms: float = 180_000) -> dict:
    from playwright.async_api import async_playwright
    times: list[float] = []
    errors: list[str] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        loaded = asyncio.Barrier(sessions + 1)
        tasks = [asyncio.create_task(_session(browser, url, k, n, pages, loaded, times, errors, timeout_ms))
                 for k in range(sessions)]
        await loaded.wait()
        t0 = time.perf_counter()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
        await browser.close()
    xs = sorted(times)

    def q(p):
        return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] if xs else float("nan")
    return dict(p50=statistics.median(xs) if xs else float("nan"), p90=q(0.9), p95=q(0.95),
                n=len(xs), errors=errors, wall=wall)


def _served(app: str, sessions: int, n: int, pages: list[str], env: dict[str, str] | None = None) -> dict:
    """`load` on a fresh server for `app`; the Attention Lab (given pages) is opened once first:
    the first session of the process pays the imports (see ws_load.warm)."""
    with Server(app, env=env) as s:
        if pages:
            asyncio.run(load(s.url, 1, 1, pages[:1]))
        return asyncio.run(load(s.url, sessions, n, pages))


def run_pair(sessions: int, n: int, pages: list[str] | None = None) -> tuple[dict, dict]:
    return (_served("benchmarks/bare_app.py", sessions, n, []),
            _served("app.py", sessions, n, pages or url_paths()))


def run_reference(sessions: int, n: int, panels: int) -> tuple[dict, dict]:
    """Reported next to the target rows, same run: the heads page alone (no page changes: the
    interactions are all keystrokes, as on the bare app) and the bare app drawing `panels` heatmaps
    (as many as the heads page shows). Separates the cost of the number of heatmaps and of the
    other pages from the cost of the page around the heatmaps."""
    ref = _served("benchmarks/bare_app.py", sessions, n, [], env={"BARE_APP_PANELS": str(panels)})
    heads = _served("app.py", sessions, n, [""])  # "" = heads, the default page
    return heads, ref


def reference_rows(bare: dict, heads: dict, ref: dict, panels: int, sessions: int, n: int) -> list[dict]:
    """Reported only (no target)."""
    name = f"Browser load, {sessions} Chromium sessions x {n} keystrokes, heads page only"
    return [dict(benchmark=name, metric="p50 repaint (s)", app=heads["p50"], bare=bare["p50"],
                 ratio=heads["p50"] / bare["p50"], target="(reported: no page changes)"),
            dict(benchmark=name + f", vs a bare app drawing {panels} heatmaps", metric="p50 repaint (s)",
                 app=heads["p50"], bare=ref["p50"], ratio=heads["p50"] / ref["p50"],
                 target="(reported: the same number of heatmaps)"),
            dict(benchmark=name + f", vs a bare app drawing {panels} heatmaps", metric="errors",
                 app=len(heads["errors"]), bare=len(ref["errors"]), ratio=None, target="(reported)")]


def rows(bare: dict, app: dict, sessions: int, n: int) -> list[dict]:
    name = f"Browser load, {sessions} Chromium sessions x {n} interactions"
    return [dict(benchmark=name, metric="p50 repaint (s)", app=app["p50"], bare=bare["p50"],
                 ratio=app["p50"] / bare["p50"], target="≤ 1.3×", ok=app["p50"] <= 1.3 * bare["p50"]),
            dict(benchmark=name, metric="p90 repaint (s)", app=app["p90"], bare=bare["p90"],
                 ratio=app["p90"] / bare["p90"], target="(noisy)"),
            dict(benchmark=name, metric="p95 repaint (s)", app=app["p95"], bare=bare["p95"],
                 ratio=app["p95"] / bare["p95"], target="(noisy)"),
            dict(benchmark=name, metric="errors", app=len(app["errors"]), bare=len(bare["errors"]), ratio=None, target="0",
                 ok=not app["errors"])]


def run(quick: bool = False) -> list[dict]:
    sessions, n = (3, 5) if quick else (10, 20)
    bare, app = run_pair(sessions, n)
    out = [("bare app", bare), ("Attention Lab", app)]
    table_rows = rows(bare, app, sessions, n)
    if not quick:
        from benchmarks.ws_load import default_heads
        panels = default_heads()
        heads, ref = run_reference(sessions, n, panels)
        out += [(f"bare app, {panels} heatmaps", ref), ("Attention Lab, heads page only", heads)]
        table_rows += reference_rows(bare, heads, ref, panels, sessions, n)
    for label, r in out:
        print(f"browser {label}: {r['n']} repaints, p50 {r['p50']:.2f} s, p90 {r['p90']:.2f} s, "
              f"p95 {r['p95']:.2f} s, errors {len(r['errors'])}")
        for e in r["errors"][:5]:
            print("  error:", e)
    return table_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--interactions", type=int, default=20)
    ap.add_argument("--pages", default="", help="comma-separated url paths; sessions start on the first "
                    "(default: every page, starting on heads)")
    a = ap.parse_args()
    bare, app = run_pair(a.sessions, a.interactions, a.pages.split(",") if a.pages else None)
    from benchmarks.report import table
    print(table(rows(bare, app, a.sessions, a.interactions)))
    for e in (app["errors"] + bare["errors"])[:10]:
        print("  error:", e)


if __name__ == "__main__":
    main()
