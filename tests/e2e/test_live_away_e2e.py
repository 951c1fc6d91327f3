"""Real Chromium: when the lecturer's screen has not checked in for LECTURER_AWAY (60 s), a
follower reads that it is away and keeps its view; the notice goes once the lecturer is back.

The lecturer's tab leaves the app (its check-ins stop) and, instead of waiting a minute, the
test moves the lecturer's last check-in in the room store (the server's SQLite file) back two
minutes: the same state the store holds after a minute away. The lecturer then opens the app
again in the same browser (its cookie makes it the lecturer of the room again)."""
from __future__ import annotations

import sqlite3

import pytest

from classroom.live.rooms import LECTURER_SEEN
from classroom.live.sqlite_store import FILE_NAME
from tests.e2e.browser import exceptions, guarded_page, start_server, wait_idle
from tests.e2e.test_live_e2e import start_class, type_sentence, wait_tick
from ui.live import AWAY_NOTICE, LECTURER_AWAY

pytestmark = pytest.mark.e2e


def test_followers_read_that_the_lecturers_screen_is_away_until_it_is_back(browser, tmp_path, monkeypatch):
    monkeypatch.delenv("ROOM_STORE", raising=False)
    data = tmp_path / "data"
    proc, url = start_server(data_dir=data)
    try:
        with guarded_page(browser, 1280, 720) as lec, guarded_page(browser, 390, 844, is_mobile=True) as a:
            link, code = start_class(lec, url)
            type_sentence(lec, "the dog sat on the mat .")
            a.goto(link)
            wait_idle(a)
            wait_tick(a, "2:dog")
            assert a.get_by_text(AWAY_NOTICE).count() == 0

            lec.goto("about:blank")  # the lecturer's screen goes away: no more check-ins
            # A check-in of the lecturer's last run can land after the move (a busy machine): move it
            # back again until the follower reads the notice (each follower check takes <= 3 s).
            for attempt in range(6):
                with sqlite3.connect(data / FILE_NAME) as con:
                    n = con.execute("UPDATE seen SET at = MIN(at, strftime('%s', 'now') - ?) WHERE code = ? "
                                    "AND session = ?", (2 * LECTURER_AWAY, code, LECTURER_SEEN)).rowcount
                assert n == 1
                try:
                    a.get_by_text(AWAY_NOTICE).wait_for(timeout=15_000)
                    break
                except Exception:  # noqa: BLE001  moved back again
                    if attempt == 5:
                        raise
            assert a.get_by_text(f"Following room {code}").count() == 1  # still following, view kept
            wait_tick(a, "2:dog")

            lec.goto(url)  # back: the browser's cookie makes it the room's lecturer again
            wait_idle(lec)
            lec.locator(".st-key-live_panel").wait_for(timeout=60_000)
            a.get_by_text(AWAY_NOTICE).wait_for(state="detached", timeout=30_000)
            assert exceptions(a) == 0 and exceptions(lec) == 0
    finally:
        proc.terminate()
        proc.wait(10)
