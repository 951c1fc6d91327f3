"""Real Chromium: a class poll on a projector and a phone. The lecturer's poll card at 1280x720 in
presentation mode shows all of it without scrolling for 12 options: the question, one compact bar per
option with its count and percentage, and after Reveal the answer in words with the right bar in
another colour. The student's options read as words (the tokens' text, spaces shown, never a bare
"·"). Screenshots: screenshots/live_poll_*.png."""
from __future__ import annotations

import re

import pytest

from tests.e2e.browser import exceptions, guarded_page, screenshot, wait_idle
from tests.e2e.test_live_e2e import open_poll, type_sentence, wait_tick

pytestmark = pytest.mark.e2e

SENTENCE = "the dog and the young cat sat on a mat ."  # 12 tokens with <bos>: the last may look at all 12


def inside(page, selector: str) -> dict:
    box = page.locator(selector).bounding_box()
    vw = page.viewport_size
    scroll = page.evaluate("() => [window.scrollY, document.querySelector('[data-testid=stMain]')?.scrollTop || 0]")
    return {"box": box, "fits": box is not None and box["y"] >= 0 and box["y"] + box["height"] <= vw["height"]
            and box["x"] >= 0 and box["x"] + box["width"] <= vw["width"], "scroll": scroll}


def test_poll_card_fits_a_projector_and_reads_as_words(server, browser):
    with guarded_page(browser, 1280, 720) as lec, \
            guarded_page(browser, 390, 844, is_mobile=True, has_touch=True) as a:
        lec.goto(server)
        wait_idle(lec)
        lec.get_by_role("button", name="Start a live class").click()
        wait_idle(lec)
        link = lec.locator('.st-key-live_card [data-testid="stCode"]').inner_text().strip()
        type_sentence(lec, SENTENCE)
        a.goto(link)
        wait_idle(a)
        wait_tick(a, "2:dog")
        open_poll(lec)
        poll = a.locator(".st-key-live_student_poll")
        poll.wait_for(timeout=30_000)
        options = poll.locator("label").all_inner_texts()
        options = [o.strip() for o in options if re.match(r"\d+: ", o.strip())]
        assert len(options) == 12, options
        for o in options:
            assert re.fullmatch(r"\d+: (“[^·]+”|a space|\d+ spaces)", o), o
        poll.locator("label").filter(has_text="dog").first.click()
        a.get_by_text("Your answer is in").wait_for(timeout=30_000)
        lec.get_by_text("1 answer ·").wait_for(timeout=30_000)

        lec.get_by_text("Presentation mode", exact=True).click()
        wait_idle(lec)
        lec.locator(".st-key-present_exit").wait_for(timeout=30_000)
        lec.locator(".poll-row").first.wait_for()
        assert lec.locator(".poll-row").count() == 12
        got = inside(lec, ".st-key-live_panel")
        assert got["fits"] and got["scroll"] == [0, 0], got
        assert "1 · 100%" in lec.locator(".poll-bars").inner_text()

        lec.get_by_role("button", name="Reveal").click()
        wait_idle(lec)
        lec.get_by_text("The answer:").wait_for(timeout=30_000)
        lec.locator(".poll-right").wait_for(timeout=30_000)
        got = inside(lec, ".st-key-live_panel")
        assert got["fits"] and got["scroll"] == [0, 0], got
        answer = lec.locator(".st-key-live_panel [data-testid=stAlert]").inner_text()
        assert re.search(r"The answer: \d+: (“.+”|a space)", answer), answer
        colours = lec.eval_on_selector_all(".poll-fill", "els => els.map(e => getComputedStyle(e).backgroundColor)")
        right = lec.eval_on_selector(".poll-right .poll-fill", "e => getComputedStyle(e).backgroundColor")
        assert colours.count(right) == 1 and len(set(colours)) == 2, colours
        assert "right" in lec.locator(".poll-right").inner_text()
        screenshot(lec, "live_poll_revealed_1280x720")
        a.locator(".st-key-live_student_poll [data-testid=stAlert]").wait_for(timeout=30_000)
        screenshot(a, "live_poll_student_390x844")
        lec.set_viewport_size({"width": 1920, "height": 1080})
        lec.wait_for_function("() => window.innerWidth === 1920")
        assert inside(lec, ".st-key-live_panel")["fits"]
        screenshot(lec, "live_poll_revealed_1920x1080")
        for p in (lec, a):
            assert exceptions(p) == 0
