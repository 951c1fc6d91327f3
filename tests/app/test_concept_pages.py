"""AppTest of the concept pages: the figures' data equals the engine's trace or closed-form values.

Every test runs the app with fresh weights (src = fresh), so the expected numbers are computed here
without the app from the same config and seed."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from classroom import contextual, scaling
from model.checkpoint import load_checkpoint
from model.config import ModelConfig, param_count
from model.layers import sinusoidal_table
from model.transformer import Transformer
from tests.helpers import fig_titled, app_test, decode, errors, figures
from ui import models, state

FRESH = state.FRESH
PAGES = ["scaling", "positional", "layer-norm", "multi-head", "ffn-output", "contextual", "cost"]


def engine(text=state.DEFAULT_TEXT, *, causal=True, T=64, **cfg_changes):
    """(model, trace, labels, ids) for the sidebar's fresh-weights defaults."""
    tok = models.fresh_tokenizer()
    cfg = ModelConfig(vocab_size=len(tok), d_model=64, n_heads=4, n_layers=2, max_len=state.T_MAX).replace(**cfg_changes)
    enc = tok.encode(text)
    model = Transformer(cfg, seed=0)
    return model, model.trace(torch.tensor([enc.ids[:T]]), causal=causal), enc.labels[:T], enc.ids[:T]


def start(page, **params):
    at = app_test()
    at.query_params["src"] = FRESH
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    for k, v in params.items():  # the first (home page) run keeps only the keys it binds in the URL
        at.query_params[k] = str(v)
    at.switch_page(f"pages/{page}.py").run()
    assert not errors(at), errors(at)
    return at


fig = fig_titled


def series(f, name=None, axis="y"):
    for t in f["data"]:
        if name is None or t.get("name") == name:
            return decode(t[axis])
    raise AssertionError(f"no trace {name!r}: {[t.get('name') for t in f['data']]}")


