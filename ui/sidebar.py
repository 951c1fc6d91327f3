"""The shared sidebar: sentence, model source and architecture, mask and sequence length."""
from __future__ import annotations

import streamlit as st

from classroom.examples import ATTENTION_EXAMPLES

from .echo import echo_literal
from model.config import PRESETS

from . import disk_models, live, models, session_models, state, train

PRESENT_CSS = """
<style>
html, body, [data-testid="stAppViewContainer"] {font-size: 22px !important;}
[data-testid="stMain"] h1 {font-size: 2.6rem !important;} [data-testid="stMain"] h2 {font-size: 2.0rem !important;}
[data-testid="stMain"] h3 {font-size: 1.6rem !important;}
/* the sidebar (folded when the mode is turned on) keeps a heading of ordinary size: "Attention Lab"
   at 2 rem filled its first screen (issue 33) */
[data-testid="stSidebar"] h2 {font-size: 1.2rem !important;}
/* the page's side padding (5 rem, 110 px at this size) goes to the charts */
.block-container {max-width: 100% !important; padding-top: 3.5rem !important;
                  padding-left: 1.5rem !important; padding-right: 1.5rem !important;}
/* the exit button sits in Streamlit's header bar, left of its menu: no page height spent on it, so
   more of the first chart is above the fold at 1280 x 720 */
.st-key-present_exit {position: fixed !important; top: 0.45rem; right: 3.6rem; z-index: 1000001;
                      width: auto !important;}
.st-key-present_exit button {min-height: 0 !important; padding: 0.15rem 0.7rem !important;}
.st-key-present_exit button p {font-size: 0.8rem !important;}
</style>
"""




def use_2017_preset() -> None:
    """The 2017 paper's base model (model.config PRESETS["vaswani-base"]) into the architecture
    widgets: d_model 512, 8 heads (d_k = d_v = 64), 6 layers, ReLU FFN 2048, post-LN, sinusoidal."""
    p = PRESETS["vaswani-base"]
    st.session_state.update(d=p.d_model, h=p.n_heads, L=p.n_layers, pe=p.pos_encoding, norm=p.norm,
                            act=p.activation, dv=0)


def dv_title(v: int) -> str:
    """The d_v list's option labels: the same in every run (d_k is named in the list's label)."""
    return "= d_k" if v == 0 else str(v)


def use_gpt2_preset() -> None:
    """GPT-2 small's shapes (model.config PRESETS["gpt2-small"]) into the architecture widgets:
    d_model 768, 12 heads (d_k = 64), 12 layers, GELU, pre-LN, learned positions, context 1,024.
    The vocabulary stays the toy one (fresh weights tokenize with it)."""
    p = PRESETS["gpt2-small"]
    st.session_state.update(d=p.d_model, h=p.n_heads, L=p.n_layers, pe=p.pos_encoding, norm=p.norm,
                            act=p.activation, dv=0, ctx=p.max_len)


def source_options() -> list[str]:
    names = list(models.shipped_checkpoints())
    names += list(models.PRETRAINED)  # listed even when its package is missing: picking it says how to install it
    names += disk_models.options()  # models opened from disk on this server (every session sees them)
    names += list(st.session_state.get("_session_model_ids", {}))
    return names + [state.FRESH]


def source_title(option: str) -> str:
    """What the Model list shows: a pretrained model's title; other options as they are (the
    value, which is also what the URL holds, stays the short key: src=minilm-l6)."""
    if option in models.PRETRAINED:
        return models.PRETRAINED[option].title
    if disk_models.is_disk(option):
        return disk_models.title(option)
    return option


def model_mask_default(src: str) -> str:
    """The mask a model is shown with by default: the mask it was trained with (bidirectional for
    the encoders: MiniLM and the masked LM), causal for the rest (fresh weights included)."""
    return "causal" if models.trained_causal(src) is not False else "bidirectional"


def apply_mask_default() -> None:
    """When the model's default mask changes (a causal LM <-> MiniLM), switch the mask to the new
    model's default. A link that names the mask keeps it on its first run; a link without one gets
    the model's default. Called before the mask radio is drawn."""
    s = st.session_state
    want = model_mask_default(s["src"])
    before = s.get("_mask_default")
    s["_mask_default"] = want
    if before is None and "mask" in st.query_params:  # the link said which mask
        return
    if before != want:
        s["mask"] = want


def check_pretrained(options: list[str], default_src: str) -> None:
    """Load the chosen pretrained model before the Model list is drawn (spinner on the first load
    in this process). If it cannot be loaded (package missing, damaged file) show the message,
    never a traceback, and fall back to the default model."""
    s = st.session_state
    if s.get("src") not in models.PRETRAINED:
        return
    err = models.pretrained_error(s["src"])
    if err is not None:
        st.error(f"{echo_literal(source_title(s['src']))} is not available: {echo_literal(err, 400)}. "
                 f"Using {echo_literal(repr(default_src))} instead.",
                 icon=":material/error:")
        s["src"] = default_src


