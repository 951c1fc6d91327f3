"""A run: one sentence (or a padded batch, the mask lab) traced through the current model, cached
and shared by every session in a byte-bounded cache (TRACES).

Pages call `current_run()`; it reads the shared controls, shows the input notices (empty text,
truncation, unknown words) and returns a Run whose `trace` is the engine's ForwardTrace as
read-only numpy arrays (`ForwardTrace.numpy()`): pages read `run.trace.layers[l].attn.weights`
(B=1, H, Tq, Tk), typed attributes named as in the trace contract."""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np
import streamlit as st
import torch

from classroom.embeddings import display_vocab
from labels import md_escape
from model.config import ModelConfig
from model.trace import ForwardTrace, first_nonfinite
from model.batcher import TraceBatcher
from model.batching import pad_batch

from . import state
from .budget_cache import BudgetCache
from .models import ModelSource, current_source, get_model
from .runtime import batcher_settings


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
    trace: ForwardTrace = field(repr=False)  # numpy arrays, read-only, batch axis B = 1 (None once a
    #                                          finished page let it go: release_pages)
    source: ModelSource | None = None  # the model that computed it (for the model-level views below)
    unk_token: str = "<unk>"  # the vocabulary's unknown token ([UNK] for WordPiece)
    special: tuple[int, ...] = ()  # positions of [CLS]/[SEP] (WordPiece models; none for the toy vocabularies)
    nonfinite: str | None = None  # where the trace first holds inf/NaN (model.trace.first_nonfinite); None = finite

    # the model's own values, shared by every run of it: not counted in a cached run's bytes
    # (ui/budget_cache.Footprint; the vocabulary is 49,152 strings on SmolLM2)
    FOOTPRINT_SHARED: ClassVar[tuple[str, ...]] = ("cfg", "vocab", "source")

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

    def again(self) -> Callable[[], ForwardTrace]:
        """A function that traces this run's tokens again (the same forward as _run: the same
        values), holding its model and tokens but not the run: for what a session keeps past its
        rerun (the .npz button's callable, ui.show.download_npz), which must not keep the trace
        alive. Always the whole trace (also for a partial run: ForwardTrace.complete False)."""
        source, ids, causal = self.source, list(self.ids), self.causal
        return lambda: _trace(source, ids, causal)


def tokenize(source: ModelSource, text: str, max_len: int, tok=None) -> tuple[list[int], list[str], int, bool, list[str]]:
    tok = get_model(source)[1] if tok is None else tok
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


# traces shared by every session, bounded by bytes (ui/budget_cache.py): one SmolLM2 trace is ~32 MB.
# keep_large=2: the two most recently used traces bigger than the whole budget stay, outside it. At
# SmolLM2's 1,024 tokens one trace (2.5-2.8 GB) is five times the default budget; with only the
# newest kept, Causal vs bidirectional (two such traces) and any small entry (the mask lab's batch,
# the contextual page's two sentences) evicted the causal run, and the pages after them traced it
# again (2.4 s each on a quiet machine; issue 33). The cache holds at most the budget + two traces.
TRACES = BudgetCache(max_entries=48, keep_large=2)


# sessions' traces asked for at the same moment share a forward (model/batcher.py; ui/runtime.py
# says how: ATTN_LAB_BATCH)
BATCHER = TraceBatcher(**batcher_settings())


def get_run(source: ModelSource, text: str, causal: bool, max_len: int, layer: int | range | None = None) -> Run:
    """Trace of `text` (cut to max_len tokens) through the model. Shared and read-only.
    layer: the caller reads that layer only (the heads page), or a range of layers (a page of
    layers: the overview, the model view). The whole trace when it is cached; else a partial trace
    of those layers alone (ForwardTrace.stopped_after, recorded_from: the blocks below run
    unrecorded, the blocks above never run), cached apart: on SmolLM2 one block of 30 run at
    layer 0, one layer of 30 kept at any layer (issue 31)."""
    key = ("run", source, text, causal, max_len)
    if layer is not None:
        whole = TRACES.peek(key)
        if whole is not None:
            return whole
        model, _ = get_model(source)
        span = layer if isinstance(layer, range) else range(int(layer), int(layer) + 1)
        last = model.cfg.n_layers - 1
        lo, hi = min(max(span.start, 0), last), min(max(span.stop - 1, span.start, 0), last)
        if (lo, hi) != (0, last):
            run = TRACES.get(key + (("layers", lo, hi),), lambda: _run(source, text, causal, max_len, (lo, hi)))
            if is_long_pass(run.cfg, run.T):
                prefetch_whole(source, text, causal, max_len)
            return run
    return TRACES.get(key, lambda: _run(source, text, causal, max_len))


