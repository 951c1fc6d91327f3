"""Long inputs as a first-class case (issue 33 point 3): every page's first paint in Chromium with a
pasted paragraph cut to the longest input the sidebar allows for the model.

Configs: MiniLM-L6 at 512 tokens (its 512 positions), SmolLM2-135M at 1,024 tokens (the sidebar's
limit, ui.state.T_LIMIT), the shipped toy causal LM at 128 (its max_len: the sidebar allows no more), fresh weights
with a 1,024-token context at 1,024, Gemma 3 270M at 2,048 (its own limit; the paragraph twice).
For each config one browser session opens the app with the paragraph (LONG_TEXT, ~1,060-1,090
tokens on the real models) and the model in its link; the first page (heads) computes and caches
the trace ("trace + first page"). Then every page of the app is visited in the same session by
clicking its link in the sidebar, as a lecturer would, and timed:

  first paint = click -> the script finished (no status widget) and every chart of the page drawn
  (each Plotly chart has its SVG, each heatmap its image), two animation frames later.

Also recorded per page: bytes received over the WebSocket, exceptions on the page, and console
errors / uncaught page errors (the overview's "RangeError: Invalid string length").
Target: <= 3 s per page at 512 tokens (MiniLM); the SmolLM2 and toy rows say their own target.

    python -m benchmarks.bench_long [--quick] [--only minilm] [--pages heads,overview]

`run(quick)` returns rows for benchmarks/run_all.py.
"""
from __future__ import annotations

import argparse
import statistics
import time
from urllib.parse import urlencode, urlparse

import os
import resource
import subprocess
import sys
import threading

from benchmarks.report import table
from deploy.server import ROOT, Server, wait_healthy

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
LOCAL = {"localhost", "127.0.0.1", "::1", "[::1]"}
BUDGET_S = 3.0

# A pasted page of prose (written for this benchmark): 1,090 MiniLM tokens, 1,059 SmolLM2 tokens.
LONG_TEXT = " ".join([
    "Attention lets every word in a sentence look at every other word and decide how much each one matters",
    "for its own meaning. When a reader meets the word it, she searches the sentence for the noun it stands",
    "for; a transformer does something similar, but it does so for every position at once, in every layer,",
    "and with several heads that each learn to look for something different. One head may follow the",
    "previous word, another may jump to the start of the text, a third may link a verb to its subject many",
    "words away. The weights are computed from queries and keys, scaled by the square root of their width,",
    "and passed through a softmax so that each row sums to one. Nothing in this recipe fixes the length of",
    "the input: a model reads a short phrase and a long paragraph with the same weights, and the cost grows",
    "with the square of the number of tokens.",
    "Before attention, recurrent networks carried a single hidden state from one word to the next, and",
    "everything the network knew about the beginning of a long sentence had to squeeze through that one",
    "vector. Translation systems of that era read the whole source sentence, compressed it, and then wrote",
    "the translation from the compressed summary alone. Long sentences suffered most: the first words were",
    "half forgotten by the time the decoder needed them. The first attention mechanisms were a patch on",
    "this design. At every step of writing, the decoder was allowed to look back over all the encoder's",
    "states and take a weighted average of them, with weights that said which source words mattered now.",
    "The patch worked so well that, a few years later, a paper asked whether the recurrence was needed at",
    "all, and answered that attention alone was enough.",
    "A transformer block has two parts. The attention layer mixes information between positions: each",
    "token gathers a weighted sum of the value vectors of the tokens it attends to. The feed-forward layer",
    "then works on each position alone, a small network applied to every token with the same weights.",
    "Around both parts run residual connections, so each block adds to the stream of vectors rather than",
    "replacing it, and a normalisation step keeps the numbers in a sensible range. Stack a dozen such",
    "blocks, put an embedding table at the bottom and a projection onto the vocabulary at the top, and you",
    "have the shape of most language models in use today, from small encoders that sort sentences into",
    "topics to large decoders that write essays, programs and poems.",
    "Because attention on its own does not know the order of the tokens, the model must be told where each",
    "token sits. The original design added fixed waves of different frequencies to the embeddings; later",
    "models learned a vector for every position, and many recent ones rotate the queries and keys by an",
    "angle that grows with the position, so that the dot product between two tokens depends on how far",
    "apart they are. Each choice has its own behaviour when the text grows longer than anything seen in",
    "training: learned positions simply run out, while rotations keep turning and can be stretched with",
    "some care.",
    "Masks decide what each position may see. An encoder that reads a finished sentence lets every token",
    "look both ways, which is ideal for understanding but useless for writing, because a model that can",
    "read the next word has nothing left to predict. A decoder that writes text one token at a time uses",
    "a causal mask instead: position five may look at positions one to five and never at six. The same",
    "weights can run under either mask; what changes is the set of scores that are replaced by minus",
    "infinity before the softmax turns them into probabilities.",
    "When a decoder writes, it would be wasteful to recompute the keys and values of the whole prefix at",
    "every step, so they are kept in a cache and only the newest token's are added. The cache grows with",
    "the length of the text, the number of layers and the width of each head, and for long documents it",
    "can take more memory than the weights themselves. Grouped-query attention shares one set of keys and",
    "values among several query heads to shrink it, and sliding windows forget what lies too far behind.",
    "The matrix of attention scores is the other memory problem. For a thousand tokens it has a million",
    "entries per head, and a model with dozens of heads and layers produces many such matrices for every",
    "sentence it reads. Tiled algorithms never write the full matrix out: they walk over blocks of keys,",
    "keep a running maximum and a running sum for every query, and rescale what they have accumulated",
    "whenever a larger score appears. The result is exactly the same softmax, computed in pieces small",
    "enough to stay in fast memory.",
    "Looking at attention weights is a popular way to peek inside a model, and it is useful as long as we",
    "remember what the weights are. They say where a head reads from, not what it does with what it reads,",
    "and a head that attends strongly to the first token may simply be resting there, parking its",
    "attention on a position that carries little information. Switching heads off and measuring what",
    "changes, or following the value vectors through the output projection, tells us more. Still, a",
    "picture of the weights is where most explanations start, and a clear picture of a long input, drawn",
    "without freezing the browser, is what a lecture needs when a student pastes a whole page of text.",
])

