"""The Circuits page (issue 35) in AppTest, on the toy model (causal-lm), MiniLM and SmolLM2: every
section renders, and the numbers on its charts equal references computed here from the model's
own trace by plain loops and numpy (never through classroom/circuits.py). Timings are printed, not
asserted."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.pretrained import PRETRAINED, load_pretrained
from model.tokenizer import SPECIALS
from tests.helpers import ROOT, app_test, decode, errors, fig_titled, figures
from ui.state import DEFAULT_TEXT, FRESH

PAGE = "pages/circuits.py"
TEXT = DEFAULT_TEXT  # the sidebar's default sentence: the pages open on it


def start(tab: str, src: str | None = None, timeout: int = 120, **params):
    at = app_test(default_timeout=timeout)
    if src:
        at.query_params["src"] = src
    at.query_params["circ_tab"] = tab
    for k, v in params.items():
        at.query_params[k] = str(v)
    t0 = time.perf_counter()
    at.run()
    at.switch_page(PAGE).run()
    print(f"{src or 'causal-lm'} · {tab}: {time.perf_counter() - t0:.1f} s")
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


def z_of(fig: dict) -> np.ndarray:
    return decode(fig["data"][0]["z"]).astype(np.float64)


def text_of(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "info", "warning") for e in at.get(kind))


@pytest.fixture(scope="module")
def toy():
    return load_checkpoint(ROOT / "checkpoints" / "causal-lm")


def loop_sink(tr, keys: list[int]) -> np.ndarray:
    L = len(tr.layers)
    H, T = tr.layers[0].attn.weights.shape[1], tr.layers[0].attn.weights.shape[2]
    out = np.zeros((L, H))
    for l in range(L):
        w = tr.layers[l].attn.weights[0].double().numpy()
        for h in range(H):
            out[l, h] = np.mean([sum(w[h, t, k] for k in keys) for t in range(1, T)])
    return out


def loop_induction(tr, n: int) -> np.ndarray:
    W = np.stack([lt.attn.weights[0].double().numpy() for lt in tr.layers])
    return np.array([[np.mean([W[l, h, i, i - n + 1] for i in range(n + 1, 2 * n + 1)]) for h in range(W.shape[1])]
                     for l in range(W.shape[0])])


def test_sinks_section_on_the_toy_model(toy):
    model, tok = toy
    at = start("Attention sinks")
    tr = model.trace(torch.tensor([tok.encode(TEXT).ids]))
    ref = loop_sink(tr, [0])
    np.testing.assert_allclose(z_of(fig_titled(at, "Sink score")), ref, atol=1e-6)
    assert f"{int((ref > 0.5).sum())} of 8 heads" in text_of(at)
    # the derived view: the chosen head (the strongest sink) with key 0 removed and rows renormalised
    l, h = np.unravel_index(np.argmax(ref), ref.shape)
    assert at.selectbox(key="circ_sink_layer").value == l and at.selectbox(key="circ_sink_head").value == h
    w = tr.layers[l].attn.weights[0, h].double().numpy()
    T = w.shape[0]
    rest = w.copy()
    rest[:, 0] = 0.0
    sums = rest.sum(1, keepdims=True)
    want = np.where(sums > 0, rest / np.where(sums > 0, sums, 1), 0)
    want = np.where(np.tril(np.ones((T, T), dtype=bool)), want, np.nan)  # masked cells: grey (NaN)
    want[:, 0] = np.nan  # the hidden sink column: blank (its own colour underneath)
    fig = fig_titled(at, "Sink hidden")
    got = z_of(fig)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert [(s["x0"], s["x1"]) for s in fig["layout"]["shapes"]] == [(-0.5, 0.5)]  # the hidden column, marked


def test_induction_section_scores_and_ablation_on_the_toy_model(toy):
    model, tok = toy
    at = start("Induction heads", ind_n=20, ind_seed=5, ind_ablate="true", ind_k=2)
    pool = np.array([i for i, s in enumerate(tok.vocab) if s not in SPECIALS])
    r = np.random.default_rng(5).choice(pool, size=20, replace=True)
    ids = np.concatenate([[tok.bos_id], r, r])
    tr = model.trace(torch.tensor([ids.tolist()]))
    ref = loop_induction(tr, 20)
    np.testing.assert_allclose(z_of(fig_titled(at, "Induction score")), ref, atol=1e-6)
    loss_fig = fig_titled(at, "Loss of each prediction")
    names = [t["name"] for t in loss_fig["data"]]
    assert names == ["as trained", "top 2 induction heads off", "2 other heads off (control)"]
    top = [divmod(int(i), 4) for i in np.argsort(-ref, axis=None, kind="stable")[:2]]
    with torch.no_grad():
        for trace_name, heads in (("as trained", []), ("top 2 induction heads off", top)):
            logits = model.trace(torch.tensor([ids.tolist()]), ablate_heads=heads).logits[0].double()
            want = -torch.log_softmax(logits, -1)[torch.arange(40), torch.tensor(ids[1:])].numpy()
            got = decode(loss_fig["data"][names.index(trace_name)]["y"])
            np.testing.assert_allclose(got, want, atol=1e-6)
    assert "Switched off: " + ", ".join(f"L{l} H{h}" for l, h in sorted(top, key=lambda p: -ref[p])) in text_of(at)


def test_logit_lens_section_on_the_toy_model(toy):
    model, tok = toy
    at = start("Logit lens")
    ids = tok.encode(TEXT).ids
    tr = model.trace(torch.tensor([ids]))
    W = model.output_matrix.detach().double().numpy()
    g, b = model.ln_f.weight.detach().double().numpy(), model.ln_f.bias.detach().double().numpy()
    z = z_of(fig_titled(at, "Logit lens"))
    assert z.shape == (3, len(ids)) and np.isnan(z[:, -1]).all()
    for row, x in enumerate([tr.embeddings.sum[0]] + [lt.resid_out[0] for lt in tr.layers]):
        x = x.double().numpy()
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        logits = ((x - mu) / np.sqrt(var + model.cfg.ln_eps) * g + b) @ W.T
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(z[row, :-1], p[np.arange(len(ids) - 1), ids[1:]], atol=1e-6)
    # the table of the last position: the model's own top-5 in the last row
    df = at.dataframe[0].value
    assert list(df.columns) == ["#1", "#2", "#3", "#4", "#5"] and list(df.index) == ["embeddings", "after layer 0",
                                                                                   "after layer 1"]
    top = torch.topk(tr.probs[0, -1], 5)
    assert df.iloc[-1, 0] == f"{tok.vocab[int(top.indices[0])]} ({float(top.values[0]):.3f})"


def test_two_models_section_same_tokenizer_gives_difference_maps(toy):
    model, tok = toy
    at = start("Two models", cmp_grids="true")
    assert at.selectbox(key="cmp_model").value == "causal-lm-learned"
    other, _ = load_checkpoint(ROOT / "checkpoints" / "causal-lm-learned")
    ids = tok.encode(TEXT).ids
    a = loop_sink(model.trace(torch.tensor([ids])), [0])
    b = loop_sink(other.trace(torch.tensor([ids])), [0])
    np.testing.assert_allclose(z_of(fig_titled(at, "Sink score: B − A")), b - a, atol=1e-6)
    titles = [(f["layout"].get("title") or {}).get("text", "") for f in figures(at)]
    assert any(t.startswith("A · layer 0") for t in titles) and any(t.startswith("B · layer 0") for t in titles)
    assert len([t for t in titles if "B − A" in t or "Shared pieces" in t]) >= 2
    # the same tokens: every shared piece is one token (the <bos> lies outside the text)
    bars = fig_titled(at, "Two tokenizers")["data"]
    assert len(bars) == 2 and decode(bars[0]["x"]).shape == (len(ids),)


def test_one_head_section_qk_against_the_projections(toy):
    model, tok = toy
    at = start("One head: QK & OV", hc_layer=1, hc_head=2)
    ids = tok.encode(TEXT).ids
    blk = model.blocks[1]
    with torch.no_grad():
        x = blk.ln1(model.tok_emb.weight[torch.tensor(ids)], False)[0].double()
        q = (x @ blk.attn.q_proj.weight.double().T + blk.attn.q_proj.bias.double())[:, 32:48]
        k = (x @ blk.attn.k_proj.weight.double().T + blk.attn.k_proj.bias.double())[:, 32:48]
    np.testing.assert_allclose(z_of(fig_titled(at, "Tokens alone")), (q @ k.T / 4.0).numpy(), atol=1e-5)
    shapes = at.dataframe[0].value
    assert list(shapes["shape"])[:3] == ["64 × 16", "64 × 16", "64 × 64"]


minilm = pytest.mark.skipif(not PRETRAINED["minilm-l6"].installed(), reason="SKIPPED LOUDLY: MiniLM not installed")
smollm = pytest.mark.skipif(not PRETRAINED["smollm2-135m"].installed(), reason="SKIPPED LOUDLY: SmolLM2 not installed")


@minilm
def test_minilm_sinks_count_cls_and_sep_and_the_lens_says_why_not():
    model, tok = load_pretrained("minilm-l6")
    ids = tok.encode(TEXT).ids
    tr = model.trace(torch.tensor([ids]), causal=False)
    at = start("Attention sinks", src="minilm-l6")
    np.testing.assert_allclose(z_of(fig_titled(at, "Sink score")), loop_sink(tr, [0, len(ids) - 1]), atol=1e-6)
    at = start("Logit lens", src="minilm-l6")
    assert not figures(at)
    assert "no output layer" in text_of(at)


@minilm
@smollm
def test_minilm_against_smollm2_aligns_tokens_by_characters():
    at = start("Two models", src="minilm-l6", cmp_model="smollm2-135m", timeout=300)
    bars = fig_titled(at, "Two tokenizers")["data"]
    a_base, b_base = decode(bars[0]["base"]), decode(bars[1]["base"])
    assert len(a_base) == 12 and len(b_base) == 10  # [CLS] 10 words [SEP]; SmolLM2: 10 tokens, no BOS
    # MiniLM's words start where SmolLM2's tokens start (+1: SmolLM2 carries the space in front)
    assert np.allclose(a_base[1:-1] - 0.05, [0, 4, 9, 12, 16, 24, 28, 31, 35, 40])  # "... table." (no space before the full stop)
    assert fig_titled(at, "Shared pieces")
    assert "difference map per head needs the same tokens" in text_of(at)


@smollm
def test_smollm2_induction_heads_and_ablation():
    model, tok = load_pretrained("smollm2-135m")
    at = start("Induction heads", src="smollm2-135m", timeout=300, ind_ablate="true")
    z = z_of(fig_titled(at, "Induction score"))
    assert z.shape == (30, 9) and z.max() > 0.7
    loss = fig_titled(at, "Loss of each prediction")["data"]
    clean, off, ctrl = (decode(t["y"]) for t in loss)
    assert off[51:].mean() > clean[51:].mean() + 1.0  # switching the top 3 off costs the second copy
    assert ctrl[51:].mean() < off[51:].mean()
    # the map equals loops over the engine's weights on the test's tokens, drawn by the documented recipe:
    # BOS, then Generator(seed).choice(ordinary tokens, n) twice (ordinary: not spelled like a special token)
    pool = np.array([i for i, s in enumerate(tok.vocab)
                     if s not in tok.specials and not (len(s) > 2 and s[0] in "[<" and s[-1] in "]>")])
    r = np.random.default_rng(0).choice(pool, size=50, replace=True)
    ids = np.concatenate([[tok.bos_id], r, r])
    np.testing.assert_allclose(z, loop_induction(model.trace(torch.tensor([ids.tolist()])), 50), atol=1e-5)


@pytest.mark.parametrize("tab, params", [("Induction heads", {"ind_ablate": "true"}), ("Logit lens", {}),
                                         ("Two models", {"cmp_grids": "true", "cmp_ind": "true"}),
                                         ("One head: QK & OV", {})])
def test_every_chart_of_every_section_has_alt_text_and_csv(tab, params):
    """The accessibility rule of tests/e2e/test_e2e_a11y.py (its default-tab check covers the sinks) on the
    other sections: each chart followed by its alt-text caption, each with its CSV button."""
    from tests.e2e.test_e2e_a11y import check_charts
    at = start(tab, **params)
    assert check_charts(at, f"circuits · {tab}") >= 1


def test_sinks_section_draws_a_long_input_in_blocks():
    """Issue 33: at 1,024 tokens the two sink heatmaps sent every cell (1,024 × 1,024, 5.6 MB each);
    now they draw blocks of 8 × 8 tokens as the heads grid does (a block row still sums to 1), and
    the sink-hidden view blanks no block that holds other keys than the sink."""
    from benchmarks.bench_long import LONG_TEXT
    at = start("Attention sinks", src=FRESH, timeout=300, ctx=1024, T=1024, text=(LONG_TEXT + " ") * 2)
    raw, hid = fig_titled(at, "Layer"), fig_titled(at, "Sink hidden")
    for fig in (raw, hid):
        assert "1,024 tokens in blocks of 8×8" in fig["layout"]["title"]["subtitle"]["text"]
        assert z_of(fig).shape == (128, 128)
    np.testing.assert_allclose(np.nansum(z_of(raw), axis=1), 1.0, atol=1e-5)
    assert not np.isnan(z_of(hid)[:, 0]).all()  # block 0 holds keys 1-7 too: drawn
    np.testing.assert_allclose(np.nansum(z_of(hid)[1:], axis=1), 1.0, atol=1e-5)  # the rest renormalised
