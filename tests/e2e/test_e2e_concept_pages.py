"""The concept pages in a real browser: each opens without an exception, shows its charts, and one
interaction changes a chart's data. Screenshots go to screenshots/concept_*.png."""
import json
import re

import pytest

from tests.e2e.browser import exceptions, open_page, rerun, screenshot

pytestmark = pytest.mark.e2e

CHARTS_JS = """() => Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'))
  .map(el => JSON.stringify((el._fullData || []).map(t => [t.name || '',
     ...['x', 'y', 'z'].map(a => t[a] && typeof t[a] !== 'string' ? Array.from(t[a], r => (r && r.length !== undefined && typeof r !== 'string') ? Array.from(r) : r) : t[a])])))"""


def charts(page) -> list[str]:
    return page.evaluate(CHARTS_JS)


# A chart's title as Plotly holds it: layout.title is {text: ...} (plotly.py always sends that
# shape), but a bare string is valid too; _fullLayout has it once Plotly has drawn the chart. HTML
# tags (<b>) are stripped. A chart whose div exists but is not drawn yet has no title here.
TITLE_JS = """el => { const t = (el._fullLayout && el._fullLayout.title) || (el.layout && el.layout.title) || '';
  return String((typeof t === 'string' ? t : t.text) || '').replace(/<[^>]+>/g, ''); }"""


def chart_titles(page) -> list[str]:
    return page.evaluate(f"""() => Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'))
      .map({TITLE_JS})""")


def wait_titles(page, *starts: str, timeout: float = 60_000) -> None:
    """Wait until a drawn chart starts with each of these titles (the page's charts arrive one by
    one; counting charts raced: the top two of the positional page were missing in one CI run)."""
    page.wait_for_function(f"""starts => {{
      const titles = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'))
        .filter(el => el._fullLayout).map({TITLE_JS});
      return starts.every(s => titles.some(t => t.startsWith(s)));
    }}""", arg=list(starts), timeout=timeout)


def chart_by_title(page, start: str) -> str:
    """The data of the chart titled `start`, titles and data read in one step (a rerun between two
    reads would pair a title with another chart's data)."""
    found = page.evaluate(f"""start => {{
      const els = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'));
      const titles = els.map({TITLE_JS});
      const data = ({CHARTS_JS})();
      const i = titles.findIndex(t => t.startsWith(start));
      return i < 0 ? {{titles}} : {{data: data[i]}};
    }}""", start)
    if "data" not in found:
        raise AssertionError(f"no chart titled {start!r}; have {found['titles']}")
    return found["data"]


def changed(page, start: str, before: str, timeout: float = 30_000) -> str:
    """The data of the chart titled `start` once it differs from `before`. Called after the rerun
    that changes it has finished (rerun()); Plotly draws the new data after the run, so this waits
    for the drawn chart's state (a Playwright timeout says it never changed)."""
    page.wait_for_function(f"""([start, before]) => {{
      const els = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'));
      const i = els.map({TITLE_JS}).findIndex(t => t.startsWith(start));
      return i >= 0 && ({CHARTS_JS})()[i] !== before;
    }}""", arg=[start, before], timeout=timeout)
    return chart_by_title(page, start)


def choose(page, label: str, option: str) -> None:
    page.get_by_role("combobox", name=label, exact=True).click()
    rerun(page, page.get_by_role("option", name=option, exact=True).click)


def press(page, role_label: str, key: str, times: int = 1) -> None:
    """Arrow keys on a slider: the last press's rerun is waited for (the URL then holds the value)."""
    s = page.get_by_role("slider", name=role_label).first
    s.focus()
    for _ in range(times - 1):
        s.press(key)
    rerun(page, lambda: s.press(key))


@pytest.fixture(scope="module")
def warm(server, browser):
    """Open the root once, so the tests below start with torch imported and the model built (a
    deep link as a fresh server's first request works too: test_e2e_smoke.py)."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    open_page(pg, server, "")
    ctx.close()
    return server


def opened(page, server, path: str, min_charts: int, titles: tuple[str, ...] = ()) -> None:
    open_page(page, server, path)
    page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot', timeout=60_000)
    page.wait_for_function(f"() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .js-plotly-plot').length >= {min_charts}",
                           timeout=30_000)
    if titles:
        wait_titles(page, *titles)
    assert exceptions(page) == 0


def test_scaling_temperature(warm, page):
    opened(page, warm, "scaling", 4, titles=("Softmax weights",))
    before = chart_by_title(page, "Softmax weights")
    press(page, "Temperature", "ArrowRight", 1)
    assert exceptions(page) == 0
    assert changed(page, "Softmax weights", before) != before
    assert "sc_temp=1.1" in page.url  # the choice is in the shareable URL
    screenshot(page, "concept_scaling")


def test_positional_dimensions(warm, page):
    opened(page, warm, "positional", 6, titles=("Sinusoidal PE", "Chosen dimensions"))
    before = chart_by_title(page, "Chosen dimensions")
    ms = page.locator('[data-testid="stMultiSelect"]').first
    ms.locator("input").click()
    page.keyboard.type("7")
    rerun(page, page.get_by_role("option", name="7", exact=True).click)
    page.keyboard.press("Escape")
    assert exceptions(page) == 0
    after = changed(page, "Chosen dimensions", before)
    assert after != before and "dim 7 (cos)" in after
    screenshot(page, "concept_positional")


def test_layernorm_choice(warm, page):
    opened(page, warm, "layer-norm", 6, titles=("Per-token variance",))
    before = chart_by_title(page, "Per-token variance")
    choose(page, "Layer norm", "layer 1 · ln2")
    assert exceptions(page) == 0
    assert changed(page, "Per-token variance", before) != before
    screenshot(page, "concept_layernorm")


def test_multihead_head(warm, page):
    opened(page, warm, "multi-head", 5, titles=("Q, K, V",))
    before = chart_by_title(page, "Q, K, V")
    choose(page, "Head", "2")
    assert exceptions(page) == 0
    assert changed(page, "Q, K, V", before) != before
    screenshot(page, "concept_multihead")


def test_ffn_output_topk(warm, page):
    opened(page, warm, "ffn-output", 4, titles=("Top-5 next tokens",))
    before = chart_by_title(page, "Top-5 next tokens")
    press(page, "Top-k", "ArrowLeft", 1)
    assert exceptions(page) == 0
    assert changed(page, "Top-", before) != before
    assert any("Top-4 next tokens" in t for t in chart_titles(page))
    screenshot(page, "concept_ffn_output")


def test_contextual_second_sentence(warm, page):
    opened(page, warm, "contextual", 1, titles=("Same word, two contexts",))
    before = chart_by_title(page, "Same word, two contexts")
    box = page.get_by_label("Sentence B")
    box.fill("yesterday apple released a new phone .")
    rerun(page, lambda: box.press("Enter"))
    assert exceptions(page) == 0
    assert changed(page, "Same word, two contexts", before) != before
    screenshot(page, "concept_contextual")


def test_cost_range(warm, page):
    opened(page, warm, "cost", 3, titles=("Attention-weight memory",))
    before = chart_by_title(page, "Attention-weight memory")
    press(page, "Plot sequence lengths up to", "ArrowLeft", 1)
    assert exceptions(page) == 0
    after = changed(page, "Attention-weight memory", before)
    assert after != before
    assert max(float(v) for v in json.loads(after)[0][1]) == 1024
    screenshot(page, "concept_cost")
