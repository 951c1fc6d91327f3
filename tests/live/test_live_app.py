"""AppTest: a lecturer session and student sessions in one process (one room store), driving the
real app.py: start, join, follow (page and every bound control), explore alone and come back, a
poll round, ending the class, and what students cannot do. The main flow runs on both backends."""
from __future__ import annotations

import os

import pytest

from classroom.live import token_hash
from tests.helpers import app_test, errors


def alerts(at, kind: str) -> list[str]:
    return [a.value for a in getattr(at, kind)]


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + \
            [a.value for k in ("info", "warning", "error", "success") for a in getattr(at, k)] + \
            [c.value for c in at.code]
    return "\n".join(parts)


@pytest.fixture
def room_store(backend, monkeypatch):
    """ROOM_STORE for the app sessions of this test ("" = in-process)."""
    monkeypatch.setenv("ROOM_STORE", backend)
    return backend


def start_class():
    lec = app_test()
    lec.run()
    lec.button(key="live_start").click().run()
    assert not errors(lec), errors(lec)
    return lec, lec.session_state["_live"].code


def student(code: str, **query):
    at = app_test()
    at.query_params["room"] = code
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not errors(at), errors(at)
    return at


def test_start_shows_code_link_and_qr_never_the_token(room_store, monkeypatch):
    from ui.live import qr_svg
    monkeypatch.setenv("ATTN_LAB_PUBLIC_URL", "https://attention.example.edu/")  # a link phones can open
    lec, code = start_class()
    ls = lec.session_state["_live"]
    assert len(code) == 5 and ls.role == "lecturer" and len(ls.token) >= 32
    link = f"https://attention.example.edu/?room={code}"
    assert link in [c.value for c in lec.code]
    img = lec.get("image")[0].proto.imgs[0].url
    import base64
    svg = base64.b64decode(img.split(",", 1)[1]).decode()
    # the QR code of the join link (Streamlit adds the SVG namespace)
    assert " ".join(svg.replace('xmlns="http://www.w3.org/2000/svg"', "").split()) == " ".join(qr_svg(link).split())
    assert ls.token not in texts(lec) and ls.token not in svg and ls.token not in str(dict(lec.query_params))
    stu = student(code)
    page = texts(stu) + str(dict(stu.query_params)) + str([w.value for w in stu.text_input])
    assert ls.token not in page and token_hash(ls.token) not in page
    assert f"Following room {code}" in texts(stu)


def test_students_follow_page_and_controls(room_store):
    lec, code = start_class()
    stu = student(code)
    lec.sidebar.text_input(key="text").input("the cat sat on the mat .").run()
    lec.sidebar.radio(key="mask").set_value("bidirectional").run()
    lec.sidebar.slider(key="T").set_value(5).run()
    lec.switch_page("pages/lesson.py").run()
    lec.button(key="lesson_next").click().run()
    lec.button(key="lesson_next").click().run()
    lec.selectbox(key="lesson_head").set_value(2).run()
    assert not errors(lec)
    stu.run()  # what the student's fragment triggers when the room's version changed
    s = stu.session_state
    assert (s["text"], s["mask"], s["T"], s["lesson_step"], s["lesson_head"]) == \
           ("the cat sat on the mat .", "bidirectional", 5, 3, 2)
    assert [t.value for t in stu.title] == ["Lesson mode"]
    q = dict(stu.query_params)
    assert q["room"] == code and q["text"] == "the cat sat on the mat ." and q["lesson_step"] == "3"
    assert q["mask"] == "bidirectional" and q["T"] == "5" and "alone" not in q
    # the heads page with a layer and the head detail (a fragment rerun on the lecturer's side)
    lec.switch_page("pages/heads.py").run()
    lec.sidebar.slider(key="T").set_value(64).run()
    lec.selectbox(key="layer").set_value(1).run()
    stu.run()
    assert stu.session_state["layer"] == 1 and stu.session_state["T"] == 64
    assert [t.value for t in stu.title] == ["Attention heads"] and not errors(stu)
    assert "lesson_step" not in dict(stu.query_params)  # nothing left over from the old view


