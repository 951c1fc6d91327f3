"""Every worked example of the lecture notes, checked against numbers computed here independently
with plain numpy (not with the code under test), to 1e-4. Also the calculator's general path
(multi-head, W_O, masks, cross-attention), the small calculators, the exports and lesson mode."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from classroom import (
    layer_norm,
    mask_lab,
    scaling,
)
from classroom import worked_examples as wx
from classroom.lesson import STEP_KEYS, build_lesson
from model.config import ModelConfig
from model.layers import sinusoidal_table
from model.transformer import Transformer

TOL = 1e-4


def np_softmax(s, allowed=None):
    s = np.asarray(s, dtype=float)
    allowed = np.ones_like(s, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    out = np.zeros_like(s)
    for i in range(s.shape[0]):
        if allowed[i].any():
            e = np.where(allowed[i], np.exp(s[i] - s[i][allowed[i]].max()), 0.0)
            out[i] = e / e.sum()
    return out


def step(steps, prefix):
    found = [s for s in steps if s.title.startswith(prefix)]
    assert found, f"no step starting with {prefix!r}: {[s.title for s in steps]}"
    return np.asarray(found[0].values, dtype=float)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=TOL, rtol=0)


def test_presets_cover_every_worked_example():
    assert set(wx.PRESETS) == {"the-cat-sat", "scaling-6-4", "layernorm-2468", "pe-d4", "padded-batch",
                               "decoder-2x2", "enc-dec-2x3", "context-vector", "padding-450", "cross-sketch"}
    for p in wx.PRESETS.values():
        assert p.hints, p.key
        wx.solve(p.key)  # every preset solves


def test_the_cat_sat():
    X = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], dtype=float)
    S = X @ X.T
    A = np_softmax(S / 2)
    steps = wx.solve("the-cat-sat")
    close(step(steps, "Scores"), S)
    close(step(steps, "Scaled"), S / 2)
    close(step(steps, "Softmax"), A)
    close(step(steps, "Output"), A @ X)
    # the values a student compares with (and where the notes go wrong)
    close(step(steps, "Softmax")[0], [0.4223, 0.1554, 0.4223])
    close(step(steps, "Softmax")[2], [0.21194, 0.21194, 0.57612])
    close(step(steps, "Output")[0], [0.84458, 0.57771, 0.84458, 0.57771])
    assert not np.allclose(step(steps, "Output")[0], [1.2669, 0.9999, 1.2669, 0.9999], atol=0.01)


def test_scaling_6_4():
    q = np.array([2.0, 3, 4, 1])
    K = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1]])
    raw = K @ q
    assert raw.tolist() == [6.0, 4.0]
    steps = wx.solve("scaling-6-4")
    close(step(steps, "Scores")[0], raw)
    close(step(steps, "Scaled")[0], raw / np.sqrt(4))
    close(step(steps, "Softmax (")[0], np_softmax([raw / 2])[0])
    close(step(steps, "Softmax without")[0], np_softmax([raw])[0])
    close(step(steps, "Softmax (")[0], [0.73106, 0.26894])
    close(step(steps, "Softmax without")[0], [0.88080, 0.11920])
    # the notes' aside softmax([10, 1]) = [0.99, 0.01]: really [0.99988, 0.00012]
    ten_one = np.exp([10.0, 1.0]) / np.exp([10.0, 1.0]).sum()
    close(wx.softmax_temperature([10, 1]), ten_one)
    close(ten_one, [0.99988, 0.00012])
    fix = next(e for e in wx.PRESETS["scaling-6-4"].errata if "[10, 1]" in e.where)
    assert "[0.99988, 0.00012]" in fix.correct


def test_layernorm_2468():
    x = np.array([2.0, 4, 6, 8])
    mu, var = x.mean(), ((x - x.mean()) ** 2).mean()
    steps = wx.solve("layernorm-2468")
    close(step(steps, "Mean"), [mu])
    close(step(steps, "Variance"), [5.0])
    close(step(steps, "√"), [np.sqrt(var + 1e-5)])
    close(step(steps, "Normalized"), (x - mu) / np.sqrt(var + 1e-5))
    close(step(steps, "Normalized"), [-1.34164, -0.44721, 0.44721, 1.34164])
    # and it matches torch's own layer norm
    ref = torch.nn.functional.layer_norm(torch.tensor(x), (4,), eps=1e-5).numpy()
    close(step(steps, "Scale"), ref)


def test_positional_encoding_d4():
    d = 4
    pe = np.zeros((3, d))
    for pos in range(3):
        for i in range(d):
            angle = pos / 10000 ** ((i - i % 2) / d)
            pe[pos, i] = np.sin(angle) if i % 2 == 0 else np.cos(angle)
    emb = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]])
    steps = wx.solve("pe-d4")
    close(step(steps, "Positional"), pe)
    close(step(steps, "Embedding +"), emb + pe)
    close(step(steps, "Positional")[1], [0.84147, 0.54030, 0.0099998, 0.99995])
    close(step(steps, "Positional")[2], [0.9093, -0.4161, 0.0200, 0.9998])
    close(step(steps, "Embedding +")[1], [1.34147, 1.14030, 0.71000, 1.79995])
    close(step(steps, "Embedding +")[0], [0.1, 1.2, 0.3, 1.4])
    # the table agrees with the engine's sinusoidal_table (float32)
    np.testing.assert_allclose(wx.pe_table(50, 16), sinusoidal_table(50, 16).numpy(), atol=1e-5)
    assert wx.pe_value(1, 3, 4)[0] == pytest.approx(np.cos(0.01), abs=1e-9)
    assert wx.pe_value(7, 4, 10)[0] == pytest.approx(np.sin(7 / 10000 ** (4 / 10)), abs=1e-9)


def test_padded_batch():
    X = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2], [0, 0, 0, 0]])
    S = X @ X.T
    look = np.tril(np.ones((4, 4), dtype=bool))
    pad = np.array([1, 1, 1, 0], dtype=bool)
    pad2d = pad[None, :] & pad[:, None]  # the notes' 2D padding mask (padded query row blanked)
    comb = look & pad2d
    A = np_softmax(S / 2, comb)
    steps = wx.solve("padded-batch")
    close(step(steps, "Scores"), S)
    close(step(steps, "Scaled"), S / 2)
    close(step(steps, "Mask (1"), comb.astype(float))
    add = step(steps, "Mask, additive")
    assert np.array_equal(np.isneginf(add), ~comb) and np.all(add[comb] == 0)
    ms = step(steps, "Masked")
    assert np.array_equal(np.isneginf(ms), ~comb)
    close(ms[comb], (S / 2)[comb])
    W = step(steps, "Softmax")
    close(W, A)
    assert not np.isnan(W).any()
    close(W[3], [0, 0, 0, 0])  # padded query row: all zero, never [1, 0, 0, 0]
    close(W[1], [0.37285, 0.62715, 0, 0])
    close(W[2], [0.11520, 0.26680, 0.61800, 0])
    close(step(steps, "Output"), A @ X)
    close(S[1, 1:3], [1.74, 2.78])
    close(S[2, 2], 4.46)


def test_padding_keys_only_gives_thirds():
    p = wx.PRESETS["padded-batch"].setup
    s = wx.compute_attention(replace(p, mask_padded_queries=False))
    close(s.weights[0, 3], [1 / 3, 1 / 3, 1 / 3, 0])


def test_decoder_2x2():
    D = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]])
    S = D @ D.T
    allowed = np.tril(np.ones((2, 2), dtype=bool))
    A = np_softmax(S / 2, allowed)
    steps = wx.solve("decoder-2x2")
    close(step(steps, "Scores"), S)
    close(step(steps, "Softmax ("), A)
    close(step(steps, "Output of the head"), A @ D)
    notes_scores = np.array([[1.0, 0.8], [0.9, 1.1]])
    An = np_softmax(notes_scores, allowed)
    close(step(steps, "Softmax of the notes"), An)
    close(An[1], [0.45017, 0.54983])
    close(step(steps, "Output with the notes"), An @ D)
    close(step(steps, "Output with the notes")[1], [0.31993, 0.41993, 0.51993, 0.61993])


def test_encoder_decoder_2x3():
    E = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]])
    Q = np.array([[0.2, 0.4, 0.6, 0.8], [0.1, 0.3, 0.5, 0.7]])
    S = Q @ E.T
    A = np_softmax(S / 2)
    steps = wx.solve("enc-dec-2x3")
    assert step(steps, "Scores").shape == (2, 3)
    close(step(steps, "Scores"), S)
    close(S, [[0.60, 1.40, 2.20], [0.50, 1.14, 1.78]])
    close(step(steps, "Scaled"), S / 2)
    close(step(steps, "Softmax"), A)
    close(step(steps, "Output"), A @ E)
    close(step(steps, "Softmax")[0], [0.21198, 0.31624, 0.47178])


def test_context_vector():
    """Notes 004, eq. 5: c_i = sum_j alpha_ij h_j with dot-product scores (no scaling)."""
    Hx = np.array([[1.0, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1]])  # annotations h_I, h_like, h_cats
    S_dec = np.array([[2.0, 0, 0, 0], [0, 2, 1, 0]])  # decoder states s0, s1
    e = S_dec @ Hx.T
    alpha = np_softmax(e)
    c = alpha @ Hx
    steps = wx.solve("context-vector")
    close(step(steps, "Scores"), [[2, 0, 0], [0, 2, 1]])
    close(step(steps, "Scaled"), e)  # scaling is off in this example
    close(step(steps, "Softmax"), alpha)
    close(step(steps, "Softmax")[0], [0.78699, 0.10650, 0.10650])
    close(step(steps, "Softmax")[1], [0.09003, 0.66524, 0.24473])
    close(step(steps, "Output"), c)
    close(step(steps, "Context vectors"), c)
    close(step(steps, "Context vectors")[:, 3], [1, 1])  # each h_j ends in 1 and the weights sum to 1
    assert not np.allclose(step(steps, "Context vectors")[0], step(steps, "Context vectors")[1])
    close(step(steps, "Without attention"), [[0, 0, 1, 1], [0, 0, 1, 1]])
    # the same numbers from torch's own attention (scale 1: the dot-product alignment, unscaled)
    t = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(S_dec)[None], torch.tensor(Hx)[None], torch.tensor(Hx)[None], scale=1.0)[0]
    close(step(steps, "Context vectors"), t.numpy())
    note = next(x for x in steps if x.title.startswith("Context vectors")).note
    assert "c1 = 0.7870·h_I + 0.1065·h_like + 0.1065·h_cats" in note, note


def test_multihead_with_wo_and_causal_matches_numpy():
    rng = np.random.default_rng(3)
    T, d, H = 5, 6, 3
    X, WQ, WK, WV, WO = (rng.normal(size=s) for s in [(T, d), (d, d), (d, d), (d, d), (d, d)])
    setup = wx.AttentionSetup(X, WQ, WK, WV, WO, n_heads=H, mask="causal")
    got = wx.compute_attention(setup)
    dk = d // H
    Q, K, V = X @ WQ, X @ WK, X @ WV
    allowed = np.tril(np.ones((T, T), dtype=bool))
    Z = []
    for h in range(H):
        sl = slice(h * dk, (h + 1) * dk)
        A = np_softmax(Q[:, sl] @ K[:, sl].T / np.sqrt(dk), allowed)
        close(got.weights[h], A)
        Z.append(A @ V[:, sl])
    close(got.concat, np.hstack(Z))
    close(got.output, np.hstack(Z) @ WO)
    steps = wx.attention_step_list(setup, head=2)
    assert [s.title for s in steps][-2:] == ["Concat of the heads", "Output Z_c W_O"]
    close(step(steps, "Q (head 2)"), Q[:, 4:6])


def test_scaling_off_and_validation():
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    s = wx.compute_attention(wx.AttentionSetup(X, np.eye(2), np.eye(2), np.eye(2), scale=False))
    assert s.scale == 1.0
    close(s.weights[0], np_softmax(X @ X.T))
    # the formulas shown say what was computed: no √d_k once scaling is off
    formulas = {st.title: st.formula for st in wx.attention_step_list(wx.AttentionSetup(X, np.eye(2), np.eye(2), np.eye(2), scale=False))}
    assert formulas["Masked scores"] == "S + M" and "sqrt" not in formulas["Scaled"]
    assert "sqrt" in {st.title: st.formula for st in wx.attention_step_list(wx.AttentionSetup(X, np.eye(2), np.eye(2), np.eye(2)))}["Masked scores"]
    bad = wx.AttentionSetup(X, np.eye(3), np.eye(2), np.eye(2))
    assert any("W_Q needs 2 rows" in p for p in wx.validate(bad))
    with pytest.raises(ValueError):
        wx.compute_attention(bad)
    nan = wx.AttentionSetup(np.array([[np.nan, 1.0]]), np.eye(2), np.eye(2), np.eye(2))
    assert any("finite" in p for p in wx.validate(nan))
    assert wx.validate(wx.AttentionSetup(X, np.eye(2), np.eye(2), np.eye(2), n_heads=3))
    # huge but finite numbers: a message, never inf/NaN further down (and X named once in self-attention)
    big = wx.validate(wx.AttentionSetup(X * 1e7, np.eye(2), np.eye(2), np.eye(2)))
    assert len(big) == 1 and "X has a value beyond" in big[0]
    assert wx.validate(wx.AttentionSetup(X / 4 * 1e6, np.eye(2), np.eye(2), np.eye(2), scale=False)) == []
    assert np.all(np.isfinite(wx.compute_attention(wx.AttentionSetup(X / 4 * 1e6, np.eye(2) * 1e6, np.eye(2) * 1e6, np.eye(2))).weights))


def test_small_calculators():
    close(wx.softmax_temperature([6, 4], 1.0), [0.88080, 0.11920])
    close(wx.softmax_temperature([6, 4], 2.0), [0.73106, 0.26894])
    x = np.array([1.0, 5.0, -2.0])
    e = np.exp(x / 0.5 - (x / 0.5).max())
    close(wx.softmax_temperature(x, 0.5), e / e.sum())
    with pytest.raises(ValueError):
        wx.softmax_temperature([1, 2], 0)
    with pytest.raises(ValueError):
        wx.softmax_temperature([1, float("nan")], 1)
    with pytest.raises(ValueError, match="too large"):
        wx.softmax_temperature([1e308, 1.0], 0.01)  # x / T overflows
    close(wx.softmax_temperature([1e300, 1e300, 1e300], 1.0), [1 / 3] * 3)
    with pytest.raises(ValueError, match="too large"):
        wx.layer_norm_steps([1e308, -1e308, 3.0])  # the variance overflows
    ln = wx.layer_norm_steps([1.0, 2.0, 4.0], eps=0.1, gamma=[2, 2, 2], beta=[1, 0, 0])
    xs = np.array([1.0, 2.0, 4.0])
    xh = (xs - xs.mean()) / np.sqrt(xs.var() + 0.1)
    close(ln.output, 2 * xh + np.array([1, 0, 0]))
    with pytest.raises(ValueError):
        wx.layer_norm_steps([1.0, 2.0], gamma=[1.0])


def test_exports():
    steps = wx.solve("padded-batch")
    csv = wx.steps_csv(steps)
    assert csv.splitlines()[0] == "step,row,column,value"
    assert "-inf" in csv and "nan" not in csv.lower()
    row = [ln for ln in csv.splitlines() if ln.startswith("Softmax (attention weights),1:2,0:1,")]
    assert row and abs(float(row[0].rsplit(",", 1)[1]) - 0.37285) < TOL
    p = wx.PRESETS["padded-batch"]
    md = wx.handout_markdown(p.title, p.description, steps, p.hints, p.errata)
    assert md.startswith("# 4-token padded batch")
    assert "| 1:2 | 0.3729 | 0.6271 | 0.0000 | 0.0000 |" in md
    assert "−∞" in md and "## Check your arithmetic" in md and "## Where the lecture notes go wrong" in md


# ----------------------------------------------------------------------------- lesson mode
@pytest.fixture(scope="module")
def lesson_run():
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=4, n_layers=1, d_ff=32, max_len=16)
    m = Transformer(cfg, seed=1).eval()
    arr = m.trace(torch.tensor([[3, 7, 1, 9, 4, 2]]), causal=True).numpy()
    return arr, ["the", "cat", "*sat*", "on", "the", "mat"]


def test_lesson_steps_and_live_answers(lesson_run):
    arr, labels = lesson_run
    steps = build_lesson(arr, labels, n_heads=4, causal=True, head=1, query=4)
    assert tuple(s.key for s in steps) == STEP_KEYS
    qs = {q.id: q for s in steps for q in s.questions}
    assert qs["d_k"].answer == 4.0 and qs["d_k"].check(4) and not qs["d_k"].check(8)
    assert qs["mask_count"].answer == 15.0
    assert qs["concat_width"].answer == 16.0
    assert qs["x_shape"].answer == "6 × 16" and qs["out_shape"].answer == "6 × 16"
    scores = arr.layers[0].attn.scores[0, 1]
    assert qs["argmax_score"].answer.startswith(f"{int(np.argmax(scores[4]))}")
    w = arr.layers[0].attn.weights[0, 1]
    assert qs["self_weight"].answer == pytest.approx(w[4, 4], abs=1e-4)
    assert qs["self_weight"].check(w[4, 4] + 0.09) and not qs["self_weight"].check(w[4, 4] + 0.2)
    # the scaling question's explanation quotes the live unscaled max weight
    s = scores[4] * 1.0
    assert f"{np_softmax(s[None], np.tril(np.ones((6, 6), bool))[4][None])[0].max():.3f}" in qs["scale_effect"].explanation
    # user tokens are escaped inside markdown
    assert "\\*sat\\*" in steps[2].questions[0].options[2]
    for q in qs.values():
        if q.kind == "choice":
            assert q.answer in q.options and q.check(q.answer)
    # self-assessment coverage: 000 Q1-Q7 and 001 Q1-Q5 (Q2 and Q4 of 001 included)
    src = " ".join(q.source for q in qs.values())
    A = "the lecture on causal masking and multi-head attention, self-assessment question "  # the notes numbered 000
    B = "the lecture on transformers for autoregressive models, self-assessment question "  # the notes numbered 001
    for tag in [A + "2", A + "3", A + "4", A + "5", A + "6", A + "7", "causal masking (question 1)",
                B + "1", B + "2", B + "3", B + "4", "autoregressive transformers (question 5)"]:
        assert tag in src, tag


def test_classroom_math_is_the_engines():
    """The consistency checks that used to run inside the app (worked_examples.pe_table raised
    AssertionError) live here: each classroom function gives the engine's numbers."""
    from classroom import worked_examples as wx
    from model.attention import additive, masked_softmax
    from model.layers import layer_norm as engine_layer_norm

    x = torch.randn(3, 5, dtype=torch.float64)
    allowed = torch.rand(3, 5) > 0.3
    _, w, _ = masked_softmax(x, allowed, temperature=0.7)
    np.testing.assert_array_equal(scaling.softmax(x.numpy(), 0.7, allowed=allowed.numpy()), w.numpy())
    np.testing.assert_array_equal(wx.softmax_from_scores(x.numpy(), allowed.numpy()), masked_softmax(x, allowed)[1].numpy())
    g, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    ln, ref = layer_norm.layer_norm(x.numpy(), g.numpy(), b.numpy()), engine_layer_norm(x, g, b)
    for k in ("normalized", "output"):
        np.testing.assert_array_equal(getattr(ln, k), getattr(ref, k).numpy())
    np.testing.assert_array_equal(ln.var, ref.var[..., 0].numpy())
    steps = wx.layer_norm_steps(x[0].numpy())
    np.testing.assert_array_equal(steps.output, engine_layer_norm(x[0], torch.ones(5, dtype=torch.float64),
                                                           torch.zeros(5, dtype=torch.float64)).output.numpy())
    # the float64 table at an offset is the engine's rows, and agrees with the model's float32 table
    np.testing.assert_array_equal(wx.pe_table(4, 6, start=7),
                                  sinusoidal_table(11, 6, dtype=torch.float64).numpy()[7:])
    np.testing.assert_allclose(wx.pe_table(50, 16), sinusoidal_table(50, 16).numpy(), atol=1e-6)
    assert f"{wx.pe_table(2, 4)[1, 3]:.5f}" == "0.99995"  # float64: cos(0.01), as the notes write it
    m = mask_lab.mask_steps(np.array([[True, True, False]]), 0, causal=True, mask_queries=False)
    np.testing.assert_array_equal(m.pad_1d_add, additive(torch.tensor([True, True, False])).numpy())
    np.testing.assert_array_equal(m.combined_add, np.where(m.combined > 0, 0.0, -np.inf))
