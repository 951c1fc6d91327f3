"""The README's pictures, made from the running app: `make screenshots` (= .venv/bin/python docs/screenshots.py).

Starts the app on a free localhost port (waits for /_stcore/health), opens each main view in Debian's
Chromium (/usr/bin/chromium, driven by the playwright package; every request that would leave localhost
is refused and fails the run), waits until the page has finished (script state notRunning, no status
widget, no spinner, every chart drawn), checks it shows no exception, and writes the page's main area to
docs/img/<name>.png, reduced to a 256-colour palette with Pillow (a dependency of Streamlit) so each
file stays small (the script fails above MAX_BYTES).

    .venv/bin/python docs/screenshots.py            # every view
    .venv/bin/python docs/screenshots.py heads flow # some of them
    .venv/bin/python docs/screenshots.py --list
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import quote, urlparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.server import Server  # noqa: E402  (starts Streamlit, waits for /_stcore/health)

OUT = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
LOCAL = {"localhost", "127.0.0.1", "[::1]", "::1"}
WIDTH, HEIGHT = 1400, 2400  # tall: Streamlit scrolls inside its own container, so the page must fit
MAX_BYTES = 200_000
SENTENCE = "The animal didn't cross the street because it was too tired."


@dataclass(frozen=True)
class Shot:
    name: str                       # docs/img/<name>.png
    path: str                       # the page's URL path ("" = the heads page at "/")
    title: str                      # what the README calls it (alt text)
    query: str = ""
    until: str = '[data-testid="stPlotlyChart"]'   # clip below the first element matching this ...
    nth: int = 0                    # ... the nth of them (0 = the first)
    ready: str = ""                 # a JS expression that is true when the page is drawn (besides charts)
    act: Callable | None = field(default=None, compare=False)  # clicks before the picture
    sidebar: bool = False           # keep the sidebar in the picture (the first one: shows the menu)


def _hover_it(page) -> None:
    """Hover "it" in layer 0's column of names: every panel then shows only its lines."""
    page.locator("#mv-grid .lay").first.locator(".tk", has_text="it").first.hover()
    page.wait_for_timeout(300)


def _answer(page) -> None:
    """Answer the first step's two questions (the page shows the step's numbers once both are checked)."""
    for answer in ("11 × 64", "auto-regression is the methodology; the Transformer is the architecture"):
        page.get_by_text(answer, exact=True).click()
        wait_idle(page)
        page.get_by_role("button", name="Check my answer").first.click()
        wait_idle(page)


def _generate(page) -> None:
    """Six greedy steps, so the page shows a growing text, its top-10 and the cache."""
    for _ in range(6):
        page.get_by_role("button", name="Step").click()
        wait_idle(page)


SHOTS = [
    Shot("heads", "", "Attention heads", sidebar=True),
    Shot("overview", "overview", "All heads overview"),
    Shot("model-view", "model-view", "Model view (lines), MiniLM-L6, hovering “it”",
         "src=minilm-l6&text=" + quote(SENTENCE), until="#mv-grid .p", nth=23,  # two layers of 12
         ready="document.querySelectorAll('#mv-grid .p').length === 72", act=_hover_it),
    Shot("mask-lab", "mask-lab", "Mask lab", nth=1),
    Shot("scaling", "scaling", "Scaling & softmax", nth=1),
    Shot("positional", "positional", "Positional encoding", nth=1),
    Shot("flow", "flow", "The whole model"),
    Shot("generate", "generate", "Generate text", nth=1, act=_generate),
    Shot("encoder-decoder", "encoder-decoder", "Encoder–decoder"),
    Shot("lesson", "lesson", "Lesson mode", until='[data-testid="stMain"] [data-testid="stDataFrame"]',
         act=_answer),
    Shot("calculator", "calculator", "Calculator", until='[data-testid="stMain"] [data-testid="stDataFrame"]'),
    Shot("minilm-heads", "", "Attention heads, MiniLM-L6 (pretrained BERT), layer 2",
         "src=minilm-l6&layer=2&text=" + quote(SENTENCE),
         ready="document.querySelectorAll('[data-testid=stPlotlyChart] g.hm image, "
               "[data-testid=stPlotlyChart] g.heatmaplayer image').length >= 12"),
]