# A long input on a deep model: pages that read one layer or a page of layers trace those only, but
# the others need the whole pass, which costs seconds (SmolLM2 at 1,024 tokens: 4.5 s on the server's
# one torch thread, ui/runtime). Once such a partial run is served, the whole trace is computed in
# one background thread, so that the next page finds it cached (measured in benchmarks.bench_long:
# Intervene, the first page needing every layer, 6.5 s first paint without this). One at a time: a
# request while the thread is busy is dropped (the page that needs it then traces it itself; the
# cache computes each key once, so a page asking while the thread computes it waits for it).
PREFETCH_ABOVE = 24_000_000  # layers x heads x T^2 (MiniLM at 512 tokens: 19M, SmolLM2 at 1,024: 283M)
PREFETCH_NICE = 15  # the background thread's nice value: the page a reader waits for gets the cores first
_PREFETCHING = threading.Lock()


def whole_pass_cost(cfg: ModelConfig, T: int) -> int:
    """layers × heads × T²: the attention weights a whole trace computes (its cost at long inputs)."""
    return cfg.n_layers * cfg.n_heads * T * T


def is_long_pass(cfg: ModelConfig, T: int) -> bool:
    """A whole pass that costs seconds (whole_pass_cost > PREFETCH_ABOVE): pages needing one layer
    trace that layer, the whole trace is prefetched, and a page needing two whole passes waits for
    the reader's click (causal vs bidirectional)."""
    return whole_pass_cost(cfg, T) > PREFETCH_ABOVE


def prefetch_whole(source: ModelSource, text: str, causal: bool, max_len: int) -> bool:
    """Trace the whole pass of this run into the cache in a background thread, unless it is cached
    or another prefetch is running. True if started."""
    key = ("run", source, text, causal, max_len)
    if key in TRACES or not _PREFETCHING.acquire(blocking=False):
        return False
    got = get_model(source)  # resolved here, in the session's script thread

    def work() -> None:
        try:
            try:  # this thread only (Linux: a thread id is a process id here): pages first
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREFETCH_NICE)
            except (AttributeError, OSError):
                pass
            TRACES.get(key, lambda: _run(source, text, causal, max_len, got=got))
        except Exception:  # noqa: BLE001 - the page that needs it traces it again and shows any error
            pass
        finally:
            _PREFETCHING.release()

    threading.Thread(target=work, name="trace-prefetch", daemon=True).start()
    return True


def _trace(source: ModelSource, ids: list[int], causal: bool, layers: tuple[int, int] | None = None,
           model: torch.nn.Module | None = None) -> ForwardTrace:
    """The trace of these tokens (numpy, read-only), through the process's batcher; layers (first,
    last): those layers only (a partial trace: ForwardTrace.complete is False). model: the
    source's model when the caller has it (a background thread)."""
    model = get_model(source)[0] if model is None else model
    if layers is None:
        return BATCHER.trace(model, ids, causal).numpy()
    return BATCHER.trace(model, ids, causal, stop_after=layers[1], record_from=layers[0]).numpy()


def _run(source: ModelSource, text: str, causal: bool, max_len: int, layers: tuple[int, int] | None = None,
         got: tuple | None = None) -> Run:
    """got: (model, tokenizer) of the source when the caller has them (a background thread)."""
    model, tok = get_model(source) if got is None else got
    max_len = min(max_len, model.cfg.max_len)
    ids, labels, n, text_cut, unknown = tokenize(source, text, max_len, tok)
    specials = special_ids(tok)
    trace = _trace(source, ids, causal, layers, model)
    return Run(labels=labels, ids=ids, n_tokens=n, truncated=n > len(ids), text_cut=text_cut,
               unknown=unknown, causal=causal, cfg=model.cfg, vocab=display_vocab(tok),
               trace=trace,
               source=source, unk_token="" if tok.unk_id is None else tok.vocab[tok.unk_id],
               special=tuple(i for i, t in enumerate(ids) if t in specials), nonfinite=first_nonfinite(trace))


def truncation_notice(run: Run) -> str:
    """What the cut-text warning says: raise the limit in the sidebar while it can go higher; at
    the limit (the model's positions or the app's limit for it, state.t_limit), that this is the most the model reads
    here (issue 33: it said "Raise it … (up to 512)" at 512)."""
    limit = state.t_limit(run.source.name if run.source is not None and run.source.kind == "pretrained" else "")
    most = min(limit, run.cfg.max_len)
    head = f"Your text has {run.n_tokens:,} tokens; the model sees the first {run.T:,} (max sequence length). "
    if run.T < most:
        return head + f"Raise it in the sidebar (up to {most:,})."
    if most == run.cfg.max_len:
        return head + f"That is the most this model reads: it has {run.cfg.max_len:,} positions."
    return head + (f"That is the most the app shows ({limit:,} tokens; the model has "
                   f"{run.cfg.max_len:,} positions).")


