"""The Intervene page (issue 19 points 2-4): the prediction before and after switching heads off
(checked against the engine's own ablation here), every head ranked, rollout; no intervention
when nothing is picked."""
from __future__ import annotations

import numpy as np
import torch

from classroom.intervene import head_importance, rollout
from model.checkpoint import load_checkpoint
from tests.helpers import ROOT, app_test, decode, errors, figures

PAGE = "pages/intervene.py"


def open_page():
    at = app_test(default_timeout=120)
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at) and not at.error
    return at


def fig(at, title):
    return next(f for f in figures(at) if title in str(f["layout"].get("title")))


def test_ablation_changes_the_prediction_as_the_engine_says():
    at = open_page()
    assert any("No head switched off" in i.value for i in at.info)
    at.multiselect(key="iv_heads").set_value(["L1 H0", "L1 H2"]).run()
    assert not errors(at)
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    x = torch.tensor([ids])
    p0 = model.trace(x).probs[0, -1].double().numpy()
    p1 = model.trace(x, ablate_heads=[(1, 0), (1, 2)]).probs[0, -1].double().numpy()
    f = fig(at, "top tokens before and after")
    names = list(f["data"][0]["x"])
    idx = [tok.vocab.index(n) for n in names]
    np.testing.assert_allclose(decode(f["data"][0]["y"]), p0[idx], atol=1e-6)
    np.testing.assert_allclose(decode(f["data"][1]["y"]), p1[idx], atol=1e-6)
    dh = decode(fig(at, "hidden state after − before")["data"][0]["z"])
    assert np.allclose(dh[0], 0) and dh[1].max() > 0  # layer 0 untouched, layer 1 changed


def test_ranking_every_head_and_clicking_one_switches_it_off():
    at = open_page()
    at.toggle(key="iv_rank").set_value(True).run()
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    want = head_importance(model, ids, causal=True).score
    got = decode(fig(at, "Importance of each head")["data"][0]["z"])
    np.testing.assert_allclose(got, want, atol=1e-5)
    best = np.unravel_index(np.argmax(want), want.shape)
    at.button(key="iv_top_0").click().run()
    assert not errors(at) and not at.exception
    assert at.multiselect(key="iv_heads").value == [f"L{best[0]} H{best[1]}"]
    at.button(key="iv_top_1").click().run()  # a second one joins it; the ranking stays on screen
    assert not errors(at) and len(at.multiselect(key="iv_heads").value) == 2


def test_rollout_on_the_page_is_the_rollout_of_the_trace():
    at = open_page()
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    tr = model.trace(torch.tensor([ids]))
    want = rollout(np.stack([lt.attn.weights[0].numpy() for lt in tr.layers]))
    np.testing.assert_allclose(decode(fig(at, "Rollout over")["data"][0]["z"]), want, atol=1e-6)
    assert np.allclose(np.triu(want, 1), 0)  # causal: nothing flows from later tokens


def test_attention_flow_on_the_page():
    from classroom.intervene import attention_flow
    at = open_page()
    at.radio(key="iv_how").set_value("flow").run()
    assert not errors(at)
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    tr = model.trace(torch.tensor([ids]))
    want = attention_flow(np.stack([lt.attn.weights[0].numpy() for lt in tr.layers]))
    np.testing.assert_allclose(decode(fig(at, "Attention flow over")["data"][0]["z"]), want, atol=1e-6)


def test_editing_one_attention_row():
    """Point 1's row editing on the page: typed weights are renormalised, the prediction follows the
    engine's own edited pass, and a row that sums to 0 is refused with a message."""
    at = open_page()
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(at.session_state["text"]).ids
    T = len(ids)
    key = f"iv_e_row_0_0_{T - 1}"
    row = [0.0] * T
    row[1], row[2] = 1.0, 3.0
    # set the data editor's state as the browser would (an edited cell per key)
    at.session_state[key] = {"edited_rows": {0: {c: v for c, v in zip(_cols(at, T), row)}},
                             "added_rows": [], "deleted_rows": []}
    at.run()
    assert not errors(at)
    want = model.trace(torch.tensor([ids]), edit_rows=[(0, 0, T - 1, row)]).probs[0, -1].double().numpy()
    f = fig(at, "edited")
    names = list(f["data"][0]["x"])
    np.testing.assert_allclose(decode(f["data"][1]["y"]), [want[tok.vocab.index(n)] for n in names], atol=1e-6)
    at.session_state[key] = {"edited_rows": {0: {c: 0.0 for c in _cols(at, T)}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert any("sums to 0" in e.value for e in at.error)


def _cols(at, T):
    from labels import token_labels
    labels = at.session_state["text"]  # the toy tokenizer's labels: <bos> + the words
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    enc = tok.encode(labels)
    return token_labels(enc.labels, plain=True)
