"""Cached calls for the Circuits page (classroom/circuits.py on the app's models): the sink map of a
run, the induction test (and with heads switched off), the logit lens, one head's W_QK / W_OV, and
a second model on the same text. Results are cached per model on small keys (the ModelSource, the
text, a few numbers), never on tensors; every session shares them."""
from __future__ import annotations

import numpy as np
import streamlit as st

from classroom import circuits
from classroom.embeddings import display_vocab
from labels import md_escape
from model.patterns import label_heads

from . import state
from .models import PRETRAINED, ModelSource, get_model, pretrained_error, shipped_checkpoints, trained_causal
from .runs import Run, finite_or_stop, get_run
from .session_models import session_models


# ---------------------------------------------------------------------------------------- sinks
def sink_keys(run: Run) -> np.ndarray:
    """bool (T,): the keys that count as the sink for this run: key 0, plus [CLS]/[SEP] where the
    tokenizer put them (Run.special; the positions are known here, so a cut-off [SEP] is never
    guessed: classroom.circuits.sink_keys' caveat does not apply)."""
    keys = np.zeros(run.T, dtype=bool)
    keys[0] = True
    if run.special:
        keys[list(run.special)] = True
    return keys


SINK_SWITCH_HELP = ("A derived view, not what the model computed: the sink's columns (the first token; [CLS] and "
                    "[SEP] for BERT models) are left out and every row is divided by what is left, so the rest of "
                    "each head's pattern shows. Head labels are then judged on those rows, with the sink's share "
                    "named beside them. Kept in the link (hide_sink=true) and across the attention pages.")


def sink_switch(where=None) -> bool:
    """The "Hide the sink" toggle of the attention views (shared key "hide_sink", in the URL:
    ui.state.SPECS). `where`: a column or container to draw it in (default: the page). The value
    is re-assigned first (state.keep): each page's toggle is a widget of its own (its own place),
    which would otherwise start from its default instead of the value the last page left."""
    if "hide_sink" in st.session_state:
        state.keep("hide_sink")
    return bool((where or st).toggle("Hide the sink", key="hide_sink", help=SINK_SWITCH_HELP))


def derived_note(run: Run, *others: Run) -> None:
    """The line under a view drawn with the sink hidden, saying that it is derived and what was left
    out (of each run shown: two models may have different sinks)."""
    names = [r.labels[i] for r in (run, *others) for i in np.nonzero(sink_keys(r))[0]]
    named = ", ".join(f"“{t}”" for t in list(dict.fromkeys(names))[:4])
    st.caption(f":material/visibility_off: **Derived view, sink hidden:** the weight on {md_escape(named)} "
               "is left out (peach columns) and every row is renormalised over the other keys; labels name the "
               "sink's share separately. Switch it off to see the weights the model computed.")


def hidden(run: Run, weights) -> np.ndarray:
    """weights (..., T, T) of the run with the sink hidden (classroom.circuits.hide_sink on sink_keys)."""
    return circuits.hide_sink(weights, sink_keys(run))


def labels_of(run: Run, weights, hide: bool) -> list:
    """model.patterns.label_heads of (H, T, T) or (L, H, T, T) weights: as computed, or with the sink
    hidden (judged on the renormalised rows, the sink named separately)."""
    return label_heads(weights, run.special_keys, hide=sink_keys(run) if hide else None)


def sink_map(run: Run) -> np.ndarray:
    """(L, H) sink scores of the run (classroom.circuits.sink_scores): cheap, from the cached trace."""
    return circuits.sink_scores(run.trace, keys=sink_keys(run))


def sink_summary(sink: np.ndarray, over: float = 0.5) -> tuple[int, float, tuple[int, int]]:
    """(heads whose sink score is above `over`, their share of all heads, the (layer, head) with
    the highest score)."""
    l, h = np.unravel_index(int(np.argmax(sink)), sink.shape)
    return int((sink > over).sum()), float((sink > over).mean()), (int(l), int(h))


def head_labels(run: Run, hide: bool = False) -> list[list]:
    """[layer][head] -> HeadPattern of the run (model.patterns.label_heads; hide: the sink named apart)."""
    w = np.stack([lt.attn.weights[0] for lt in run.trace.layers])  # (L, H, T, T)
    return labels_of(run, w, hide)


# ------------------------------------------------------------------------------------ induction
CLEAR_INDUCTION = 0.3  # a best induction score below this is called "no clear induction head"


