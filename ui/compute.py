"""Cached compute: models (shared, read-only) and traces (on small hashable keys, never tensors).

Pages call `current_run()`; it reads the shared controls, shows the input notices (empty text,
truncation, unknown words) and returns a Run whose `trace` is the engine's ForwardTrace as
read-only numpy arrays (`ForwardTrace.numpy()`): pages read `run.trace.layers[l].attn.weights`
(B=1, H, Tq, Tk), typed attributes named as in the trace contract.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import streamlit as st
import torch

from classroom import analysis
from classroom.embeddings import display_vocab
from classroom.text import md_escape  # noqa: F401  (pages import it from here with the other helpers)
from model import checkpoint
from model.checkpoint import from_bytes, load_checkpoint
from model.config import ModelConfig
from model.pretrained import PRETRAINED as ALL_PRETRAINED
from model.pretrained import load_pretrained
from model.tokenizer import Tokenizer
from model.trace import ForwardTrace
from model.transformer import Transformer
from model.batching import pad_batch

from . import state
from .budget_cache import BudgetCache

CHECKPOINTS = checkpoint.CHECKPOINT_DIR
# The pretrained models the app offers (MiniLM-L6, SmolLM2-135M): all of model.pretrained's registry.
PRETRAINED = dict(ALL_PRETRAINED)
DEFAULT_SOURCE = "causal-lm"


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "checkpoint" | "fresh" | "session" | "pretrained"
    name: str  # checkpoint directory name, the digest of a session-trained model, or a PRETRAINED key
    cfg_json: str = ""  # fresh weights: the ModelConfig as JSON
    seed: int = 0


@st.cache_resource
def shipped_checkpoints() -> dict[str, dict]:
    """{name: config.json contents} for every decoder checkpoint in checkpoints/
    (model.checkpoint.shipped_checkpoints, read once per process)."""
    return checkpoint.shipped_checkpoints(CHECKPOINTS)


# Trained/uploaded models kept in server memory (a few MB each). Beyond this many the least
# recently registered is dropped, so a long-running class server does not grow without bound; a
# session whose model was dropped is told so (ui/sidebar.py) and can upload its downloaded copy.
MAX_SESSION_MODELS = int(os.environ.get("ATTN_LAB_MAX_SESSION_MODELS", 64))


@st.cache_resource
def session_models() -> "OrderedDict[str, bytes]":
    """Server-wide store of models trained or uploaded in the app: digest -> safetensors bytes
    (oldest first; at most MAX_SESSION_MODELS)."""
    return OrderedDict()


_store_lock = threading.Lock()


def register_model_bytes(data: bytes) -> str:
    """Keep a trained/uploaded model (safetensors bytes) and return its id (the digest)."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    with _store_lock:
        store = session_models()
        store[digest] = data
        store.move_to_end(digest)
        while len(store) > max(1, MAX_SESSION_MODELS):
            store.popitem(last=False)
    return digest


def forget_dropped_session_models() -> list[str]:
    """Remove from this session's Model list the names whose model the server dropped (limit
    MAX_SESSION_MODELS); returns those names (the sidebar says so)."""
    ids: dict[str, str] = st.session_state.get("_session_model_ids", {})
    gone = [name for name, digest in ids.items() if digest not in session_models()]
    for name in gone:
        del ids[name]
    return gone


def fresh_tokenizer() -> Tokenizer:
    """Vocabulary for fresh weights: the default checkpoint's, so the same sentence tokenizes."""
    metas = shipped_checkpoints()
    if DEFAULT_SOURCE in metas:
        return Tokenizer.from_dict(metas[DEFAULT_SOURCE]["tokenizer"])
    return Tokenizer.build([state.DEFAULT_TEXT, "the cat sat on the mat . a dog ran to the park ."], add_bos=True)


LOADING = {  # what the spinner says while a pretrained model loads (once per server process)
    "minilm-l6": "Loading MiniLM-L6 (91 MB of weights from its installed package, checked and mapped to the engine)…",
    "smollm2-135m": "Loading SmolLM2-135M: dequantizing 134.5M parameters from its GGUF file to float32 (about 5 s, "
                    "once per server; every session then shares them)…",
}


