"""The room store on disk (SQLite, the default) and what every backend adds for the per-client limits:
a room, its poll and its answers survive a restart of the store; several processes share one file;
the file is in WAL mode with a busy timeout and a schema version; a bad ROOM_STORE says what is wrong;
answer_status tells a full poll from a closed one and caps one client's answers; hit() is a sliding
window shared by every process of the store."""
from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading

import pytest

from classroom.live import (Answer, Poll, PollQuestion, StoreMisconfigured, StoreUnavailable, View, new_token,
                            open_store, token_hash)
from classroom.live.sqlite_store import SCHEMA_VERSION, SQLiteStore, default_path

Q = PollQuestion(prompt="2 + 2?", kind="choice", answer="4", options=("3", "4", "5"))


def room(store, code="ABCDE"):
    h = token_hash(new_token())
    assert store.create(code, h) is not None
    return code, h


# --------------------------------------------------------------------------- every backend

def test_a_full_poll_is_not_a_closed_one(make_store):
    store = make_store(max_answers=3)
    code, h = room(store)
    assert store.answer_status(code, "p", "s0", Answer("p", "4")) == "closed"  # no poll yet
    store.set_poll(code, h, Poll("p", Q))
    assert [store.answer_status(code, "p", f"s{i}", Answer("p", "4")) for i in range(4)] == ["ok"] * 3 + ["full"]
    store.set_poll(code, h, Poll("p", Q, "closed"))
    assert store.answer_status(code, "p", "s9", Answer("p", "4")) == "closed"


def test_one_client_answers_at_most_its_cap_per_poll(store):
    code, h = room(store)
    store.set_poll(code, h, Poll("p", Q))
    got = [store.answer_status(code, "p", f"bot{i}", Answer("p", "3"), client="10.0.0.9", max_per_client=5)
           for i in range(8)]
    assert got == ["ok"] * 5 + ["client"] * 3
    # the capped client may still change the answers it gave; another client is not touched
    assert store.answer_status(code, "p", "bot0", Answer("p", "5"), client="10.0.0.9", max_per_client=5) == "ok"
    assert store.answer_status(code, "p", "stu", Answer("p", "4"), client="10.0.0.7", max_per_client=5) == "ok"
    assert len(store.answers(code, "p")) == 6 and store.answers(code, "p")["bot0"].value == "5"
    store.set_poll(code, h, Poll("p2", Q))  # a new poll: the client's count starts again
    assert store.answer_status(code, "p2", "bot7", Answer("p2", "3"), client="10.0.0.9", max_per_client=5) == "ok"


def test_hit_is_a_sliding_window(store, clock):
    assert [store.hit("start:10.0.0.1", 3, 600) for _ in range(3)] == [0.0] * 3
    wait = store.hit("start:10.0.0.1", 3, 600)
    assert 599 <= wait <= 600
    assert store.hit("start:10.0.0.2", 3, 600) == 0.0  # another client
    clock.advance(400)
    assert 199 <= store.hit("start:10.0.0.1", 3, 600) <= 200
    assert store.hit("start:10.0.0.1", 3, 600, record=False) > 0  # a look records nothing
    clock.advance(201)
    assert store.hit("start:10.0.0.1", 3, 600) == 0.0


# --------------------------------------------------------------------------- SQLite