def wait_idle(page, timeout: float = 120_000) -> None:
    """The script run finished (notRunning), the status widget and every spinner are gone."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                           " && !document.querySelector('[data-testid=\"stSpinner\"]')", timeout=timeout)
    # widgets whose code the browser loads on first use are drawn as grey boxes until it arrives
    page.wait_for_load_state("networkidle", timeout=timeout)
    page.wait_for_timeout(300)


CHARTS_DRAWN = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
  .every(c => c.querySelector('svg.main-svg'))"""


def take(browser, url: str, shot: Shot, offsite: list[str]) -> bytes:
    ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, color_scheme="light")

    def guard(route):
        u = route.request.url
        if u.startswith(("data:", "blob:", "about:")) or (urlparse(u).hostname or "") in LOCAL:
            route.continue_()
        else:
            offsite.append(u)
            route.abort()

    ctx.route("**/*", guard)
    try:
        page = ctx.new_page()
        full = f"{url}/{shot.path}" + (f"?{shot.query}" if shot.query else "")
        page.goto(full)
        page.wait_for_selector('[data-testid="stApp"]', timeout=120_000)
        wait_idle(page)
        if shot.act:
            shot.act(page)
        if shot.ready:
            page.wait_for_function(f"() => {shot.ready}", timeout=120_000)
        page.wait_for_function(CHARTS_DRAWN, timeout=120_000)
        page.wait_for_timeout(800)  # transitions and web fonts settle
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"{shot.name}: the page shows an exception")
        main = page.locator('[data-testid="stMain"]').bounding_box()
        target = page.locator(shot.until).nth(shot.nth)
        bottom = target.bounding_box()
        if main is None or bottom is None:
            raise RuntimeError(f"{shot.name}: {shot.until!r} (#{shot.nth}) is not on the page")
        # from just above the page's title (or the sidebar's menu) to just below `until`
        tops = [page.locator('[data-testid="stMain"] h1').first.bounding_box()]
        if shot.sidebar:
            tops.append(page.locator('[data-testid="stSidebarNav"]').bounding_box())
        y0 = max(0, min(b["y"] for b in tops if b) - 24)
        x0 = 0 if shot.sidebar else main["x"] + 2  # (not the sidebar's border)
        y1 = min(bottom["y"] + bottom["height"] + 16, HEIGHT)
        return page.screenshot(clip={"x": x0, "y": y0, "width": main["x"] + main["width"] - x0, "height": y1 - y0})
    finally:
        ctx.close()


def compress(png: bytes, path: Path) -> int:
    """A 256-colour palette (no dithering: the charts are flat colours and smooth scales), shrunk
    in steps of 10 % of its width until it fits MAX_BYTES; returns the bytes written."""
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("RGB")
    scale = 1.0
    while True:
        im = img if scale == 1.0 else img.resize((round(img.width * scale), round(img.height * scale)),
                                                 Image.Resampling.LANCZOS)
        q = im.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        buf = io.BytesIO()
        q.save(buf, format="PNG", optimize=True)
        if buf.tell() <= MAX_BYTES or scale < 0.55:
            break
        scale -= 0.1
    if buf.tell() > MAX_BYTES:
        raise RuntimeError(f"{path.name}: {buf.tell():,} bytes even at {scale:.0%} of its width")
    path.write_bytes(buf.getvalue())
    return buf.tell()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="docs/screenshots.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="views to take (default: all)")
    ap.add_argument("--list", action="store_true", help="name the views and exit")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(f"{s.name:16} /{s.path}{'?' + s.query if s.query else ''}" for s in SHOTS))
        return 0
    unknown = set(a.names) - {s.name for s in SHOTS}
    if unknown:
        ap.error(f"unknown view(s) {sorted(unknown)}; known: {[s.name for s in SHOTS]}")
    shots = [s for s in SHOTS if not a.names or s.name in a.names]
    if not Path(CHROMIUM).exists():
        print("Debian's Chromium is missing: make chromium (or apt-get install -y --no-install-recommends chromium)",
              file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright
    OUT.mkdir(parents=True, exist_ok=True)
    offsite: list[str] = []
    with Server("app.py") as srv, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for s in shots:
                t0 = time.perf_counter()
                n = compress(take(browser, srv.url, s, offsite), OUT / f"{s.name}.png")
                print(f"docs/img/{s.name}.png  {n / 1000:.0f} kB  ({time.perf_counter() - t0:.1f} s)", flush=True)
        finally:
            browser.close()
    if offsite:
        print(f"requests that tried to leave localhost (refused): {offsite[:5]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
