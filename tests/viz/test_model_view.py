"""viz/model_view.py: the lines drawn are exactly the weights at or above 0.05 with their opacity and
geometry; hovering (CSS) or picking a token keeps only its lines; labels are escaped."""
import math
import re

import numpy as np
import pytest

from viz.model_view import LEVELS, model_view_html, multi_head_lines


def n_lines(traces) -> int:
    return sum(sum(1 for v in t.x if v is None) for t in traces if t.mode == "lines")


def test_model_view_html_draws_every_weight_above_the_first_level_once():
    g = np.random.default_rng(0)
    w = g.dirichlet(np.ones(5), size=(2, 3, 5))  # (L, H, T, T), rows sum to 1
    html = model_view_html(w, ["a", "b", "<c>", "d", "e"], first_layer=4)
    lines = re.findall(r'<i class="l q(\d+) r(\d+) d(m?)(\d+) o(\d+)"></i>', html)
    assert len(lines) == int((w >= LEVELS[0]).sum())  # one line per weight >= 0.05, none below
    want = sorted((i, j, round(w[l, h, i, j] * 20)) for l in range(2) for h in range(3)
                  for i, j in zip(*np.nonzero(w[l, h] >= LEVELS[0])))
    got = sorted((int(q), int(q) + (-1 if m else 1) * int(d), int(o)) for q, r, m, d, o in lines)
    assert [(i, j) for i, j, _ in got] == [(i, j) for i, j, _ in want]  # line k rows down ends at key i + k
    assert all(max(1, o) == max(1, o2) for (_, _, o), (_, _, o2) in zip(got, want))  # opacity = weight in 1/20
    assert all(q == r for q, r, *_ in lines)
    assert html.count('class="p"') == 6 and "layer 4" in html and "layer 5" in html
    # each token's hover rule hides every other token's lines
    for i in range(5):
        assert f":has(.q{i}:hover) .l:not(.q{i}) {{visibility: hidden}}" in html
    assert "&lt;c&gt;" in html and "<c>" not in html  # labels escaped
    pinned = model_view_html(w, list("abcde"), only=2)
    assert ":not(:has(.q:hover)) .l:not(.q2) {visibility: hidden}" in pinned
    assert ":not(:has(.q:hover))" not in html
    with pytest.raises(ValueError):
        model_view_html(w, ["a", "b"])
    with pytest.raises(ValueError):
        model_view_html(w, list("abcde"), only=5)


def test_model_view_html_line_geometry():
    """A line k rows down is as long and as steep as the panel's geometry says."""
    w = np.zeros((1, 1, 40, 40))
    w[0, 0, np.arange(40), 0] = 1.0
    html = model_view_html(w, [str(i) for i in range(40)])
    row = 420 // 40  # px per row at T = 40
    m = re.search(r"\.d0 \{width: ([\d.]+)px; transform: rotate\(([-\d.]+)deg\)\}", html)
    dx = float(m.group(1))
    assert float(m.group(2)) == 0
    m = re.search(r"\.dm3 \{width: ([\d.]+)px; transform: rotate\(([-\d.]+)deg\)\}", html)
    assert float(m.group(1)) == pytest.approx(math.hypot(dx, 3 * row), abs=0.06)
    assert float(m.group(2)) == pytest.approx(-math.degrees(math.atan2(3 * row, dx)), abs=0.006)
    assert f".r7 {{top: {7 * row}px}}" in html
    # rows too thin to read: every n-th name is shown, the others are hidden but still hoverable
    assert html.count('class="tk q q') == 40 and html.count(" hide\"") == 40 - len(range(0, 40, 1 + (10 - 1) // row))


def test_multi_head_lines_one_colour_per_head():
    w = np.zeros((3, 4, 4))
    for h in range(3):
        w[h, np.arange(4), (np.arange(4) + h) % 4] = 1.0  # head h: query i -> key i + h
    fig = multi_head_lines(w, list("abcd"))
    colours = {t.legendgroup: t.line.color for t in fig.data}
    assert len(colours) == 3 and len(set(colours.values())) == 3
    assert n_lines(fig.data) == 12


def test_multi_head_lines_legend_under_the_title():
    """With 12 heads the legend wrapped to two rows over the title (screenshot audit, issue 21
    point 7): it sits in the top margin under the title, in container coordinates."""
    w = np.full((12, 4, 4), 0.25)
    fig = multi_head_lines(w, list("abcd"), title="Layer 0: 12 heads")
    assert fig.layout.legend.yref == "container" and fig.layout.legend.yanchor == "top"
    assert fig.layout.title.yref == "container"
    assert fig.layout.legend.y * fig.layout.height <= fig.layout.height - 30
