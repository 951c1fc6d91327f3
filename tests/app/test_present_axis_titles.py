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
