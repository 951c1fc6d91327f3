"""Shared sidebar controls, their defaults, and the URL binding.

Every shared control has a key; its value lives in st.session_state (so it persists across pages)
and, when it differs from the default, in the URL query string (so a copied link reproduces the
view; the page itself is the URL path). Values read from the URL are validated: an invalid value
falls back to the default and a notice says so. Pages can bind their own widgets with `bound()`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

import streamlit as st

from model.config import D_MODEL_CHOICES, HEAD_CHOICES, ModelConfig
from model.config import valid_heads  # noqa: F401  (the sidebar's head rule: the app's one rule)
from model.pretrained import PRETRAINED

from .echo import echo_literal

# The default sentence, for every model: the toy vocabularies split "table." into "table" "." (the same
# ids as the training corpus's "table ."), while a space before the full stop made SmolLM2 read " ." ("·.",
# perplexity 230 against 111 without it; issue 33).
DEFAULT_TEXT = "the keys to the cabinet are on the table."
FRESH = "fresh weights (your architecture)"
D_MODELS = list(D_MODEL_CHOICES)  # the app's one list of d_model choices (model.config)
# Longer text is cut (with a notice) before tokenizing: room for Gemma 3's 2,048 tokens of prose (about
# 5 characters a token: 10,000 characters made 1,972 tokens). Encoding 20,000 costs ~0.02 s.
MAX_TEXT_CHARS = 20_000
URL_TEXT_CHARS = 1_500  # a longer text (any bound text box) travels in the URL compressed, as `<key>.z`
# The longest compressed value a link holds: with the rest of the request line it stays under the 8 kB
# that nginx (deploy/) and most proxies accept for one (a longer one gets "414 URI Too Long"). A
# 10,000-character English paragraph compresses to ~5,000; text that does not fit stays out of the
# link, and the sidebar says so (url_fits).
URL_ZIPPED_CHARS = 6_000
ZIPPED = ".z"  # suffix of a compressed value's URL key: text.z=<base64url(deflate(utf-8))>
T_MIN, T_MAX = 2, 256  # T_MAX: the fresh-weights models' default max_len
CONTEXTS = [256, 512, 1024]  # fresh weights' context (max_len) choices; 1024: GPT-2 small
# The slider's and the URL's bound: the longest input the app shows, for models whose max_len allows
# it (SmolLM2: 8,192 positions, GPT-2 small's context; MiniLM stops at its 512, the shipped toy models
# at 128). Long inputs are drawn as blocks or windows of tokens (issue 33; benchmarks/bench_long.py).
T_LIMIT = 1024


def t_limit(src: str) -> int:
    """The longest input the app shows the model `src` (a Model list key), before its own positions
    (ModelConfig.max_len) cut it further."""
    entry = PRETRAINED.get(src)
    return entry.longest_input if entry is not None else T_LIMIT


# A pretrained model's own limit where its entry sets one (model.pretrained: Gemma 3, 2,048 tokens,
# four of its 512-token windows); the URL accepts the largest, and the sidebar cuts to the model's.
T_LIMIT_MOST = max([T_LIMIT, *(e.longest_input for e in PRETRAINED.values())])
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
    parse: Callable[[str], Any]  # the URL's text -> the value (ValueError when invalid)
    dump: Callable[[Any], str] | None = None  # the value -> the URL's text (None: str(), booleans lower-case)


def zip_text(text: str) -> str:
    """A long text as a compact URL value: raw DEFLATE of its UTF-8, in URL-safe base64 without
    padding (only A-Z a-z 0-9 - _: nothing to percent-encode). unzip_text reverses it.
    Why not a short link stored on the server: a link must work on any replica behind the proxy
    (deploy/replicas.py runs several processes), after a restart, and next year; and a store that
    every visitor can write to must be bounded, so old links would break. A compressed link needs
    no store at all."""
    import base64
    import zlib
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = z.compress(text.encode("utf-8")) + z.flush()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def unzip_text(value: str) -> str:
    """The text of a zip_text value. ValueError when it is not one, or would hold more than
    MAX_TEXT_CHARS characters (decompression stops there: a small link cannot unpack to gigabytes)."""
    import base64
    import binascii
    import zlib
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        d = zlib.decompressobj(-15)
        limit = 4 * MAX_TEXT_CHARS  # UTF-8: at most 4 bytes a character
        out = d.decompress(raw, limit + 1)
        if len(out) > limit or d.unconsumed_tail or not d.eof:
            raise ValueError("not a complete compressed text of at most MAX_TEXT_CHARS characters")
        return out.decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a compressed text: {exc}") from None


def url_value(value: Any, spec: Spec) -> tuple[str, str] | None:
    """(URL key suffix, text) of a value as a link holds it: "" and the plain text, or ZIPPED and
    the compressed text for a text over URL_TEXT_CHARS; None when even that is too long."""
    if spec.dump is not None:
        text = spec.dump(value)
    else:
        text = str(value).lower() if isinstance(value, bool) else str(value)
    if not isinstance(value, str) or len(value) <= URL_TEXT_CHARS:
        return "", text
    packed = zip_text(value)
    return (ZIPPED, packed) if len(packed) <= URL_ZIPPED_CHARS else None


def url_fits(key: str) -> bool:
    """Does this key's current value fit in a link (url_value)?"""
    spec = _registry().get(key) or SPECS[key]
    return url_value(st.session_state.get(key, spec.default), spec) is not None


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
    "T": Spec(64, _int_in(T_MIN, T_LIMIT_MOST)),
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
    name = key
    value = spec.default
    try:
        if raw is None and key + ZIPPED in st.query_params:  # a long text, compressed (zip_text)
            name, raw = key + ZIPPED, st.query_params.get(key + ZIPPED)
            raw = unzip_text(raw)
        if raw is not None:
            value = spec.parse(raw)
    except (ValueError, KeyError, TypeError):
        # the key is the app's own (registered in code); the value is the link's: escaped
        _notices().append(f"The link's value {name}={echo_literal(repr(raw), 42)} is not valid here; "
                          f"using the default {echo_literal(repr(spec.default))}.")
    if key not in st.session_state:
        st.session_state[key] = value


