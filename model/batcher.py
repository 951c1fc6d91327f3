"""Tracing for many threads at once (a class's sessions): requests for the same model that meet in
the queue go through one batched forward, and each caller gets its own sentence's trace.

Why: a forward pass over a few tokens reads every weight once for those few rows; SmolLM2-135M's
matrices (~420 MB of float32 read per pass) dominate a 15-token trace, so B sentences in one pass
cost far less than B passes (benchmarks/bench_batching.py measures it on this machine).

How (continuous batching, no timer): a request runs at once when fewer than `slots` forwards of its
model are under way, so a lone user never waits for a batch to fill. Requests arriving while the
slots are busy queue; when a forward ends, the thread that ran it takes what has queued since as
the next batch (oldest first, up to `max_rows` sentences / `max_tokens` padded tokens), so under
load every forward carries everyone who arrived during the previous one. The caller threads do the
work themselves (no thread of the batcher's own): the thread that holds a slot runs batches until
its own trace is done, then hands the slot to the oldest waiting request's thread.

Exact (the default, pad=False): only sentences of the same length share a forward, unpadded, so
each one runs through the same ops on the same shapes as alone, and its trace (every field, the
derived ones included) is bit for bit the trace of its own forward, whatever else was in the batch:
float32 matmuls over 4 rows or more give each row the same bits whatever the number of rows
(checked on SmolLM2 over 4-64 tokens and 2-16 sentences; tests/model/test_batch_trace.py checks
every family exact batching accepts: batchable). A sentence of 1-3 tokens is traced alone (its own matmul of 1-3 rows takes
another kernel). With pad=True sentences of different lengths are padded on the right
(model.batching.pad_batch) and traced with the key_padding_mask: each row's softmax and attention
products then run over the padded length, a different summation order, which changes the last
bits (~1e-7 on the toy models; up to ~8e-6 of a field's scale on SmolLM2, whose residual stream
reaches 2e4). Either way model.batching.unbatch cuts each sentence's trace out as a copy, and the
batch is freed before anyone is woken. A model whose attention has variants other than rotary
positions and q/k norms (a window, ALiBi, the additive score; the soft-cap unless padding:
ROWWISE) is traced alone, as is every request of a batch
that fails (each caller then traces its own sentence and meets its own error, if any).

Pure Python and torch: no Streamlit (ui/runs.py holds the process's batcher).
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import torch

from .batching import pad_batch, unbatch
from .layers import QKNorm, Rotary, SoftCap
from .trace import ForwardTrace
from .transformer import Transformer

MIN_BATCH_TOKENS = 4  # shorter sentences are traced alone (pad=False: the 1-3 row matmuls differ in the last bit)
# Elementwise kernels with exp/erf (SiLU, GELU) take a different path for the last elements of a
# tensor (fewer than two vectors of 16 floats), so a sentence's values there match its own
# forward's only where each row's width is a whole number of such steps: exact batching needs an
# FFN width that is a multiple of this (every model the app ships: 256, 1536; a toy width of 48 is not).
EXACT_WIDTH = 64
# Keys and values must reach the score and value matmuls as a tensor of their own: grouped-query
# attention copies them (model.layers.repeat_kv). Without it they are strided views of the
# projection, (B, H, T, d) over (B, T, H, d), and torch multiplies such views of one sentence
# (B = 1 folds into a strided 3-D batched gemm) on another path than B of them (copied first):
# the app's default toy model (4 heads, d_k 16) differs in the last bit at 5 and 7 tokens. So
# exact batching needs grouped-query attention (SmolLM2, and every checked length and batch: 4-64
# tokens, 2-8 sentences); models with one K/V head per query head batch only padded (pad=True).
# With more than one intra-op thread the kernels split a batch's work at other places than a single
# sentence's (SmolLM2 at 2 threads: rows of 5 tokens differ), so exact batching needs the app's one
# thread (ui/runtime.py).


def batchable(model, exact: bool = False) -> bool:
    """Whether sentences for this model may share a forward: a Transformer whose attention layers
    have no variant other than the row-wise ones (ROWWISE: unbatch knows their fields); exact: and whose
    FFN width is a multiple of EXACT_WIDTH, with grouped-query attention and one torch thread
    (bit-identical traces, see above)."""
    if exact and torch.get_num_threads() != 1:
        return False
    rowwise = ROWWISE if exact else ROWWISE + (SoftCap,)
    return isinstance(model, Transformer) and all(
        all(type(h) in rowwise for h in blk.attn.variants.all)
        and (not exact or (blk.ffn.fc1.out_features % EXACT_WIDTH == 0
                           and blk.attn.n_kv_heads < blk.attn.n_heads)) for blk in model.blocks)


# Attention variants that work row by row and whose fields unbatch cuts: rotary positions (each
# row's own positions 0 .. n-1 under right padding) and Qwen3's q/k RMSNorm (per head and token).
# Gemma 2's soft-cap (tanh over the scores) only when padding: an elementwise tanh over a sentence's
# (H, T, T) scores alone ends on a tail its batched run computes with the vector kernel (see
# EXACT_WIDTH), so exact batching leaves it alone. A window, ALiBi and the additive score: alone.
ROWWISE = (Rotary, QKNorm)


@dataclass(eq=False)
class _Request:
    ids: tuple[int, ...]
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # handed a slot: run batches until this request is done
    result: ForwardTrace | None = None  # this sentence's trace (cut out of its batch)
    alone: bool = False  # the batch failed: trace this sentence alone
    rows: int = 1  # sentences in the forward that served it (for the statistics)


@dataclass
class _Queue:
    pending: deque = field(default_factory=deque)
    running: int = 0  # slots in use


class TraceBatcher:
    """trace(model, ids, causal) -> the ForwardTrace of ids (one sentence, B = 1) that
    model.trace(torch.tensor([ids]), causal=causal) gives; thread-safe, batched with concurrent
    callers of the same model and mask. slots: forwards of one model at once (one per core, with
    the app's one torch thread); pad: pad sentences of different lengths into one batch."""

    def __init__(self, slots: int = 2, max_rows: int = 8, max_tokens: int = 1024, pad: bool = False):
        if slots < 1 or max_rows < 1 or max_tokens < 1:
            raise ValueError("slots, max_rows and max_tokens must be at least 1")
        self.slots, self.max_rows, self.max_tokens, self.pad = slots, max_rows, max_tokens, pad
        self._lock = threading.Lock()
        self._queues: dict[tuple, _Queue] = {}
        self._models: dict[int, object] = {}  # id -> model, while it has a queue (ids stay unique)
        self.forwards = 0  # batched forwards run (statistics, benchmarks)
        self.rows_traced = 0  # sentences they carried

    def trace(self, model, ids, causal: bool = True, stop_after: int | None = None,
              record_from: int = 0) -> ForwardTrace:
        """stop_after, record_from: a partial trace (Transformer.trace); requests share a forward
        only with requests for the same layers."""
        ids = tuple(int(i) for i in ids)
        if self.max_rows == 1 or len(ids) < MIN_BATCH_TOKENS or not batchable(model, exact=not self.pad):
            return model.trace(torch.tensor([ids], dtype=torch.long), causal=causal, stop_after=stop_after,
                               record_from=record_from)
        key = (id(model), bool(causal), stop_after, record_from)
        req = _Request(ids)
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = _Queue()
                self._models[id(model)] = model
            q.pending.append(req)
            if q.running < self.slots:
                q.running += 1
                req.lead = True
        while True:
            with self._lock:  # the request's fields change under the lock, then `done` wakes it
                lead, req.lead = req.lead, False
                finished = req.result is not None or req.alone
                if not lead and not finished:
                    req.done.clear()
            if lead:  # a slot: run batches (this one's included) until it is done
                self._serve(key, model, causal, req, (stop_after, record_from))
            elif finished:
                break
            else:
                req.done.wait()
        if req.alone:
            return model.trace(torch.tensor([ids], dtype=torch.long), causal=causal, stop_after=stop_after,
                               record_from=record_from)
        tr, req.result = req.result, None
        return tr

    def _take(self, q: _Queue) -> list[_Request]:
        """The next batch (caller holds the lock): the oldest request, then every pending one
        that fits (pad=False: of the same length), up to max_rows sentences / max_tokens tokens."""
        first = q.pending[0]
        batch, longest, distinct = [first], len(first.ids), {first.ids}
        for r in list(q.pending)[1:]:
            if len(distinct) >= self.max_rows:
                break
            if not self.pad and len(r.ids) != len(first.ids):
                continue
            new = r.ids not in distinct
            t = max(longest, len(r.ids))
            if new and (len(distinct) + 1) * t > self.max_tokens:
                continue
            batch.append(r)
            longest = t
            distinct.add(r.ids)
        for r in batch:
            q.pending.remove(r)
        return batch

    def _serve(self, key: tuple, model, causal: bool, own: _Request, view: tuple = (None, 0)) -> None:
        """Hold a slot: run batches from the queue until `own` is done, then pass the slot to the
        oldest waiting request (or give it back)."""
        q = self._queues[key]
        try:
            while True:
                with self._lock:
                    if own.result is not None or own.alone or not q.pending:
                        break
                    batch = self._take(q)
                self._run(model, causal, batch, view)
        finally:
            with self._lock:
                nxt = next((r for r in q.pending if not r.lead), None)
                if nxt is not None:
                    nxt.lead = True  # the slot passes on: it stays counted in q.running
                    nxt.done.set()
                else:
                    q.running -= 1
                    if q.running == 0:
                        del self._queues[key]
                        if not any(k[0] == key[0] for k in self._queues):
                            self._models.pop(key[0], None)

    def _run(self, model, causal: bool, reqs: list[_Request], view: tuple = (None, 0)) -> None:
        """One forward for these requests (identical sentences share a row); each is woken with
        its sentence's trace, or told to trace alone when the batch fails. The thread that ran the
        forward cuts every row out (model.batching.unbatch) before waking anyone, so the batch is
        freed right away: the batch and its copies are in memory together only here, for one
        batch per slot, however many sessions wait (100 sessions: see docs/benchmarks.md)."""
        stop_after, record_from = view  # a partial trace (Transformer.trace), the same for the whole batch
        rows: dict[tuple[int, ...], int] = {}
        for r in reqs:
            rows.setdefault(r.ids, len(rows))
        seqs = list(rows)
        try:
            if len(seqs) == 1:
                tr = model.trace(torch.tensor([seqs[0]], dtype=torch.long), causal=causal, stop_after=stop_after,
                                 record_from=record_from)
            else:
                b = pad_batch([list(s) for s in seqs], pad_id=0)
                padded = any(n != b.ids.shape[1] for n in b.lengths)
                tr = model.trace(b.ids, causal=causal, key_padding_mask=b.key_padding_mask if padded else None,
                                 stop_after=stop_after, record_from=record_from)
            cuts = {s: tr for s in seqs} if len(seqs) == 1 else {s: unbatch(tr, rows[s], len(s)) for s in seqs}
            del tr
        except Exception:  # each caller traces alone and meets its own error, if any
            with self._lock:
                for r in reqs:
                    r.alone = True
                    r.done.set()
            return
        with self._lock:
            self.forwards += 1
            self.rows_traced += len(seqs)
            for r in reqs:
                r.result, r.rows = cuts[r.ids], len(seqs)
                r.done.set()