def pretrained_model(name: str) -> tuple[Transformer, Tokenizer]:
    """_pretrained_model with a spinner naming the model and what loading it does (cold loads only:
    a cached model returns before the spinner would show)."""
    if name in _loaded:  # warm: no spinner machinery on every rerun
        return _pretrained_model(name)
    with st.spinner(LOADING.get(name, f"Loading {name}…"), show_time=True):
        out = _pretrained_model(name)
    _loaded.add(name)
    return out


_loaded: set[str] = set()


@st.cache_resource(max_entries=4, show_spinner=False)
def _pretrained_model(name: str) -> tuple[Transformer, Tokenizer]:
    """A PRETRAINED model, loaded once per process (model.pretrained.load_pretrained). Raises
    ModuleNotFoundError (naming the install command) or ValueError (a damaged file, named): the
    sidebar shows the message and falls back to the default model. Failures are not cached."""
    return load_pretrained(name)


def pretrained_error(name: str) -> str | None:
    """None when the PRETRAINED model `name` loads; else the message saying why not."""
    try:
        pretrained_model(name)
    except (ModuleNotFoundError, ValueError, OSError) as e:
        return str(e)
    return None


@st.cache_resource(max_entries=16, show_spinner=False)
def get_model(source: ModelSource) -> tuple[Transformer, Tokenizer]:
    """Shared by every session: never mutate the returned model (train a copy)."""
    if source.kind == "pretrained":
        return pretrained_model(source.name)  # already eval, requires_grad False
    if source.kind == "checkpoint":
        model, tok = load_checkpoint(CHECKPOINTS / source.name)
    elif source.kind == "session":
        model, tok = from_bytes(session_models()[source.name])
    elif source.kind == "fresh":
        tok = fresh_tokenizer()
        model, tok = Transformer(ModelConfig.from_dict(json.loads(source.cfg_json)), seed=source.seed), tok
    else:
        raise ValueError(f"unknown model source {source.kind!r}")
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), tok


@dataclass(frozen=True)
class Run:
    labels: list[str]  # what the user typed, one per token (after truncation)
    ids: list[int]
    n_tokens: int  # tokens before truncation
    truncated: bool
    text_cut: bool  # the text itself was longer than state.MAX_TEXT_CHARS
    unknown: list[str]  # typed words that map to the unknown token
    causal: bool
    cfg: ModelConfig
    vocab: list[str]  # one label per token id, as a reader sees it (byte-level BPE: "·Paris", not "ĠParis")
    trace: ForwardTrace = field(repr=False)  # numpy arrays, read-only, batch axis B = 1
    source: ModelSource | None = None  # the model that computed it (for the model-level views below)
    unk_token: str = "<unk>"  # the vocabulary's unknown token ([UNK] for WordPiece)
    special: tuple[int, ...] = ()  # positions of [CLS]/[SEP] (WordPiece models; none for the toy vocabularies)

    @property
    def T(self) -> int:
        return len(self.ids)

    @property
    def special_keys(self) -> np.ndarray | None:
        """bool (T,), True at [CLS]/[SEP] (what model.patterns scores the [CLS]/[SEP] sink on); None
        for models without such tokens."""
        if not self.special:
            return None
        keys = np.zeros(self.T, dtype=bool)
        keys[list(self.special)] = True
        return keys

    def export_extras(self) -> dict[str, np.ndarray]:
        """What the .npz export adds to the trace's arrays."""
        return {"token_ids": np.asarray(self.ids), "token_labels": np.asarray(self.labels, dtype=str)}


def tokenize(source: ModelSource, text: str, max_len: int) -> tuple[list[int], list[str], int, bool, list[str]]:
    _, tok = get_model(source)
    text_cut = len(text) > state.MAX_TEXT_CHARS
    enc = tok.encode(text[: state.MAX_TEXT_CHARS])
    n = len(enc.ids)
    ids, labels = enc.ids[:max_len], enc.labels[:max_len]
    unknown = [lab for i, lab in zip(ids, labels) if i == tok.unk_id]
    return ids, labels, n, text_cut, unknown