LONG_TEXT_TWICE = f"{LONG_TEXT} {LONG_TEXT}"  # for a limit over ~1,050 tokens (Gemma 3: 2,048)

# name -> (link query (its text, else LONG_TEXT), tokens the model sees, target per page in s or None = reported)
CONFIGS = {
    "MiniLM-L6, 512 tokens": (dict(src="minilm-l6", T=512), 512, BUDGET_S),
    "SmolLM2-135M, 1,024 tokens": (dict(src="smollm2-135m", T=1024), 1024, BUDGET_S),
    "toy causal LM, 128 tokens (its max_len)": (dict(src="causal-lm", T=128), 128, BUDGET_S),
    "fresh weights (2 layers, 4 heads, context 1,024), 1,024 tokens": (
        dict(src="fresh weights (your architecture)", ctx=1024, T=1024), 1024, BUDGET_S),
    # the paragraph twice (2,106 Gemma tokens): Gemma 3's own limit is 2,048 (model.pretrained)
    "Gemma 3 270M, 2,048 tokens": (dict(src="gemma3-270m", T=2048, text=LONG_TEXT_TWICE), 2048, BUDGET_S),
}

IDLE = """() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'
  && !document.querySelector('[data-testid="stStatusWidget"]')"""
# every Plotly chart drawn: its SVG present, and each heatmap trace of it has its image
PAINTED = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => {
  const p = c.querySelector('.js-plotly-plot');
  if (!p || !p.querySelector('.main-svg')) return false;
  const heat = (p.data || []).filter(t => t.type === 'heatmap').length;
  return p.querySelectorAll('.heatmaplayer image').length >= Math.min(heat, 1);
})"""
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
TITLE = "() => document.querySelector('[data-testid=\"stMain\"] h1')?.textContent || ''"
NAV = """() => [...document.querySelectorAll('[data-testid="stSidebarNav"] a')].map(a => ({
  href: a.getAttribute('href'), text: a.textContent.trim()}))"""


class CappedServer(Server):
    """The app's server with its address space capped (RLIMIT_AS, mem_gb): a page that would take
    more memory fails with MemoryError (an exception on the page, counted) instead of the kernel's
    OOM killer taking this or another process on a shared machine. Its resident memory is sampled
    every 50 ms (peak_gb(), reset_peak())."""

    def __init__(self, mem_gb: float, **kw):
        super().__init__("app.py", **kw)
        self.mem_gb = mem_gb
        self._peak = 0.0
        self._stop = threading.Event()

    def start(self) -> "CappedServer":
        cap = int(self.mem_gb * 2**30)

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", self.app, "--server.headless", "true",
             "--server.address", "localhost", "--server.port", str(self.port),
             "--browser.gatherUsageStats", "false", *self.extra],
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit if self.mem_gb else None)
        wait_healthy(self.url, self.proc)
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set() and self.proc is not None and self.proc.poll() is None:
            try:
                with open(f"/proc/{self.proc.pid}/statm") as f:
                    self._peak = max(self._peak, int(f.read().split()[1]) * page / 2**30)
            except OSError:
                return
            time.sleep(0.05)

    def peak_gb(self) -> float:
        return self._peak

    def reset_peak(self) -> None:
        self._peak = 0.0

    def stop(self) -> None:
        self._stop.set()
        super().stop()


def _guard(offsite: list[str]):
    def route(r):
        host = urlparse(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL:
            r.continue_()
        else:
            offsite.append(r.request.url)
            r.abort()
    return route


class Session:
    """One browser session of the app: console errors, page errors and WebSocket bytes recorded."""

    def __init__(self, browser, offsite: list[str], width: int = 1400, height: int = 1000):
        self.ctx = browser.new_context(viewport={"width": width, "height": height})
        self.ctx.route("**/*", _guard(offsite))
        self.page = self.ctx.new_page()
        self.errors: list[str] = []
        self.received = 0
        self.page.on("console", lambda m: self.errors.append(f"{m.text} {m.location.get('url', '')}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"{type(e).__name__}: {e}"))
        self.page.on("websocket", self._ws)

    def _ws(self, ws) -> None:
        ws.on("framereceived", lambda f: setattr(self, "received", self.received + len(f)))

    def settle(self, timeout: float) -> float:
        """Wait until the run has finished and every chart is drawn; returns when the run finished
        (perf_counter), the part of a page's time the server's script took."""
        p = self.page
        p.wait_for_function(IDLE, timeout=timeout, polling=50)
        finished = time.perf_counter()
        p.wait_for_function(PAINTED, timeout=timeout, polling="raf")
        p.evaluate(FRAMES)
        p.wait_for_function(IDLE, timeout=timeout, polling=50)  # a chart's own rerun (none expected)
        return finished

    def open(self, url: str, timeout: float) -> float:
        t0 = time.perf_counter()
        self.page.goto(url, timeout=timeout)
        self.page.wait_for_selector('[data-testid="stSidebarNav"] a', timeout=timeout)
        self.settle(timeout)
        return time.perf_counter() - t0

    def nav(self) -> list[dict]:
        return self.page.evaluate(NAV)

    def visit(self, href: str, timeout: float) -> dict:
        """Click the sidebar link `href`; time until the page is settled and painted."""
        p = self.page
        errs, got = len(self.errors), self.received
        link = p.locator(f'[data-testid="stSidebarNav"] a[href="{href}"]').first
        old = p.evaluate(TITLE)
        t0 = time.perf_counter()
        link.click()
        # the new page's title has replaced the old one's, then its run has finished and its charts are drawn
        p.wait_for_function(f"(old) => ({TITLE})() !== old", arg=old, timeout=timeout, polling="raf")
        finished = self.settle(timeout)
        dt = time.perf_counter() - t0
        exc = p.locator('[data-testid="stException"]')
        return dict(seconds=dt, run_s=finished - t0, bytes=self.received - got, errors=self.errors[errs:],
                    exceptions=exc.count(), exception=exc.first.inner_text()[:160].replace("\n", " ") if exc.count() else "")

    def switch_layer(self, timeout: float) -> tuple[float, int]:
        """On the heads page: pick layer 1 in the Layer box; (seconds until the grid of layer 1 is
        drawn, bytes received)."""
        p = self.page
        got = self.received
        p.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').filter(has_text="Layer").first.click()
        t0 = time.perf_counter()
        p.get_by_role("option", name="1", exact=True).click()
        p.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .gtitle')]"
                            ".some(t => t.textContent.startsWith('Layer 1:'))", timeout=timeout, polling="raf")
        self.settle(timeout)
        return time.perf_counter() - t0, self.received - got

    def close(self) -> None:
        self.ctx.close()


def _name(href: str, url: str) -> str:
    path = href.rstrip("/")
    return "heads" if path in ("", url, url.rstrip("/")) else path.rsplit("/", 1)[-1]


def visit_all(s: Session, server: CappedServer, pages: list[str] | None, timeout: float,
              tag: str) -> list[tuple[str, dict]]:
    """Click every page's sidebar link (the heads page last: the session starts on it); each visit
    also records the server's peak resident memory during it."""
    url = server.url
    links = [l for l in s.nav() if not pages or _name(l["href"], url) in pages]
    links.sort(key=lambda l: _name(l["href"], url) == "heads")
    out = []
    for link in links:
        name = _name(link["href"], url)
        server.reset_peak()
        r = s.visit(link["href"], timeout)
        r["rss_gb"] = server.peak_gb()
        print(f"  {tag} | {name}: {r['seconds']:.2f} s (run finished at {r['run_s']:.2f} s), {r['bytes'] / 1e6:.2f} MB, "
              f"server {r['rss_gb']:.1f} GB, "
              f"{r['exceptions']} exceptions {r.get('exception', '')}, errors {[e[:80] for e in r['errors'][:2]]}", flush=True)
        out.append((name, r))
    return out


