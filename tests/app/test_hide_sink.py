"""The "Hide the sink" switch (issue 35) on the attention views, in AppTest: the derived view's
numbers against a renormalisation done here by loops, the sink's columns marked, the labels judged
with the sink hidden (SmolLM2's heads stop being "first-token sink"), the state in the URL and
across pages, MiniLM's [CLS]/[SEP] as its sink."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.pretrained import PRETRAINED, load_pretrained
from tests.helpers import ROOT, app_test, decode, errors, figures
from ui.state import DEFAULT_TEXT

TEXT = DEFAULT_TEXT  # the sidebar's default sentence: the pages open on it


def start(page: str, src: str | None = None, timeout: int = 120, **params):
    at = app_test(default_timeout=timeout)
    if src:
        at.query_params["src"] = src
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page(page).run()
    assert not errors(at), errors(at)
    return at


def hidden_ref(w: np.ndarray, keys: list[int]) -> np.ndarray:
    """Rows renormalised over the keys not in `keys`, by loops; the hidden columns NaN (blank)."""
    out = np.zeros_like(w, dtype=np.float64)
    for i in range(w.shape[0]):
        left = [j for j in range(w.shape[1]) if j not in keys]
        tot = sum(w[i, j] for j in left)
        for j in left:
            out[i, j] = w[i, j] / tot if tot > 1e-12 else 0.0
    out[:, keys] = np.nan
    return out


def heatmaps(fig: dict) -> list[np.ndarray]:
    return [decode(t["z"]).astype(np.float64) for t in fig["data"] if t["type"] == "heatmap"]


def caption_text(at) -> str:
    return "\n".join(c.value for c in at.caption)


def test_heads_page_shows_the_derived_view_and_labels_it():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(TEXT).ids
    w = model.trace(torch.tensor([ids])).layers[0].attn.weights[0].double().numpy()  # (H, T, T)
    at = start("pages/heads.py", hide_sink="true")
    assert at.toggle(key="hide_sink").value is True
    fig = figures(at)[0]
    assert fig["layout"]["title"]["text"].endswith("· sink hidden")
    causal = np.tril(np.ones((len(ids), len(ids)), bool))
    for h, z in enumerate(heatmaps(fig)):
        want = hidden_ref(w[h], [0])
        want[~causal] = np.nan
        np.testing.assert_allclose(z, want, atol=1e-6)
    assert len(fig["layout"]["shapes"]) == 4  # the sink column of each head, marked
    titles = [a["text"] for a in fig["layout"]["annotations"] if a["text"].startswith("head ")]
    assert all("sink 0." in t for t in titles), titles
    assert "Derived view, sink hidden" in caption_text(at)
    assert at.query_params["hide_sink"] == "true"
    # off again: the weights as computed, no marks, no note
    at.toggle(key="hide_sink").set_value(False).run()
    fig = figures(at)[0]
    for h, z in enumerate(heatmaps(fig)):
        np.testing.assert_allclose(z, np.where(causal, w[h], np.nan), atol=1e-6)
    assert not fig["layout"].get("shapes") and "Derived view" not in caption_text(at)
    assert "hide_sink" not in at.query_params


def test_the_switch_follows_the_reader_across_pages():
    at = start("pages/heads.py")
    at.toggle(key="hide_sink").set_value(True).run()
    at.switch_page("pages/scaling.py").run()  # a page without the switch
    assert at.query_params["hide_sink"] == "true"
    at.switch_page("pages/overview.py").run()
    assert at.toggle(key="hide_sink").value is True
    assert "sink (hidden)" in at.dataframe[0].value.columns
    at.switch_page("pages/causal-vs-bidirectional.py").run()
    assert not errors(at)
    fig = figures(at)[0]
    for z in heatmaps(fig):  # causal | bidirectional | difference: the sink column blank in each
        assert np.isnan(z[:, 0]).all()
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode(TEXT).ids
    T = len(ids)
    wc = model.trace(torch.tensor([ids]), causal=True).layers[0].attn.weights[0, 0].double().numpy()
    wb = model.trace(torch.tensor([ids]), causal=False).layers[0].attn.weights[0, 0].double().numpy()
    want_c = hidden_ref(wc, [0])
    want_c[~np.tril(np.ones((T, T), bool))] = np.nan
    z_c, z_b, z_d = heatmaps(fig)[:3]  # head 0: causal, bidirectional, difference (both derived)
    np.testing.assert_allclose(z_c, want_c, atol=1e-6)
    np.testing.assert_allclose(z_b, hidden_ref(wb, [0]), atol=1e-6)
    np.testing.assert_allclose(z_d, hidden_ref(wb, [0]) - np.nan_to_num(want_c), atol=1e-6)


@pytest.mark.skipif(not PRETRAINED["smollm2-135m"].installed(), reason="SKIPPED LOUDLY: SmolLM2 not installed")
def test_smollm2_heads_get_labels_beyond_the_sink():
    model, tok = load_pretrained("smollm2-135m")
    ids = tok.encode(TEXT).ids
    tr = model.trace(torch.tensor([ids]))
    sink = np.array([[lt.attn.weights[0, h, 1:, 0].double().mean().item() for h in range(9)] for lt in tr.layers])
    at = start("pages/overview.py", src="smollm2-135m", timeout=300)
    plain = at.dataframe[0].value
    at.toggle(key="hide_sink").set_value(True).run()
    table = at.dataframe[0].value
    as_computed = (plain["label"] == "first-token sink").sum()
    assert as_computed >= 150  # most of SmolLM2's 270 heads, as computed
    assert (table["label"] == "first-token sink").sum() == 0
    named = (table["label"] != "other").sum()
    assert named >= 60, table["label"].value_counts()  # a pattern of their own for many heads
    np.testing.assert_allclose(table["sink (hidden)"].to_numpy().reshape(30, 9), sink, atol=1e-4)


@pytest.mark.skipif(not PRETRAINED["minilm-l6"].installed(), reason="SKIPPED LOUDLY: MiniLM not installed")
def test_minilm_hides_cls_and_sep():
    model, tok = load_pretrained("minilm-l6")
    ids = tok.encode(TEXT).ids
    T = len(ids)
    w = model.trace(torch.tensor([ids]), causal=False).layers[0].attn.weights[0].double().numpy()
    at = start("pages/heads.py", src="minilm-l6", timeout=300, hide_sink="true")
    fig = figures(at)[0]
    for h, z in enumerate(heatmaps(fig)):
        np.testing.assert_allclose(z, hidden_ref(w[h], [0, T - 1]), atol=1e-6)
    assert {(s["x0"], s["x1"]) for s in fig["layout"]["shapes"]} == {(-0.5, 0.5), (T - 1.5, T - 0.5)}
    assert r"“\[CLS\]”, “\[SEP\]”" in caption_text(at)  # Markdown-escaped
