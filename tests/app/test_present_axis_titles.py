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
