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


def qk(at, qid: str, part: str) -> str:
    """The widget key of question `qid`'s `part` (answer, check, reset): lq_<id>_<context>__<part>,
    the context being the model, sentence, mask, head and query the answer depends on."""
    keys = {w.key for kind in ("radio", "number_input", "button") for w in at.get(kind) if w.key}
    found = [k for k in keys if k.startswith(f"lq_{qid}_") and k.endswith(f"__{part}")
             and re.fullmatch(rf"lq_{qid}_[0-9a-f]{{10}}__{part}", k)]
    assert len(found) == 1, (qid, part, sorted(keys))
    return found[0]


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
    assert at.button(key=qk(at, "d_k", "check")).disabled  # nothing committed yet
    at.number_input(key=qk(at, "d_k", "answer")).set_value(D // H).run()
    at.button(key=qk(at, "d_k", "check")).click().run()
    assert not errors(at)
    ok = " ".join(s.value for s in at.success)
    assert "Right" in ok and f"{D} / {H} = **{D // H}**" in ok
    at.button(key=qk(at, "d_k", "reset")).click().run()
    assert not at.success or "d_model / h" not in " ".join(s.value for s in at.success)


def test_choice_question_wrong_answer_is_explained():
    at = open_lesson(reveal=False, lesson_step="4")
    r = at.radio(key=qk(at, "scale_effect", "answer"))
    r.set_value("more peaked").run()
    at.button(key=qk(at, "scale_effect", "check")).click().run()
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
    at.number_input(key=qk(at, "self_weight", "answer")).set_value(0.5).run()
    at.button(key=qk(at, "self_weight", "check")).click().run()
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
    show(at)  # another query: its question is asked afresh (issue 34), then revealed
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
    at.radio(key=qk(at, "method_arch", "answer")).set_value(
        "auto-regression is the methodology; the Transformer is the architecture").run()
    at.button(key=qk(at, "method_arch", "check")).click().run()
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
    at.radio(key=qk(at, "k_shape", "answer")).set_value("K: 10 × 64, Z: 10 × 128").run()
    at.button(key=qk(at, "k_shape", "check")).click().run()
    ok = " ".join(m.value for m in at.success)
    assert "Z (10, 128)" in ok and "weights (10, 10)" in ok and "same last dimension" in ok, ok


def test_an_answer_is_not_carried_to_another_head_query_or_sentence():
    """Issue 34: the revealed state was keyed by the question alone. After answering step 6's
    self-weight question for head 0, head 1 showed its own answer at once and graded the old pick
    against it; the same after changing the query token or the sentence."""
    at = open_lesson(reveal=False, lesson_step="6")
    at.number_input(key=qk(at, "self_weight", "answer")).set_value(0.5).run()
    at.button(key=qk(at, "self_weight", "check")).click().run()
    assert at.success or at.error  # graded for head 0
    first = qk(at, "self_weight", "reset")
    for change in (lambda: at.selectbox(key="lesson_head").set_value(1).run(),
                   lambda: at.selectbox(key="lesson_query").set_value(0).run(),
                   lambda: at.sidebar.text_input(key="text").set_value("the cat sat on the mat .").run()):
        change()
        assert not errors(at), errors(at)
        assert not at.success and not at.error, "graded an answer given for another head, query or sentence"
        assert any("Predict first" in i.value for i in at.info)  # asked afresh, nothing revealed
        ans = at.number_input(key=qk(at, "self_weight", "answer"))
        assert ans.value is None and not ans.disabled
    at.selectbox(key="lesson_head").set_value(0).run()  # back to head 0, query and sentence changed: still fresh
    assert first not in {b.key for b in at.button}


def test_step_8_evidence_contrasts_different_keys():
    """Issue 34: step 8's evidence named the same token for both heads ("head 0 … on <bos>, while
    head 1 prefers <bos>"). Now it names a query where the two heads' strongest keys differ, and
    those are the engine's argmax."""
    at = open_lesson(reveal=False, lesson_step="8")
    for q in [r for r in at.radio if (r.key or "").endswith("__answer")]:
        q.set_value(q.options[0]).run()
    for n in [n for n in at.number_input if (n.key or "").endswith("__answer")]:
        n.set_value(1).run()
    for b in [b for b in at.button if (b.key or "").endswith("__check")]:
        b.click().run()
    text = " ".join(str(x.value) for x in (*at.success, *at.error))
    m = re.search(r"from \*\*(\d+)\\?:[^*]*\*\*, head (\d+) puts its largest weight on \*\*(\d+)\\?:[^*]*\*\* "
                  r"\(\d\.\d\d\) while head (\d+) puts its largest on \*\*(\d+)\\?:", text)
    assert m, text
    q, h1, k1, h2, k2 = (int(g) for g in m.groups())
    assert k1 != k2 and h1 != h2
    _, a, _ = engine_layer0(at)
    w = a.weights[0].numpy()
    assert int(w[h1, q].argmax()) == k1 and int(w[h2, q].argmax()) == k2


def test_notes_000_q7_is_answered_with_the_models_own_softmax():
    """000 Q7 (which function makes the output a distribution): the explanation quotes the model's
    own output probabilities at the followed token (the engine's trace), no longer static text."""
    at = open_lesson(reveal=False, lesson_step="9")
    at.radio(key=qk(at, "output_layer", "answer")).set_value("softmax").run()
    at.button(key=qk(at, "output_layer", "check")).click().run()
    ok = " ".join(s.value for s in at.success)
    m = re.search(r"\|V\| = ([\d,]+) logits gives probabilities between (\S+) and (\d\.\d{4}) \(its top choice\), "
                  r"summing to (\d\.\d{4})", ok)
    assert m, ok
    cfg, _, T = engine_layer0(at)
    model, tok = _model(at.session_state["src"])
    ids = tok.encode(at.session_state["text"]).ids[: int(at.session_state["T"])]
    p = model.trace(torch.tensor([ids]), causal=at.session_state["mask"] == "causal").probs[0, T - 1].numpy()
    assert int(m.group(1).replace(",", "")) == cfg.vocab_size
    assert abs(float(m.group(3)) - p.max()) < 6e-5 and abs(float(m.group(4)) - 1) < 1e-4
def test_show_without_predicting_gives_the_answer_not_you_said_none():
    """Issue 33: after "Show them without predicting" every question answered "You said None." in
    red. With no answer given there is nothing to mark wrong: the answer and the explanation, as
    information."""
    for step in ("1", "3"):
        at = open_lesson(reveal=True, lesson_step=step)
        assert not any("You said" in e.value for e in at.error), [e.value for e in at.error]
        answers = [i.value for i in at.info if i.value.startswith("The answer: ")]
        assert answers, [i.value for i in at.info]
        assert not at.error
    # a prediction is still judged: the last option is wrong or right, and the message says which
    at = open_lesson(reveal=False, lesson_step="3")
    for q in [r for r in at.radio if (r.key or "").endswith("__answer")]:
        q.set_value(q.options[-1]).run()
    for b in [b for b in at.button if (b.key or "").endswith("__check")]:
        b.click().run()
    judged = [s.value for s in at.success if s.value.startswith("Right.")] + [e.value for e in at.error if "You said" in e.value]
    assert judged and not any("None" in j for j in judged)
