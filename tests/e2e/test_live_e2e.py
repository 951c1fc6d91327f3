"""Real Chromium: a live class with a lecturer context and student contexts on one server.

The lecturer starts a class and types a sentence (Enter); both students' heatmaps show its tokens,
with the sentence in their address bars. One student explores alone (the lecturer's next sentence
leaves it alone) and comes back. One poll round with reveal. A student whose link carries extra
parameters and a forged lecturer token, and who then changes controls, changes nothing for anyone
else. Screenshots: the lecturer's projector view at 1280x720 and 1920x1080, a phone student at
390x844 (screenshots/live_*.png, looked at by hand)."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e.browser import exceptions, finished_runs, guarded_page, screenshot, wait_idle

pytestmark = pytest.mark.e2e

TICKS = "[data-testid=stPlotlyChart] g[class^=x][class$=tick] text"


def ticks(page) -> list[str]:
    return page.eval_on_selector_all(TICKS, "els => els.map(e => e.textContent)")


def wait_tick(page, tick: str, timeout: float = 15_000) -> None:
    """Until a chart's x tick reads `tick` (following happens by itself: no click, no reload)."""
    page.wait_for_function(f"(t) => [...document.querySelectorAll('{TICKS}')].some(e => e.textContent === t)",
                           arg=tick, timeout=timeout)


def type_sentence(page, text: str) -> None:
    box = page.get_by_role("textbox", name="Sentence", exact=True)
    box.fill(text)
    box.press("Enter")
    wait_idle(page)


def start_class(lec, url: str) -> tuple[str, str]:
    """The lecturer's tab opens the app and starts a live class: (the join link shown, the room code)."""
    lec.goto(url)
    wait_idle(lec)
    lec.get_by_role("button", name="Start a live class").click()
    wait_idle(lec)
    link = lec.locator('.st-key-live_card [data-testid="stCode"]').inner_text().strip()
    return link, re.search(r"room=([A-Z0-9]{5})", link).group(1)


