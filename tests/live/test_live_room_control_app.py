"""AppTest: the lecturer sees and controls the room. The panel says "N following · M exploring"
(check-ins of the last 10 s); "Lock the room" refuses new students with "Room CODE is locked by the
lecturer" while students already in stay; when the lecturer has not checked in for 60 s, followers
read that the lecturer's screen is away, and the notice goes once the lecturer is back."""
from __future__ import annotations

import pytest

from ui.live import AWAY_NOTICE, roster
from tests.helpers import app_test, errors
from tests.live.test_live_app import start_class, student, texts


@pytest.fixture(autouse=True)
def default_store(monkeypatch):
    monkeypatch.delenv("ROOM_STORE", raising=False)


def test_roster_counts_each_student_once_by_its_latest_check_in():
    assert roster({}) == (0, 0)
    seen = {"lecturer": 10.0, "aa.f": 9.0, "bb.f": 9.5, "bb.e": 9.8, "cc.e": 9.0, "cc.f": 9.9, "dd.e": 1.0}
    assert roster(seen) == (2, 2)  # aa, cc follow; bb, dd explore; the lecturer is not a student


def test_panel_says_following_and_exploring():
    lec, code = start_class()
    a, b, c = student(code), student(code), student(code)
    c.button(key="live_explore").click().run()
    for s in (a, b, c):
        s.run()  # each page's check (the watch fragment) in AppTest
    lec.run()
    assert "**2** following · **1** exploring" in texts(lec), texts(lec)


def test_lock_refuses_new_students_and_keeps_those_in():
    lec, code = start_class()
    a = student(code)
    lec.sidebar.toggle(key="live_locked").set_value(True).run()
    assert not errors(lec) and "(locked)" in texts(lec)
    late = student(code)
    assert f"Room {code} is locked by the lecturer" in texts(late) and "_live" not in late.session_state
    a.run()
    assert f"Following room {code}" in texts(a) and a.session_state["_live"].following
    lec.sidebar.toggle(key="live_locked").set_value(False).run()
    assert f"Following room {code}" in texts(student(code))


def test_away_notice_after_60_s_without_the_lecturer(monkeypatch):
    from ui.live import store
    lec, code = start_class()
    a = student(code)
    a.run()
    assert AWAY_NOTICE not in texts(a)
    real = store().clock
    monkeypatch.setattr(store(), "clock", lambda: real() + 61)  # a minute later; the lecturer's tab sleeps
    a.run()
    assert AWAY_NOTICE in texts(a)
    lec.run()  # the lecturer is back (its panel checks in)
    a.run()
    assert AWAY_NOTICE not in texts(a)


def test_a_followers_start_here_does_not_ask_to_type():
    lec, code = start_class()
    a = student(code)
    start = next(m.value for m in a.markdown if m.value.startswith("**Start here.**"))
    assert "follows the lecturer" in start and "Type" not in start and "type" not in start.replace("your own", "")
    a.button(key="live_explore").click().run()
    start = next(m.value for m in a.markdown if m.value.startswith("**Start here.**"))
    assert "Type a sentence" in start  # exploring alone: the usual guidance