def input_notices(run: Run) -> None:
    if run.text_cut:
        st.warning(f"Your text is longer than {state.MAX_TEXT_CHARS:,} characters; only the start is used.", icon=":material/content_cut:")
    if run.truncated:
        st.warning(truncation_notice(run), icon=":material/content_cut:")
    if run.unknown:
        uniq = list(dict.fromkeys(run.unknown))
        shown = ", ".join(md_escape(u) for u in uniq[:12]) + (" …" if len(uniq) > 12 else "")
        st.caption(f"Not in this model's vocabulary, computed as `{run.unk_token}` (labels keep what you typed): {shown}")


# The namespaces of the pages that asked for a run in this script run (per script thread).
# Streamlit keeps a page's namespace alive after the page has run, for as long as anything holds a
# function defined in it: a widget's format_func stays in the session's widget state after the
# session has moved to another page (measured: SmolLM2 at 1,024 tokens, every visited page's run,
# 2.5-2.9 GB each, kept by a selectbox's format_func; the server passed 11 GB in eight pages).
# release_pages (app.py, after the page) swaps each run such a namespace holds for the same run
# without its trace (labels, ids and config stay, for a format_func that reads them later): the
# shared trace cache alone decides which traces stay. Deferred tables hold their own arguments
# (ui.show.deferred) and fragments ask for the run again (current_run).
_PAGES = threading.local()


def note_page(depth: int = 2) -> None:
    """Remember the namespace of the page that is asking for a run (the first frame up the stack
    that runs as a page script: __name__ "__main__")."""
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__") != "__main__":
        f = f.f_back
    if f is None:
        return
    seen = getattr(_PAGES, "namespaces", None)
    if seen is None:
        seen = _PAGES.namespaces = {}
    seen[id(f.f_globals)] = f.f_globals


def release_pages() -> int:
    """In the namespaces note_page saw in this script thread: every Run and BatchRun becomes the
    same run with trace=None, every ForwardTrace is dropped. Returns how many names changed."""
    spaces = getattr(_PAGES, "namespaces", None) or {}
    _PAGES.namespaces = {}
    n = 0
    for g in spaces.values():
        for name, value in list(g.items()):
            if isinstance(value, (Run, BatchRun)) and value.trace is not None:
                g[name] = dataclasses.replace(value, trace=None)
                n += 1
            elif isinstance(value, ForwardTrace):
                del g[name]
                n += 1
    return n


def current_run(text: str | None = None, causal: bool | None = None, notices: bool = True,
                layer: int | range | None = None) -> Run:
    """The run for the sidebar's sentence and settings. Stops the page with a friendly message
    when there is nothing to show (empty text). layer: the page reads that layer (or that range
    of layers) only: a partial trace unless the whole one is cached (get_run)."""
    note_page()
    s = st.session_state
    text = s.get("text", state.DEFAULT_TEXT) if text is None else text
    causal = (s.get("mask", "causal") == "causal") if causal is None else causal
    source = current_source()
    if not str(text).strip():
        st.info("Type a sentence in the sidebar to see its attention (the box is empty).", icon=":material/edit:")
        state.end_page()
    run = get_run(source, str(text), bool(causal), int(s.get("T", 64)), layer)
    if notices:
        input_notices(run)
    return finite_or_stop(run)


def finite_or_stop(run: Run) -> Run:
    """The run, or (its trace holds inf or NaN: weights that overflow, 3e38) the page ends here with
    a message naming where the numbers stopped being finite, never a chart of NaN. Every page's
    run goes through it (current_run does it; a page that traces with get_run calls it)."""
    if run.nonfinite is not None:
        st.error(nonfinite_message(run), icon=":material/error:")
        state.end_page()
    return run


def nonfinite_message(run: Run) -> str:
    """What a page says instead of charts when the trace holds inf or NaN (Run.nonfinite)."""
    return (f"This model's numbers stop being finite in {run.nonfinite}: its weights are too large (or broken) "
            "for float32, so there is nothing true to draw. Nothing is shown; pick another model, or check the "
            "weights of that layer in the model's files.")


def current_length() -> int:
    """How many tokens the current run has (the sidebar's text, tokenized and cut as current_run
    cuts it), without tracing anything: a page that decides how much of the trace it needs."""
    s = st.session_state
    source = current_source()
    model, _ = get_model(source)
    max_len = min(int(s.get("T", 64)), model.cfg.max_len)
    return len(tokenize(source, str(s.get("text", state.DEFAULT_TEXT)), max_len)[0])


def current_cfg() -> ModelConfig:
    """The current model's config, without tracing anything (a page that sizes its controls before
    it asks for a run: the heads page's layer picks how far the trace goes)."""
    return get_model(current_source())[0].cfg


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
    note_page()
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