def test_a_second_student_on_a_fresh_session_gets_the_current_view(room_store):
    lec, code = start_class()
    lec.sidebar.text_input(key="text").input("a dog ran to the park .").run()
    lec.switch_page("pages/overview.py").run()
    stu = student(code)
    stu.run()  # the page switch happens on the first run
    assert stu.session_state["text"] == "a dog ran to the park ." and [t.value for t in stu.title] == ["All heads overview"]


def test_explore_alone_and_come_back(room_store):
    lec, code = start_class()
    stu = student(code)
    stu.button(key="live_explore").click().run()
    assert dict(stu.query_params)["alone"] == "true" and "Exploring on your own" in texts(stu)
    stu.sidebar.text_input(key="text").input("my own sentence .").run()
    lec.sidebar.text_input(key="text").input("the lecturer's sentence .").run()
    stu.run()
    assert stu.session_state["text"] == "my own sentence ." and dict(stu.query_params)["text"] == "my own sentence ."
    stu.button(key="live_back").click().run()
    stu.run()
    assert stu.session_state["text"] == "the lecturer's sentence ." and "alone" not in dict(stu.query_params)
    assert f"Following room {code}" in texts(stu)
    # changing a control while following is exploring too: the lecturer's next change leaves it alone
    stu.sidebar.radio(key="mask").set_value("bidirectional").run()
    assert not stu.session_state["_live"].following and dict(stu.query_params)["alone"] == "true"
    lec.sidebar.text_input(key="text").input("another one .").run()
    stu.run()
    assert stu.session_state["text"] == "the lecturer's sentence ." and stu.session_state["mask"] == "bidirectional"


def test_students_cannot_drive_the_room(room_store):
    lec, code = start_class()
    lec.sidebar.text_input(key="text").input("the lecturer's view .").run()
    ls = lec.session_state["_live"]
    from ui.live import store
    before = store().view(code)
    # a replayed join link with extra parameters, a forged lecturer token, then controls changed
    evil = student(code, text="injected text", lecturer="forged-token", layer="1")
    assert "lecturer link is not valid" in texts(evil) and evil.session_state["_live"].role == "student"
    evil.sidebar.text_input(key="text").input("student drives").run()
    evil.switch_page("pages/flow.py").run()
    assert not errors(evil)
    assert store().view(code) == before  # neither the view nor its version moved
    other = student(code)
    assert other.session_state["text"] == "the lecturer's view ."
    # a student session has no lecturer controls, and its buttons change nothing in the room
    keys = {b.key for b in evil.button}
    assert not keys & {"live_end", "live_poll_open", "live_poll_reveal"}
    assert store().state(code).status == "open" and lec.session_state["_live"].role == "lecturer"
    assert ls.token not in str(evil.session_state["_live"])


def test_poll_round_one_answer_per_session_and_reveal(room_store):
    lec, code = start_class()
    lec.session_state["live_poll_box"] = True
    lec.run()
    lec.button(key="live_poll_open").click().run()
    poll = lec.session_state["_live"].poll
    assert poll is not None and poll.state == "open"
    a, b = student(code), student(code)
    right = poll.question.answer
    wrong = next(o for o in poll.question.options if o != right)
    ra = next(r for r in a.radio if r.key == f"live_answer_{poll.id}")
    for value in (wrong, right, wrong, right):  # one session answering again and again: one answer
        ra.set_value(value).run()
    b.text_input(key="live_nick").input("bo").run()
    next(r for r in b.radio if r.key == f"live_answer_{poll.id}").set_value(wrong).run()
    lec.run()
    panel = texts(lec)
    assert "2 answers" in panel and "**2** following · **0** exploring" in panel
    import html as H
    from classroom.live import option_words
    bars = " ".join(h.proto.body for h in lec.get("html") if "poll-bars" in h.proto.body)
    assert f'{H.escape(option_words(right))}</span>' in bars and bars.count("1 · 50%") == 2, bars
    lec.button(key="live_poll_reveal").click().run()
    a.run()
    b.run()
    assert any("Right" in s for s in alerts(a, "success")), texts(a)
    assert any("the answer is" in e for e in alerts(b, "error")), texts(b)
    from classroom.live import poll_csv
    from ui.live import store
    csv = poll_csv(store().poll(code), list(store().answers(code, poll.id).values()))
    assert csv.count("\n") == 3 and ",bo," in csv