def measure(server: CappedServer, config: str, browser, offsite: list[str], pages: list[str] | None = None,
            timeout: float = 600_000) -> tuple[float, list[tuple[str, dict]], dict[str, float]]:
    """One config: a session at the default sentence visits every page first (it warms what each
    page computes once per server, e.g. the flash page's memory measurement, and gives each page's
    time at a short input), then a session with the long text: (seconds of its first page, with
    the trace computed; [(page, visit)] at the long input; {page: seconds at the default sentence})."""
    query, _, _ = CONFIGS[config]
    url = server.url
    short: dict[str, float] = {}
    s = Session(browser, offsite)
    try:
        s.open(f"{url}/?{urlencode({k: v for k, v in query.items() if k != 'text'})}", timeout)
        short = {n: r["seconds"] for n, r in visit_all(s, server, pages, timeout, f"{config}, default sentence")}
    finally:
        s.close()
    s = Session(browser, offsite)
    try:
        first = s.open(f"{url}/?{urlencode({'text': LONG_TEXT, **query})}", timeout)
        visits = visit_all(s, server, pages, timeout, config)
        if visits and visits[-1][0] == "heads":  # the session ends on the heads page: another layer
            server.reset_peak()
            dt, sent = s.switch_layer(timeout)
            print(f"  {config} | heads, layer 0 → 1: {dt:.2f} s, server {server.peak_gb():.1f} GB", flush=True)
            visits.append(("heads, switch to layer 1", dict(seconds=dt, run_s=dt, bytes=sent, errors=[], exceptions=0,
                                                             rss_gb=server.peak_gb())))
        return first, visits, short
    finally:
        s.close()


