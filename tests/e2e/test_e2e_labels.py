"""Real Chromium, issue 21 point 7: labels that collide. Measured from the rendered SVG: the panel
titles of an 8-head grid do not overlap each other, key labels sit only under the bottom row, the
three-attentions panels' row labels stay out of the panel on their left, and a 62-token sentence
still shows token labels. Viewport 1280 x 720 wide (the narrower of the issue's two)."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.browser import charts_drawn, exceptions, guarded_page, open_page
from ui.state import FRESH

pytestmark = pytest.mark.e2e
FRESH_Q = "src=" + quote(FRESH)


@pytest.fixture
def narrow(browser):
    with guarded_page(browser, 1280, 2400) as pg:
        yield pg


def _open(pg, server, path: str, query: str) -> None:
    """Open a page and wait until every chart on it is drawn and laid out for good (its state,
    never a time): the web fonts loaded, and the charts' text boxes the same over two animation
    frames. Plotly measures its text to size the margins and redraws when the fonts arrive; boxes
    read in between put a panel title over the chart's title (1 run in ~6 of the full suite)."""
    open_page(pg, server, path, query, timeout=120_000)
    charts_drawn(pg)
    pg.evaluate("() => document.fonts.ready.then(() => true)")
    boxes = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"] text')]
        .map(t => { const b = t.getBoundingClientRect(); return [b.x, b.y, b.width, b.height].map(Math.round).join(','); })
        .join(';')"""
    frames = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
    last = pg.evaluate(boxes)
    for _ in range(100):  # settled: unchanged across two frames (a relayout finishes within a few)
        pg.evaluate(frames)
        now = pg.evaluate(boxes)
        if now == last:
            break
        last = now
    assert exceptions(pg) == 0


def _boxes(locator) -> list[dict]:
    return [b for b in (e.bounding_box() for e in locator.all()) if b and b["width"] > 0]


def _overlap(a: dict, b: dict, pad: float = 0.5) -> bool:
    return not (a["x"] + a["width"] <= b["x"] + pad or b["x"] + b["width"] <= a["x"] + pad or
                a["y"] + a["height"] <= b["y"] + pad or b["y"] + b["height"] <= a["y"] + pad)


def test_eight_head_titles_and_key_labels_do_not_collide(server, narrow):
    _open(narrow, server, "", FRESH_Q + "&h=8")
    chart = narrow.locator('[data-testid="stPlotlyChart"]').first
    titles = _boxes(chart.locator("g.annotation"))  # each panel title's box (all its lines)
    assert len(titles) >= 8
    for i in range(len(titles)):
        for j in range(i + 1, len(titles)):
            assert not _overlap(titles[i], titles[j]), (i, j, titles[i], titles[j])
    # the chart title is not under a panel title either
    gtitle = _boxes(chart.locator("g.g-gtitle text"))
    assert gtitle and not any(_overlap(gtitle[0], t) for t in titles)
    # key labels: only below the lowest panel (none between rows of panels)
    plots = _boxes(chart.locator("rect.nsewdrag"))
    lowest_top = max(p["y"] for p in plots)
    keys = _boxes(chart.locator('g[class^="x"][class$="tick"] text'))
    assert keys and all(k["y"] > lowest_top for k in keys), "key labels mid-grid"


def test_62_tokens_still_show_token_labels(server, narrow):
    text = quote(" ".join(["the keys to the cabinet are on the table ."] * 6) + " the cat")
    _open(narrow, server, "", f"T=128&text={text}")
    chart = narrow.locator('[data-testid="stPlotlyChart"]').first
    keys = chart.locator('g[class^="x"][class$="tick"] text').all_text_contents()
    rows = chart.locator('g[class^="y"][class$="tick"] text').all_text_contents()
    assert len(rows) >= 10 and "0:<bos>" in rows, rows
    assert len(keys) >= 5
    boxes = _boxes(chart.locator('g[class^="y"][class$="tick"] text'))
    boxes.sort(key=lambda b: (b["x"], b["y"]))
    for a, b in zip(boxes, boxes[1:]):  # row labels of one column: none on top of the next
        if abs(a["x"] - b["x"]) < 40:
            assert not _overlap(a, b, pad=1.0), (a, b)


def test_three_attentions_row_labels_stay_out_of_the_left_panel(server, narrow):
    _open(narrow, server, "encoder-decoder", "")
    chart = narrow.locator('[data-testid="stPlotlyChart"]').filter(has_text="Decoder self-attn").first
    chart.scroll_into_view_if_needed()
    plots = sorted(_boxes(chart.locator("rect.nsewdrag")), key=lambda b: b["x"])
    assert len(plots) == 3
    labels = _boxes(chart.locator("g.y2tick text"))  # the decoder's rows, "3:ta→kasa"
    assert labels
    assert min(b["x"] for b in labels) >= plots[0]["x"] + plots[0]["width"], (labels[0], plots[0])
    # the decoder self-attention shares those rows: no labels of its own between the panels
    assert not _boxes(chart.locator("g.y3tick text"))
    # one key label per column, slanted at 60°: neighbours at least a line apart (they ran together
    # in panels squeezed by the gaps at 1280 px)
    for ax in ("xtick", "x2tick", "x3tick"):
        ends = sorted(b["x"] + b["width"] for b in _boxes(chart.locator(f"g.{ax} text")))
        assert len(ends) >= 5
        assert min(b - a for a, b in zip(ends, ends[1:])) * 0.866 >= 10, (ax, ends)


def test_causal_vs_bidirectional_labels_stay_out_of_the_panels(server, narrow):
    """'on causal vs bidirectional … one panel's row labels run into the next panel': no tick label
    of the comparison grid lies on any panel."""
    _open(narrow, server, "causal-vs-bidirectional", FRESH_Q)
    chart = narrow.locator('[data-testid="stPlotlyChart"]').first
    chart.scroll_into_view_if_needed()
    plots = _boxes(chart.locator("rect.nsewdrag"))
    assert len(plots) >= 6
    labels = _boxes(chart.locator('g[class^="y"][class$="tick"] text')) + \
        _boxes(chart.locator('g[class^="x"][class$="tick"] text'))
    assert len(labels) >= 10
    for lab in labels:
        for p in plots:
            assert not _overlap(lab, p, pad=1.0), (lab, p)


@pytest.fixture
def tall(browser):
    """1280 px wide and tall enough for a whole page (Streamlit scrolls inside its own container)."""
    with guarded_page(browser, 1280, 9000) as pg:
        yield pg


# every chart's title, tick labels (any subplot, colour bars excluded), axis titles and annotations
_TEXTS_JS = r"""() => Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')).map(el => {
  const box = (t, kind) => { const r = t.getBoundingClientRect(); return {kind, text: t.textContent, x: r.x, y: r.y, width: r.width, height: r.height}; };
  const q = s => Array.from(el.querySelectorAll(s)).filter(t => t.getBoundingClientRect().width > 0);
  return {title: q('g.g-gtitle text').map(t => box(t, 'title')),
          ticks: q('g[class^="x"][class$="tick"] text, g[class^="y"][class$="tick"] text').map(t => box(t, 'tick')),
          other: q('g[class^="g-x"][class$="title"] text, g[class^="g-y"][class$="title"] text, g.annotation text, g.legend text').map(t => box(t, 'other'))};
})"""


@pytest.mark.parametrize("path", ["positional", "multi-head", "ffn-output"])
def test_present_mode_chart_titles_clear_the_tick_labels(server, tall, path):
    """Presentation mode: a chart's 20 px title touched the 16 px top tick label on these pages
    (screenshot audit). No chart title overlaps any tick label, axis title, legend or annotation."""
    _open(tall, server, path, "present=true")
    charts = tall.evaluate(_TEXTS_JS)
    titled = [c for c in charts if c["title"]]
    assert len(titled) >= 3
    for c in titled:
        for t in c["title"]:
            for o in c["ticks"] + c["other"]:
                assert not _overlap(t, o), (path, t["text"], o["text"], t, o)


def test_present_mode_key_axis_title_clears_the_slanted_labels(server, tall):
    """Variants page, presentation mode: "key (looked at)" sat on a slanted 16 px key label."""
    _open(tall, server, "variants", "present=true")
    charts = tall.evaluate(_TEXTS_JS)
    keys = [(a, c) for c in charts for a in c["other"] if a["text"].startswith("key (looked at)")]
    assert len(keys) >= 5
    for a, c in keys:
        for t in c["ticks"]:
            assert not _overlap(a, t), (a, t)


@pytest.mark.parametrize("path", ["cost", "heads"])
def test_present_mode_exit_button_is_not_under_the_header(server, browser, path):
    """Screenshot audit, 1280 x 720: in presentation mode the page's "Exit presentation mode"
    button sat under Streamlit's header (only its lower border showed): the one way out on the page."""
    with guarded_page(browser, 1280, 720) as pg:
        open_page(pg, server, path, "present=true", timeout=120_000)
        # the element drawn at the button's centre is the button (or inside it), not the header.
        # Measured in one step, once the presentation CSS has pinned it to the header bar (CI,
        # 2026-11-26: the box was read at its place in the page's flow, y 96, and the CSS moved it
        # before the point was tested).
        hit_js = """() => { const b = [...document.querySelectorAll('button')].find(
                e => e.textContent.includes('Exit presentation mode'));
            if (!b || getComputedStyle(b.closest('.st-key-present_exit')).position !== 'fixed') return false;
            const r = b.getBoundingClientRect();
            if (r.top < 0) return false;
            const e = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            return !!(e && e.closest('button') === b); }"""
        try:
            pg.wait_for_function(hit_js, timeout=30_000)
        except Exception:  # noqa: BLE001  (say where it is)
            raise AssertionError(pg.get_by_role("button", name="Exit presentation mode").bounding_box()) from None


def test_present_mode_heads_show_above_the_fold(server, browser):
    """Issue 21 point 1: at 1280 x 720 in presentation mode the heads page showed no heatmap above
    the fold (the exit button, the title, the example row and the caption came first). The exit
    button now sits in the header bar and the caption under the grid: the heatmaps start at least
    200 px above the bottom of the window."""
    with guarded_page(browser, 1280, 720) as pg:
        open_page(pg, server, "heads", "present=true", timeout=120_000)
        pg.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .heatmaplayer image').length >= 4",
                             timeout=120_000)
        charts_drawn(pg)
        top = pg.evaluate("() => Math.min(...[...document.querySelectorAll('.js-plotly-plot .heatmaplayer image')]"
                          ".map(e => e.getBoundingClientRect().top))")
        assert top <= 720 - 200, top
        exit_box = pg.get_by_role("button", name="Exit presentation mode").bounding_box()
        assert exit_box and exit_box["y"] + exit_box["height"] <= 80, exit_box  # in the header bar