def test_scaling_matches_engine_and_temperature_changes_softmax():
    at = start("scaling", sc_query=5, sc_head=2)
    _, tr, labels, _ = engine()
    scores = tr.layers[0].attn.scores[0, 2, 5, :6].numpy()
    f = fig(at, "Scores: raw vs scaled")
    np.testing.assert_allclose(series(f, "q·k (raw)"), scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(series(f, "q·k / √d_k"), scores / 4.0, rtol=1e-5, atol=1e-6)  # d_k = 16
    w = fig(at, "Softmax weights")
    np.testing.assert_allclose(series(w, "softmax(scaled)"), tr.layers[0].attn.weights[0, 2, 5, :6].numpy(), atol=1e-6)
    np.testing.assert_allclose(series(w, "softmax(raw)"), torch.softmax(torch.tensor(scores, dtype=torch.float64), -1).numpy(), atol=1e-6)
    # experiment: sampled variance within 25% of d_k (> 3.4 standard errors at 1500 samples)
    v = fig(at, "Variance of q·k vs d_k")
    dk = series(v, "theory: d_k", "x")
    np.testing.assert_array_equal(series(v, "theory: d_k"), dk)
    np.testing.assert_allclose(series(v, "sampled Var(q·k)"), dk, rtol=0.25)
    np.testing.assert_allclose(series(v, "sampled Var(q·k / √d_k)"), 1.0, rtol=0.25)
    e = fig(at, "Mean softmax entropy")
    assert series(e, "without scaling")[-1] < 0.5 * series(e, "with 1/√d_k")[-1]
    md = " ".join(m.value for m in at.markdown)
    assert "[0.8808, 0.1192]" in md and "[0.7311, 0.2689]" in md
    # the temperature slider changes the softmax: softmax(scaled / 2)
    at.slider(key="sc_temp").set_value(2.0).run()
    assert not errors(at)
    w2 = fig(at, "Softmax weights (temperature 2)")
    np.testing.assert_allclose(series(w2, "softmax(scaled)"), scaling.softmax(scores / 4.0, 2.0), atol=1e-6)
    assert at.query_params["sc_temp"] == ["2.0"] or at.query_params["sc_temp"] == "2.0"


def test_positional_values_equal_sinusoidal_table_and_sum():
    at = start("positional")
    _, tr, labels, _ = engine()
    np.testing.assert_allclose(decode(fig(at, "Sinusoidal PE: 128 positions")["data"][0]["z"]),
                               sinusoidal_table(128, 64).numpy(), atol=1e-7)
    curves = fig(at, "Chosen dimensions vs position")
    assert [t["name"] for t in curves["data"]] == ["dim 4 (sin)", "dim 5 (cos)", "dim 12 (sin)", "dim 13 (cos)", "dim 30 (sin)"]
    np.testing.assert_allclose(series(curves, "dim 5 (cos)"), sinusoidal_table(128, 64)[:, 5].numpy(), atol=1e-7)
    emb = tr.embeddings
    np.testing.assert_allclose(decode(fig(at, "token embedding")["data"][0]["z"]), emb.token[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "position")["data"][0]["z"]), emb.position.numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "sum = block input")["data"][0]["z"]), (emb.token[0] + emb.position).numpy(), atol=1e-6)
    pe = emb.position.double().numpy()
    sim = decode(fig(at, "Sinusoidal PE(i)·PE(j)")["data"][0]["z"])
    np.testing.assert_allclose(sim, pe @ pe.T, atol=1e-4)
    np.testing.assert_allclose(np.diag(sim), 32.0, atol=1e-4)  # d/2
    # the d = 4 worked example: true values, not the notes' slips
    tables = [d.value for d in at.dataframe]
    ex = next(t for t in tables if "pos 1" in t.index)
    np.testing.assert_allclose(ex.loc["pos 1"].to_numpy(), [0.84147, 0.54030, 0.01000, 0.99995], atol=1e-5)
    sums = next(t for t in tables if "'cat' + PE(1)" in t.index)
    np.testing.assert_allclose(ex.loc["pos 2"].to_numpy(), [0.9093, -0.4161, 0.0200, 0.9998], atol=1e-4)
    np.testing.assert_allclose(sums.loc["'cat' + PE(1)"].to_numpy(), [1.34147, 1.14030, 0.71, 1.79995], atol=1e-5)
    np.testing.assert_allclose(sums.loc["'the' + PE(0)"].to_numpy(), [0.1, 1.2, 0.3, 1.4], atol=1e-4)
    # learned vs sinusoidal: the right side is a learned-position checkpoint's own table when one is
    # shipped (compared with that checkpoint as loaded now: it may be retrained), else a fresh learned table
    two = fig(at, "Position tables, first")
    left, right = decode(two["data"][0]["z"]), decode(two["data"][1]["z"])
    n = left.shape[0]
    np.testing.assert_allclose(left, sinusoidal_table(n, 64).numpy(), atol=1e-6)
    learned_dirs = [d for d in sorted(models.CHECKPOINTS.iterdir()) if (d / "config.json").is_file()
                    and json.loads((d / "config.json").read_text()).get("config", {}).get("pos_encoding") == "learned"]
    if learned_dirs:
        lm, _ = load_checkpoint(learned_dirs[0])
        expected = lm.position_table(n).detach().numpy()
    else:
        expected = Transformer(engine()[0].cfg.replace(n_layers=1, pos_encoding="learned"), seed=0).position_table(n).detach().numpy()
    np.testing.assert_allclose(right, expected, atol=1e-6)
    cos = decode(fig(at, "Which positions look alike?")["data"][1]["z"])
    u = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(cos, u @ u.T, atol=1e-5)
    # choosing dimensions changes the curves and the URL
    at.multiselect(key="pe_dims_ms").set_value([3]).run()
    assert not errors(at)
    assert [t["name"] for t in fig(at, "Chosen dimensions vs position")["data"]] == ["dim 3 (cos)"]