def special_ids(tok) -> set[int]:
    """Ids of [CLS] and [SEP] for a WordPiece tokenizer; empty for the toy vocabularies (their
    <bos> is the first token, which the first-token sink already covers)."""
    return {i for i in (getattr(tok, "cls_id", None), getattr(tok, "sep_id", None)) if i is not None}


# traces shared by every session, bounded by bytes (ui/budget_cache.py): one SmolLM2 trace is ~32 MB
TRACES = BudgetCache(max_entries=48)


def get_run(source: ModelSource, text: str, causal: bool, max_len: int) -> Run:
    """Trace of `text` (cut to max_len tokens) through the model. Shared and read-only."""
    return TRACES.get(("run", source, text, causal, max_len), lambda: _run(source, text, causal, max_len))


def _run(source: ModelSource, text: str, causal: bool, max_len: int) -> Run:
    model, tok = get_model(source)
    max_len = min(max_len, model.cfg.max_len)
    ids, labels, n, text_cut, unknown = tokenize(source, text, max_len)
    tr = model.trace(torch.tensor([ids], dtype=torch.long), causal=causal)
    specials = special_ids(tok)
    return Run(labels=labels, ids=ids, n_tokens=n, truncated=n > len(ids), text_cut=text_cut,
               unknown=unknown, causal=causal, cfg=model.cfg, vocab=display_vocab(tok), trace=tr.numpy(),
               source=source, unk_token="" if tok.unk_id is None else tok.vocab[tok.unk_id],
               special=tuple(i for i, t in enumerate(ids) if t in specials))


def trained_causal(src: str) -> bool | None:
    """Whether the model named in the Model list was trained with the causal mask: True (causal LMs,
    SmolLM2), False (MiniLM, the masked LM: bidirectional objectives), None (fresh weights, or a
    model whose objective is not recorded)."""
    if src in PRETRAINED:
        return bool(PRETRAINED[src].causal)
    meta = shipped_checkpoints().get(src)
    if meta is not None:
        objective = (meta.get("extra") or {}).get("objective")
        return {"mlm": False, "causal": True, "clm": True}.get(objective, True)
    return None


def current_source() -> ModelSource:
    s = st.session_state
    src = s.get("src", DEFAULT_SOURCE)
    if src == state.FRESH:
        cfg = state.fresh_config(len(fresh_tokenizer()))
        return ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), int(s["seed"]))
    if src in shipped_checkpoints():
        return ModelSource("checkpoint", src)
    if src in PRETRAINED:
        return ModelSource("pretrained", src)
    sid = s.get("_session_model_ids", {}).get(src)
    if sid and sid in session_models():
        return ModelSource("session", sid)
    return ModelSource("checkpoint", DEFAULT_SOURCE) if DEFAULT_SOURCE in shipped_checkpoints() else \
        ModelSource("fresh", "fresh", json.dumps(state.fresh_config(len(fresh_tokenizer())).to_dict(), sort_keys=True), 0)


def input_notices(run: Run) -> None:
    if run.text_cut:
        st.warning(f"Your text is longer than {state.MAX_TEXT_CHARS:,} characters; only the start is used.", icon=":material/content_cut:")
    if run.truncated:
        st.warning(f"Your text has {run.n_tokens} tokens; the model sees the first {run.T} "
                   f"(max sequence length). Raise it in the sidebar (up to {min(state.T_LIMIT, run.cfg.max_len)}).",
                   icon=":material/content_cut:")
    if run.unknown:
        uniq = list(dict.fromkeys(run.unknown))
        shown = ", ".join(md_escape(u) for u in uniq[:12]) + (" …" if len(uniq) > 12 else "")
        st.caption(f"Not in this model's vocabulary, computed as `{run.unk_token}` (labels keep what you typed): {shown}")


def current_run(text: str | None = None, causal: bool | None = None, notices: bool = True) -> Run:
    """The run for the sidebar's sentence and settings. Stops the page with a friendly message
    when there is nothing to show (empty text)."""
    s = st.session_state
    text = s.get("text", state.DEFAULT_TEXT) if text is None else text
    causal = (s.get("mask", "causal") == "causal") if causal is None else causal
    source = current_source()
    if not str(text).strip():
        st.info("Type a sentence in the sidebar to see its attention (the box is empty).", icon=":material/edit:")
        state.end_page()
    run = get_run(source, str(text), bool(causal), int(s.get("T", 64)))
    if notices:
        input_notices(run)
    return run