def test_end_the_class(room_store):
    lec, code = start_class()
    lec.sidebar.text_input(key="text").input("last view .").run()
    stu = student(code)
    lec.button(key="live_end").click().run()
    assert "_live" not in lec.session_state and "has ended" in texts(lec)
    stu.run()
    assert "The class has ended" in texts(stu) and stu.session_state["text"] == "last view ."
    assert "room" not in dict(stu.query_params) and stu.get("plotly_chart")
    late = app_test()
    late.query_params["room"] = code
    late.run()
    assert f"The class {code} has ended" in texts(late) and not errors(late)


def test_mistyped_and_unknown_codes(room_store):
    for raw, says in (("K7", "is not a class code"), ("ZZZZZ", "No live class has the code ZZZZZ")):
        at = app_test()
        at.query_params["room"] = raw
        at.run()
        assert says in texts(at) and not errors(at)
        assert "room" not in dict(at.query_params) and at.get("plotly_chart")  # the app works as usual
    lec, code = start_class()
    lec.sidebar.text_input(key="text").input("typed code .").run()
    at = app_test()
    at.run()
    at.sidebar.text_input(key="live_join_code").input(f" {code.lower()[:2]}-{code.lower()[2:]} ")
    next(b for b in at.button if "live_join_form" in (b.key or "")).click().run()
    at.run()
    assert not errors(at) and at.session_state["text"] == "typed code ." and dict(at.query_params)["room"] == code


def test_store_unreachable_says_so_and_the_app_works(monkeypatch):
    monkeypatch.setenv("ROOM_STORE", "redis://127.0.0.1:1/0")
    at = app_test()
    at.run()
    at.button(key="live_start").click().run()
    assert not errors(at) and any("live class is unavailable" in e for e in alerts(at, "error"))
    assert at.get("plotly_chart") and "_live" not in at.session_state
    stu = app_test()
    stu.query_params["room"] = "ABCDE"
    stu.run()
    assert not errors(stu) and "live class is unavailable" in texts(stu) and stu.get("plotly_chart")


def test_redis_restart_mid_class_the_lecturer_restores_the_room(redis_server, monkeypatch):
    import redis
    redis.Redis.from_url(redis_server.url).flushdb()
    monkeypatch.setenv("ROOM_STORE", redis_server.url)
    lec, code = start_class()
    lec.sidebar.text_input(key="text").input("before the restart .").run()
    lec.session_state["live_poll_box"] = True
    lec.run()
    lec.button(key="live_poll_open").click().run()
    stu = student(code)
    assert stu.session_state["text"] == "before the restart ."
    poll = lec.session_state["_live"].poll
    next(r for r in stu.radio if r.key == f"live_answer_{poll.id}").set_value(poll.question.answer).run()
    lec.run()  # the lecturer's panel shows (and keeps) the answers
    assert "1 answer · open" in texts(lec)
    redis_server.stop()
    stu.run()
    lec.run()
    assert not errors(stu) and not errors(lec)
    assert "unavailable" in texts(stu) and "unavailable" in texts(lec) and stu.get("plotly_chart")
    redis_server.start()  # empty: nothing was saved
    stu.run()
    assert "not available right now" in texts(stu) and not errors(stu)
    lec.run()  # the lecturer's panel restores the room: same code and token, its view, poll and answers
    assert redis.Redis.from_url(redis_server.url).exists(f"live:{{{code}}}:room")
    from ui.live import store
    assert {a.value for a in store().answers(code, poll.id).values()} == {poll.question.answer}
    assert "1 answer · open" in texts(lec)
    lec.sidebar.text_input(key="text").input("after the restart .").run()
    stu.run()
    stu.run()
    assert stu.session_state["text"] == "after the restart ." and not errors(stu)
    assert stu.session_state["_live"].poll is not None and "Class poll" in texts(stu)


def test_private_lecturer_link_resumes_the_seat_and_leaves_the_address_bar(room_store):
    lec, code = start_class()
    token = lec.session_state["_live"].token
    again = app_test()  # the lecturer's reload, or another device
    again.query_params["room"] = code
    again.query_params["lecturer"] = token
    again.run()
    ls = again.session_state["_live"]
    assert ls.role == "lecturer" and ls.code == code and not errors(again)
    assert "lecturer" not in dict(again.query_params) and "room" not in dict(again.query_params)
    again.sidebar.text_input(key="text").input("from the second device .").run()
    stu = student(code)
    assert stu.session_state["text"] == "from the second device ."


