"""Issue 22's sections on existing pages, each against an independent computation: the PE-off
demonstration (positional), d_v != d_k (multi-head), the search-engine analogy, embedding
neighbours and per-position cross-entropy (FFN & output), live answers in lesson mode."""
from __future__ import annotations

import numpy as np

from tests.app.test_concept_pages import engine, fig, start
from tests.helpers import decode, errors


def test_positional_pe_off_section_matches_a_numpy_permutation():
    at = start("positional", pe_shuffle=3)
    model, tr, labels, ids = engine()
    from classroom import positional
    perm = positional.shuffle_order(len(ids), 3)
    blind = positional.without_positions(model)
    # independent: trace the shuffled ids, compare with the original weights indexed by perm
    import torch
    w = np.stack([l.attn.weights[0].numpy() for l in blind.trace(torch.tensor([ids]), causal=False).layers])
    ws = np.stack([l.attn.weights[0].numpy() for l in
                   blind.trace(torch.tensor([[ids[i] for i in perm]]), causal=False).layers])
    gap = np.abs(ws - w[:, :, perm][:, :, :, perm]).max()
    table = at.dataframe[-1].value
    shown = table.iloc[0, 0]
    assert abs(shown - gap) < 1e-6 and shown < 1e-5
    assert table.iloc[1, 1] > 1e-2  # causal mask, no PE: outputs differ
    f1 = fig(at, "No PE: weights of the shuffled sentence")
    f2 = fig(at, "P W Pᵀ")
    z1, z2 = decode(f1["data"][0]["z"]), decode(f2["data"][0]["z"])
    np.testing.assert_allclose(z1, ws[-1, 0], atol=1e-6)
    np.testing.assert_allclose(z2, w[-1, 0][perm][:, perm], atol=1e-6)
    text = " ".join(m.value for m in at.markdown)
    assert "Attention alone ignores order" in text and "The causal mask alone leaks some order" in text


def test_calculator_accepts_v_narrower_than_k():
    from classroom import worked_examples as wx
    from tests.app.test_calculator import open_calc, shown, tables
    at = open_calc()
    at.number_input(key="calc_dv").set_value(2).run()
    assert not errors(at), errors(at)
    X = wx.PRESETS["the-cat-sat"].setup.X
    S = X @ X.T / np.sqrt(X.shape[1])  # W_Q = W_K = I (d_k = 4); W_V = the first 2 columns of I
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    Z = A @ X[:, :2]
    zs = [shown(df) for df in tables(at) if df.shape == (3, 2)]
    assert any(np.allclose(z, Z, atol=5e-4) for z in zs), zs
    assert any(df.shape == (3, 4) and list(df.columns) == ["k0", "k1", "k2", "k3"] for df in tables(at))


def test_multihead_page_with_dv_different_from_dk():
    at = start("multi-head", dv=8)
    model, tr, labels, _ = engine(d_v=8)
    a = tr.layers[0].attn
    assert a.k.shape[-1] == 16 and a.heads.shape[-1] == 8
    shapes = at.dataframe[0].value
    T = len(labels)
    assert shapes.loc["Q_j, K_j (one head)", "shape"] == f"{T} × 16"
    assert shapes.loc["Z_j = weights V_j (one head)", "shape"] == f"{T} × 8"
    assert shapes.loc["concat(Z_1 … Z_h)", "shape"] == f"{T} × 32" and shapes.loc["W_O", "shape"] == "32 × 64"
    np.testing.assert_allclose(decode(fig(at, "Z_0")["data"][0]["z"]), a.heads[0, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "concat(")["data"][0]["z"]), a.concat[0].numpy(), atol=1e-6)
    qkv = decode(fig(at, "Q, K, V of token")["data"][0]["z"])
    ti = T - 1
    np.testing.assert_allclose(qkv[2, :8], a.v[0, 0, ti].numpy(), atol=1e-6)
    assert np.isnan(qkv[2, 8:]).all()
    assert "d_k = 64 / 4 = 16 and d_v = 8" in " ".join(c.value for c in at.caption)


def test_search_engine_analogy_equals_numpy_attention():
    from classroom import search as se
    from tests.app.test_calculator import open_calc, tables
    at = open_calc()
    at.slider(key="search_food").set_value(2.0).run()
    at.slider(key="search_animals").set_value(1.0).run()
    assert not errors(at), errors(at)
    lib = se.LIBRARY
    q = np.array([1.0, 2.0, 0.0])
    s = lib.keys @ q  # independent: numpy softmax(q Kᵀ / √d_k) V
    z = s / np.sqrt(3)
    w = np.exp(z - z.max())
    w /= w.sum()
    table = [df for df in tables(at) if df.index.name == "document"][0]
    np.testing.assert_allclose(table["score q·k"].astype(float), s, atol=5e-5)
    np.testing.assert_allclose(table["weight (softmax)"].astype(float), w, atol=5e-5)
    out = w @ lib.values
    text = " ".join(m.value for m in at.markdown)
    assert f"stars {out[0]:.4f}, minutes {out[1]:.4f}" in text, text
    bars = decode(fig(at, "The blend")["data"][0]["y"])
    np.testing.assert_allclose(bars, w, atol=1e-12)
    at.toggle(key="search_scale").set_value(False).run()
    w2 = np.exp(s - s.max())
    w2 /= w2.sum()
    table = [df for df in tables(at) if df.index.name == "document"][0]
    np.testing.assert_allclose(table["weight (softmax)"].astype(float), w2, atol=5e-5)


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


def test_ffn_page_targets_losses_and_neighbours():
    import torch
    import torch.nn.functional as F

    from tests.app.test_lesson import _model, open_lesson  # noqa: F401  (shared checkpoint cache)
    from tests.helpers import app_test
    at = app_test()
    at.run()
    at.switch_page("pages/ffn-output.py").run()
    assert not errors(at), errors(at)
    s = at.session_state
    model, tok = _model(s["src"])
    ids = tok.encode(s["text"]).ids[: int(s["T"])]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    ce = F.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]), reduction="none").numpy()
    table = [d.value for d in at.dataframe if "loss −log p" in d.value.columns][0]
    np.testing.assert_allclose(table["loss −log p"].astype(float), ce, atol=1e-4)
    assert list(table["target index"]) == ids[1:]
    assert f"**{ce.mean():.4f}** nats" in " ".join(m.value for m in at.markdown)
    E = model.tok_emb.weight.detach().double()
    w = tok.vocab.index("apple")
    cos = F.cosine_similarity(E, E[w][None], dim=1)
    f = fig(at, "Nearest neighbours of “apple”")
    names = list(f["data"][0]["x"])
    np.testing.assert_allclose(decode(f["data"][0]["y"]), [float(cos[tok.vocab.index(n)]) for n in names], atol=1e-6)
    at.text_input(key="emb_word").input("zebra").run()
    assert any("not in this model's vocabulary" in i.value for i in at.info)
