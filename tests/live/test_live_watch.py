"""classroom/live/watch.py: the process's room watcher reads each watched room once a beat and says
what moved (the view, the poll, the end), on the in-memory store and on a SQLite file written by
another store object (another process's view of the same file)."""
from __future__ import annotations

import threading

import pytest

from classroom.live import MemoryStore, Poll, PollQuestion, StoreUnavailable, View, new_token, token_hash
from classroom.live.sqlite_store import SQLiteStore
from classroom.live.watch import RoomWatcher

Q = PollQuestion(prompt="2 + 2?", kind="choice", answer="4", options=("3", "4", "5"))


def room(store, code="ABCDE"):
    h = token_hash(new_token())
    store.create(code, h)
    return code, h


@pytest.fixture(params=["memory", "sqlite"])
def two_views(request, tmp_path):
    """(the lecturer's store, the watcher's store): one object in memory, or two on one SQLite file."""
    if request.param == "memory":
        s = MemoryStore()
        return s, s
    return SQLiteStore(tmp_path / "r.sqlite3"), SQLiteStore(tmp_path / "r.sqlite3")


def test_each_change_is_reported_once_with_what_moved(two_views):
    lec, mine = two_views
    code, h = room(lec)
    other, _ = room(lec, "FGHJK")
    calls = []
    w = RoomWatcher(lambda: mine, lambda: [code, other], lambda c, what: calls.append((c, what)))
    assert w.tick() == [] and calls == []  # first sight: only the marks
    assert w.tick() == []  # nothing moved
    lec.publish(code, h, View.of("heads", {"text": "a dog"}))
    assert w.tick() == [(code, "view")] and calls == [(code, "view")]
    assert w.tick() == []
    lec.set_poll(code, h, Poll("p1", Q))
    assert w.tick() == [(code, "poll")]
    lec.publish(code, h, View.of("overview", {}))
    lec.set_poll(code, h, Poll("p1", Q, "closed"))
    assert w.tick() == [(code, "view"), (code, "poll")]  # both in one beat
    lec.end(code, h)
    assert w.tick() == [(code, "end")]
    assert [c for c, _ in calls].count(other) == 0  # the other room never moved


def test_rooms_no_longer_watched_are_forgotten_and_a_bad_read_is_skipped(two_views):
    lec, mine = two_views
    code, h = room(lec)
    watched = [code]
    w = RoomWatcher(lambda: mine, lambda: list(watched), lambda c, what: None)
    w.tick()
    watched.clear()
    w.tick()
    lec.publish(code, h, View.of("heads", {}))
    watched.append(code)
    assert w.tick() == []  # seen again for the first time: a mark, no stale change

    class Down:
        def state(self, code):
            raise StoreUnavailable("down")
    w2 = RoomWatcher(lambda: Down(), lambda: [code], lambda c, what: None)
    assert w2.tick() == []


def test_the_thread_reports_a_change_by_itself():
    s = MemoryStore()
    code, h = room(s)
    seen = threading.Event()
    w = RoomWatcher(lambda: s, lambda: [code], lambda c, what: seen.set(), every=0.01)
    w.ensure_running()
    w.ensure_running()  # one thread
    try:
        assert w.running
        for _ in range(1000):  # until the watcher's first read (its mark)
            if w._last.get(code) is not None:
                break
            threading.Event().wait(0.01)
        s.publish(code, h, View.of("heads", {}))
        assert seen.wait(10)
    finally:
        w.stop()
