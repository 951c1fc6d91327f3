"""The whole-model flow diagram is readable in both themes (issue 21 audit: its box labels were
grey on pastel, about 3:1). Every text of the figure is checked against what lies under it,
composited over the light and the dark page background: WCAG AA, contrast ≥ 4.5:1."""
from __future__ import annotations

import re

import pytest
import torch

from classroom.flow import stages
from model.checkpoint import load_checkpoint
from tests.helpers import ROOT
from viz.flow import flow_diagram

PAGES = {"light": "#ffffff", "dark": "#0e1117"}  # Streamlit's light and dark backgrounds


def _rgba(c: str) -> tuple[float, float, float, float]:
    c = c.strip()
    if c.startswith("#"):
        h = c[1:]
        if len(h) == 3:
            h = "".join(ch * 2 for ch in h)
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16), 1.0
    m = re.fullmatch(r"rgba?\(([^)]*)\)", c)
    assert m, f"colour {c!r} not understood"
    v = [float(x) for x in m.group(1).split(",")]
    return v[0], v[1], v[2], (v[3] if len(v) > 3 else 1.0)


def _over(top: str | None, under: tuple[float, float, float], opacity: float = 1.0) -> tuple[float, float, float]:
    if not top:
        return under
    r, g, b, a = _rgba(top)
    a *= opacity
    return tuple(a * t + (1 - a) * u for t, u in zip((r, g, b), under))


def _lum(rgb) -> float:
    def ch(v):
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (ch(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg, bg) -> float:
    a, b = sorted((_lum(fg), _lum(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def text_pairs(fig, page: str):
    """(text, text colour, background colour) for every text annotation, the background being the
    page, then every filled shape under the text's anchor point, then the annotation's own bgcolor."""
    fl = fig
    out = []
    for a in fl.layout.annotations:
        if not a.text:
            continue
        assert a.font.color, f"{a.text!r} has no colour of its own: it would take the theme's, unchecked"
        bg = _rgba(PAGES[page])[:3]
        for s in fl.layout.shapes:
            if s.type == "rect" and s.fillcolor and min(s.x0, s.x1) <= a.x <= max(s.x0, s.x1) \
                    and min(s.y0, s.y1) <= a.y <= max(s.y0, s.y1):
                bg = _over(s.fillcolor, bg, 1.0 if s.opacity is None else s.opacity)
        bg = _over(a.bgcolor, bg)
        fg = _over(a.font.color, bg, 1.0 if a.opacity is None else a.opacity)
        out.append((a.text, fg, bg))
    return out


@pytest.fixture(scope="module")
def fig():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    tr = model.trace(torch.tensor([tok.encode("the keys to the cabinet are on the table .").ids]))
    return flow_diagram(stages(tr.numpy(), model.cfg), title="11 tokens, from ids to probabilities")


@pytest.mark.parametrize("page", list(PAGES))
def test_every_text_reaches_wcag_aa_on_its_background(fig, page):
    pairs = text_pairs(fig, page)
    names = [t for t, _, _ in pairs]
    assert any("token ids" in t for t in names) and any(t.startswith("(") for t in names)  # names and shapes
    assert len(pairs) >= 3 * 10
    low = [(t, round(contrast(fg, bg), 2)) for t, fg, bg in pairs if contrast(fg, bg) < 4.5]
    assert not low, low


def test_the_title_keeps_the_theme_colour(fig):
    """The chart title sits on the page like every chart's title: the theme's own text colour
    (dark on light, light on dark), not a fixed one that would vanish in one of them."""
    assert fig.layout.title.text and not fig.layout.title.font.color
