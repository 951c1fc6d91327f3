"""Issue 21 (classroom UI problems), points 4, 5, 7, 9, 10, 12: each test fails on the code
before the fix (see the issue text quoted in each docstring)."""
from __future__ import annotations

import re

import numpy as np

from tests.helpers import app_test, errors, figures


def _open(page: str, **query):
    at = app_test()
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    return at


def _all_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [x.value for x in (*at.info, *at.warning, *at.success, *at.error)]
    parts += [h.value for h in (*at.title, *at.header, *at.subheader)]
    return "\n".join(str(p) for p in parts)


# ---------------------------------------------------------------- point 5: question before answer
def test_lesson_step1_asks_before_it_tells_the_shape():
    """'step 1 states the shape of X above "What is the shape of X?"'."""
    at = _open("pages/lesson.py")
    T, D = at.session_state["T"], None
    text = _all_text(at)
    assert "What is the shape of the input matrix X?" in text
    m = re.search(r"has \*\*(\d+) tokens\*\* and this model has \*\*d_model = (\d+)\*\*", text)
    T, D = int(m.group(1)), int(m.group(2))
    # before answering: no statement of the shape, no formula, no matrix of X
    assert "row of length d_model" not in text
    assert f"{T} × {D}**" not in text and not at.latex and not at.dataframe
    at.radio(key="lq_x_shape__answer").set_value(f"{T} × {D}").run()
    at.button(key="lq_x_shape__check").click().run()
    text = _all_text(at)
    assert "row of length d_model" in text and at.latex and at.dataframe  # revealed after the answer


def test_lesson_step3_heatmap_only_after_show():
    """'step 3 shows the score heatmap above "Which key gets the highest raw score?"'."""
    at = _open("pages/lesson.py", lesson_step="3")
    assert "highest raw score" in _all_text(at)
    assert figures(at) == []  # the heatmap would give the answer away
    at.button(key="lesson_showbtn_scores").click().run()
    assert len(figures(at)) == 1 and not errors(at)


# ---------------------------------------------------------------- point 12: clutter, notes
def test_mask_lab_has_one_csv_and_no_repeated_captions():
    """'the mask lab is about 6,000 px tall with 12 "CSV of these numbers" buttons and 12 identical
    "Heatmap: … exact values in the CSV below." captions'."""
    at = _open("pages/mask-lab.py")
    assert len(at.get("download_button")) <= 2
    caps = [c.value for c in at.caption]
    assert not any("exact values in the CSV below" in c for c in caps)
    assert len(caps) == len(set(caps))  # no caption twice
    assert len(figures(at)) <= 8


def test_no_page_points_to_notes_the_student_does_not_have():
    """'Pages refer to "notes 001/004" and "the handwritten notes"'."""
    for page, query in (("pages/lesson.py", {}), ("pages/lesson.py", {"lesson_step": "4"}),
                        ("pages/encoder-decoder.py", {}), ("pages/positional.py", {}), ("pages/scaling.py", {})):
        at = _open(page, **query)
        text = _all_text(at)
        assert "notes 00" not in text.lower() and "handwritten" not in text.lower(), page
