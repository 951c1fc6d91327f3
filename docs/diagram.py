"""docs/img/architecture.svg: the layers and the one-way data flow, as a hand-written SVG (no plotting
library, no browser). Run `.venv/bin/python docs/diagram.py` after changing LAYERS or FLOW;
tests/test_readme.py checks that the committed file is what this script writes."""
from __future__ import annotations

from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parent / "img" / "architecture.svg"

# (directory, what it is, what it may not import); top to bottom: imports point down only
LAYERS = [
    ("app.py", "the router: shared sidebar, st.navigation over the pages", ""),
    ("pages/", "one thin script per topic: read state → cached compute → viz → show",
     "no math, no torch"),
    ("ui/", "the only Streamlit-aware helpers: state and URL, model registry, runs, show_fig, downloads",
     "no benchmarks/; training/ only for the training pages"),
    ("viz/", "pure: numpy/pandas arrays + token labels → Plotly figure (never displays)",
     "no streamlit, torch, classroom/, ui/"),
    ("classroom/  ·  training/", "pure Python over model/: analyses, lessons, worked examples · corpora, the training loop",
     "no streamlit, plotly, ui/, viz/"),
    ("model/", "the engine, pure torch: config, tokenizers, attention + hooks, Transformer, trace, checkpoints",
     "no streamlit, plotly, upper layers"),
    ("labels/", "token labels and the HTML/Markdown escapes, standard library only (viz/ and classroom/ share it)",
     "nothing of the project"),
]

# (box text, code text, layer it lives in)
FLOW = [
    ("text", "the sidebar's sentence", "pages/ · ui/"),
    ("tokenizer", "tok.encode(text)", "model/"),
    ("Transformer.trace", "model.trace(ids)", "model/"),
    ("ForwardTrace.numpy()", "typed, same field names", "model/"),
    ("classroom analysis", "frozen dataclasses", "classroom/"),
    ("viz figure", "go.Figure", "viz/"),
    ("page", "show_fig(fig, key)", "pages/ · ui/"),
]

W = 1360
FONT = "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\""
BLUE, TEAL, ORANGE, GREY = "#0072B2", "#009E73", "#E69F00", "#555555"  # Okabe–Ito: colour-blind safe
FILL = {"model/": "#DCEBF7", "classroom/": "#D5F0E6", "viz/": "#FBEBC8", "pages/ · ui/": "#EFEFEF"}
LAYER_FILL = ["#EFEFEF", "#EFEFEF", "#EFEFEF", "#FBEBC8", "#D5F0E6", "#DCEBF7", "#F2F2F2"]


def text(x: float, y: float, s: str, size: int = 14, weight: str = "normal", anchor: str = "start",
         fill: str = "#222222", mono: bool = False) -> str:
    family = 'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace"' if mono else FONT
    return (f'<text x="{x:g}" y="{y:g}" font-size="{size}" font-weight="{weight}" text-anchor="{anchor}" '
            f'fill="{fill}" {family}>{escape(s)}</text>')


def box(x: float, y: float, w: float, h: float, fill: str, stroke: str = GREY) -> str:
    return f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="6" fill="{fill}" stroke="{stroke}"/>'


def arrow(x1: float, y1: float, x2: float, y2: float) -> str:
    return f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="{GREY}" stroke-width="2" marker-end="url(#head)"/>'


TITLE_FLOW, TITLE_LAYERS = "Data flows one way", "Layers: imports point down only"


def after(title: str, size: int = 20) -> float:
    """x just after a bold title at the left margin (DejaVu Sans Bold: about 0.65 em per character)."""
    return 20 + 0.65 * size * len(title) + 16


def svg() -> str:
    out: list[str] = []
    # 1. data flow, left to right
    out.append(text(20, 34, TITLE_FLOW, 20, "bold"))
    out.append(text(after(TITLE_FLOW), 34, "every number on screen is a field of the trace, read as a typed attribute "
                    "(tr.layers[l].attn.weights)", 14, fill=GREY))
    n, gap, top, h = len(FLOW), 22, 56, 74
    bw = (W - 40 - gap * (n - 1)) / n
    for i, (name, code, layer) in enumerate(FLOW):
        x = 20 + i * (bw + gap)
        out.append(box(x, top, bw, h, FILL[layer]))
        out.append(text(x + bw / 2, top + 26, name, 12, "bold", "middle"))
        out.append(text(x + bw / 2, top + 46, code, 11, anchor="middle", mono=True))
        out.append(text(x + bw / 2, top + 64, layer, 12, anchor="middle", fill=GREY))
        if i:
            out.append(arrow(x - gap + 2, top + h / 2, x - 3, top + h / 2))
    # 2. layers, top to bottom
    y0 = top + h + 64
    out.append(text(20, y0 - 22, TITLE_LAYERS, 20, "bold"))
    out.append(text(after(TITLE_LAYERS), y0 - 22, "tests/test_layering.py scans every import and fails otherwise", 14, fill=GREY))
    lh, lgap = 46, 16
    for i, ((name, what, rule), fill) in enumerate(zip(LAYERS, LAYER_FILL)):
        y = y0 + i * (lh + lgap)
        out.append(box(20, y, W - 40, lh, fill))
        out.append(text(36, y + 29, name, 16, "bold", mono=True))
        out.append(text(300, y + 29, what, 14))
        if rule:
            out.append(text(W - 36, y + 29, rule, 12, anchor="end", fill=GREY))
        if i:
            out.append(arrow(150, y - lgap - 2, 150, y + 1))
    height = y0 + len(LAYERS) * (lh + lgap) + 10
    head = ('<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{GREY}"/></marker></defs>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height:g}" viewBox="0 0 {W} {height:g}" '
            f'role="img" aria-label="Attention Lab: the data flow and the layers">\n'
            f'<rect width="100%" height="100%" fill="#FFFFFF"/>\n{head}\n' + "\n".join(out) + "\n</svg>\n")


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(svg(), encoding="utf-8")
    print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}")