def test_head_changed_in_the_head_detail_fragment_is_followed(room_store):
    lec, code = start_class()
    stu = student(code)
    lec.session_state["detail"] = True
    lec.run()
    lec.selectbox(key="head").set_value(3).run()
    assert dict(lec.query_params).get("head") == "3"
    stu.run()
    assert stu.session_state["head"] == 3 and stu.session_state["detail"] is True and not errors(stu)


def test_presentation_mode_stays_the_students_own(room_store):
    lec, code = start_class()
    lec.sidebar.toggle(key="present").set_value(True).run()
    lec.sidebar.text_input(key="text").input("on the projector .").run()
    stu = student(code)
    assert stu.session_state["text"] == "on the projector ." and stu.session_state["present"] is False
    assert "present" not in dict(stu.query_params)


def test_following_costs_one_trace_per_change(room_store, monkeypatch):
    """However many students follow, a new sentence is traced once (the shared trace cache)."""
    import ui.runs as compute
    calls = []
    real = compute._run

    def counting(source, text, causal, max_len, layer=None):  # layer: the heads page's partial trace
        calls.append(text)
        return real(source, text, causal, max_len, layer)

    monkeypatch.setattr(compute, "_run", counting)
    lec, code = start_class()
    text = f"one trace for the whole class {code.lower()} ."  # new to the (process-wide) trace cache
    students = [student(code) for _ in range(4)]
    lec.sidebar.text_input(key="text").input(text).run()
    for s in students:
        s.run()
        assert s.session_state["text"] == text
    assert calls.count(text) == 1


def test_a_lesson_question_as_a_class_poll(room_store):
    from classroom.lesson import build_lesson
    lec, code = start_class()
    lec.session_state["live_poll_box"] = True
    lec.run()
    pick = lec.sidebar.selectbox(key="live_q_pick")
    i = next(k for k, lab in enumerate(pick.options) if lab.startswith("Lesson step 3"))  # the shown labels
    pick.set_value(i).run()
    lec.button(key="live_poll_open").click().run()
    poll = lec.session_state["_live"].poll
    assert poll.question.source.startswith("lesson: step 3") and not errors(lec)
    # the answer is the lesson's, computed from the same trace
    import torch
    from model.checkpoint import load_checkpoint
    from tests.helpers import ROOT
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    enc = tok.encode(lec.session_state["text"])
    tr = model.trace(torch.tensor([enc.ids]), causal=True).numpy()
    steps = build_lesson(tr, enc.labels, n_heads=model.cfg.n_heads, causal=True, norm=model.cfg.norm)
    assert poll.question.prompt in [q.prompt for q in steps[2].questions]
    lq = next(q for q in steps[2].questions if q.prompt == poll.question.prompt)
    assert poll.question.check(lq.answer)
    stu = student(code)
    assert "Class poll" in texts(stu)


def test_why_this_token_as_a_class_poll(room_store):
    """"Which head writes most of X?" (direct logit attribution) is offered as a class poll; its
    answer is the head with the largest share, X the model's prediction, from the engine itself."""
    import numpy as np
    import torch

    from classroom.attribution import logit_attribution
    from model.checkpoint import load_checkpoint
    from tests.helpers import ROOT
    lec, code = start_class()
    lec.session_state["live_poll_box"] = True
    lec.run()
    pick = lec.sidebar.selectbox(key="live_q_pick")
    i = next(k for k, lab in enumerate(pick.options) if lab.startswith("Why this token?"))
    pick.set_value(i).run()
    lec.button(key="live_poll_open").click().run()
    poll = lec.session_state["_live"].poll
    assert not errors(lec) and "Why this token?" in poll.question.source
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = torch.tensor([tok.encode(lec.session_state["text"]).ids])
    tr = model.trace(ids, causal=True)
    target = int(torch.argmax(tr.logits[0, -1]))
    heads = np.asarray(logit_attribution(model, tr, target).heads)
    best = np.unravel_index(int(np.argmax(heads)), heads.shape)
    assert poll.question.answer == f"L{best[0]} H{best[1]}" and len(poll.question.options) == 4
    assert tok.decode([target]).strip() in poll.question.prompt
    assert "Class poll" in texts(student(code))