def layer_allowed(run: Run, layer: int) -> np.ndarray:
    """The `allowed` mask of one layer for the single sentence, as (T, T) (or (H, T, T))."""
    a = np.asarray(run.trace.layers[layer].attn.allowed, dtype=bool)
    while a.ndim > 2 and a.shape[0] == 1:
        a = a[0]
    return a


@dataclass(frozen=True)
class BatchRun:
    """A padded batch of sentences through the model (the mask lab)."""
    texts: tuple[str, ...]
    labels: list[list[str]]  # per sentence, padded with "<pad>" to T
    lengths: list[int]  # real tokens per sentence (after truncation)
    n_tokens: list[int]  # tokens before truncation
    ids: np.ndarray  # (B, T)
    key_padding_mask: np.ndarray  # (B, T) bool, True = real token
    causal: bool
    mask_queries: bool
    cfg: ModelConfig
    trace: ForwardTrace = field(repr=False)  # numpy arrays, read-only, B sentences
    token_type_ids: np.ndarray | None = None  # (B, T): 0 = text A, 1 = text B (a sentence pair in row 0)
    pair: bool = False  # row 0 is texts[0] and texts[1] as one pair: [CLS] A [SEP] B [SEP]

    @property
    def T(self) -> int:
        return self.ids.shape[1]

    def export_extras(self) -> dict[str, np.ndarray]:
        """What the .npz export adds to the trace's arrays."""
        extras = {"token_ids": self.ids, "key_padding_mask": self.key_padding_mask,
                  "token_labels": np.asarray(self.labels, dtype=str)}
        if self.token_type_ids is not None:
            extras["token_type_ids"] = self.token_type_ids
        return extras


def takes_pairs(source: ModelSource) -> bool:
    """Does the model read sentence pairs (token types, BERT's [CLS] A [SEP] B [SEP])?"""
    model, tok = get_model(source)
    return model.cfg.type_vocab_size > 0 and hasattr(tok, "encode_pair")


def get_batch_run(source: ModelSource, texts: tuple[str, ...], causal: bool, mask_queries: bool,
                  max_len: int, pair: bool = False) -> BatchRun:
    """Trace a batch of sentences padded to a common length (right padding). pair (models that
    take pairs, at least 2 texts): row 0 is texts[0] and texts[1] as one pair with token types.
    Cached with the single runs (TRACES)."""
    return TRACES.get(("batch", source, tuple(texts), causal, mask_queries, max_len, pair),
                      lambda: _batch_run(source, tuple(texts), causal, mask_queries, max_len, pair))


def _batch_run(source: ModelSource, texts: tuple[str, ...], causal: bool, mask_queries: bool,
               max_len: int, pair: bool = False) -> BatchRun:
    model, tok = get_model(source)
    max_len = min(max_len, model.cfg.max_len)
    cut = [t[: state.MAX_TEXT_CHARS] for t in texts]
    pair = pair and len(cut) >= 2 and takes_pairs(source)
    encs = [tok.encode_pair(cut[0], cut[1])] + [tok.encode(t) for t in cut[2:]] if pair else [tok.encode(t) for t in cut]
    batch = pad_batch([e.ids for e in encs], tok.pad_id, max_len)
    T = batch.ids.shape[1]
    labels = [list(e.labels[:max_len]) + ["<pad>"] * (T - min(len(e.ids), max_len)) for e in encs]
    types = None
    if pair:
        types = np.zeros((len(encs), T), dtype=np.int64)
        row = encs[0].token_type_ids[:T]
        types[0, :len(row)] = row
    tr = model.trace(batch.ids, causal=causal, key_padding_mask=batch.key_padding_mask,
                     mask_padded_queries=mask_queries,
                     token_type_ids=None if types is None else torch.from_numpy(types))
    return BatchRun(texts=texts, labels=labels, lengths=batch.lengths, n_tokens=[len(e.ids) for e in encs],
                    ids=batch.ids.numpy(), key_padding_mask=batch.key_padding_mask.numpy(), causal=causal,
                    mask_queries=mask_queries, cfg=model.cfg, trace=tr.numpy(), token_type_ids=types, pair=pair)


