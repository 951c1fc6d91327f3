"""The FFN & output layer page (AppTest): target losses, embedding neighbours, the top-k table's cell text."""
from __future__ import annotations


import numpy as np

from tests.app.test_concept_pages import fig
from tests.helpers import decode, errors



def _luminance(rgb) -> float:
    c = [v / 255 for v in rgb]
    c = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]


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


def test_topk_cell_text_contrasts_with_its_cell():
    """'the top-5 table puts white text on bright yellow': every cell's text colour against the
    Cividis colour of its probability, WCAG contrast ratio >= 3 (plotly's own colour scale)."""
    from plotly.colors import hex_to_rgb, sample_colorscale, unlabel_rgb

    from viz.charts import topk_heatmap
    p = np.array([[0.97, 0.02, 0.01], [0.5, 0.3, 0.2], [0.7, 0.2, 0.1], [0.35, 0.33, 0.32]])
    fig = topk_heatmap(p, [["a", "b", "c"]] * 4, ["w", "x", "y", "z"])
    texts = [t for t in fig.data if t.type == "scatter"]
    assert texts, "no per-cell text colours"
    colours = list(texts[0].textfont.color)
    for q, col in zip(p.ravel(), colours):
        cell = unlabel_rgb(sample_colorscale("Cividis", [float(q)])[0])
        a, b = _luminance(cell), _luminance(hex_to_rgb(col))
        ratio = (max(a, b) + 0.05) / (min(a, b) + 0.05)
        assert ratio >= 3.0, (q, col, ratio)


def _ffn_text(**query):
    from tests.helpers import all_text, app_test
    at = app_test(default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/ffn-output.py").run()
    assert not errors(at), errors(at)
    return all_text(at)


def test_neighbours_caption_says_where_the_rows_come_from():
    """Issue 34: a trained toy model's neighbours (pear, banana, peach) were captioned "(fresh
    weights: random rows, so no pattern)": the condition tested the vocabulary size."""
    trained = _ffn_text(emb_word="apple")
    assert "random rows" not in trained and "learned these rows from the built-in corpus" in trained
    fresh = _ffn_text(src="fresh weights (your architecture)", emb_word="apple")
    assert "fresh weights: random rows, so no pattern" in fresh and "built-in corpus" not in fresh


def test_one_hot_targets_flag_the_notes_seven_cells():
    """Issue 34: seed 004 draws the one-hot vector of "am" with 7 cells for a 6-word vocabulary."""
    text = _ffn_text()
    assert "exactly |V| cells" in text and "7 cells for its 6-word vocabulary" in text
    assert "[0, 1, 0, 0, 0, 0]" in text and "(309 here)" in text
