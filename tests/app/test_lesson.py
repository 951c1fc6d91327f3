"""AppTest: lesson mode steps forward and back (step in the URL), reveals answers with the live
numbers, and renders in presentation mode."""
import re
from functools import lru_cache

import numpy as np
import torch

from model.checkpoint import load_checkpoint
from tests.helpers import ROOT, errors, open_page

PAGE = "pages/lesson.py"


@lru_cache(maxsize=4)
def _model(name: str):
    return load_checkpoint(ROOT / "checkpoints" / name)


def engine_layer0(at):
    """What the lesson should show, recomputed here from the engine's trace: the model the page
    uses (the sidebar's Model, a shipped checkpoint loaded directly, not through ui.models),
    the sidebar's sentence and mask. Returns (model cfg, layer-0 AttentionTrace without batch)."""
    s = at.session_state
    name = s["src"]
    assert (ROOT / "checkpoints" / name / "config.json").is_file(), f"the page uses {name!r}"
    model, tok = _model(name)
    ids = tok.encode(s["text"]).ids[: int(s["T"])]
    tr = model.trace(torch.tensor([ids]), causal=s["mask"] == "causal")
    return model.cfg, tr.layers[0].attn, len(ids)


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text)]


def open_lesson(reveal: bool = True, **query):
    """The lesson at a step; reveal=True also presses "Show them without predicting" (the step's
    explanation and numbers only appear after its questions)."""
    at = open_page(PAGE, **query)
    if reveal:
        show(at)
    return at


def show(at):
    """Reveal the current step's explanation and numbers (if its questions still hide them)."""
    btn = [b for b in at.button if (b.key or "").startswith("lesson_show_")]
    if btn:
        btn[0].click().run()
        assert not errors(at), errors(at)
    return at


