"""Presentation mode (screenshot audit, issue 21 point 7): the head grid's axis titles sit in the
margins that present_fonts widens for 16 px labels; they move out with them instead of landing
on the larger tick labels."""
from __future__ import annotations

import numpy as np

from ui.show import PRESENT_FONT_PX, present_fonts
from viz.attention import head_grid


def test_axis_titles_move_out_with_the_widened_margins():
    w = np.tril(np.ones((4, 6, 6))) / np.arange(1, 7)[:, None]
    fig = head_grid(w, ["<bos>", "the", "keys", "to", "the", "cabinet"])
    ml, mb = fig.layout.margin.l, fig.layout.margin.b
    q = next(a for a in fig.layout.annotations if a.text.startswith("query"))
    k = next(a for a in fig.layout.annotations if a.text.startswith("key"))
    assert q.xshift == -ml + 2 and k.yshift == -mb + 2
    present_fonts(fig)
    # still at the outer edge of the (wider) margins
    assert abs(q.xshift + fig.layout.margin.l) <= 2 + PRESENT_FONT_PX / 14 * 2
    assert abs(k.yshift + fig.layout.margin.b) <= 2 + PRESENT_FONT_PX / 14 * 2


def test_the_top_margin_grows_with_the_title_and_the_legend_moves_down_with_it():
    """A 20 px title in a margin sized for ~14 px touched the top tick label (positional, multi-head,
    FFN & output pages): the plot now starts lower, and a legend under the title keeps its gap."""
    from viz.charts import line_chart
    fig = line_chart([0, 1, 2], {"a": [0, 1, 2], "b": [2, 1, 0]}, title="Two lines", xaxis="x", yaxis="y")
    t0, h0, lg0 = fig.layout.margin.t, fig.layout.height, fig.layout.legend.y
    top0 = (1 - lg0) * h0  # the legend's top, px from the top of the chart
    present_fonts(fig)
    assert fig.layout.margin.t >= t0 + 16 and fig.layout.height == h0 + (fig.layout.margin.t - t0)
    assert abs((1 - fig.layout.legend.y) * fig.layout.height - (top0 + 8)) < 0.5


def test_rows_of_panels_open_for_the_grown_titles():
    """Issue 33: SmolLM2's 9 heads in 3 rows with three-line titles; presentation mode grew them
    from 12 to 16 px and each title reached down onto the panel above it. Every gap between rows
    now holds its title at the new size, and every panel keeps its height."""
    w = np.tril(np.ones((9, 6, 6))) / np.arange(1, 7)[:, None]
    subtitles = [f"head {h} · other (broad/uniform 0.80 < 0.9)" for h in range(9)]
    fig = head_grid(w, ["a", "b", "c", "d", "e", "f"], subtitles=subtitles)

    def panels(f):  # (bottom px, top px) of each row, measured from the bottom of the chart
        m, plot = f.layout.margin, f.layout.height - f.layout.margin.t - f.layout.margin.b
        rows = sorted({tuple(f.layout[k].domain) for k in f.layout.to_plotly_json() if k.startswith("yaxis")})
        return [(m.b + a * plot, m.b + b * plot) for a, b in rows]

    before = panels(fig)
    lines = max(str(a.text).count("<br>") + 1 for a in fig.layout.annotations if str(a.text).startswith("head"))
    assert len(before) == 3 and lines >= 2
    present_fonts(fig)
    after = panels(fig)
    # each panel keeps its height (less what the wider tick-label margins take, as before issue 33)
    assert all(abs((t - b) - (t0 - b0)) < 10 for (b, t), (b0, t0) in zip(after, before)), (after, before)
    # a title block at 16 px (Plotly's line height: 1.3 em: 62 px for three lines, drawn 64 px tall
    # with its padding, 5 px above its panel in Chromium) and 3 px clear of the panel above. Main's
    # gap was 70 px: in Chromium each title's top touched the panel above (issue 33).
    need = lines * 1.3 * PRESENT_FONT_PX + 10
    for (_, top), (bottom, _) in zip(after, after[1:]):
        assert bottom - top >= need, (bottom - top, need)
    # each title still sits on top of its panel
    tops = {round(t, 1) for _, t in after}
    m, plot = fig.layout.margin, fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    for a in fig.layout.annotations:
        if str(a.text).startswith("head"):
            assert round(m.b + a.y * plot, 1) in tops
