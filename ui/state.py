"""Shared sidebar controls, their defaults, and the URL binding.

Every shared control has a key; its value lives in st.session_state (so it persists across pages)
and, when it differs from the default, in the URL query string (so a copied link reproduces the
view; the page itself is the URL path). Values read from the URL are validated: an invalid value
falls back to the default and a notice says so. Pages can bind their own widgets with `bound()`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NoReturn

import streamlit as st

from model.config import D_MODEL_CHOICES, HEAD_CHOICES, ModelConfig
from model.config import valid_heads  # noqa: F401  (the sidebar's head rule: the app's one rule)

# The default sentence, for every model: the toy vocabularies split "table." into "table" "." (the same
# ids as the training corpus's "table ."), while a space before the full stop made SmolLM2 read " ." ("·.",
# perplexity 230 against 111 without it; issue 33).
DEFAULT_TEXT = "the keys to the cabinet are on the table."
FRESH = "fresh weights (your architecture)"
D_MODELS = list(D_MODEL_CHOICES)  # the app's one list of d_model choices (model.config)
MAX_TEXT_CHARS = 10_000  # longer text is cut (with a notice) before tokenizing
URL_TEXT_CHARS = 1_500  # the sentence travels in the URL only up to this length
T_MIN, T_MAX = 2, 256  # T_MAX: the fresh-weights models' default max_len
CONTEXTS = [256, 512, 1024]  # fresh weights' context (max_len) choices; 1024: GPT-2 small
# The slider's and the URL's bound: the longest input the app shows, for models whose max_len allows
# it (SmolLM2: 8,192 positions, GPT-2 small's context; MiniLM stops at its 512, the shipped toy models
# at 128). Long inputs are drawn as blocks or windows of tokens (issue 33; benchmarks/bench_long.py).
T_LIMIT = 1024
MAX_LAYERS = 12  # fresh weights: up to GPT-2 small's 12 layers
DV_CHOICES = [0, 4, 8, 16, 32, 64]  # value width per head for fresh weights; 0 = d_k (the usual)


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        v = int(raw)
        if not lo <= v <= hi:
            raise ValueError(f"must be in {lo}..{hi}")
        return v
    return parse


def _one_of(options: list) -> Callable[[str], Any]:
    def parse(raw: str):
        for o in options:
            if str(o) == raw:
                return o
        raise ValueError(f"must be one of {options}")
    return parse


@dataclass(frozen=True)
class Spec:
    default: Any
    parse: Callable[[str], Any]


def _text(raw: str) -> str:
    """A link's sentence: one line (the box is single-line; old links may hold %0A), at most
    MAX_TEXT_CHARS characters."""
    return " ".join(raw[:MAX_TEXT_CHARS].splitlines())


SPECS: dict[str, Spec] = {
    "text": Spec(DEFAULT_TEXT, _text),
    "src": Spec("causal-lm", str),  # validated against the available sources at render time
    "d": Spec(64, _one_of(D_MODELS)),
    "h": Spec(4, _one_of(list(HEAD_CHOICES))),
    "L": Spec(2, _int_in(1, MAX_LAYERS)),
    "ctx": Spec(T_MAX, _one_of(CONTEXTS)),
    "T": Spec(64, _int_in(T_MIN, T_LIMIT)),
    "mask": Spec("causal", _one_of(["causal", "bidirectional"])),
    "pe": Spec("sinusoidal", _one_of(["sinusoidal", "learned"])),
    "norm": Spec("pre", _one_of(["pre", "post"])),
    "act": Spec("gelu", _one_of(["gelu", "relu"])),
    "dv": Spec(0, _one_of(DV_CHOICES)),
    "seed": Spec(0, _int_in(0, 9999)),
    "present": Spec(False, lambda r: {"1": True, "0": False, "true": True, "false": False}[r.lower()]),
    # the attention views' "Hide the sink" switch (ui/circuits.py: sink_switch): shared by every page
    "hide_sink": Spec(False, lambda r: {"1": True, "0": False, "true": True, "false": False}[r.lower()]),
}


def _notices() -> list[str]:
    return st.session_state.setdefault("_url_notices", [])


def _registry() -> dict[str, Spec]:
    """Keys bound to the URL in this run (shared + the current page's)."""
    return st.session_state.setdefault("_bound_this_run", {})


def load(key: str, spec: Spec) -> None:
    """First time a key is seen in a session: take its value from the URL (validated) or the default."""
    loaded = st.session_state.setdefault("_url_loaded", set())
    if key in loaded and key in st.session_state:
        return
    loaded.add(key)
    raw = st.query_params.get(key)
    value = spec.default
    if raw is not None:
        try:
            value = spec.parse(raw)
        except (ValueError, KeyError, TypeError):
            shown = raw if len(raw) < 40 else raw[:40] + "…"
            _notices().append(f"The link's value {key}={shown!r} is not valid here; using the default {spec.default!r}.")
    if key not in st.session_state:
        st.session_state[key] = value


def bound(key: str, default: Any, parse: Callable[[str], Any] | None = None) -> None:
    """Bind a page's widget key to the URL. Call before creating the widget (with key=key)."""
    if parse is None:
        parse = {bool: SPECS["present"].parse, int: int, float: float}.get(type(default), str)
    spec = Spec(default, parse)
    load(key, spec)
    keep(key)
    _registry()[key] = spec
    show_url_notices()  # a bad value for a page's own control: say so right where the control is


def keep(*keys: str) -> None:
    """Keep these widget values in this run although their widgets may not be drawn (another
    page, or controls shown only in some states). Re-assigning marks a value as set by code:
    Streamlit then keeps it when the widget with this key is not drawn, and a widget with the same
    key (but other parameters, e.g. help text) starts from it instead of its own default."""
    for key in keys:
        st.session_state[key] = st.session_state[key]


def set_default(key: str, default: Any) -> None:
    """Change the default of a bound key for this run (e.g. the model source, which depends on
    the checkpoints present): values equal to it stay out of the URL."""
    spec = _registry().get(key) or SPECS[key]
    _registry()[key] = Spec(default, spec.parse)


def fix(key: str, options: list, fallback: Any | None = None) -> None:
    """Make sure session_state[key] is one of options (e.g. heads after d_model changed)."""
    value = st.session_state.get(key)
    if value not in options:
        new = fallback if fallback in options else options[0]
        raw = st.query_params.get(key)
        if raw is not None and raw == str(value) and key not in st.session_state.get("_url_fixed", set()):
            # the value came from a link and is not available with the current settings
            st.session_state.setdefault("_url_fixed", set()).add(key)
            st.warning(f"The link's value {key}={raw[:40]!r} is not available here; using {new!r}.", icon=":material/link:")
        st.session_state[key] = new


def step_slider(key: str, n_steps: int, label: str = "Step", *, help: str | None = None) -> int:
    """A 1-based step slider (1 … n_steps) bound to the URL under `key`; the value is kept in range
    when n_steps changes (a shorter sentence, another tile size). With a single step there is
    nothing to choose: no slider, and the step is 1. Returns the chosen step."""
    bound(key, 1)
    fix(key, list(range(1, n_steps + 1)), 1)
    if n_steps <= 1:
        return 1
    return st.slider(label, 1, n_steps, key=key, help=help)


class PageEnd(Exception):
    """Raised by end_page(): the page has said what it has to say. app.py catches it around
    pg.run(), so the run's closing work (the URL sync, emptying the plotly.js prefetch chart) still
    reaches the browser: after st.stop() Streamlit drops every later element and URL change."""


def end_page() -> NoReturn:
    """End the page here (in place of st.stop() on pages). Inside a fragment, where app.py's
    handler is not on the stack, Streamlit's own st.stop()."""
    try:
        # Streamlit internals, imported here: if a release moves them, only this check falls back
        from streamlit.runtime.scriptrunner_utils.script_run_context import RunLocation, ThreadState
        in_fragment = ThreadState.get().run_location == RunLocation.FRAGMENT
    except Exception:  # a Streamlit without these internals: assume a fragment (st.stop is safe)
        in_fragment = True
    if in_fragment:
        st.stop()
    raise PageEnd


def begin_run() -> None:
    st.session_state["_bound_this_run"] = {}
    for key, spec in SPECS.items():
        load(key, spec)
        _registry()[key] = spec


# Called after every sync_url (ui/live.py: a live class's lecturer publishes the view from fragment
# reruns too). Registered by the module that needs it; state.py imports nothing above it.
AFTER_SYNC: list[Callable[[], None]] = []


def reload_from_url(keep: tuple[str, ...] = ()) -> None:
    """Forget every value taken from the URL so far (except `keep`): the following reads take them
    from the URL again, validated, as in a fresh session opening the link. A live class's follower
    applies the lecturer's link this way (ui/live.py). Call before any widget is drawn."""
    s = st.session_state
    loaded = s.get("_url_loaded", set())
    for key in loaded - set(keep):
        s.pop(key, None)
    s["_url_loaded"] = loaded & set(keep)
    s.pop("_url_fixed", None)


def sync_url() -> None:
    """Write the bound values that differ from their defaults to the URL (end of every run)."""
    loaded = st.session_state.get("_url_loaded", set())
    # keep link values of controls not drawn yet in this session (another page's): not lost
    params = {k: v for k, v in st.query_params.items() if k not in loaded}
    for key, spec in _registry().items():
        v = st.session_state.get(key, spec.default)
        if v == spec.default:
            continue
        if isinstance(v, str) and len(v) > URL_TEXT_CHARS:  # long texts (any box) stay out of the URL
            continue
        params[key] = str(v).lower() if isinstance(v, bool) else str(v)
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)
    for hook in AFTER_SYNC:
        hook()


def show_url_notices() -> None:
    notes = _notices()
    for n in notes:
        st.warning(n, icon=":material/link:")
    notes.clear()


def fresh_config(vocab_size: int) -> ModelConfig:
    s = st.session_state
    return ModelConfig(vocab_size=vocab_size, d_model=s["d"], n_heads=s["h"], n_layers=s["L"],
                       max_len=s["ctx"], pos_encoding=s["pe"], norm=s["norm"], activation=s["act"],
                       d_v=s["dv"])
