"""Grids of panels on a phone (390 x 844) and unchanged on a desktop (1400 x 900), issue 33: at 390 px
the heads grid drew its panels 66 px wide under titles 219 px wide that overlapped each other, and the
overview's thumbnails were 34 px wide. Under a 640 px viewport a chart of several subplot columns is
at least wide enough for readable panels, in a box that scrolls sideways (ui.show.phone_min_width)."""
from __future__ import annotations

import pytest

from tests.e2e.browser import charts_drawn, exceptions, guarded_page, open_page

pytestmark = pytest.mark.e2e

# Every grid chart on the page (two or more x axes): Plotly's laid-out width, its narrowest panel (px),
# the pairs of annotations (panel titles, axis titles) whose boxes overlap, the width of the chart's
# Streamlit element and of the box around it that scrolls.
GRIDS_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].map(el => {
  const p = el.querySelector('.js-plotly-plot'), fl = p && p._fullLayout;
  if (!fl) return null;
  const xs = Object.keys(fl).filter(k => /^xaxis\\d*$/.test(k)).map(k => fl[k]._length);
  const bs = [...p.querySelectorAll('g.annotation')].map(a => a.getBoundingClientRect()).filter(b => b.width > 0);
  let overlaps = 0;
  for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
    const a = bs[i], b = bs[j];
    if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1
        && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1) overlaps++;
  }
  const main = document.querySelector('[data-testid="stMain"]');
  return {width: fl.width, panels: xs.length, narrowest: Math.min(...xs), overlaps,
          element: el.getBoundingClientRect().width, column: el.closest('[data-testid="stVerticalBlock"]').getBoundingClientRect().width,
          pageScrolls: main.scrollWidth > main.clientWidth};
}).filter(g => g && g.panels > 1)"""


def _grids(pg, least_panel: float) -> list[dict]:
    """The page's grid charts once each is laid out at its phone width (the page's CSS arrives with
    the chart: wait for the state, never for a time), or as they are when that never happens."""
    try:
        pg.wait_for_function(f"() => {{ const g = ({GRIDS_JS})(); return g.length > 0 && g.every(c => c.narrowest >= {least_panel}); }}",
                             timeout=20_000)
    except Exception:  # noqa: BLE001  (the assertions below say what was drawn)
        pass
    return pg.evaluate(GRIDS_JS)


@pytest.mark.parametrize("path, least_panel", [("heads", 120), ("overview", 100)])
def test_phone_grid_panels_readable(browser, server, path, least_panel):
    """390 x 844: every panel of the grid is at least least_panel px wide (the heads grid's panels
    120 px, the overview's thumbnails 100 px), no two titles overlap, and the page itself does
    not scroll sideways (only the chart's box does); hovering a panel still shows its numbers and
    dragging across it still zooms."""
    with guarded_page(browser, 390, 844) as pg:
        open_page(pg, server, path)
        charts_drawn(pg)
        grids = _grids(pg, least_panel)
        assert grids, f"no grid chart on {path}"
        for g in grids:
            assert g["narrowest"] >= least_panel, f"{path}: a panel {g['narrowest']:.0f} px wide at 390 px: {g}"
            assert g["overlaps"] == 0, f"{path}: {g['overlaps']} pairs of titles overlap at 390 px: {g}"
            assert g["width"] > 390 and g["element"] >= g["width"] - 1, g  # Plotly laid out at the wide width
            assert not g["pageScrolls"], f"{path}: the whole page scrolls sideways: {g}"
        # hover still works on the wide chart: a panel's hover label gives its key and weight
        plot = pg.locator('[data-testid="stPlotlyChart"] .nsewdrag').first
        plot.scroll_into_view_if_needed()
        box = plot.bounding_box()
        pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        pg.wait_for_selector('[data-testid="stPlotlyChart"] .hoverlayer .hovertext', timeout=10_000)
        hover = pg.locator('[data-testid="stPlotlyChart"] .hoverlayer .hovertext').first.text_content()
        assert "key" in hover and "weight" in hover, hover
        # and zoom: a drag across part of the panel narrows its x axis
        before = pg.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.xaxis.range.slice()")
        pg.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.2)
        pg.mouse.down()
        pg.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.6, steps=8)
        pg.mouse.up()
        pg.wait_for_function(f"""() => {{ const r = document.querySelector('.js-plotly-plot')._fullLayout.xaxis.range;
            return r[1] - r[0] < {before[1] - before[0]} * 0.8; }}""", timeout=10_000)
        assert exceptions(pg) == 0


@pytest.mark.parametrize("path", ["heads", "overview"])
def test_desktop_grid_fills_its_column(browser, server, path):
    """1400 x 900: the grid is drawn at its column's width, exactly as before the phone rule (no
    min width, no sideways scrolling), and its titles do not overlap."""
    with guarded_page(browser, 1400, 900) as pg:
        open_page(pg, server, path)
        charts_drawn(pg)
        grids = pg.evaluate(GRIDS_JS)
        assert grids
        for g in grids:
            assert abs(g["width"] - g["column"]) <= 1 and abs(g["element"] - g["column"]) <= 1, g
            assert not g["pageScrolls"] and g["overlaps"] == 0, g
        scrolls = pg.evaluate("""() => [...document.querySelectorAll('[class*="st-key-wide_"]')]
            .some(e => e.scrollWidth > e.clientWidth)""")
        assert not scrolls
        # the phone rule stays inside its media query: no grid has a min width at 1400 px
        mins = pg.evaluate("""() => [...document.querySelectorAll('[class*="st-key-wide_"]')]
            .map(e => getComputedStyle(e).minWidth)""")
        assert all(m == "auto" or float(m.removesuffix("px")) <= 16 for m in mins), mins  # Streamlit's 1 rem


# Every chart on the page: its right edge, whether it sits in a box that scrolls sideways, and
# whether that box's label (ui.show.SCROLL_NOTE, shown on phones only) is visible; the title of each.
CHARTS_JS = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].map(el => {
  const p = el.querySelector('.js-plotly-plot'), fl = p && p._fullLayout;
  const keyOf = b => [...b.classList].find(c => c.startsWith('st-key-wide_'));
  let box = el.closest('[class*="st-key-wide_"]');
  while (box && keyOf(box).endsWith('_in')) box = box.parentElement.closest('[class*="st-key-wide_"]');
  let label = false;
  if (box) {
    const key = keyOf(box);
    const note = document.querySelector('.' + key + '_note');
    label = !!note && note.getBoundingClientRect().height > 0 && note.innerText.includes('scroll sideways');
  }
  const main = document.querySelector('[data-testid="stMain"]');
  return {right: el.getBoundingClientRect().right, title: fl && fl.title ? String(fl.title.text || '') : '',
          boxed: !!box && box.scrollWidth > box.clientWidth, label,
          ticks: p ? p.querySelectorAll('g.xtick text').length : 0,
          pageScrolls: main.scrollWidth > main.clientWidth};
})"""


@pytest.mark.parametrize("path", ["heads", "overview", "model-view", "circuits"])
def test_phone_charts_fit_or_scroll_in_a_labelled_box_with_a_focus(browser, server, path):
    """390 x 844 with focus=1.2: no chart is wider than the screen unless it scrolls inside a box
    whose label says so; on the heads and overview pages the focused head comes first, fits the
    screen and labels its tokens; the page itself never scrolls sideways."""
    with guarded_page(browser, 390, 844) as pg:
        open_page(pg, server, path, "focus=1.2")
        least = 2 if path in ("heads", "overview") else 1  # the focused head and the grid
        charts_drawn(pg, least)
        try:  # until each chart is laid out at the phone's width (its box's CSS arrives with it): a state, not a time
            pg.wait_for_function(f"() => {{ const c = ({CHARTS_JS})(); return c.length >= {least} "
                                 "&& c.every(x => x.right <= 391 || (x.boxed && x.label))"
                                 + (" && c[0].title.includes('Focused')" if least == 2 else "") + "; }", timeout=30_000)
        except Exception:  # noqa: BLE001  (the assertions below say what was drawn)
            pass
        charts = pg.evaluate(CHARTS_JS)
        assert charts, f"no chart on {path}"
        for c in charts:
            assert c["right"] <= 390 + 1 or (c["boxed"] and c["label"]), f"{path}: a chart wider than the phone, unlabelled: {c}"
            assert not c["pageScrolls"], f"{path}: the whole page scrolls sideways: {c}"
        if path in ("heads", "overview"):
            first = charts[0]
            assert "Focused: layer 1, head 2" in first["title"] and first["right"] <= 391 and not first["boxed"], first
            assert first["ticks"] >= 3, first  # the focused head's key labels are drawn
        if path == "model-view":  # the HTML grid of lines: a labelled region that scrolls
            assert pg.locator('[role="region"][aria-label*="scrolls sideways"]').count() == 1
        assert exceptions(pg) == 0
