"""Issue 33 in a real browser: what Plotly draws, not only what the server sends. The flash page's
masked cells inside the tile being read are grey (they were white while the caption said grey);
the Generate page's cache chart ticks whole positions (Plotly ticked 5.5 with a few points) and its
distribution chart shows the rule's stages. Waits for the state needed, never for time."""
import io

import pytest

from tests.e2e.browser import exceptions, open_page, screenshot, wait_idle

pytestmark = pytest.mark.e2e

CHART_BY_TITLE = """start => Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'))
  .find(el => el._fullLayout && String((el._fullLayout.title && el._fullLayout.title.text) || '').replace(/<[^>]+>/g, '').startsWith(start))"""


def wait_chart(page, start: str, timeout: float = 120_000) -> None:
    page.wait_for_function(f"start => !!({CHART_BY_TITLE})(start)", arg=start, timeout=timeout)


def cell_centre(page, start: str, col: int, row: int) -> tuple[float, float]:
    """Page coordinates of the centre of heatmap cell (row, col) in the chart titled `start`."""
    return tuple(page.evaluate(f"""([start, col, row]) => {{
      const el = ({CHART_BY_TITLE})(start); const fl = el._fullLayout; const box = el.getBoundingClientRect();
      return [box.left + fl.xaxis._offset + fl.xaxis.l2p(col), box.top + fl.yaxis._offset + fl.yaxis.l2p(row)];
    }}""", [start, col, row]))


def test_flash_masked_cells_in_the_current_tile_are_grey(page, server):
    from PIL import Image
    open_page(page, server, "flash", "flash_tile=4")
    wait_chart(page, "Step 1/")
    assert exceptions(page) == 0
    el = page.locator('[data-testid="stPlotlyChart"]').first
    el.scroll_into_view_if_needed()
    wait_idle(page)
    x, y = cell_centre(page, "Step 1/", col=2, row=0)  # query 0, key 2: masked (causal), inside keys 0..3
    shot = Image.open(io.BytesIO(page.screenshot(clip={"x": x - 2, "y": y - 2, "width": 4, "height": 4}))).convert("RGB")
    r, g, b = shot.getpixel((2, 2))
    assert abs(r - 217) <= 6 and abs(g - 217) <= 6 and abs(b - 217) <= 6, (r, g, b)  # MASKED_COLOR, not white
    x, y = cell_centre(page, "Step 1/", col=0, row=2)  # an allowed cell is coloured, not grey
    r, g, b = Image.open(io.BytesIO(page.screenshot(clip={"x": x - 2, "y": y - 2, "width": 4, "height": 4}))).convert("RGB").getpixel((2, 2))
    assert (r, g, b) != (217, 217, 217)
    screenshot(page, "e2e_flash_masked_grey")


def test_generate_cache_chart_ticks_whole_positions_and_shows_the_rule(page, server):
    open_page(page, server, "generate", "gen_strategy=sample&gen_temp=0.5&gen_topk=3")
    wait_chart(page, "Next token")
    page.get_by_role("button", name="Step").click()
    page.wait_for_function("() => document.body.innerText.includes('Step 1 of')", timeout=120_000)
    wait_chart(page, "KV cache size")
    wait_idle(page)
    assert exceptions(page) == 0
    ticks = page.evaluate(f"""() => Array.from(({CHART_BY_TITLE})('KV cache size').querySelectorAll('g.xtick text'))
      .map(t => t.textContent)""")
    assert len(ticks) >= 2 and all(t.replace(",", "").isdigit() for t in ticks), ticks
    names = page.evaluate(f"""() => ({CHART_BY_TITLE})('Next token')._fullData.map(t => t.name)""")
    assert names == ["model (temperature 1)", "÷ temperature 0.5", "top-k 3, top-p off: kept, renormalised"]
    bands = page.evaluate(f"""() => ({CHART_BY_TITLE})('Next token')._fullLayout.shapes.length""")
    assert bands == 3
    screenshot(page, "e2e_generate_sampling")
