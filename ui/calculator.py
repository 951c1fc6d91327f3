"""The calculator page's widgets and state: editable matrices (st.data_editor, text cells so that
whatever is typed stays on screen), presets from classroom/worked_examples.py, small calculators.
All numbers come from classroom.worked_examples (which calls model.attention.attend / model.layers)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from classroom import worked_examples as wx
from labels import md_escape
from ui import lesson as L
from ui import state

MAX_T, MAX_D = 8, 8
PRESET_KEYS = ["custom"] + list(wx.PRESETS)
DEFAULT_PRESET = "the-cat-sat"
MATS = ("X", "E", "W_Q", "W_K", "W_V", "W_O")
s = st.session_state


def _title(key: str) -> str:
    return "Custom (your own numbers)" if key == "custom" else wx.PRESETS[key].title


# ------------------------------------------------------------------ state
def _str_df(a: np.ndarray, rows, cols) -> pd.DataFrame:
    return pd.DataFrame([[f"{float(x):g}" for x in r] for r in np.atleast_2d(a)], index=list(rows), columns=list(cols))


def _names(n: int, p: str) -> list[str]:
    return [f"{p}{j}" for j in range(n)]


def _set_bases(setup: wx.AttentionSetup) -> None:
    T, d = setup.X.shape
    s["calc_T"], s["calc_d"] = T, d
    dv = s["calc_dv"] = setup.W_V.shape[1]  # the width of V (all heads): may differ from d_k's
    s["calc_cross"] = setup.X_kv is not None
    Tk = setup.X_kv.shape[0] if setup.X_kv is not None else T
    s["calc_Tk"] = Tk
    s["calc_heads"] = setup.n_heads
    s["calc_mask"] = setup.mask
    s["calc_scale"] = setup.scale
    s["calc_maskq"] = setup.mask_padded_queries
    s["calc_wo"] = setup.W_O is not None
    s["_calc_labels"] = list(setup.labels) or _names(T, "t")
    s["_calc_kv_labels"] = list(setup.kv_labels) or _names(Tk, "s")
    rows, krows = wx.token_names(s["_calc_labels"], T, "t"), wx.token_names(s["_calc_kv_labels"], Tk, "s")
    base = {"X": _str_df(setup.X, rows, _names(d, "x")),
            "E": _str_df(setup.X_kv if setup.X_kv is not None else np.zeros((Tk, d)), krows, _names(d, "x")),
            "W_Q": _str_df(setup.W_Q, _names(d, "x"), _names(d, "q")),
            "W_K": _str_df(setup.W_K, _names(d, "x"), _names(d, "k")),
            "W_V": _str_df(setup.W_V, _names(d, "x"), _names(dv, "v")),
            "W_O": _str_df(setup.W_O if setup.W_O is not None else np.eye(dv, d), _names(dv, "c"), _names(d, "o"))}
    pad = setup.padding if setup.padding is not None else (True,) * Tk
    base["pad"] = pd.DataFrame({"real token": [bool(p) for p in pad]}, index=krows if setup.X_kv is not None else rows)
    s["_calc_base"] = base
    s["_calc_cur"] = {k: v.copy() for k, v in base.items()}
    s["_calc_ver"] = s.get("_calc_ver", 0) + 1


def load_preset(key: str) -> None:
    p = wx.PRESETS[key]
    if p.kind == "attention":
        _set_bases(p.setup)
    if p.kind == "layernorm":
        s["calc_ln_x"] = ", ".join(f"{x:g}" for x in p.vector)
        s["calc_ln_eps"] = f"{p.eps:g}"
    if p.kind == "pe":
        s["calc_pe_d"], s["calc_pe_n"], s["calc_pe_pos"], s["calc_pe_i"] = p.d_model, p.positions, 1, 1
    if key == "scaling-6-4":
        s["calc_sm_x"], s["calc_sm_t"] = "6, 4", 1.0


def _resize() -> None:
    """T, d, encoder length, cross or W_O changed: keep the overlapping typed values."""
    T, d, Tk = int(s["calc_T"]), int(s["calc_d"]), int(s["calc_Tk"])
    cur = s["_calc_cur"]
    old_d, old_dv = cur["W_Q"].shape[0], cur["W_V"].shape[1]
    if old_dv == old_d != d:  # V kept the width of Q and K: it follows d_model
        s["calc_dv"] = d
    dv = int(s.get("calc_dv", d))
    s["_calc_labels"] = (s["_calc_labels"] + _names(T, "t")[len(s["_calc_labels"]):])[:T]
    s["_calc_kv_labels"] = (s["_calc_kv_labels"] + _names(Tk, "s")[len(s["_calc_kv_labels"]):])[:Tk]
    rows, krows = wx.token_names(s["_calc_labels"], T, "t"), wx.token_names(s["_calc_kv_labels"], Tk, "s")
    if not s.get("calc_cross"):
        krows = rows

    def fit(old: pd.DataFrame, r: list[str], c: list[str], eye: bool) -> pd.DataFrame:
        new = _str_df(np.eye(len(r), len(c)) if eye else np.zeros((len(r), len(c))), r, c)
        for i in range(min(len(r), old.shape[0])):
            for j in range(min(len(c), old.shape[1])):
                new.iat[i, j] = old.iat[i, j]
        return new

    base = {"X": fit(cur["X"], rows, _names(d, "x"), False),
            "E": fit(cur["E"], wx.token_names(s["_calc_kv_labels"], Tk, "s"), _names(d, "x"), False)}
    for name, p in (("W_Q", "q"), ("W_K", "k")):
        base[name] = fit(cur[name], _names(d, "x"), _names(d, p), True)
    base["W_V"] = fit(cur["W_V"], _names(d, "x"), _names(dv, "v"), True)
    base["W_O"] = fit(cur["W_O"], _names(dv, "c"), _names(d, "o"), True)
    n_keys = Tk if s.get("calc_cross") else T
    old_pad = list(cur["pad"]["real token"])
    pad = [bool(old_pad[i]) if i < len(old_pad) else True for i in range(n_keys)]
    base["pad"] = pd.DataFrame({"real token": pad}, index=krows if s.get("calc_cross") else rows)
    s["_calc_base"] = base
    s["_calc_cur"] = {k: v.copy() for k, v in base.items()}
    s["_calc_ver"] = s.get("_calc_ver", 0) + 1


WIDGET_KEYS = ("calc_T", "calc_d", "calc_dv", "calc_Tk", "calc_heads", "calc_mask", "calc_scale", "calc_maskq", "calc_wo",
               "calc_cross", "calc_sm_x", "calc_sm_t", "calc_ln_x", "calc_ln_eps", "calc_ln_gamma", "calc_ln_beta",
               "calc_pe_d", "calc_pe_n", "calc_pe_pos", "calc_pe_i")


def init() -> str:
    """Bind the preset to the URL and load it when it changed. Returns the preset key.
    Streamlit drops a widget's state when another page runs; the values are kept in a shadow copy
    (and the typed matrices in _calc_cur) and restored here."""
    state.bound("preset", DEFAULT_PRESET)
    state.fix("preset", PRESET_KEYS, DEFAULT_PRESET)
    if "_calc_base" not in s:
        _set_bases(wx.PRESETS[DEFAULT_PRESET].setup)  # the matrices start from The/CAT/SAT
        if s["preset"] != "custom":
            load_preset(s["preset"])
        s["_calc_loaded"] = s["preset"]
    else:
        for k, v in s.get("_calc_shadow", {}).items():
            if k not in s:
                s[k] = v
        if f"calc_ed_X_{s['_calc_ver']}" not in s:  # editors were dropped: show what was typed
            s["_calc_base"] = {k: v.copy() for k, v in s["_calc_cur"].items()}
    for k, v in (("calc_sm_x", "1, 2, 3"), ("calc_sm_t", 1.0), ("calc_ln_x", "2, 4, 6, 8"), ("calc_ln_eps", "1e-05"),
                 ("calc_ln_gamma", ""), ("calc_ln_beta", ""), ("calc_pe_d", 4), ("calc_pe_n", 3),
                 ("calc_pe_pos", 1), ("calc_pe_i", 1)):
        s.setdefault(k, v)
    return s["preset"]


def _on_preset() -> None:
    key = s["preset"]
    if key != "custom":
        load_preset(key)
    s["_calc_loaded"] = key


# ------------------------------------------------------------------ editors
def _editor(name: str, label: str, help_: str = "") -> pd.DataFrame:
    base = s["_calc_base"][name]
    st.markdown(f"**{label}**" + (f" · {help_}" if help_ else ""))
    cfg = {c: st.column_config.TextColumn(c, width=58) for c in base.columns}
    df = st.data_editor(base, key=f"calc_ed_{name}_{s['_calc_ver']}", column_config=cfg, num_rows="fixed",
                        width="stretch")
    s["_calc_cur"][name] = df.copy()
    return df


def _parse(df: pd.DataFrame, name: str, problems: list[str]) -> np.ndarray:
    out = np.zeros(df.shape)
    for i in range(df.shape[0]):
        for j in range(df.shape[1]):
            x, err = L.parse_number(df.iat[i, j], f"{name} row {df.index[i]}, column {df.columns[j]}")
            if err:
                problems.append(err)
            else:
                out[i, j] = x
    return out


def controls() -> None:
    c = st.columns(4)
    c[0].number_input("Tokens T", 1, MAX_T, key="calc_T", on_change=_resize)
    c[1].number_input("d_model", 1, MAX_D, key="calc_d", on_change=_resize)
    heads = [h for h in range(1, int(s["calc_d"]) + 1) if int(s["calc_d"]) % h == 0 and int(s["calc_dv"]) % h == 0]
    state.fix("calc_heads", heads, 1)
    c[2].selectbox("Heads", heads, key="calc_heads",
                   help="Only head counts that divide d_model and the width of V are offered (d_k = d_model / heads).")
    c[3].toggle("Scale by 1/√d_k", key="calc_scale")
    st.radio("Mask", list(wx.MASKS), key="calc_mask", horizontal=True,
             help="combined = causal × padding (elementwise product of the 1/0 masks)")
    c = st.columns([1, 1.5, 1.2, 1.3])
    c[0].checkbox("Use W_O", key="calc_wo", on_change=_resize, help="Output projection after the concat.")
    c[1].checkbox("Encoder–decoder", key="calc_cross", on_change=_resize,
                  help="Queries from X (decoder), keys and values from a second matrix E (encoder output).")
    c[2].number_input("Width of V (h·d_v)", 1, MAX_D, key="calc_dv", on_change=_resize,
                      help="Q and K must share d_k (their dot product); V may be narrower or wider: each head's "
                           "output Z then has d_v columns, and W_O has h·d_v rows.")
    if s["calc_cross"]:
        c[3].number_input("Encoder tokens", 1, MAX_T, key="calc_Tk", on_change=_resize)
    elif s["calc_mask"] in ("padding", "combined"):
        c[3].checkbox("Mask padded query rows", key="calc_maskq",
                      help="As the notes' 2D padding mask: a padded token's own row is blanked (all-zero weights).")


def setup_from_editors() -> tuple[wx.AttentionSetup | None, list[str]]:
    problems: list[str] = []
    cross = bool(s["calc_cross"])
    E = WO = pad = None
    r1 = st.columns(2)
    with r1[0]:
        X = _parse(_editor("X", "X (decoder input)" if cross else "X (one row per token)"), "X", problems)
    with r1[1]:
        if cross:
            E = _parse(_editor("E", "E (encoder output → K, V)"), "E", problems)
        if s["calc_mask"] in ("padding", "combined"):
            st.markdown("**Padding** · untick = padding token" + (" (encoder side)" if cross else ""))
            pdf = st.data_editor(s["_calc_base"]["pad"], key=f"calc_ed_pad_{s['_calc_ver']}", num_rows="fixed",
                                 column_config={"real token": st.column_config.CheckboxColumn("real token")})
            s["_calc_cur"]["pad"] = pdf.copy()
            pad = tuple(bool(x) if x is not None and x == x else False for x in pdf["real token"])
    r2 = st.columns(2)
    with r2[0]:
        WQ = _parse(_editor("W_Q", "W_Q"), "W_Q", problems)
    with r2[1]:
        WK = _parse(_editor("W_K", "W_K"), "W_K", problems)
    r3 = st.columns(2)
    with r3[0]:
        WV = _parse(_editor("W_V", "W_V"), "W_V", problems)
    with r3[1]:
        if s["calc_wo"]:
            WO = _parse(_editor("W_O", "W_O"), "W_O", problems)
    if problems:
        return None, problems
    setup = wx.AttentionSetup(
        X=X, W_Q=WQ, W_K=WK, W_V=WV, W_O=WO, n_heads=int(s["calc_heads"]), mask=s["calc_mask"], padding=pad,
        scale=bool(s["calc_scale"]), mask_padded_queries=bool(s["calc_maskq"]), X_kv=E if cross else None,
        labels=tuple(s["_calc_labels"][: X.shape[0]]),
        kv_labels=tuple(s["_calc_kv_labels"][: E.shape[0]]) if cross else ())
    return setup, wx.validate(setup)


def same_setup(a: wx.AttentionSetup, b: wx.AttentionSetup) -> bool:
    def eq(x, y):
        if x is None or y is None:
            return x is None and y is None
        return np.shape(x) == np.shape(y) and np.allclose(x, y)
    return (eq(a.X, b.X) and eq(a.X_kv, b.X_kv) and eq(a.W_Q, b.W_Q) and eq(a.W_K, b.W_K) and eq(a.W_V, b.W_V)
            and eq(a.W_O, b.W_O) and a.n_heads == b.n_heads and a.mask == b.mask and a.scale == b.scale
            and (a.mask not in ("padding", "combined") or (tuple(a.padding or ()) == tuple(b.padding or ())
                                                          and a.mask_padded_queries == b.mask_padded_queries)))


def show_steps(steps: list[wx.Step], key: str, ncols: int = 2) -> None:
    for r in range(0, len(steps), ncols):
        cols = st.columns(ncols)
        for col, (n, stp) in zip(cols, list(enumerate(steps))[r:r + ncols]):
            with col:
                st.markdown(f"**{n + 1}. {stp.title}**")
                st.latex(stp.formula)
                L.show_table(stp.values, stp.rows, stp.cols, key=f"{key}_{n}", nd=stp.decimals)
                if stp.note:
                    st.caption(stp.note)


# ------------------------------------------------------------------ worked-example panel
def preset_panel(key: str, modified: bool) -> None:
    p = wx.PRESETS[key]
    st.info(f"**{p.title}** (notes {p.source}). {p.description}", icon=":material/menu_book:")
    if modified:
        st.caption("You have changed the example's numbers: the hints below refer to the original.")
    st.warning("**Check your arithmetic**\n\n" + "\n".join(f"- {h}" for h in p.hints), icon=":material/calculate:")
    if p.errata:
        with st.expander(f"Where the lecture notes' arithmetic is wrong ({len(p.errata)})", expanded=True):
            st.markdown("\n".join(f"- **{e.where}** — the notes write {e.notes}; correct: {e.correct}."
                                  for e in p.errata))


def downloads(title: str, description: str, steps: list[wx.Step], hints=(), errata=(), name: str = "worked",
              key: str = "calc_dl") -> None:
    c = st.columns([1, 1.7, 2])
    c[0].download_button("⬇ CSV", wx.steps_csv(steps).encode("utf-8"), file_name=f"{name}.csv", mime="text/csv",
                         key=f"{key}_csv", help="Every step as rows: step, row, column, value.")
    c[1].download_button("⬇ Markdown handout", wx.handout_markdown(title, description, steps, hints, errata).encode("utf-8"),
                         file_name=f"{name}.md", mime="text/markdown", key=f"{key}_md",
                         help="Inputs, each step with its formula and table, hints and the notes' errata.")


# ------------------------------------------------------------------ small calculators
def softmax_calc() -> None:
    st.subheader("Softmax with temperature")
    st.text_input("Scores x", key="calc_sm_x", help="Numbers separated by commas.")
    st.number_input("Temperature T", min_value=0.01, max_value=100.0, step=0.1, key="calc_sm_t")
    x, err = L.parse_vector(s["calc_sm_x"], "Scores")
    if err:
        st.error(err)
        return
    T = float(s["calc_sm_t"])
    try:
        p = wx.softmax_temperature(x, T)
    except ValueError as e:
        st.error(f"Scores: {e}.")
        return
    st.latex(r"\mathrm{softmax}(x/T)_i = \frac{e^{x_i/T}}{\sum_j e^{x_j/T}}")
    L.show_table(np.vstack([x, x / T, p]), ("x", "x / T", "softmax"), _names(len(x), "x"), key="calc_sm_tab", nd=3)


def layernorm_calc() -> None:
    st.subheader("Layer norm of a vector")
    st.text_input("Vector x", key="calc_ln_x")
    st.text_input("ε (inside the square root)", key="calc_ln_eps")
    with st.expander("γ and β (blank = 1 and 0)"):
        st.text_input("γ", key="calc_ln_gamma")
        st.text_input("β", key="calc_ln_beta")
    x, err = L.parse_vector(s["calc_ln_x"], "x")
    eps, err2 = L.parse_number(s["calc_ln_eps"], "ε")
    g = b = None
    errs = [e for e in (err, err2) if e]
    if eps is not None and eps <= 0:
        errs.append("ε must be > 0.")
    if s["calc_ln_gamma"].strip():
        g, e = L.parse_vector(s["calc_ln_gamma"], "γ")
        errs += [e] if e else []
    if s["calc_ln_beta"].strip():
        b, e = L.parse_vector(s["calc_ln_beta"], "β")
        errs += [e] if e else []
    if not errs:
        try:
            ln = wx.layer_norm_steps(x, eps, g, b)
        except ValueError as e:
            errs.append(str(e))
    if errs:
        for e in errs:
            st.error(e)
        return
    st.latex(rf"\mu = {L.fmt(ln.mean)},\quad \sigma^2 = {L.fmt(ln.var)}")
    st.latex(rf"\sqrt{{\sigma^2+\varepsilon}} = {L.fmt(ln.std, 5)}")
    st.caption(f"ε = {ln.eps:g} is added inside the square root (it only matters when σ² ≈ 0).")
    st.latex(r"y_i = \gamma_i \frac{x_i - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta_i")
    L.show_table(np.vstack([ln.x, ln.normalized, ln.output]), ("x", "x̂", "y"), _names(len(x), "x"), key="calc_ln_tab", nd=3)


def pe_calc() -> None:
    st.subheader("Positional encoding PE(pos, i)")
    c = st.columns(3)
    c[0].number_input("d_model", 1, 4096, key="calc_pe_d")
    d = int(s["calc_pe_d"])
    if s["calc_pe_i"] > d - 1:
        s["calc_pe_i"] = d - 1
    c[1].number_input("pos", 0, 100_000, key="calc_pe_pos")
    c[2].number_input("i (dimension)", 0, d - 1, key="calc_pe_i")
    _, tex = wx.pe_value(int(s["calc_pe_pos"]), int(s["calc_pe_i"]), d)
    st.latex(tex)
    st.number_input("Table: positions 0 … n−1, n =", 1, 64, key="calc_pe_n")
    n = int(s["calc_pe_n"])
    L.show_table(wx.pe_table(n, d), [f"pos {p}" for p in range(n)], _names(d, "d"), key="calc_pe_tab", nd=4, max_cols=8)


def render() -> None:
    try:
        _render()
    finally:
        s["_calc_shadow"] = {k: s[k] for k in WIDGET_KEYS if k in s}


def _render() -> None:
    key = init()
    st.selectbox("Worked example", PRESET_KEYS, key="preset", format_func=_title, on_change=_on_preset,
                 help="Every hand-worked example of the lecture notes, with the correct numbers.")
    preset = wx.PRESETS.get(key)
    main, side = st.columns([2.3, 1], gap="medium")
    with side:
        softmax_calc()
        st.divider()
        layernorm_calc()
        st.divider()
        pe_calc()
    with main:
        if preset is not None and preset.kind != "attention":
            solved_preset(key, preset)
        attention_calculator(key, preset)


def solved_preset(key: str, preset: wx.Preset) -> None:
    """A layer-norm or PE example of the notes, solved step by step (above the attention calculator)."""
    preset_panel(key, False)
    steps = wx.solve(key)
    show_steps(steps, "calc_solve")
    downloads(preset.title, preset.description, steps, preset.hints, preset.errata, name=key,
              key="calc_dl_solved")
    st.divider()


def attention_calculator(key: str, preset: wx.Preset | None) -> None:
    """Scaled dot-product attention on the typed matrices; an attention example's panel above it."""
    panel = st.container()
    st.subheader("Scaled dot-product attention, step by step")
    controls()
    setup, problems = setup_from_editors()
    if problems:
        st.error("Fix these cells to see the computation (what you typed is kept):\n\n" +
                 "\n".join(f"- {md_escape(p)}" for p in problems[:8]) +
                 (f"\n- … and {len(problems) - 8} more" if len(problems) > 8 else ""), icon=":material/pan_tool:")
        return
    modified = preset is None or preset.kind != "attention" or not same_setup(setup, preset.setup)
    if preset is not None and preset.kind == "attention":
        with panel:
            preset_panel(key, modified)
            if modified:
                st.button("Reset to the example's numbers", key="calc_reset", on_click=load_preset, args=(key,))
    H = setup.n_heads
    head = 0
    if H > 1:
        state.fix("calc_show_head", list(range(H)), 0)
        head = st.radio("Show head", list(range(H)), horizontal=True, key="calc_show_head")
    steps = wx.attention_step_list(setup, head)
    if preset is not None and preset.kind == "attention" and not modified:
        export = wx.setup_inputs_steps(setup) + wx.solve(key)
        downloads(preset.title, preset.description, export, preset.hints, preset.errata, name=key)
        extra = wx.solve(key)[len(steps):]
    else:
        export = wx.setup_inputs_steps(setup) + steps
        downloads("Attention calculation", "Computed with Attention Lab's calculator.", export, name="attention")
        extra = []
    show_steps(steps + extra, "calc_step")
