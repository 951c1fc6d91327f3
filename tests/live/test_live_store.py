"""The room store: one suite, run against both backends (in-process and a real redis-server)."""
from __future__ import annotations

import random
import string
import time

import pytest

from classroom.live import (CODE_ALPHABET, Answer, NotLecturer, Poll, PollQuestion, RoomGone, StoreFull,
                            StoreUnavailable, View, new_code, new_token, normalize_code, open_store, token_hash)
from classroom.live.redis_store import RedisStore

Q = PollQuestion(prompt="2 + 2?", kind="choice", answer="4", options=("3", "4", "5"))


def room(store, code="ABCDE"):
    tok = new_token()
    assert store.create(code, token_hash(tok)) is not None
    return code, token_hash(tok)


def test_codes_have_no_look_alikes():
    assert not set("0O1IL") & set(CODE_ALPHABET)
    codes = {new_code() for _ in range(200)}
    assert all(len(c) == 5 and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert len(codes) > 190  # random, not a counter
    assert normalize_code(" abc-de ") == "ABCDE"
    assert normalize_code("ABCD") == "ABCD" and normalize_code("ABCDEF") == "ABCDEF"
    for bad in ("ABC", "ABCDEFG", "ABCD0", "ABCDO", "ABCD1", "ABCDI", "ABCDL", "", None, "AB/DE"):
        assert normalize_code(bad) is None, bad


def test_codes_use_every_letter_and_digit_but_the_look_alikes():
    """31 characters: A-Z and 2-9 without 0/O, 1/I/L (a code space of 31^5), each one typed or drawn."""
    want = set(string.ascii_uppercase + string.digits) - set("0O1IL")
    assert len(want) == 31 and len(CODE_ALPHABET) == 31 and set(CODE_ALPHABET) == want
    for c in sorted(want):
        assert normalize_code(c * 5) == c * 5 and normalize_code(c.lower() * 4) == c * 4, c
    rng = random.Random(7)
    drawn = "".join(new_code(rng) for _ in range(400))  # 2,000 draws: each of the 31 appears
    assert set(drawn) == want


def test_create_publish_and_versions(store):
    code, h = room(store)
    assert store.create(code, token_hash("other")) is None  # the code is taken
    st = store.state(code)
    assert (st.status, st.view_version, st.poll_version) == ("open", 0, 0)
    assert store.view(code) == (st, None)
    v = View.of("lesson", {"text": "the cat", "lesson_step": "3"})
    assert store.publish(code, h, v) == 1
    assert store.publish(code, h, View.of("", {})) == 2
    st2, view = store.view(code)
    assert view == View.of("", {}) and st2.view_version == 2 and st2.epoch == st.epoch
    assert store.state("ZZZZZ") is None and store.view("ZZZZZ") is None


def test_only_the_lecturer_token_drives_a_room(store):
    code, h = room(store)
    store.publish(code, h, View.of("heads", {"text": "mine"}))
    for bad in (token_hash("guess"), "", token_hash(""), h[:-1] + ("0" if h[-1] != "0" else "1")):
        with pytest.raises(NotLecturer):
            store.publish(code, bad, View.of("heads", {"text": "hacked"}))
        with pytest.raises(NotLecturer):
            store.set_poll(code, bad, Poll("p1", Q))
        with pytest.raises(NotLecturer):
            store.end(code, bad)
        assert not store.is_lecturer(code, bad)
    assert store.is_lecturer(code, h)
    st, view = store.view(code)
    assert view.params == (("text", "mine"),) and st.status == "open" and st.poll_version == 0
    with pytest.raises(RoomGone):
        store.publish("QQQQQ", h, View.of("", {}))


def test_token_is_stored_as_a_hash(store, backend):
    tok = new_token()
    store.create("HASHD", token_hash(tok))
    if backend.startswith("redis"):
        import redis
        raw = redis.Redis.from_url(backend).hgetall("live:{HASHD}:room")
        assert tok.encode() not in b"".join(list(raw.keys()) + list(raw.values()))
    elif backend == "memory":
        assert tok not in repr(store._rooms)
    else:  # the SQLite file and its write-ahead log
        assert token_hash(tok).encode() in store.path.read_bytes() + store.path.with_name(store.path.name + "-wal").read_bytes()
        assert tok.encode() not in store.path.read_bytes() + store.path.with_name(store.path.name + "-wal").read_bytes()


def test_poll_answers_one_per_session_changeable_until_closed(store):
    code, h = room(store)
    assert store.answer(code, "p1", "s1", Answer("p1", "4")) is False  # no poll yet
    pv = store.set_poll(code, h, Poll("p1", Q))
    assert store.poll(code) == Poll("p1", Q) and store.state(code).poll_version == pv
    assert store.answer(code, "p1", "s1", Answer("p1", "3", "ann"))
    assert store.answer(code, "p1", "s1", Answer("p1", "4", "ann"))  # changed, not added
    assert store.answer(code, "p1", "s2", Answer("p1", "5"))
    for _ in range(20):  # many posts from one session: still one answer
        store.answer(code, "p1", "s2", Answer("p1", "3"))
    got = store.answers(code, "p1")
    assert {s: a.value for s, a in got.items()} == {"s1": "4", "s2": "3"} and got["s1"].nickname == "ann"
    assert store.answer(code, "p0", "s3", Answer("p0", "4")) is False  # another poll's id
    assert store.answer(code, "p1", "s3", Answer("p0", "4")) is False  # an answer labelled for another poll
    store.set_poll(code, h, Poll("p1", Q, "closed"))
    assert store.answer(code, "p1", "s1", Answer("p1", "5")) is False
    assert store.answers(code, "p1")["s1"].value == "4"  # closing keeps the answers
    store.set_poll(code, h, Poll("p1", Q, "revealed"))
    assert len(store.answers(code, "p1")) == 2
    store.set_poll(code, h, Poll("p2", Q))  # a new poll starts empty
    assert store.answers(code, "p2") == {} and store.answers(code, "p1") == {}
    store.set_poll(code, h, None)
    assert store.poll(code) is None


def test_answers_are_capped(make_store):
    store = make_store(max_answers=3)
    code, h = room(store)
    store.set_poll(code, h, Poll("p", Q))
    assert [store.answer(code, "p", f"s{i}", Answer("p", "4")) for i in range(5)] == [True] * 3 + [False] * 2
    assert store.answer(code, "p", "s0", Answer("p", "5"))  # an existing session may still change its answer
    assert len(store.answers(code, "p")) == 3


def test_end_the_class(store):
    code, h = room(store)
    store.set_poll(code, h, Poll("p", Q))
    before = store.state(code).poll_version
    store.end(code, h)
    st = store.state(code)
    assert st.status == "ended" and st.poll_version > before
    assert store.answer(code, "p", "s", Answer("p", "4")) is False
    with pytest.raises(NotLecturer):  # an ended room is read-only, even for its lecturer
        store.publish(code, h, View.of("", {}))
    assert not store.is_lecturer(code, h)


def test_presence_counts_the_last_ten_seconds(store, clock):
    code, _ = room(store)
    for i in range(5):
        store.state(code, seen=f"s{i}")
    assert store.present(code) == 5
    clock.advance(6)
    store.state(code, seen="s0")
    store.state(code, seen="s1")
    assert store.present(code) == 5
    clock.advance(5)  # s2..s4 last seen 11 s ago
    assert store.present(code) == 2
    assert store.present("NOONE") == 0


def test_presence_is_bounded(make_store, clock):
    store = make_store(max_present=10)
    code, _ = room(store)
    for i in range(50):
        store.state(code, seen=f"s{i}")
        clock.advance(0.01)
    assert store.present(code) == 10


def test_presence_keeps_the_newest_check_ins(make_store, clock):
    """Past max_present, the sessions that checked in longest ago are pruned, never the newest (a
    session checking in again is new again)."""
    store = make_store(max_present=10)
    code, _ = room(store)
    for i in range(20):  # s0 at t0, s1 at t0 + 1 s, ..., s19 at t0 + 19 s
        store.state(code, seen=f"s{i}")
        clock.advance(1)
    store.state(code, seen="s0")  # at t0 + 20 s: prunes s10 (now the oldest), keeps s0
    assert store.present(code, window=60) == 10
    assert store.present(code, window=10.5) == 10  # s0 and s11..s19: all seen in the last 10.5 s
    assert store.present(code, window=0.5) == 1  # s0, just now


def test_expired_rooms_free_their_places(make_store, clock):
    """A full server does not stay full: rooms that expired make room for new ones."""
    store = make_store(max_rooms=2, ttl=600)
    room(store, "AAAAA")
    room(store, "BBBBB")
    with pytest.raises(StoreFull):
        room(store, "CCCCC")
    clock.advance(601)  # both expired (nothing else has looked at them since)
    room(store, "CCCCC")
    room(store, "DDDDD")
    with pytest.raises(StoreFull):
        room(store, "EEEEE")


def test_rooms_are_bounded(make_store):
    store = make_store(max_rooms=3)
    for c in ("AAAAA", "BBBBB", "CCCCC"):
        room(store, c)
    with pytest.raises(StoreFull):
        room(store, "DDDDD")
    assert store.rooms() == 3


def test_restore_after_the_store_lost_a_room(store):
    """The lecturer's session re-creates its room (Redis restarted empty): a new epoch, so a
    follower that applied version 1 of the old room applies the restored view too."""
    code, h = room(store)
    store.publish(code, h, View.of("heads", {"text": "a"}))
    old = store.state(code)
    ans = {"s1": Answer("p", "4"), "s2": Answer("p", "3"), "s3": Answer("old", "5")}
    assert store.create(code, h, view=View.of("heads", {"text": "a"})) is None  # still there: no restore
    # simulate the loss: a fresh store of the same kind would be empty; here the room's code differs
    st = store.create("RSTRD", h, epoch="e2", view=View.of("heads", {"text": "a"}), poll=Poll("p", Q), answers=ans)
    assert st.epoch == "e2" and st.view_key != old.view_key
    assert store.view("RSTRD")[1] == View.of("heads", {"text": "a"})
    assert store.poll("RSTRD") == Poll("p", Q)
    assert {s: a.value for s, a in store.answers("RSTRD", "p").items()} == {"s1": "4", "s2": "3"}
    store.publish("RSTRD", h, View.of("flow", {}))


def test_views_are_bounded(store):
    code, h = room(store)
    with pytest.raises(ValueError):
        store.publish(code, h, View.of("heads", {"text": "x" * 20_000}))


def test_memory_rooms_expire_after_idle_hours(clock):
    store = open_store("", clock=clock, ttl=3 * 3600, ended_ttl=600)
    code, h = room(store)
    clock.advance(2 * 3600)
    store.state(code, seen="s1")  # students checking in do not keep a room alive ...
    store.keepalive(code, h)  # ... the lecturer does
    clock.advance(2.9 * 3600)
    assert store.state(code) is not None
    clock.advance(0.2 * 3600)
    assert store.state(code) is None and store.rooms() == 0
    code2, h2 = room(store, "EEEEE")
    store.end(code2, h2)
    clock.advance(601)
    assert store.state(code2) is None


def test_rooms_live_four_idle_hours_by_default(store, backend, clock):
    assert store.ttl == 4 * 3600
    code, h = room(store)
    if backend.startswith("redis"):  # Redis expires the keys on its own clock
        import redis
        assert 3.9 * 3600 * 1000 < redis.Redis.from_url(backend).pttl(f"live:{{{code}}}:room") <= 4 * 3600 * 1000
    else:
        clock.advance(3.9 * 3600)
        assert store.state(code) is not None
        clock.advance(0.2 * 3600)
        assert store.state(code) is None


def test_keepalive_needs_the_lecturer_token(make_store, backend, clock):
    """Only the lecturer keeps a room alive: a keep-alive with another token is refused and the
    room expires when it would have."""
    store = make_store(ttl=600)
    code, h = room(store)
    for bad in (token_hash("guess"), "", h[:-1] + ("0" if h[-1] != "0" else "1")):
        with pytest.raises(NotLecturer):
            store.keepalive(code, bad)
    with pytest.raises(RoomGone):
        store.keepalive("QQQQQ", h)
    if backend.startswith("redis"):  # Redis expires on its own clock: a refused keep-alive with a 3-hour ttl renews nothing
        import redis
        with pytest.raises(NotLecturer):
            make_store(ttl=3 * 3600).keepalive(code, token_hash("guess"))
        assert 0 < redis.Redis.from_url(backend).pttl(f"live:{{{code}}}:room") <= 600 * 1000
        make_store(ttl=3 * 3600).keepalive(code, h)  # the lecturer's does
        assert redis.Redis.from_url(backend).pttl(f"live:{{{code}}}:room") > 600 * 1000
    else:
        clock.advance(590)
        with pytest.raises(NotLecturer):
            store.keepalive(code, token_hash("guess"))
        clock.advance(20)
        assert store.state(code) is None  # expired at 600 s: the refused keep-alive did not extend it
        code2, h2 = room(store, "FFFFF")
        clock.advance(590)
        store.keepalive(code2, h2)
        clock.advance(20)
        assert store.state(code2) is not None


def test_redis_rooms_expire(redis_server):
    """Every key of a room carries the room's expiry; the lecturer's writes renew it."""
    import redis
    r = redis.Redis.from_url(redis_server.url)
    r.flushdb()
    store = open_store(redis_server.url, ttl=3 * 3600)
    code, h = room(store, "TTLRM")
    store.set_poll(code, h, Poll("p", Q))
    store.answer(code, "p", "s1", Answer("p", "4"))
    store.state(code, seen="s1")
    keys = [k.decode() for k in r.keys("live:{TTLRM}:*")]
    assert sorted(keys) == ["live:{TTLRM}:answers", "live:{TTLRM}:clients", "live:{TTLRM}:room", "live:{TTLRM}:seen"]
    for k in keys:
        assert 2.9 * 3600 * 1000 < r.pttl(k) <= 3 * 3600 * 1000, k
    store.end(code, h)
    assert 0 < r.pttl("live:{TTLRM}:room") <= 3600 * 1000  # an ended room: an hour
    short = open_store(redis_server.url, ttl=0.3)
    room(short, "SHORT")
    deadline = time.time() + 10
    while short.state("SHORT") is not None and time.time() < deadline:
        time.sleep(0.05)
    assert short.state("SHORT") is None
    assert not r.keys("live:{SHORT}:*")


def test_two_processes_share_rooms_through_redis(redis_server):
    import redis
    redis.Redis.from_url(redis_server.url).flushdb()
    a, b = open_store(redis_server.url), open_store(redis_server.url)  # as two replicas would
    code, h = room(a, "SHARE")
    a.publish(code, h, View.of("flow", {"text": "x"}))
    assert b.view(code)[1] == View.of("flow", {"text": "x"})
    b.set_poll(code, h, Poll("p", Q))  # the lecturer's session may be on either replica
    assert a.answer(code, "p", "s1", Answer("p", "4")) and b.answers(code, "p")["s1"].value == "4"


def test_redis_unreachable_and_restarted(redis_server):
    from deploy.redis_local import LocalRedis
    down = open_store("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailable):
        down.state("ABCDE")
    with pytest.raises(StoreUnavailable):
        down.create("ABCDE", "h")
    with LocalRedis() as r:
        store = open_store(r.url)
        code, h = room(store, "RSTRT")
        store.set_poll(code, h, Poll("p", Q))
        r.stop()
        with pytest.raises(StoreUnavailable):
            store.state(code)
        r.start()  # same port, empty (nothing saved): the client reconnects and the scripts reload
        assert store.state(code) is None
        assert store.create(code, h, poll=Poll("p", Q)) is not None
        assert store.answer(code, "p", "s", Answer("p", "4"))


def test_open_store_urls():
    assert type(open_store(None)).__name__ == "SQLiteStore" and type(open_store("memory")).__name__ == "MemoryStore"
    assert isinstance(open_store("redis://127.0.0.1:6399/2"), RedisStore)  # connects lazily
    with pytest.raises(ValueError):
        open_store("postgres://x")