def test_default_store_is_a_sqlite_file_under_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_LAB_DATA_DIR", str(tmp_path / "lab"))
    s = open_store("")
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "lab" / "rooms.sqlite3" == default_path()
    room(s)
    con = sqlite3.connect(s.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    con = s._acquire()  # a pooled connection
    assert con.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    s._release(con)
    s.close()


def test_rooms_polls_and_answers_survive_a_restart(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    a = SQLiteStore(path)
    code, h = room(a)
    a.publish(code, h, View.of("heads", {"text": "before"}))
    a.set_poll(code, h, Poll("p", Q))
    for i in range(30):
        assert a.answer(code, "p", f"s{i}", Answer("p", "4" if i % 3 else "5", f"n{i}"))
    before = a.state(code)
    del a  # the process dies without closing anything
    b = SQLiteStore(path)  # the restarted server
    assert b.state(code) == before
    assert b.view(code)[1] == View.of("heads", {"text": "before"}) and b.poll(code) == Poll("p", Q)
    got = b.answers(code, "p")
    assert len(got) == 30 and got["s0"].value == "5" and got["s1"].nickname == "n1"
    assert b.is_lecturer(code, h)  # the lecturer's token still drives the room
    assert b.publish(code, h, View.of("flow", {})) == before.view_version + 1


def _answer_many(path: str, code: str, who: str, n: int) -> None:
    s = SQLiteStore(path)
    for i in range(n):
        assert s.answer(code, "p", f"{who}-{i}", Answer("p", "4"))
        s.state(code, seen=f"{who}-{i}")


def test_several_processes_share_one_file(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    s = SQLiteStore(path)
    code, h = room(s)
    s.set_poll(code, h, Poll("p", Q))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_answer_many, args=(str(path), code, f"proc{k}", 60)) for k in range(3)]
    for p in procs:
        p.start()
    threads = [threading.Thread(target=_answer_many, args=(str(path), code, f"thread{k}", 40)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert len(s.answers(code, "p")) == 3 * 60 + 2 * 40  # none lost
    assert s.present(code, window=3600) == 3 * 60 + 2 * 40  # every check-in (a slow machine: not only the last 10 s)


def test_a_newer_schema_is_refused_in_words(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    SQLiteStore(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(StoreUnavailable, match="newer Attention Lab"):
        SQLiteStore(path)


def test_a_folder_that_cannot_hold_the_file_says_so(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        SQLiteStore(blocker / "rooms.sqlite3")


@pytest.mark.parametrize("url, says", [
    ("redis://host:notaport/0", "port must be a number"),
    ("redis://127.0.0.1:99999/0", "port must be a number"),
    ("redis://:6379/0", "names no Redis host"),
    ("redis://127.0.0.1:6379/zero", "database after the port must be a number"),
    ("postgres://x", "names no store this app knows"),
    ("sqlite://", "names no file"),
])
def test_a_bad_room_store_url_says_what_is_wrong(url, says):
    with pytest.raises(StoreMisconfigured, match=says) as info:
        open_store(url)
    assert isinstance(info.value, ValueError) and url in str(info.value)


def test_lock_and_who_is_seen(store, clock):
    from classroom.live import NotLecturer
    from classroom.live.rooms import LECTURER_SEEN
    code, h = room(store)
    assert store.state(code).locked is False and store.state(code).lecturer_at == 0.0
    with pytest.raises(NotLecturer):
        store.set_locked(code, token_hash("guess"), True)
    store.set_locked(code, h, True)
    assert store.state(code).locked is True
    store.state(code, seen=LECTURER_SEEN)
    t = clock()
    store.state(code, seen="aaaa.f")
    clock.advance(5)
    store.state(code, seen="bbbb.e")
    got = store.state(code)
    assert got.lecturer_at == pytest.approx(t, abs=1e-3) and got.locked
    assert set(store.seen_by(code)) == {LECTURER_SEEN, "aaaa.f", "bbbb.e"}
    clock.advance(6)
    assert set(store.seen_by(code)) == {"bbbb.e"}
    store.set_locked(code, h, False)
    assert store.state(code).locked is False


def test_calls_from_new_threads_reuse_pooled_connections(tmp_path, monkeypatch):
    """Streamlit runs every script run (a follower's check too) in a new thread: the store must not
    open a connection per thread. 60 calls, each from a thread of its own, open one connection; 12
    threads at once all get answers and at most POOL_IDLE connections stay open afterwards."""
    from classroom.live import sqlite_store
    s = SQLiteStore(tmp_path / "r.sqlite3")
    code, _ = room(s)
    opened = []
    real_open = s._open
    monkeypatch.setattr(s, "_open", lambda: opened.append(1) or real_open())

    def check(i, out):
        out.append(s.state(code, seen=f"{i:04x}.f"))
    got: list = []
    for i in range(60):
        t = threading.Thread(target=check, args=(i, got))
        t.start()
        t.join()
    assert len(got) == 60 and all(r is not None for r in got) and len(opened) == 0  # the pool's first one
    barrier = threading.Barrier(12)
    errors: list = []

    def at_once(i):
        barrier.wait()
        try:
            check(100 + i, got)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    ts = [threading.Thread(target=at_once, args=(i,)) for i in range(12)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and len(got) == 72
    assert len(s._idle) <= sqlite_store.POOL_IDLE
    assert len(s.seen_by(code, 60.0)) == 72
    s.close()
    assert s._idle == []