def max_test_tokens(source: ModelSource) -> int:
    """The longest copy the model's positions allow (2n + 1 <= max_len), capped at 100."""
    model, _ = get_model(source)
    return int(min(100, (model.cfg.max_len - 1) // 2))


@st.cache_data(max_entries=24, show_spinner=False)
def induction(source: ModelSource, n: int, seed: int, causal: bool,
              ablate: tuple[tuple[int, int], ...] = ()) -> circuits.InductionTest:
    """classroom.circuits.induction_test with the model's tokenizer (its BOS, its ordinary tokens)."""
    model, tok = get_model(source)
    return circuits.induction_test(model, n, seed, tok=tok, causal=causal, ablate=ablate)


def test_tokens(source: ModelSource, ids) -> list[str]:
    """Readable labels of the test's tokens."""
    _, tok = get_model(source)
    shown = display_vocab(tok)
    return [shown[int(i)] for i in ids]


# ------------------------------------------------------------------------------------ logit lens
@st.cache_data(max_entries=16, show_spinner=False)
def lens(source: ModelSource, text: str, causal: bool, max_len: int, k: int) -> circuits.LogitLens:
    """classroom.circuits.logit_lens over the run's cached trace (ui.runs.get_run)."""
    model, _ = get_model(source)
    return circuits.logit_lens(model, get_run(source, text, causal, max_len).trace, k=k)


def finite(scores) -> np.ndarray:
    """Scores with -inf (masked) as NaN: drawn grey, never as a colour."""
    a = np.asarray(scores, dtype=np.float64)
    return np.where(np.isfinite(a), a, np.nan)


def vocab_labels(source: ModelSource) -> list[str]:
    _, tok = get_model(source)
    return list(display_vocab(tok))


# ------------------------------------------------------------------------------------ one head
@st.cache_data(max_entries=8, show_spinner=False)
def _word_ids(source: ModelSource) -> np.ndarray:
    _, tok = get_model(source)
    return circuits.word_ids(tok)


@st.cache_data(max_entries=32, show_spinner=False)
def head_circuit(source: ModelSource, layer: int, head: int, ids: tuple[int, ...]) -> circuits.HeadCircuit:
    """classroom.circuits.head_circuit searched over the 2,000 most frequent word-like tokens
    (classroom.circuits.word_ids) and the text's own."""
    model, _ = get_model(source)
    return circuits.head_circuit(model, layer, head, ids, vocab_ids=_word_ids(source), max_candidates=2000)


# ------------------------------------------------------------------------------------ two models
def other_options(current: str) -> list[str]:
    """The models a second model can be (the Model list without fresh weights: a trained or
    pretrained model), the sidebar's own first so the default compares something else."""
    names = list(shipped_checkpoints()) + list(PRETRAINED) + list(st.session_state.get("_session_model_ids", {}))
    return [n for n in names if n != current] + ([current] if current in names else [])


def source_named(name: str) -> ModelSource | None:
    """The ModelSource of a Model-list entry (a checkpoint, a pretrained model or a session model);
    None when it is gone."""
    if name in shipped_checkpoints():
        return ModelSource("checkpoint", name)
    if name in PRETRAINED:
        return ModelSource("pretrained", name)
    sid = st.session_state.get("_session_model_ids", {}).get(name)
    if sid and sid in session_models():
        return ModelSource("session", sid)
    return None


def load_error(name: str) -> str | None:
    """Why a pretrained second model cannot be loaded (its package missing), or None."""
    return pretrained_error(name) if name in PRETRAINED else None


def mask_of(name: str) -> bool:
    """The mask a model was trained with (True = causal; fresh weights and unknown: causal)."""
    return trained_causal(name) is not False


def segment_labels(al: circuits.Alignment, text: str) -> list[str]:
    """The shared pieces' text as labels, without the spaces a BPE token carries in front."""
    return [t.strip() or t for t in al.segment_texts(text[: state.MAX_TEXT_CHARS])]


def pooled(run: Run, layer: int, seg: np.ndarray, n_segments: int) -> np.ndarray:
    """(S, S): the layer's attention, mean over its heads, on the shared text pieces
    (classroom.circuits.pool_to_segments)."""
    w = np.asarray(run.trace.layers[layer].attn.weights[0], dtype=np.float64).mean(0)  # (T, T)
    return circuits.pool_to_segments(w, seg, n_segments)


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b − a (two maps of the same shape), the difference maps' values."""
    return np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)


def run_for(source: ModelSource, text: str, causal: bool, max_len: int) -> Run:
    """A second model's run of the same text (the shared trace cache, ui.runs.get_run); the page
    ends with a message when its numbers are not finite (ui.runs.finite_or_stop)."""
    return finite_or_stop(get_run(source, text, causal, max_len))


@st.cache_data(max_entries=32, show_spinner=False)
def _spans(source: ModelSource, text: str, ids: tuple[int, ...], labels: tuple[str, ...]) -> list[tuple[int, int]]:
    _, tok = get_model(source)
    return circuits.char_spans(tok, text, list(ids), list(labels))


def spans(run: Run, text: str) -> list[tuple[int, int]]:
    """Character spans of the run's tokens in the text it was made from (classroom.circuits.char_spans)."""
    return _spans(run.source, text[: state.MAX_TEXT_CHARS], tuple(run.ids), tuple(run.labels))