@st.cache_data(max_entries=16, show_spinner=False)
def _norm_placement(cfg_json: str, ids: tuple[int, ...]) -> dict:
    return analysis.norm_placement_comparison(ModelConfig.from_dict(json.loads(cfg_json)), ids, seed=0)


def get_norm_placement(run: Run) -> dict:
    """Pre-LN vs post-LN on the run's ids with fresh weights of its architecture (cached)."""
    return _norm_placement(json.dumps(run.cfg.to_dict(), sort_keys=True), tuple(run.ids))


# ----------------------------------------------------------------------------- model-level views
# Pages never touch the cached model: what they show of its weights comes from these functions.

def allocated_parameters(source: ModelSource) -> int:
    """Parameters of the allocated model (to set beside the count from the config)."""
    return get_model(source)[0].num_parameters()


def ffn_position_check(run: Run, layer: int) -> float:
    """max |FFN on each position alone - FFN on all positions| for one layer of the run."""
    model, _ = get_model(run.source)
    ffn = run.trace.layers[layer].ffn
    return analysis.ffn_position_check(model, layer, ffn.input[0], ffn.output[0])


def output_layer_view(run: Run, n_rows: int) -> dict:
    """Weight tying of the run's model (analysis.weight_tying: tied?, shape, max |recomputed -
    model logits|) plus the first n_rows of the embedding E and of the output matrix, (n, D)."""
    model, _ = get_model(run.source)
    tie = analysis.weight_tying(model, run.trace.final[0], run.trace.logits[0])
    return {**tie, "embedding_rows": model.tok_emb.weight.detach().numpy()[:n_rows].copy(),
            "output_rows": model.output_matrix.detach().numpy()[:n_rows].copy()}


@st.cache_data(max_entries=8, show_spinner="Timing forward passes…")
def forward_timing(source: ModelSource, Ts: tuple[int, ...], repeats: int) -> tuple[list[float], list[float]]:
    """Measured forward time (best of `repeats`, s) per T and the fitted FLOP curve; once per model."""
    model, _ = get_model(source)
    secs = analysis.measure_forward_time(model, Ts, repeats=repeats, seed=0)
    fit = analysis.fit_theory(Ts, secs, model.cfg)
    return secs.tolist(), fit["fit"].tolist()


@st.cache_data(max_entries=8, show_spinner="Timing one block and its attention at lengths up to 1,024…")
def block_timing(cfg_json: str, Ts: tuple[int, ...], repeats: int) -> dict[str, list[float]]:
    """Best-of-`repeats` seconds per T of attention alone and of one whole block with this
    architecture (analysis.measure_block_time, fresh weights); once per architecture."""
    cfg = ModelConfig.from_dict(json.loads(cfg_json))
    r = analysis.measure_block_time(cfg, Ts, repeats=repeats, seed=0)
    return {k: v.tolist() for k, v in r.items()}


@st.cache_data(max_entries=16, show_spinner=False)
def comparison_position_table(source: ModelSource, n: int) -> tuple[np.ndarray, str, str]:
    """A learned position table to set beside the sinusoidal one, (n', D) with n' <= n, and where
    it comes from: ("current", "") the current model's own; ("checkpoint", name) a shipped
    checkpoint trained with learned positions and the same d_model; ("init", "") a fresh learned
    table at initialisation (seed 0). Built once, not per rerun."""
    model, _ = get_model(source)
    cfg = model.cfg
    if cfg.pos_encoding == "learned":
        return model.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "current", ""
    for name, meta in shipped_checkpoints().items():
        if (meta.get("config") or {}).get("pos_encoding") == "learned":
            try:
                other, _ = get_model(ModelSource("checkpoint", name))
            except (OSError, ValueError):  # unreadable (e.g. being rewritten): try the next
                continue
            if other.cfg.d_model == cfg.d_model:
                n_other = min(n, other.cfg.max_len)
                return other.position_table(n_other).detach().numpy().copy(), "checkpoint", name
    fresh = Transformer(cfg.replace(n_layers=1, pos_encoding="learned"), seed=0)
    return fresh.position_table(min(n, cfg.max_len)).detach().numpy().copy(), "init", ""