def rows_for(config: str, first: float, visits: list[tuple[str, dict]], short: dict[str, float]) -> list[dict]:
    _, _, target = CONFIGS[config]
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    rows = [dict(benchmark=f"{config}: trace + first page (heads)",
                 metric=f"open the link → painted (s); load average {load} (1/5/15 min) after the config's pages",
                 app=first, bare=None, ratio=None, target="(reported: the trace is computed once, then cached)")]
    for name, r in visits:
        broken = r["exceptions"] or r["errors"]
        base = short.get(name)
        rows.append(dict(benchmark=f"{config}: {name}",
                         metric=f"click → painted (s; the run finished at {r['run_s']:.1f}); baseline: the default "
                                f"sentence; {r['bytes'] / 1e6:.2f} MB received; server {r['rss_gb']:.1f} GB"
                                + (f"; {r['exceptions']} exceptions" if r["exceptions"] else "")
                                + (f"; console: {r['errors'][0][:60]}" if r["errors"] else ""),
                         app=r["seconds"], bare=base, ratio=base and r["seconds"] / base,
                         target=f"≤ {target:g} s" if target else "(reported)",
                         ok=(not broken and (target is None or r["seconds"] <= target))))
    secs = [r["seconds"] for _, r in visits]
    if secs:
        rows.append(dict(benchmark=f"{config}: every page", metric=f"median / max click → painted (s), {len(secs)} pages",
                         app=f"{statistics.median(secs):.2f} / {max(secs):.2f}", bare=None, ratio=None,
                         target=f"max ≤ {target:g} s" if target else "(reported)",
                         ok=target is None or max(secs) <= target))
    return rows


MEM_GB = 14.0  # the benchmark server's address-space cap (CappedServer)


def run(quick: bool = False, only: str = "", pages: list[str] | None = None, mem_gb: float = MEM_GB) -> list[dict]:
    from playwright.sync_api import sync_playwright
    if quick and not pages:
        pages = ["heads", "overview", "causal-vs-bidirectional", "model-view"]
    rows: list[dict] = []
    offsite: list[str] = []
    with CappedServer(mem_gb) as app, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for config in CONFIGS:
                if only and only.lower() not in config.lower():
                    continue
                first, visits, short = measure(app, config, browser, offsite, pages)
                rows += rows_for(config, first, visits, short)
                print(table(rows), flush=True)
        finally:
            browser.close()
    if offsite:
        rows.append(dict(benchmark="requests off localhost", metric="count", app=len(offsite), bare=None,
                         ratio=None, target="0", ok=False))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the four attention pages only")
    ap.add_argument("--only", default="", help="configs whose name contains this (minilm, smollm2, toy, gemma)")
    ap.add_argument("--pages", default="", help="comma-separated page paths (default: every page)")
    ap.add_argument("--mem-gb", type=float, default=MEM_GB, help="the server's address-space cap in GB (0: none)")
    a = ap.parse_args()
    print(table(run(quick=a.quick, only=a.only, pages=[x for x in a.pages.split(",") if x] or None, mem_gb=a.mem_gb)))