def bound(key: str, default: Any, parse: Callable[[str], Any] | None = None,
          dump: Callable[[Any], str] | None = None) -> None:
    """Bind a page's widget key to the URL. Call before creating the widget (with key=key).
    parse: the URL's text -> the value; dump: the value -> the URL's text (both needed for a
    value that is not a str, int, float or bool, e.g. a multiselect's list: `bound_list`)."""
    if parse is None:
        parse = {bool: SPECS["present"].parse, int: int, float: float}.get(type(default), str)
    spec = Spec(default, parse, dump)
    load(key, spec)
    keep(key)
    _registry()[key] = spec
    show_url_notices()  # a bad value for a page's own control: say so right where the control is


def bound_list(key: str, item: Callable[[str], Any] = str, sep: str = ",") -> None:
    """Bind a multiselect's list (default: empty) to the URL as its items joined by `sep`
    (Intervene's heads: iv_heads=L0 H1,L1 H3). item parses one item (ValueError when invalid);
    the page keeps only the items that are options."""
    bound(key, [], lambda raw: [item(x) for x in raw.split(sep) if x], lambda v: sep.join(str(x) for x in v))


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
    _registry()[key] = Spec(default, spec.parse, spec.dump)


def fix(key: str, options: list, fallback: Any | None = None) -> None:
    """Make sure session_state[key] is one of options (e.g. heads after d_model changed)."""
    value = st.session_state.get(key)
    if value not in options:
        new = fallback if fallback in options else options[0]
        raw = st.query_params.get(key)
        if raw is not None and raw == str(value) and key not in st.session_state.get("_url_fixed", set()):
            # the value came from a link and is not available with the current settings
            st.session_state.setdefault("_url_fixed", set()).add(key)
            st.warning(f"The link's value {key}={echo_literal(repr(raw), 42)} is not available here; "
                       f"using {echo_literal(repr(new))}.", icon=":material/link:")
        st.session_state[key] = new


def follow_labels(key: str, options: Sequence, format_func: Callable[[Any], str] = str) -> None:
    """Call before drawing a selectbox, radio, multiselect or segmented control (key=key) whose
    option labels change between runs while the options stay (a token's label follows the
    sentence, a head's title its pattern).

    The browser keeps the label it was last sent and sends it back with every later rerun;
    Streamlit maps it to a value through the labels of the run before. When a label changes and
    the value does not, Streamlit does not tell the browser: its next rerun sends a label no
    option has any more, and the widget falls back to its first option (the view is lost), or
    code that reads the key before the widget gets the label string itself (issue 33: d_v was
    '= d_k (16)' after d_model changed). Here:
      - a label this key had in an earlier run is mapped back to its option;
      - when the current value's label is not the one the browser holds, the value is assigned
        again, which makes Streamlit send the widget's new label to the browser."""
    s = st.session_state
    memo = s.setdefault("_option_labels", {})  # key -> {option: label} as last sent
    held: dict = memo.get(key, {})
    back = {lab: o for o, lab in held.items()}
    value = s.get(key)
    many = isinstance(value, (list, tuple))
    values = list(value) if many else [value]
    recovered = [back.get(v, v) if isinstance(v, str) and v not in options else v for v in values]
    labels = {}
    for o in options:
        try:
            labels[o] = format_func(o)
        except TypeError:  # an unhashable option: nothing to follow
            return
    stale = any(held.get(v) != labels.get(v) for v in recovered if v in labels and v in held)
    if key in s and (recovered != values or stale):
        s[key] = type(value)(recovered) if many else recovered[0]
    memo[key] = labels


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
    # Send every shared control's value to the browser with each run (a value assigned by code goes
    # out with its widget), not only when it changed. The browser's own copy can be lost: when the
    # first run of a session is rerun at once (the first request to a fresh server: ui._use_router)
    # it clears the sidebar widgets' values it had just received, and its next rerun after a change
    # sends their defaults instead (index 0, minimum), which the server then applied: a Heads change
    # after the sentence switched fresh weights at d_model 64 to causal-lm with d_model 8 (the
    # e2e heads test's flake, 2026-11-26). The sentence box is left alone: text typed but not yet
    # applied (Enter) would be overwritten by the run's value.
    keep(*(key for key in SPECS if key != "text"))


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
    params = {k: v for k, v in st.query_params.items() if k.removesuffix(ZIPPED) not in loaded}
    for key, spec in _registry().items():
        v = st.session_state.get(key, spec.default)
        if v == spec.default:
            continue
        shown = url_value(v, spec)
        if shown is not None:  # None: too long even compressed (the sidebar says so)
            params[key + shown[0]] = shown[1]
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