def test_the_app_store_keeps_rooms_four_idle_hours(monkeypatch):
    from ui import live
    monkeypatch.delenv("ROOM_STORE", raising=False)
    monkeypatch.delenv("ATTN_LAB_ROOM_TTL_HOURS", raising=False)
    monkeypatch.setattr(live, "_stores", {})
    assert live.store().ttl == 4 * 3600


@pytest.mark.parametrize("what", ["view", "poll", "end"])
def test_followers_already_up_to_date_are_not_rerun(monkeypatch, clock, what):
    """After the lecturer's change, this process reruns its followers' pages, except a follower
    whose own check has applied the room's current view (or poll) meanwhile: a second run right
    after the first would clear the first's messages not yet sent. The class's end reruns every
    follower."""
    from classroom.live import MemoryStore, Poll, PollQuestion, View
    from ui import live, runtime
    s = MemoryStore(clock=clock)
    h = token_hash("lecturer")
    s.create("ABCDE", h)
    s.publish("ABCDE", h, View.of("heads", {"text": "v1"}))
    s.publish("ABCDE", h, View.of("heads", {"text": "v2"}))
    s.set_poll("ABCDE", h, Poll("p1", PollQuestion(prompt="2 + 2?", kind="choice", answer="4", options=("3", "4"))))
    rs = s.state("ABCDE")
    old_view, old_poll = (rs.epoch, rs.view_version - 1), (rs.epoch, rs.poll_version - 1)
    up_to_date = live.LiveSession("ABCDE", "student", applied=rs.view_key, poll_key=rs.poll_key)
    behind = live.LiveSession("ABCDE", "student", applied=old_view, poll_key=old_poll)
    other_epoch = live.LiveSession("ABCDE", "student", applied=("old", rs.view_version), poll_key=("old", rs.poll_version))
    alone = live.LiveSession("ABCDE", "student", following=False)
    here = {"up": up_to_date, "behind": behind, "epoch": other_epoch, "alone": alone}
    asked: list[dict] = []
    monkeypatch.setattr(live, "store", lambda: s)
    monkeypatch.setattr(live, "followers_here", lambda code: dict(here) if code == "ABCDE" else {})
    monkeypatch.setattr(runtime, "rerun_idle_sessions", lambda sessions: asked.append(dict(sessions)) or len(sessions))
    live._rerun_followers("ABCDE", what)
    assert len(asked) == 1 and set(asked[0]) <= set(here)
    wanted = {sid: bool(asked[0][sid]()) if sid in asked[0] else False for sid in here}
    if what == "end":
        assert wanted == {"up": True, "behind": True, "epoch": True, "alone": False}
    else:
        assert wanted == {"up": False, "behind": True, "epoch": True, "alone": False}
    up_to_date.applied, up_to_date.poll_key = old_view, old_poll  # asked when its turn comes, not before
    assert asked[0]["up"]()


def test_the_panel_counts_students_seen_in_the_last_ten_seconds(monkeypatch, clock):
    """The lecturer's roster, "N following · M exploring": sessions that checked in within the last
    10 s (the room store's clock, moved by hand), by what each said it does (".f" follows, ".e"
    explores)."""
    from classroom.live import MemoryStore
    from ui import live
    monkeypatch.setenv("ROOM_STORE", "")
    monkeypatch.setitem(live._stores, "", MemoryStore(clock=clock))
    lec, code = start_class()
    for sid in ("a.f", "b.f", "c.e"):
        live.store().state(code, seen=sid)
    clock.advance(30)
    live.store().state(code, seen="d.f")
    live.store().state(code, seen="e.e")
    clock.advance(9)
    lec.run()
    assert "**1** following · **1** exploring" in texts(lec)
    clock.advance(2)
    lec.run()
    assert "**0** following · **0** exploring" in texts(lec)


def test_the_current_view_poll_asks_about_the_focused_head(room_store):
    lec, code = start_class()
    lec.session_state["focus"] = "1.3"
    lec.session_state["live_poll_box"] = True
    lec.run()
    pick = lec.sidebar.selectbox(key="live_q_pick")
    assert "(layer 1, head 3: the current view)" in pick.options[0]
    lec.button(key="live_poll_open").click().run()
    assert "layer 1, head 3" in lec.session_state["_live"].poll.question.prompt
