"""AppTest, the default room store (SQLite): what a client reads at each per-client limit of the live
class, and when ROOM_STORE names no usable store. (The same limits from two real client addresses
through nginx: tests/deploy/test_proxy_limits.py.) Every AppTest session is a loopback client: the
limits hold for it too."""
from __future__ import annotations

import pytest

from tests.helpers import app_test, errors
from tests.live.test_live_app import alerts, start_class, student, texts


@pytest.fixture(autouse=True)
def default_store(monkeypatch):
    monkeypatch.delenv("ROOM_STORE", raising=False)


def test_a_client_starts_at_most_five_rooms_in_ten_minutes():
    at = app_test()
    at.run()
    codes = []
    for _ in range(5):
        at.button(key="live_start").click().run()
        codes.append(at.session_state["_live"].code)
        at.button(key="live_end").click().run()
    at.button(key="live_start").click().run()
    said = alerts(at, "error")
    assert "_live" not in at.session_state and not errors(at)
    assert any("started 5 live classes in the last 10 minutes" in e and "Try again in 10 minutes" in e
               for e in said), said
    assert len(set(codes)) == 5


def test_wrong_codes_per_minute_then_refused_before_any_look_up():
    lec, code = start_class()
    for i in range(20):
        at = student("ZZZZ" + "23456789ABCDEFGHJKMN"[i])
        assert "No live class has the code" in texts(at)
    at = student(code)  # the 21st attempt in a minute, the right code included
    said = texts(at)
    assert "Too many wrong class codes" in said and "Try again in" in said and "seconds" in said
    assert "_live" not in at.session_state and "No live class" not in said


def test_a_full_poll_says_so(monkeypatch):
    from ui.live import store
    lec, code = start_class()
    lec.session_state["live_poll_box"] = True
    lec.run()
    lec.button(key="live_poll_open").click().run()
    poll = lec.session_state["_live"].poll
    store().max_answers = 2
    said = []
    for _ in range(3):
        s = student(code)
        next(r for r in s.radio if r.key == f"live_answer_{poll.id}").set_value(poll.question.options[0]).run()
        said.append(texts(s))
    assert all("Your answer is in" in t for t in said[:2])
    assert "This poll is full" in said[2] and "poll is closed" not in said[2]


def test_one_client_answers_at_most_its_cap(monkeypatch):
    import ui.live
    monkeypatch.setattr(ui.live, "ANSWERS_PER_CLIENT", 2)
    lec, code = start_class()
    lec.session_state["live_poll_box"] = True
    lec.run()
    lec.button(key="live_poll_open").click().run()
    poll = lec.session_state["_live"].poll
    said = []
    for _ in range(3):  # three scripted sessions of one address
        s = student(code)
        next(r for r in s.radio if r.key == f"live_answer_{poll.id}").set_value(poll.question.options[0]).run()
        said.append(texts(s))
    assert "Your network address has sent 2 answers to this poll" in said[2] and "next poll" in said[2]
    assert len(ui.live.store().answers(code, poll.id)) == 2


def test_a_bad_room_store_url_is_said_in_words(monkeypatch):
    monkeypatch.setenv("ROOM_STORE", "redis://host:notaport/0")
    at = app_test()
    at.run()
    at.button(key="live_start").click().run()
    said = " ".join(alerts(at, "error"))
    assert not errors(at) and "The live class is off on this server" in said
    assert "port must be a number" in said and "notaport" in said and at.get("plotly_chart")
