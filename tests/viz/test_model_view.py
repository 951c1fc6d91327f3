"""viz/model_view.py: the lines drawn are exactly the weights at or above 0.05, grouped by level;
isolating a token keeps only its lines; labels are escaped."""
import numpy as np
import pytest

from viz.model_view import LEVELS, OPACITY, model_view, multi_head_lines


def n_lines(traces) -> int:
    return sum(sum(1 for v in t.x if v is None) for t in traces if t.mode == "lines")


def lines(fig):
    return [t for t in fig.data if t.mode == "lines"]


def test_every_weight_above_the_first_level_is_one_line():
    g = np.random.default_rng(0)
    w = g.dirichlet(np.ones(5), size=(2, 3, 5))  # (L, H, T, T), rows sum to 1
    fig = model_view(w, ["a", "b", "<c>", "d", "e"])
    assert n_lines(fig.data) == int((w >= LEVELS[0]).sum())
    # the strongest lines are in the most opaque trace of their panel
    top_level = max(k for k, lo in enumerate(LEVELS) if w.max() >= lo)
    assert max(t.opacity for t in lines(fig)) == OPACITY[top_level]
    only = model_view(w, ["a", "b", "<c>", "d", "e"], only=2)
    assert n_lines(only.data) == int((w[:, :, 2] >= LEVELS[0]).sum())
    T = 5
    starts = [y for t in lines(only) for y in t.y[0::3]]
    assert starts and all((-y) % (T + 3.0) == 2 for y in starts)  # every line starts at query 2 of its panel
    ticks = list(fig.layout.yaxis.ticktext)
    assert "2:&lt;c&gt;" in ticks and "<c>" not in " ".join(ticks)
    dots = next(t for t in fig.data if t.mode == "markers")  # one per query token per panel, to click
    assert len(dots.x) == 2 * 3 * 5 and list(dots.customdata[:5]) == [0, 1, 2, 3, 4]
    assert "&lt;c&gt;" in dots.hovertext[2]
    with pytest.raises(ValueError):
        model_view(w, ["a", "b"])


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
