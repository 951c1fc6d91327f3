"""Issue 22 point 1: at the 2017 paper's size (d_model 512, 8 heads, 6 layers; fresh weights) every
page keeps its byte budget: bytes sent per rerun <= 1.5x the float32 bytes of the matrices shown
(measured end to end by benchmarks/bench_pages.py; base64 alone costs 4/3). At T = 64 the heads page
sent 1.68x: its grid repeated the 64 token labels on every panel (x, y of 8 heatmaps, tick values
and texts of 18 axes) and the closed code view sent its code. The charts' JSON must leave room for
the rest of a rerun (Streamlit's session and navigation messages, the sidebar, the page's text:
about 0.13x here), so it may use at most 1.40x."""
from __future__ import annotations

import json

import numpy as np
import plotly.io as pio
import pytest

from tests.app.test_attention_pages import start
from tests.helpers import decode, figures
from viz.attention import compare_grid, head_grid, overview_grid

WORDS = "the cat sat on a mat near the old river and the dog ran to the park while a man saw".split()
T = 64
CHART_BUDGET = 1.40  # chart JSON / float32 bytes of its matrices


def _ratio(fig_json: str) -> float:
    spec = json.loads(fig_json)
    floats = sum(4 * decode(t["z"]).size for t in spec["data"] if t.get("type") == "heatmap")
    floats += sum(4 * decode(t["y"]).size for t in spec["data"] if t.get("type") == "bar")
    return len(fig_json.encode()) / floats


@pytest.mark.parametrize("page", ["pages/heads.py", "pages/causal-vs-bidirectional.py"])
def test_2017_preset_charts_stay_within_the_byte_budget_at_t64(page):
    at = start(page, d=512, h=8, L=6, norm="post", act="relu", T=T)
    text = " ".join(WORDS[(j * 3) % len(WORDS)] + ("" if j % 5 else str(j)) for j in range(T - 1))  # + <bos>
    at.sidebar.text_input(key="text").set_value(text).run()
    specs = [el.proto.spec for el in at.get("plotly_chart")]
    assert specs and len(decode(json.loads(specs[0])["data"][0]["z"])) == T
    total = sum(len(s.encode()) for s in specs)
    floats = sum(len(s.encode()) / _ratio(s) for s in specs)
    assert total / floats <= CHART_BUDGET, f"{page}: charts {total} B = {total / floats:.3f}x their float32 bytes"
    # the token labels travel once per chart (x and y of its first heatmap), not once per panel
    grid = figures(at)[0]
    label = grid["data"][0]["x"][5]
    assert specs[0].count(json.dumps(label)) == 2


def _weights(H, T, seed=0):
    rng = np.random.default_rng(seed)
    s = np.where(np.tril(np.ones((T, T), bool)), rng.normal(size=(H, T, T)), -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("make", ["head_grid", "compare_grid", "overview_grid"])
def test_grid_token_labels_sent_once(make):
    """Each token label appears once as a category (x and y of the first panel), never per panel,
    and never as tick values or texts (ticks are category indices)."""
    w = _weights(8, 20)
    labels = [f"tok{i}" for i in range(20)]
    allowed = np.tril(np.ones((20, 20), bool))
    fig = {"head_grid": lambda: head_grid(w, labels, allowed=allowed),
           "compare_grid": lambda: compare_grid(w, _weights(8, 20, 1), labels, allowed_a=allowed),
           "overview_grid": lambda: overview_grid(np.stack([w, w]), labels=labels, allowed=allowed)}[make]()
    spec = pio.to_json(fig, validate=False)
    for i in (0, 7, 19):
        assert spec.count(f'"{i}:tok{i}"') == 2, (make, i)


def test_fallback_csv_names_every_panels_tokens():
    """A page that passes no table of its own (the train page's grid) gets fig_table's CSV: the
    panels that send no labels take them from the panel their axes match, not 0..T-1."""
    from ui.show import fig_table

    w = _weights(3, 4)
    t = fig_table(head_grid(w, list("abcd")))
    for h in range(3):
        rows = t[t.trace == f"head {h}"]
        assert list(rows["x"][:4]) == ["0:a", "1:b", "2:c", "3:d"] and list(rows["y"][::4]) == ["0:a", "1:b", "2:c", "3:d"]
        np.testing.assert_allclose(rows["value"].to_numpy(), w[h].ravel(), rtol=1e-6)
