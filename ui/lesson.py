"""Streamlit helpers for the classroom pages (calculator and lesson mode): number tables that stay
readable on a projector, predict-then-reveal question widgets, and parsing of typed numbers."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from classroom.lesson import LessonStep, Question
from viz.attention import head_heatmap

from .echo import echo_literal
from viz.common import DIVERGING_SCALE

# Presentation mode: the shared CSS (ui/sidebar.py) enlarges text; these rules make the lesson's
# own elements (buttons, radio labels, LaTeX, tables) follow. Static CSS, no user text.
PRESENT_EXTRA_CSS = """
<style>
.stButton button, .stDownloadButton button {font-size: 1.3rem !important; padding: 0.5rem 1.4rem !important;}
[data-testid="stRadio"] label p, [data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li
  {font-size: 1.45rem !important; line-height: 1.5 !important;}
.katex {font-size: 1.6em !important;}
[data-testid="stTable"] td, [data-testid="stTable"] th {font-size: 1.25rem !important; padding: 0.35rem 0.6rem !important;}
[data-testid="stNumberInput"] input, [data-testid="stSelectbox"] div {font-size: 1.3rem !important;}
[data-testid="stSelectbox"] [data-baseweb="select"] *, [data-testid="stTextInput"] input {font-size: 1.3rem !important;}
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p {font-size: 1.15rem !important;}
[data-testid="stWidgetLabel"] p {font-size: 1.3rem !important;}
[data-testid="stAlert"] p, [data-testid="stAlert"] li {font-size: 1.35rem !important;}
</style>
"""


def presenting() -> bool:
    return bool(st.session_state.get("present"))


def present_css() -> None:
    if presenting():
        st.html(PRESENT_EXTRA_CSS)


def fmt(x: float, nd: int = 4) -> str:
    """A cell as text: −∞ for minus infinity, blank for NaN (masked display), else nd decimals."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    x = float(x)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "−∞" if x < 0 else "∞"
    s = f"{x:.{nd}f}"
    return "0." + "0" * nd if s == "-0." + "0" * nd else s


def frame(values: np.ndarray, rows: Sequence[str] = (), cols: Sequence[str] = (), nd: int = 4,
          max_cols: int | None = None) -> pd.DataFrame:
    """A table of formatted strings (so −∞ shows as −∞, never as a huge number)."""
    v = np.atleast_2d(np.asarray(values, dtype=float))
    cols = list(cols) or [str(j) for j in range(v.shape[1])]
    rows = list(rows) or [str(i) for i in range(v.shape[0])]
    if max_cols is not None and v.shape[1] > max_cols:
        v, cols = v[:, :max_cols], cols[:max_cols]
    data = [[fmt(x, nd) for x in row] for row in v]
    return pd.DataFrame(data, index=_unique(rows), columns=_unique(cols))


def _unique(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        n = str(n)
        if n in seen:
            seen[n] += 1
            n = f"{n} ({seen[n]})"
        else:
            seen[n] = 0
        out.append(n)
    return out


def show_table(values: np.ndarray, rows: Sequence[str] = (), cols: Sequence[str] = (), *, key: str,
               nd: int = 4, max_cols: int | None = None) -> None:
    """st.table on a projector (scales with the font), a compact st.dataframe otherwise."""
    df = frame(values, rows, cols, nd, max_cols)
    if presenting():
        st.table(df)
    else:
        st.dataframe(df, key=key, width="stretch", height=min(38 + 35 * len(df), 420))
    v = np.atleast_2d(values)
    if max_cols is not None and v.shape[1] > max_cols:
        st.caption(f"First {max_cols} of {v.shape[1]} columns.")


def step_heatmap(step: LessonStep, labels: Sequence[str], big: bool) -> go.Figure:
    """A token × token step of the lesson (scores, scaled, mask, weights) as a heatmap: weights on
    their 0..1 scale, scores on a diverging scale centred at 0; larger type on a projector (big)."""
    finite = step.matrix[np.isfinite(step.matrix)]
    if step.zrange is not None:
        zmin, zmax, zmid, scale, name = *step.zrange, None, "Cividis", "weight"
    else:
        m = float(np.abs(finite).max()) if finite.size else 1.0
        zmin, zmax, zmid, scale, name = -m, m, 0.0, DIVERGING_SCALE, "score"
    fig = head_heatmap(np.nan_to_num(step.matrix, nan=0.0, neginf=0.0), labels, allowed=step.allowed,
                       zmin=zmin, zmax=zmax, zmid=zmid, colorscale=scale, value_name=name,
                       height=(760 if big else None))
    if big:  # projector: explicit sizes (the app theme would otherwise keep 12 px ticks)
        fig.update_layout(font=dict(size=20), title_font_size=24)
        fig.update_xaxes(tickfont_size=18, title_font_size=20)
        fig.update_yaxes(tickfont_size=18, title_font_size=20)
        fig.update_traces(colorbar=dict(tickfont=dict(size=18), title=dict(font=dict(size=20))))
    return fig


def parse_number(raw, where: str) -> tuple[float | None, str | None]:
    """A typed cell -> (value, None) or (None, message saying what to fix)."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return None, f"{where} is empty: type a number."
    s = str(raw).strip().replace("−", "-").replace(",", ".") if not isinstance(raw, (int, float)) else raw
    if isinstance(s, str) and s == "":
        return None, f"{where} is empty: type a number."
    try:
        x = float(s)
    except (TypeError, ValueError):
        return None, f"{where}: “{echo_literal(raw, 20)}” is not a number."
    if not math.isfinite(x):
        return None, f"{where}: “{echo_literal(raw, 20)}” is not a finite number (no NaN or infinity)."
    return x, None


def parse_vector(text: str, name: str) -> tuple[np.ndarray | None, str | None]:
    """"2, 4, 6, 8" (commas, spaces or semicolons) -> array, or a message."""
    parts = [p for p in str(text).replace(";", ",").replace("\n", ",").replace(" ", ",").split(",") if p.strip()]
    if not parts:
        return None, f"{name}: type some numbers separated by commas, e.g. 2, 4, 6, 8."
    if len(parts) > 512:
        return None, f"{name}: at most 512 numbers."
    out = []
    for n, p in enumerate(parts, 1):
        x, err = parse_number(p, f"{name}, entry {n}")
        if err:
            return None, err
        out.append(x)
    return np.array(out), None


def question(q: Question, key: str) -> bool:
    """Predict-then-reveal: the student commits an answer, then the app reveals and explains.
    Returns True when revealed."""
    st.markdown(f":material/psychology_alt: **Predict** — {q.prompt}")
    st.caption(f"From {q.source}.")
    revealed_key = f"{key}__revealed"
    revealed = bool(st.session_state.get(revealed_key))
    wkey = f"{key}__answer"
    if q.kind == "choice":
        st.radio("Your answer", list(q.options), index=None, key=wkey, disabled=revealed,
                 horizontal=q.keep_order or (len(q.options) <= 4 and max(len(o) for o in q.options) < 14),
                 label_visibility="collapsed")
    else:
        st.number_input("Your answer", min_value=float(q.lo), max_value=float(q.hi), value=None,
                        step=float(q.step), key=wkey, disabled=revealed, placeholder="type your prediction",
                        format="%.2f" if q.step < 1 else "%.0f")
    given = st.session_state.get(wkey)
    if not revealed:
        st.button("Check my answer", key=f"{key}__check", disabled=given is None,
                  help="Commit an answer first." if given is None else None,
                  on_click=_set, args=(revealed_key, True))
        return False
    if given is None:  # revealed with "Show them without predicting": no answer to judge
        answer = fmt(q.answer, 2) if q.kind == "number" else q.answer  # as the options and the explanation write it
        st.info(f"The answer: **{answer}**. {q.explanation}", icon=":material/lightbulb:")
    elif q.check(given):
        st.success(f"Right. {q.explanation}", icon=":material/check_circle:")
    else:
        shown = fmt(given, 2) if q.kind == "number" else given
        st.error(f"You said {shown}. {q.explanation}", icon=":material/cancel:")
    st.button("Try again", key=f"{key}__reset", on_click=_reset, args=(revealed_key, wkey))
    return True


def _set(key: str, value) -> None:
    st.session_state[key] = value


def _reset(revealed_key: str, answer_key: str) -> None:
    st.session_state[revealed_key] = False
    st.session_state.pop(answer_key, None)
