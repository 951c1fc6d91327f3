"""Class polls (classroom/live/poll.py): questions from the engine's numbers, the tally, the CSV."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest
import torch

from classroom.lesson import build_lesson
from classroom.live import Answer, Poll, PollQuestion, attention_question, clean_nickname, from_lesson, poll_csv, tally
from model.checkpoint import load_checkpoint
from tests.helpers import ROOT


def test_attention_question_answer_is_the_engines_argmax():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    enc = tok.encode("the keys to the cabinet are on the table .")
    tr = model.trace(torch.tensor([enc.ids]), causal=True).numpy()
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            w = tr.layers[layer].attn.weights[0, head]
            allowed = np.asarray(tr.layers[layer].attn.allowed).reshape(-1, *w.shape)[0]
            q = len(enc.ids) - 1
            pq = attention_question(w, enc.labels, layer=layer, head=head, query=q, allowed=allowed)
            best = int(np.argmax(w[q]))
            assert pq.answer == f"{best}: {enc.labels[best]}"
            assert len(pq.options) == q + 1  # causal: the query and every earlier token
            assert f"layer {layer}, head {head}" in pq.prompt
    # a middle query under the causal mask: only keys up to it are offered
    w = tr.layers[0].attn.weights[0, 0]
    pq = attention_question(w, enc.labels, layer=0, head=0, query=3, allowed=np.tril(np.ones_like(w, dtype=bool)))
    assert pq.options == tuple(f"{j}: {enc.labels[j]}" for j in range(4))
    assert pq.answer == f"{int(np.argmax(w[3, :4]))}: {enc.labels[int(np.argmax(w[3, :4]))]}"


def test_attention_question_escapes_user_text():
    w = np.full((2, 2), 0.5)
    pq = attention_question(w, ["**x**", "<b>y</b>"], layer=0, head=0, query=0)
    assert "**“\\*\\*x\\*\\*”**" in pq.prompt and "<b>" not in pq.explanation
    with pytest.raises(ValueError):
        attention_question(w, ["a"], layer=0, head=0, query=0)
    with pytest.raises(ValueError):
        attention_question(w, ["a", "b"], layer=0, head=0, query=0, allowed=np.zeros((2, 2), dtype=bool))


def test_lesson_questions_become_polls():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    enc = tok.encode("the cat sat on the mat .")
    tr = model.trace(torch.tensor([enc.ids]), causal=True).numpy()
    steps = build_lesson(tr, enc.labels, n_heads=model.cfg.n_heads, causal=True)
    qs = [(s, q) for s in steps for q in s.questions]
    assert len(qs) >= 5
    for s, q in qs:
        p = from_lesson(q, s.title)
        assert p.kind == q.kind and p.prompt == q.prompt
        assert p.check(q.answer) and q.check(p.answer)
        assert PollQuestion.from_dict(p.to_dict()) == p
        if p.kind == "choice":
            wrong = next(o for o in p.options if o != p.answer)
            assert not p.check(wrong)


def test_parse_rejects_what_is_not_an_answer():
    q = PollQuestion(prompt="?", kind="number", answer=0.5, lo=0, hi=1, step=0.01, tolerance=0.01)
    assert q.parse(0.25) == 0.25 and q.parse("0.3") == 0.3
    for bad in (float("nan"), float("inf"), 2.0, -1, True, "x"):
        with pytest.raises((ValueError, TypeError)):
            q.parse(bad)
    c = PollQuestion(prompt="?", kind="choice", answer="b", options=("a", "b"))
    assert c.parse("a") == "a"
    with pytest.raises(ValueError):
        c.parse("c")
    with pytest.raises(ValueError):
        PollQuestion(prompt="?", kind="choice", answer="z", options=("a", "b"))


def test_tally_and_csv():
    q = PollQuestion(prompt="Which *one*?", kind="choice", answer="b", options=("a", "b", "c"))
    ans = [Answer("p", "b", "=cmd|' /C calc'!A0", 10.0), Answer("p", "a", "", 12.5), Answer("p", "b", "bo", 11.0)]
    t = tally(q, ans)
    assert t.n == 3 and t.right == 2 and t.bars == (("a", 1), ("b", 2), ("c", 0))
    rows = list(csv.reader(io.StringIO(poll_csv(Poll("p", q), ans))))
    assert rows[0] == ["question", "student", "answer", "right", "seconds"]
    assert rows[1] == ["Which one?", "'=cmd|' /C calc'!A0", "b", "yes", "0.0"]  # a formula stays text
    assert rows[2][1:] == ["bo", "b", "yes", "1.0"] and rows[3][1:] == ["student 3", "a", "no", "2.5"]
    n = PollQuestion(prompt="?", kind="number", answer=0.5, lo=0, hi=1, step=0.01, tolerance=0.005)
    t = tally(n, [Answer("p", v) for v in (0.5, 0.501, 0.2, 0.5, 0.9)] +
              [Answer("p", i / 100) for i in range(60, 75)])
    assert t.bars[0] == ("0.50", 3) and t.right == 3 and t.bars[-1][0] == "other"
    assert sum(c for _, c in t.bars) == 20 and len(t.bars) == 13


def test_nickname_is_one_short_plain_line():
    assert clean_nickname("  Ann\n\x1b[31m  Lee\u200f ") == "Ann [31m Lee"
    assert len(clean_nickname("x" * 100)) == 24 and clean_nickname(None) == ""


def test_attention_question_ties_go_to_the_first_key():
    """Equal largest weights (exact in binary: no rounding involved): the answer is the earliest key,
    as np.argmax gives; a masked key never wins."""
    labels = ["a", "b", "c", "d"]
    w = np.array([[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.25, 0.375, 0.375, 0], [0.125, 0.375, 0.125, 0.375]])
    for q, best in ((1, 0), (2, 1), (3, 1)):
        pq = attention_question(w, labels, layer=0, head=0, query=q)
        assert pq.answer == f"{best}: {labels[best]}" == pq.options[int(np.argmax(w[q]))], q
    allowed = np.ones((4, 4), dtype=bool)
    allowed[3, 1] = False  # key 1 masked for query 3: key 3 is the largest left
    assert attention_question(w, labels, layer=0, head=0, query=3, allowed=allowed).answer == "3: d"