def open_poll(lec) -> None:
    """The lecturer opens a class poll (New class poll, then Open the poll) and waits for the app's
    own signal that it is open: the panel's "Close the poll" button. Under load a click on "Open the
    poll" sometimes never reaches its callback (seen in the server's log: no call; the button is
    still there, as a lecturer would see): the click is made again, as a lecturer would."""
    for _ in range(3):
        if lec.get_by_role("button", name="Close the poll").count():
            return
        if not lec.get_by_role("button", name="Open the poll").count():
            lec.get_by_text("New class poll").click()
        lec.get_by_role("button", name="Open the poll").click(timeout=60_000)
        wait_idle(lec)
        try:
            lec.get_by_role("button", name="Close the poll").wait_for(timeout=20_000)
            return
        except Exception:  # noqa: BLE001  clicked again
            continue
    raise AssertionError("the lecturer's poll did not open after three clicks on Open the poll")


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def main_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def test_live_class_in_real_browsers(server, browser):
    with guarded_page(browser, 1280, 720) as lec, guarded_page(browser, 390, 844, is_mobile=True, has_touch=True) as a, \
            guarded_page(browser, 1200, 1400) as b, guarded_page(browser, 1200, 1400) as evil:
        lec.goto(server)
        wait_idle(lec)
        lec.get_by_role("button", name="Start a live class").click()
        wait_idle(lec)
        link = lec.locator('.st-key-live_card [data-testid="stCode"]').inner_text().strip()
        m = re.fullmatch(r"(http://localhost:\d+)/\?room=([A-Z0-9]{5})", link)
        assert m, link
        code = m.group(2)
        # the server listens on localhost only: the card says the link works only here, and shows no QR code
        assert lec.locator('.st-key-live_card img').count() == 0
        assert "works only on this computer" in lec.locator(".st-key-live_card").inner_text()
        assert "lecturer=" not in link and "lecturer" not in lec.url

        for st_page in (a, b):
            st_page.goto(link)
            wait_idle(st_page)
            st_page.get_by_text(f"Following room {code}").wait_for(timeout=20_000)
            assert exceptions(st_page) == 0

        # the lecturer types a sentence and presses Enter: both students' heatmaps show its tokens
        type_sentence(lec, "the dog sat on the mat .")
        for st_page in (a, b):
            wait_tick(st_page, "2:dog")
            assert query(st_page)["text"] == "the dog sat on the mat ." and query(st_page)["room"] == code
        body = main_text(a)
        assert "Following room" in body and exceptions(a) == 0

        # projector view: the join card above the page, who follows and who explores
        lec.get_by_text("2 following · 0 exploring").wait_for(timeout=10_000)
        screenshot(lec, "live_lecturer_1280x720")
        lec.set_viewport_size({"width": 1920, "height": 1080})
        # Plotly redraws the charts at the new width: wait for a chart wider than the old window
        lec.wait_for_function("() => [...document.querySelectorAll('[data-testid=stPlotlyChart] .main-svg')]"
                              ".some(s => s.getBoundingClientRect().width > 1280)", timeout=30_000)
        screenshot(lec, "live_lecturer_1920x1080")
        lec.set_viewport_size({"width": 1280, "height": 720})

        # b explores alone: the lecturer's next sentence leaves it; a follows
        b.get_by_role("button", name="Explore on my own").click()
        wait_idle(b)
        type_sentence(b, "my own cat ran .")
        wait_tick(b, "2:own")
        checked = finished_runs(b)
        type_sentence(lec, "a bird flew to the tree .")
        wait_tick(a, "2:bird")
        wait_idle(b, after=checked)  # b's own check of the room has run since the lecturer's change
        assert "2:own" in ticks(b) and "2:bird" not in ticks(b) and query(b)["text"] == "my own cat ran ."
        # the address bar is written at the end of b's run: wait for it, not for a time
        b.wait_for_function("() => new URL(location.href).searchParams.get('alone') === 'true'", timeout=60_000)
        assert query(b)["alone"] == "true"
        b.get_by_role("button", name="Back to the lecturer").click()
        wait_tick(b, "2:bird")
        assert query(b)["text"] == "a bird flew to the tree ." and "alone" not in query(b)

        # a student who replays the link with extra parameters and a forged token, then drives
        evil.goto(f"{link}&text=hacked+view+.&lecturer=forged&mask=bidirectional")
        wait_idle(evil)
        evil.get_by_text("lecturer link is not valid").wait_for(timeout=20_000)
        seen = {id(p): finished_runs(p) for p in (a, b)}
        type_sentence(evil, "the student tries to drive .")
        wait_tick(evil, "3:tries")
        assert exceptions(evil) == 0
        for other in (a, b):  # each student's own check of the room has run since the forged change
            wait_idle(other, after=seen[id(other)])
        for other in (lec, a, b):
            assert "2:bird" in ticks(other) and "3:tries" not in ticks(other)
        assert query(lec).get("text") == "a bird flew to the tree ."

        # one poll round: the lecturer opens a question from the current view; a answers; reveal
        open_poll(lec)
        a.locator(".st-key-live_student_poll").wait_for(timeout=45_000)  # (its own check every 3 s, or the server's rerun, on a loaded machine)
        a.locator(".st-key-live_student_poll label").filter(has_text="bird").first.click()
        a.get_by_text("Your answer is in").wait_for(timeout=15_000)
        lec.get_by_text("1 answer ·").wait_for(timeout=15_000)
        # the bar's fill animates once: until no animation or transition runs on the page
        lec.wait_for_function("() => document.getAnimations().every(x => x.playState !== 'running')", timeout=10_000)
        screenshot(lec, "live_lecturer_poll_1280x720")
        lec.get_by_role("button", name="Reveal").click()
        wait_idle(lec)
        lec.get_by_text("The answer:").wait_for(timeout=10_000)
        revealed = lec.locator(".st-key-live_panel [data-testid=stAlert]").inner_text()
        answer = re.search(r"The answer: (.+?) \(", revealed).group(1)
        a.locator(".st-key-live_student_poll [data-testid=stAlert]").wait_for(timeout=15_000)
        said = a.locator(".st-key-live_student_poll [data-testid=stAlert]").inner_text()
        assert answer in said and ("Right" in said or "the answer is" in said)
        screenshot(a, "live_student_390x844")
        for p in (lec, a, b, evil):
            assert exceptions(p) == 0
