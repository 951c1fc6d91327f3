"""The Generate page's state: one classroom.generation.Session per browser session, stepped by
buttons or an autoplay fragment. The model is the sidebar's (shared, read-only)."""
from __future__ import annotations

import streamlit as st

from classroom.generate import Session, Settings

from .models import PRETRAINED, ModelSource, get_model, trained_causal

KEY = "_generation"


def why_not(source: ModelSource) -> str | None:
    """None when the source's model can continue text; else one line saying why not."""
    model, _ = get_model(source)
    if not model.cfg.output_head:
        return "This model has no output layer (an encoder such as MiniLM): it turns text into vectors and cannot predict words."
    if source.kind == "checkpoint":
        if trained_causal(source.name) is False:
            return ("The masked LM was trained to fill in blanks with both sides visible, not to continue text "
                    "left to right, so its continuations are noise.")
    if source.kind == "pretrained" and not PRETRAINED[source.name].causal:
        return "This model was not trained to continue text."
    if source.kind == "disk" and model.cfg.encoder:  # BERT, RoBERTa, DistilBERT: they fill blanks
        return "This model was trained to fill in blanks with both sides visible, not to continue text."
    return None


def current(source: ModelSource, prompt: tuple[int, ...], settings: Settings) -> Session:
    """This browser session's generation for (model, prompt, settings): a new one when any changed."""
    key = (source, prompt, settings)
    held = st.session_state.get(KEY)
    if held is None or held[0] != key:
        model, _ = get_model(source)
        held = (key, Session.start(model, list(prompt), settings))
        st.session_state[KEY] = held
    return held[1]


def advance(source: ModelSource, prompt: tuple[int, ...], settings: Settings, n: int = 1) -> Session:
    """n steps of this session's generation (each feeds only the new token: KV cache)."""
    gen = current(source, prompt, settings)
    model, _ = get_model(source)
    for _ in range(n):
        gen = gen.step(model)
    st.session_state[KEY] = ((source, prompt, settings), gen)
    return gen


def reset() -> None:
    st.session_state.pop(KEY, None)


def token_texts(source: ModelSource, ids: list[int]) -> list[str]:
    """Readable labels of token ids (byte-level BPE: "·Paris"; word vocabularies: the word)."""
    _, tok = get_model(source)
    labels = getattr(tok, "labels", None)
    return list(labels(ids)) if callable(labels) else [tok.vocab[int(i)] for i in ids]


def decode(source: ModelSource, ids: list[int]) -> str:
    _, tok = get_model(source)
    return tok.decode(ids)


def eos_id(source: ModelSource) -> int | None:
    _, tok = get_model(source)
    return getattr(tok, "eos_id", None)


def uncached_gap(source: ModelSource, gen: Session) -> float:
    """max |next-token logits with the KV cache − without it (the whole text run again)|."""
    model, _ = get_model(source)
    return float((gen.uncached_logits(model) - gen.logits).abs().max())


def config(source: ModelSource):
    model, _ = get_model(source)
    return model.cfg