def render() -> None:
    s = st.session_state
    # Presentation mode folds the sidebar when it is turned on (the toggle left it open, a third of a
    # 1280 px projector), and the arrow at the top left opens it again; leaving the mode unfolds it.
    # (Streamlit applies a changed initial_sidebar_state unless the user folded or opened the sidebar
    # by hand in this browser: that choice wins.)
    st.set_page_config(initial_sidebar_state="collapsed" if s.get("present") else "auto")
    if s.get("present"):
        st.html(PRESENT_CSS)  # static CSS only, no user text
        # Presentation mode keeps the sidebar (page menu, sentence box; Streamlit's own arrow folds
        # it away) and a way out on the page itself (issue 21: it used to hide everything).
        st.button("Exit presentation mode", key="present_exit", icon=":material/close_fullscreen:",
                  on_click=_leave_presentation)
    with st.sidebar:
        st.markdown("## Attention Lab")
        state.show_url_notices()
        train.adopt_finished()  # a training of this session that just finished joins the Model list
        for name in session_models.forget_dropped_session_models():
            st.warning(f"The model {echo_literal(repr(name))} was removed from the server's memory (it keeps the "
                       f"{session_models.MAX_SESSION_MODELS} most recent trained or uploaded models). Upload its "
                       "downloaded checkpoint on the Train page to use it again.", icon=":material/delete:")
        # A one-line box: Enter applies the text (a text area needed Ctrl+Enter, and a plain Enter
        # only added a line break that ended up in the link; issue 21 point 3).
        st.text_input("Sentence", key="text",
                      help="Any text; press Enter to apply. The toy models lower-case it and split it into words "
                           "and punctuation; the real models use their own tokenizers.")
        if not state.url_fits("text"):
            st.caption(f"This text is too long for a link, even compressed (links hold up to "
                       f"{state.URL_ZIPPED_CHARS:,} characters): a copied link opens with the default sentence.")
        options = source_options()
        default_src = models.DEFAULT_SOURCE if models.DEFAULT_SOURCE in options else state.FRESH
        state.set_default("src", default_src)  # the default model stays out of the URL
        disk_models.follow_link(default_src)  # a link to a model on disk not loaded yet: load it
        state.fix("src", options, default_src)
        check_pretrained(options, default_src)
        st.selectbox("Model", options, key="src", format_func=source_title,
                     help="A trained checkpoint shipped with the app, a pretrained model (MiniLM-L6), a model "
                          "opened from disk on this server, a model you trained or uploaded, or fresh random "
                          "weights with the architecture below.")
        disk_models.panel()
        fresh = s["src"] == state.FRESH
        heads = state.valid_heads(s["d"])
        state.fix("h", heads, 4 if 4 in heads else heads[-1])  # before the model is built from them
        model, tok = models.get_model(models.current_source())
        cfg = model.cfg
        if fresh:
            with st.expander("Architecture (fresh weights)", expanded=True):
                st.button("Preset: 2017 paper (base)", key="preset_2017", on_click=use_2017_preset,
                          help="d_model 512, 8 heads (d_k = d_v = 64), 6 layers, ReLU feed-forward of 2048, "
                               "post-LN, sinusoidal positions: the base model of “Attention Is All You Need”.")
                st.button("Preset: GPT-2 small", key="preset_gpt2", on_click=use_gpt2_preset,
                          help="d_model 768, 12 heads (d_k = 64), 12 layers, GELU, pre-LN, learned positions, context "
                               "1,024: GPT-2 small's shapes with random weights and this app's small vocabulary "
                               "(about 86M parameters; the first build takes a few seconds).")
                st.selectbox("d_model", state.D_MODELS, key="d")
                st.selectbox("Heads", heads, key="h",
                             help="Only head counts that divide d_model and leave each head at least 4 dimensions "
                                  "are offered (d_k = d_model / heads ≥ 4).")
                st.slider("Layers", 1, state.MAX_LAYERS, key="L")
                st.radio("Positional encoding", ["sinusoidal", "learned"], key="pe", horizontal=True)
                st.radio("Norm placement", ["pre", "post"], key="norm", horizontal=True,
                         help="pre-LN (GPT-2): x + Attn(LN(x)). post-LN (2017 paper): LN(x + Attn(x)).")
                st.radio("FFN activation", ["gelu", "relu"], key="act", horizontal=True,
                         help="GELU (GPT-2, BERT) or ReLU (the 2017 paper) between the FFN's two layers.")
                # The options' labels must not depend on d_k: the browser sends the label back, and a
                # label from before d_model changed ("= d_k (16)") matched no option (issue 33: a
                # crash on the next click). d_k is in the widget's label instead, which may change.
                d_k = s["d"] // s["h"]
                st.selectbox(f"d_v (value width per head; d_k = {d_k})", state.DV_CHOICES, key="dv",
                             format_func=dv_title,
                             help="Q and K must share d_k (their dot product); V may be narrower or wider: "
                                  "each head then returns Z_j of width d_v, and W_O reads h·d_v numbers.")
                st.selectbox("Context (max_len)", state.CONTEXTS, key="ctx",
                             help="How many positions the model has (the learned position table's rows). GPT-2 small: 1,024.")
                st.number_input("Seed", 0, 9999, key="seed")
        else:
            # A trained model's architecture is fixed: it is stated, not offered as (disabled)
            # controls; six widgets fewer on every rerun of every page. The values chosen for fresh
            # weights are kept (and stay in the URL) for when fresh weights are picked again: every
            # URL-bound key is re-assigned at the start of each run (state.begin_run).
            entry = models.PRETRAINED.get(s["src"])
            if entry is not None:
                terms = entry.licence_path()  # the licence's copy shipped in the package (Gemma's terms)
                where = " (its copy in the package: the button below)" if terms is not None else ""
                st.caption(f"{entry.description} Licence {entry.licence}{where}; {entry.parameters / 1e6:.1f}M "
                           f"parameters, {entry.size_mb:.0f} MB of weights.")
                if terms is not None:
                    st.download_button(entry.licence, data=lambda p=terms: p.read_bytes(), file_name=terms.name,
                                       mime="text/html", key="licence_terms", on_click="ignore",
                                       icon=":material/gavel:",
                                       help=f"The copy of the licence in the package {entry.package}: {terms}")
            elif disk_models.is_disk(s["src"]):
                n = model.num_parameters()
                st.caption(f"Opened from {echo_literal(disk_models.shown_path(disk_models.path_of(s['src'])), 200)} "
                           f"({echo_literal(cfg.architecture or cfg.family)}); "
                           f"{f'{n / 1e6:.1f}M' if n >= 100_000 else f'{n:,}'} parameters, "
                           f"{4 * n / 1e6:,.1f} MB in float32.")
            st.caption(f"{models.architecture(models.current_source(), cfg).summary}. "
                       "To choose your own architecture, pick \"fresh weights\" as the model.")
        t_max = min(state.t_limit(s["src"]), cfg.max_len)
        if s["T"] > t_max:
            why = (f"this model has {cfg.max_len:,} positions" if t_max == cfg.max_len else
                   f"the app shows this model at most {t_max:,} tokens; it has {cfg.max_len:,} positions")
            st.info(f"Max sequence length {s['T']:,} is more than this model allows ({why}); using {t_max:,}.",
                    icon=":material/straighten:")
            s["T"] = t_max
        # Re-assert the value: the slider's bounds change with the model (64 → 512), which makes it a
        # new widget, and a new widget would start at its minimum (2) unless its key holds a value
        # set through session state (issue 21: picking fresh weights turned every heatmap into 2×2).
        s["T"] = int(s["T"])
        st.slider("Max sequence length", state.T_MIN, t_max, key="T",
                  help="Longer input is truncated (with a notice).")
        apply_mask_default()
        state.set_default("mask", s["_mask_default"])  # the model's own default stays out of the URL
        st.radio("Mask", ["causal", "bidirectional"], key="mask", horizontal=True,
                 help="The same weights run either way: the mask is an input, not a weight.")
        trained_causal = models.trained_causal(s["src"])
        if trained_causal is False and s["mask"] == "causal":
            st.caption("This model was trained bidirectionally, not with the causal mask: its attention under it "
                       "is not what it learned.")
        elif trained_causal is True and s["mask"] == "bidirectional" and s["src"] != state.FRESH:
            st.caption("This model was trained with the causal mask (each token sees only the past): "
                       "bidirectionally it sees what it never saw in training.")
        st.radio("Chart images (camera button)", ["PNG", "SVG"], key="img_fmt", horizontal=True,
                 help="What each chart's camera button downloads: PNG (a picture) or SVG (a vector image that "
                      "stays sharp at any size, for papers and slides). Same title and labels as on screen.")
        st.toggle("Presentation mode", key="present",
                  help="Large text and chart labels for a projector. A link with ?present=true opens in it with "
                       "this sidebar folded (the arrow at the top left opens it); \"Exit presentation mode\" at the "
                       "top of the page leaves it.")
    live.render()  # the "Live class" section, and the join card / follower's banner above the page


def _leave_presentation() -> None:
    st.session_state["present"] = False


def _use_example(text: str) -> None:
    st.session_state["text"] = text  # a callback runs before the script: the sidebar box shows it


def example_buttons() -> None:
    """"Try an example" on the attention pages: one click puts a sentence worth showing into the
    sidebar's sentence box. With a toy model, one line says it cannot show them well."""
    # one horizontal container (a flex row that wraps), not columns: each button shows its whole
    # label, and a rerun sends one block instead of six (issue 22: ~0.6 kB per rerun)
    with st.container(horizontal=True, vertical_alignment="center"):
        st.markdown("**Try an example:**", width="content")
        for i, (label, text) in enumerate(ATTENTION_EXAMPLES):
            st.button(label, key=f"example_{i}", on_click=_use_example, args=(text,), help=text)
    if st.session_state.get("text") in {t for _, t in ATTENTION_EXAMPLES} and \
            not models.current_source().real:
        st.caption("This toy model's small vocabulary knows few of these words (they become unknown tokens): "
                   f"pick \"{models.PRETRAINED['minilm-l6'].title}\" as the model in the sidebar to see a real one.")
