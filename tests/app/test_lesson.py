"""AppTest: lesson mode steps forward and back (step in the URL), reveals answers with the live
numbers, and renders in presentation mode."""
import re

import numpy as np

from tests.helpers import app_test, errors

PAGE = "pages/lesson.py"


def open_lesson(**query):
    at = app_test()
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at), errors(at)
    return at


def header(at) -> str:
    return at.header[0].value


def test_steps_forward_and_back():
    at = open_lesson()
    assert header(at).startswith("1 ·")
    assert at.button(key="lesson_back").disabled
    at.button(key="lesson_next").click().run()
    assert header(at).startswith("2 ·") and at.query_params.get("lesson_step") in ("2", ["2"])
    at.button(key="lesson_next").click().run()
    assert header(at).startswith("3 ·")
    at.button(key="lesson_back").click().run()
    assert header(at).startswith("2 ·")
    assert not errors(at)


def test_step_from_url_and_last_step():
    at = open_lesson(lesson_step="9")
    assert header(at).startswith("9 · Output projection")
    assert at.button(key="lesson_next").disabled
    at = open_lesson(lesson_step="99")  # invalid -> first step, no crash
    assert header(at).startswith("1 ·")


def test_number_question_reveals_live_answer():
    at = open_lesson(lesson_step="2")
    prompt = next(m.value for m in at.markdown if "How many dimensions" in m.value)
    D, H = (int(x) for x in re.findall(r"\*\*(\d+)\*\*", prompt)[:2])
    assert at.button(key="lq_d_k__check").disabled  # nothing committed yet
    at.number_input(key="lq_d_k__answer").set_value(D // H).run()
    at.button(key="lq_d_k__check").click().run()
    assert not errors(at)
    ok = " ".join(s.value for s in at.success)
    assert "Right" in ok and f"{D} / {H} = **{D // H}**" in ok
    at.button(key="lq_d_k__reset").click().run()
    assert not at.success or "d_model / h" not in " ".join(s.value for s in at.success)


def test_choice_question_wrong_answer_is_explained():
    at = open_lesson(lesson_step="4")
    r = at.radio(key="lq_scale_effect__answer")
    r.set_value("more peaked").run()
    at.button(key="lq_scale_effect__check").click().run()
    err = " ".join(e.value for e in at.error)
    assert "You said more peaked" in err and "flatter" in err
    # the explanation quotes the live numbers: two weights, unscaled vs scaled
    nums = [float(x) for x in re.findall(r"would be (\d\.\d{3}); with scaling it is (\d\.\d{3})", err)[0]]
    assert nums[0] >= nums[1] - 1e-9


def test_self_weight_question_uses_trace():
    at = open_lesson(lesson_step="6")
    at.number_input(key="lq_self_weight__answer").set_value(0.5).run()
    at.button(key="lq_self_weight__check").click().run()
    text = " ".join(x.value for x in list(at.success) + list(at.error))
    w = float(re.search(r"The weight is \*\*(\d\.\d{4})\*\*", text).group(1))
    assert 0.0 <= w <= 1.0
    row = [float(x) for x in re.search(r"The whole row is \[([^\]]+)\]", text).group(1).replace("…", "").split(",") if x.strip()]
    assert abs(sum(row) - 1.0) < 0.01 or len(row) >= 12


def test_presentation_mode():
    at = open_lesson(present="true", lesson_step="6")
    assert not errors(at)
    assert at.button(key="lesson_leave_present") is not None
    css = " ".join(str(h.proto) for h in at.get("html"))
    assert "stSidebar" in css and "font-size" in css
    at.button(key="lesson_leave_present").click().run()
    assert not errors(at) and not at.session_state["present"]


def test_head_and_query_change_numbers():
    at = open_lesson(lesson_step="6")
    t1 = next(m.value for m in at.markdown if m.value.startswith("Each row becomes"))
    at.selectbox(key="lesson_query").set_value(0).run()
    t2 = next(m.value for m in at.markdown if m.value.startswith("Each row becomes"))
    assert t1 != t2
    # causal run: the first token attends only to itself
    if at.session_state["mask"] == "causal":
        assert "[1.000, 0.000" in t2
