"""Train page in a real browser: start a tiny training, see the progress advance and finish, see
the trained model in the sidebar's Model list (and the attention snapshots with their scrubber)."""
from __future__ import annotations

import re
import time

import pytest

from tests.e2e.browser import exceptions, finished_runs, open_page, rerun, screenshot, wait_idle

pytestmark = pytest.mark.e2e

STEPS = 60  # tiny: the test checks the final state and that the progress it happened to see was
# consistent (monotone, within 0..STEPS), never how many polls landed while it ran (timing)


def set_slider(page, label: str, home_then_right: int) -> None:
    s = page.get_by_role("slider", name=label).first
    n = finished_runs(page)
    s.focus()
    s.press("Home")
    for _ in range(home_then_right):
        s.press("ArrowRight")
    # the value the keys lead to, then the rerun that carries it to the server (the slider sends
    # it once, shortly after the last key): states, not a time
    page.wait_for_function("([el, n]) => Number(el.value) === Number(el.min) + n * Number(el.step)",
                           arg=[s.element_handle(), home_then_right], timeout=30_000)
    wait_idle(page, after=n)


def progress_step(page) -> int | None:
    # one snapshot of the DOM (no auto-wait): the bar vanishes the moment the training ends
    text = page.evaluate("() => document.querySelector('[data-testid=\"stProgress\"]')?.innerText ?? null")
    if not text:
        return None
    m = re.search(r"step (\d+) of (\d+)", text)
    return int(m.group(1)) if m else None


def test_train_tiny_model_progress_and_sidebar(server, page):
    open_page(page, server, "")  # warm: torch imported, model built
    open_page(page, server, "train")
    assert exceptions(page) == 0
    set_slider(page, "Layers", 0)  # 1 layer
    set_slider(page, "Steps", (STEPS - 20) // 10)  # Home = 20, then 10 per arrow
    assert page.get_by_role("slider", name="Steps").first.input_value() == str(STEPS)
    page.get_by_role("button", name="Start training").click()

    # Record whatever progress values show up until the result appears (the number of values seen
    # depends on the machine's speed, so none is required); the deadline only stops a hang.
    seen: list[int] = []
    deadline = time.time() + 240
    done = page.get_by_text("Trained in", exact=False)
    while done.count() == 0:
        assert time.time() < deadline, f"training did not finish; progress seen: {seen}"
        step = progress_step(page)
        if step is not None and (not seen or step != seen[-1]):
            seen.append(step)
        page.wait_for_timeout(100)
    wait_idle(page)
    assert exceptions(page) == 0
    # what was seen is consistent: never backwards, never past the end
    assert seen == sorted(seen) and all(0 <= s <= STEPS for s in seen), seen
    assert page.locator('[data-testid="stProgress"]').count() == 0  # gone once finished
    # the final state: the loss chart has one point per step, all STEPS of them
    n_points = page.evaluate("""() => {
        for (const el of document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')) {
            // _fullData: the arrays as plotly drew them (typed arrays decoded)
            const t = (el._fullData || []).find(d => d.name === 'loss per step');
            if (t) return t.y.length;
        }
        return null; }""")
    assert n_points == STEPS, n_points

    # results: snapshot heatmaps and a scrubber over the snapshot steps
    assert page.get_by_text("Attention during training").count() == 1
    assert page.get_by_role("slider", name="Snapshot at step").count() == 1
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 3  # loss, heads, scores
    screenshot(page, "train_done")

    # the sidebar's Model list now offers the trained model; the current model is still selected
    model_box = page.get_by_role("combobox", name="Model", exact=True)
    model_box.click()
    option = page.get_by_role("option", name=re.compile(r"^trained #1: d64·4h·1L"))
    assert option.count() == 1
    rerun(page, option.click)
    assert exceptions(page) == 0
    caption = page.locator('[data-testid="stSidebar"]').get_by_text("d_model 64 · 4 heads · 1 layers")
    assert caption.count() == 1


def test_upload_of_a_pickle_is_refused_in_the_browser(server, page):
    """The real upload path (browser -> upload endpoint -> page): a pickle named .safetensors gets a
    clear error, no traceback, and the sidebar's model stays."""
    import pickle
    open_page(page, server, "")
    open_page(page, server, "train")
    model_before = page.get_by_role("combobox", name="Model", exact=True).inner_text()
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        files=[{"name": "evil.safetensors", "mimeType": "application/octet-stream",
                "buffer": pickle.dumps({"w": [1.0, 2.0]}, protocol=4)}])
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for(timeout=60_000)
    wait_idle(page)
    assert "pickle" in alert.inner_text() and "not loaded" in alert.inner_text()
    assert exceptions(page) == 0
    assert page.get_by_role("combobox", name="Model", exact=True).inner_text() == model_before
    alert.scroll_into_view_if_needed()
    screenshot(page, "train_upload_refused")