def test_questions_come_before_their_answers():
    """Issue 21 point 5: step 1 stated the shape of X above "What is the shape of X?", step 3 showed
    the score heatmap above "Which key gets the highest raw score?"."""
    from tests.helpers import figures
    at = open_lesson(reveal=False, lesson_step="1")
    q = next(m.value for m in at.markdown if "What is the shape" in m.value or "shape of the input matrix X" in m.value)
    assert q
    assert not at.latex and not figures(at) and not at.dataframe  # nothing that holds the answer yet
    assert any("Predict first" in i.value for i in at.info)
    show(at)
    assert at.latex  # revealed on request
    at = open_lesson(reveal=False, lesson_step="3")
    assert not figures(at)
    for q in [r for r in at.radio if (r.key or "").endswith("__answer")]:
        q.set_value(q.options[0]).run()
    for b in [b for b in at.button if (b.key or "").endswith("__check")]:
        b.click().run()
    assert figures(at)  # the heatmap appears once every question of the step is checked


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
    at = open_lesson(reveal=False, lesson_step="2")
    prompt = next(m.value for m in at.markdown if "How many dimensions" in m.value)
    D, H = (int(x) for x in re.findall(r"\*\*(\d+)\*\*", prompt)[:2])
    cfg, _, _ = engine_layer0(at)
    assert (D, H) == (cfg.d_model, cfg.n_heads)  # the model the page traces, not made-up numbers
    assert at.button(key="lq_d_k__check").disabled  # nothing committed yet
    at.number_input(key="lq_d_k__answer").set_value(D // H).run()
    at.button(key="lq_d_k__check").click().run()
    assert not errors(at)
    ok = " ".join(s.value for s in at.success)
    assert "Right" in ok and f"{D} / {H} = **{D // H}**" in ok
    at.button(key="lq_d_k__reset").click().run()
    assert not at.success or "d_model / h" not in " ".join(s.value for s in at.success)


def test_choice_question_wrong_answer_is_explained():
    at = open_lesson(reveal=False, lesson_step="4")
    r = at.radio(key="lq_scale_effect__answer")
    r.set_value("more peaked").run()
    at.button(key="lq_scale_effect__check").click().run()
    err = " ".join(e.value for e in at.error)
    assert "You said more peaked" in err and "flatter" in err
    # the explanation quotes the live numbers: two weights, unscaled vs scaled
    unscaled, scaled = (float(x) for x in
                        re.findall(r"would be (\d\.\d{3}); with scaling it is (\d\.\d{3})", err)[0])
    # recomputed from the engine's trace: layer 0, the lesson's head and query row
    _, a, T = engine_layer0(at)
    h, i = at.session_state["lesson_head"], at.session_state["lesson_query"]
    assert i == T - 1  # the default row: the last token
    row = a.scores[0, h, i].double().numpy()
    ok = a.allowed.expand(a.scores.shape)[0, h, i].numpy()
    e = np.where(ok, np.exp(row - row[ok].max()), 0.0)
    assert abs(unscaled - (e / e.sum()).max()) < 6e-4
    assert abs(scaled - float(a.weights[0, h, i].max())) < 6e-4
    assert a.scale < 1 and unscaled > scaled  # this model scales, so the row is strictly flatter


def test_self_weight_question_uses_trace():
    at = open_lesson(reveal=False, lesson_step="6")
    at.number_input(key="lq_self_weight__answer").set_value(0.5).run()
    at.button(key="lq_self_weight__check").click().run()
    text = " ".join(x.value for x in list(at.success) + list(at.error))
    w = float(re.search(r"The weight is \*\*(\d\.\d{4})\*\*", text).group(1))
    row = [float(x) for x in re.search(r"The whole row is \[([^\]]+)\]", text).group(1).replace("…", "").split(",") if x.strip()]
    _, a, T = engine_layer0(at)
    h, i = at.session_state["lesson_head"], at.session_state["lesson_query"]
    ref = a.weights[0, h, i].numpy()  # (T,) the engine's row
    assert abs(w - ref[i]) < 6e-5  # 4 decimals shown
    assert len(row) == min(T, 12)  # the first 12 weights ("…" after them)
    np.testing.assert_allclose(row, ref[:len(row)], atol=6e-4)
    total = float(re.search(r"sums to (\d\.\d{4})", text).group(1))
    assert abs(total - ref.sum()) < 6e-5 and abs(total - 1) < 1e-3


def test_presentation_mode():
    at = open_lesson(present="true", lesson_step="6")
    assert not errors(at)
    css = " ".join(str(h.proto) for h in at.get("html"))
    assert "font-size" in css and "katex" in css  # the lesson's own CSS too
    at.button(key="lesson_leave_present").click().run()
    assert not errors(at) and not at.session_state["present"]
    # the click took effect: the button is gone, and so is the presentation CSS
    assert "lesson_leave_present" not in [b.key for b in at.button]
    assert "katex" not in " ".join(str(h.proto) for h in at.get("html"))
    assert header(at).startswith("6 ·")  # same step


def test_head_and_query_change_numbers():
    at = open_lesson(lesson_step="6")
    t1 = next(m.value for m in at.markdown if m.value.startswith("Each row becomes"))
    at.selectbox(key="lesson_query").set_value(0).run()
    t2 = next(m.value for m in at.markdown if m.value.startswith("Each row becomes"))
    assert t1 != t2
    # each text quotes the engine's row for its query (layer 0, head 0)
    _, a, T = engine_layer0(at)
    assert at.session_state["mask"] == "causal"  # the default: the first token sees only itself
    assert "[1.000, 0.000" in t2
    for text, i in ((t1, T - 1), (t2, 0)):
        shown = numbers(text.split("Row", 1)[1])[: min(T, 8)]
        np.testing.assert_allclose(shown, a.weights[0, 0, i, :len(shown)].numpy(), atol=6e-4)


def test_lesson_answers_notes_001_q1_and_q4_live():
    """001 Q1 quotes the model's own next-token factors; 001 Q4 runs the attention function on
    Q 10 × 64, K 10 × 64, V 10 × 128. Recomputed here with torch's softmax over the model's logits."""
    import re

    import torch

    from tests.app.test_lesson import _model, open_lesson
    at = open_lesson(reveal=False, lesson_step="1")
    at.radio(key="lq_method_arch__answer").set_value(
        "auto-regression is the methodology; the Transformer is the architecture").run()
    at.button(key="lq_method_arch__check").click().run()
    ok = " ".join(m.value for m in at.success)
    s = at.session_state
    model, tok = _model(s["src"])
    ids = tok.encode(s["text"]).ids[: int(s["T"])]
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids]))[0].double(), dim=-1)
    first = float(p[0, ids[1]])
    total = float(torch.log(p[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]).sum())
    assert f"= {first:.4f}" in ok, ok
    shown_total = float(re.findall(r"log p\(x\) = (-?\d+\.\d+)", ok)[0])
    assert abs(shown_total - total) < 2e-3
    at = open_lesson(reveal=False, lesson_step="2")
    at.radio(key="lq_k_shape__answer").set_value("K: 10 × 64, Z: 10 × 128").run()
    at.button(key="lq_k_shape__check").click().run()
    ok = " ".join(m.value for m in at.success)
    assert "Z (10, 128)" in ok and "weights (10, 10)" in ok and "same last dimension" in ok, ok