def test_layernorm_stats_engine_and_choice():
    at = start("layer-norm")
    _, tr, labels, _ = engine()
    ln = tr.layers[0].ln1
    np.testing.assert_allclose(series(fig(at, "Per-token mean"), "mean before"), ln.mean[0, :, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(series(fig(at, "Per-token mean"), "mean after"), 0.0, atol=1e-5)
    np.testing.assert_allclose(series(fig(at, "Per-token variance"), "variance before"), ln.var[0, :, 0].numpy(), rtol=1e-5)
    np.testing.assert_allclose(series(fig(at, "Per-token variance"), "variance after"), 1.0, atol=1e-3)
    norms = decode(fig(at, "‖residual stream‖")["data"][0]["z"])  # (T, stages)
    np.testing.assert_allclose(norms[:, -1], tr.layers[1].resid_out[0].norm(dim=-1).numpy(), rtol=1e-5)
    pp = fig(at, "Pre-LN vs post-LN")
    np.testing.assert_allclose(series(pp, "post-LN")[1:], 8.0, rtol=1e-3)  # sqrt(64): renormalised
    ln_m = decode(fig(at, "Layer norm: per row")["data"][0]["z"])
    np.testing.assert_allclose(ln_m[:, :6].mean(1), 0.0, atol=1e-9)  # rows normalised
    bn_m = decode(fig(at, "Batch norm: per column")["data"][0]["z"])
    np.testing.assert_allclose(bn_m[:5].mean(0), 0.0, atol=1e-9)  # columns normalised
    assert "[-1.3416, -0.4472, 0.4472, 1.3416]" in " ".join(m.value for m in at.markdown)
    at.selectbox(key="ln_where").set_value("layer 1 · ln2").run()
    assert not errors(at)
    np.testing.assert_allclose(series(fig(at, "Per-token mean"), "mean before"), tr.layers[1].ln2.mean[0, :, 0].numpy(), atol=1e-6)


def test_multihead_shapes_params_and_engine():
    at = start("multi-head", mh_head=1, mh_token=3)
    model, tr, labels, _ = engine()
    a = tr.layers[0].attn
    qkv = decode(fig(at, "Q, K, V of token 3 in head 1")["data"][0]["z"])
    np.testing.assert_allclose(qkv, np.stack([a.q[0, 1, 3], a.k[0, 1, 3], a.v[0, 1, 3]]), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "Z_1")["data"][0]["z"]), a.heads[0, 1].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "concat(")["data"][0]["z"]), a.concat[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(decode(fig(at, "Output = concat")["data"][0]["z"]), a.output[0].numpy(), atol=1e-6)
    bars = series(fig(at, "Parameter count by part"))
    assert bars.sum() == param_count(model.cfg) == model.num_parameters()
    md = " ".join(m.value for m in at.markdown)
    assert "**124,439,808**" in md
    shapes = at.dataframe[0].value
    assert shapes.loc["Q_j, K_j, V_j (one head)", "shape"] == f"{len(labels)} × 16"
    at.selectbox(key="mh_head").set_value(3).run()
    np.testing.assert_allclose(decode(fig(at, "Z_3")["data"][0]["z"]), a.heads[0, 3].numpy(), atol=1e-6)


def test_ffn_output_matches_engine():
    at = start("ffn-output", ffn_layer=1)
    model, tr, labels, ids = engine()
    np.testing.assert_allclose(decode(fig(at, "Hidden activations")["data"][0]["z"]), tr.layers[1].ffn.hidden_post[0].numpy(), atol=1e-6)
    top = decode(fig(at, "Top-5 next tokens")["data"][0]["z"])
    expect = torch.sort(tr.probs[0], dim=-1, descending=True).values[:, :5].numpy()
    np.testing.assert_allclose(top, expect, atol=1e-6)
    p = series(fig(at, "Probability of each actual next token"))
    np.testing.assert_allclose(p, [tr.probs[0, t - 1, ids[t]].item() for t in range(1, len(ids))], rtol=1e-5)
    logp = sum(math.log(x) for x in p)
    assert any(m.label.startswith("log p(x)") and m.value == f"{logp:.3f}" for m in at.metric)
    assert "**is** the token-embedding matrix" in " ".join(m.value for m in at.markdown)
    at.slider(key="ffn_k").set_value(2).run()
    assert decode(fig(at, "Top-2 next tokens")["data"][0]["z"]).shape == (len(ids), 2)


def test_contextual_cosine_by_layer_and_bad_inputs():
    at = start("contextual", mask="bidirectional")
    a, b = at.text_input(key="ctx_a").value, at.text_input(key="ctx_b").value
    assert "apple" in a.lower() and "apple" in b.lower()
    assert at.selectbox(key="ctx_word").value == "apple"
    model, ta, la, _ = engine(a, causal=False)
    _, tb, lb, _ = engine(b, causal=False)
    ia, ib = contextual.find_word(la, "apple"), contextual.find_word(lb, "apple")
    cos = series(fig(at, "Same word, two contexts"))
    assert cos[0] == pytest.approx(1.0, abs=1e-6)  # the same embedding row
    va, vb = ta.layers[1].resid_out[0, ia].double(), tb.layers[1].resid_out[0, ib].double()
    assert cos[-1] == pytest.approx(float(va @ vb / va.norm() / vb.norm()), abs=1e-5)
    assert cos[-1] < 0.999
    # a word missing from one sentence is never offered; no shared word -> a message, not a traceback
    at.text_input(key="ctx_b").input("a dog ate an orange").run()
    assert not errors(at)
    assert at.selectbox(key="ctx_word").options == ["ate", "an"]  # "apple" is not offered any more
    assert len(series(fig(at, "Same word, two contexts"))) == 4  # token emb, + position, 2 layers
    at.text_input(key="ctx_b").input("<b>zebra</b> 🦓").run()
    assert not errors(at) and any("No word appears in both" in w.value for w in at.warning)
    at.text_input(key="ctx_a").input("   ").run()
    assert not errors(at) and any("both boxes" in i.value for i in at.info)


def test_cost_closed_form_and_timing():
    at = start("cost")
    _, _, labels, _ = engine()
    mem = fig(at, "Attention-weight memory vs T")
    Ts = series(mem, None, "x")
    np.testing.assert_allclose(series(mem), 2 * 4 * Ts ** 2 * 4 / 2**20)  # L·h·T²·4 bytes, in MiB (issue 33: one unit)
    assert mem["layout"]["yaxis"]["title"]["text"] == "MiB (float32)"
    fl = fig(at, "FLOPs per forward pass")
    ratio = series(fl, "attention (QKᵀ, weights·V) ∝ T²") / Ts ** 2
    np.testing.assert_allclose(ratio, ratio[0])
    tm = fig(at, "Time of one block vs T")
    measured = series(tm, "whole block (measured)")
    assert measured.size >= 4 and np.all(measured > 0) and np.all(np.isfinite(series(tm, "attention alone (measured)")))
    assert any(m.value == f"{len(labels) ** 2:,}" for m in at.metric)
    gpt = next(d.value for d in at.dataframe if "scores per head per layer" in d.value.index)
    assert gpt.loc["scores per head per layer", "value"] == "1,024² = 1,048,576"
    assert gpt.loc["scores, all heads and layers", "value"] == "150,994,944"
    assert gpt.loc["attention weights as float32", "value"] == "576 MiB (603,979,776 bytes) per sequence"
    at.select_slider(key="cost_tmax").set_value(256).run()
    assert series(fig(at, "Attention-weight memory vs T"), None, "x").max() == 256


@pytest.mark.parametrize("page", PAGES)
def test_exotic_html_text_never_breaks_a_page(page):
    text = "<script>alert(1)</script> ☃ \u202e مرحبا 🍎 apple " + "x " * 40
    at = start(page, text=text)
    assert not errors(at)
    figs = figures(at)
    assert figs and all(f["data"] for f in figs), f"{page}: no figure drawn for this text"
    for f in figs:
        for t in f["data"]:
            for axis in ("x", "y"):
                vals = t.get(axis)
                if isinstance(vals, list):
                    assert not any("<script>" in str(v) for v in vals)
