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

Exact (the default, pad=False): only sentences of the same length share a forward, unpadded, and
only where this machine has shown that a batch gives each row its own forward's bits. Whether it
does is a fact about the CPU's kernels, not about the model: MKL and oneDNN pick kernels by shape,
thread count and instruction set (AVX2, AVX-512, AMX), and a batched row may differ from the row
alone in the last bit on one CPU and not on another. So it is measured (ExactBatching):
- when a model is first used, with the process's thread settings, a small batch (PROBE_ROWS
  sentences at each of PROBE_LENGTHS) is traced and each row alone; one differing bit in any field
  and exact mode traces that model alone (for these thread settings);
- the first batch of each shape (sentences, tokens, mask) is checked the same way before anyone gets
  it: each caller gets the trace of its own forward, and the shape batches from then on only if every
  row was the same bits. One differing bit and the model is traced alone from then on;
- a change of thread settings (torch.set_num_threads) starts a new measurement.
A shape's kernels run the same ops on the same positions whatever the sentences, so a shape checked
once stays exact; so exact mode never returns a trace that differs from the single forward.
A sentence of 1-3 tokens is traced alone (its own matmul of 1-3 rows is cheap anyway). With
pad=True sentences of different lengths are padded on the right (model.batching.pad_batch) and
traced with the key_padding_mask: each row's softmax and attention products then run over the
padded length, a different summation order, which changes the last bits (PAD_BOUND of a field's
scale). Either way model.batching.unbatch cuts each sentence's trace out as a copy, and the batch is
freed before anyone is woken. A model whose attention has variants other than rotary positions and
q/k norms (a window, ALiBi, the additive score; the soft-cap unless padding: ROWWISE) is traced
alone, as is every request of a batch that fails (each caller then traces its own sentence and meets
its own error, if any).

Pure Python and torch: no Streamlit (ui/runs.py holds the process's batcher).
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass, field

import torch

from .batching import pad_batch, same_bits, unbatch
from .layers import QKNorm, Rotary, SoftCap
from .trace import ForwardTrace
from .transformer import Transformer

MIN_BATCH_TOKENS = 4  # shorter sentences are traced alone (a forward of 1-3 rows is cheap anyway)
PROBE_ROWS, PROBE_LENGTHS = 3, (5, 11)  # the first-use measurement: 3 sentences at 5 and at 11 tokens
MAX_CHECKED_SHAPES = 4096  # shapes remembered per model and thread settings (a tuple each)
# pad=True: each field of a padded sentence's trace is within this fraction of the field's scale
# (its largest |value|, at least 1) of its own forward's (tests/model/test_batch_trace.py, every
# family; SmolLM2's residual stream reaches 2e4, and its fields stay within ~8e-6)
PAD_BOUND = 1e-5


def batchable(model, exact: bool = False) -> bool:
    """Whether sentences for this model may share a forward at all: a Transformer whose attention
    layers have no variant other than the row-wise ones (ROWWISE, and the soft-cap: unbatch knows
    their fields). exact: and this machine's measurement (ExactBatching, with the current thread
    settings; a TraceBatcher keeps its own) says its batches are bit for bit each row's forward."""
    rowwise = isinstance(model, Transformer) and all(
        all(type(h) in ROWWISE for h in blk.attn.variants.all) for blk in model.blocks)
    return rowwise and (not exact or _MEASURED.usable(model, True))


# Attention variants that work row by row and whose fields unbatch cuts: rotary positions (each
# row's own positions 0 .. n-1 under right padding), Qwen3's q/k RMSNorm (per head and token) and
# Gemma 2's soft-cap (tanh over each score). A window, ALiBi and the additive score: alone.
ROWWISE = (Rotary, QKNorm, SoftCap)


def thread_settings() -> tuple:
    """What the kernels a forward takes depend on besides shapes and the CPU: the intra-op threads."""
    return (torch.get_num_threads(),)


@dataclass
class _Measured:
    """One model's exact batching under one thread setting."""
    exact: bool | None = None  # None: not measured yet (or being measured); False: a bit differed
    checked: dict = field(default_factory=dict)  # (rows, tokens, causal) -> deepest layer checked
    busy: bool = False  # a thread is measuring it


class ExactBatching:
    """Whether a batched forward gives each sentence its own forward's bits, measured on this machine
    (the module's docstring): per model (held weakly) and thread settings. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _measured(self, model) -> _Measured:  # caller holds the lock
        per = self._models.get(model)
        if per is None:
            per = self._models[model] = {}
        return per.setdefault(thread_settings(), _Measured())

    def verdict(self, model) -> bool | None:
        """True: exact batching is on for this model (under the current thread settings); False: a
        bit differed, the model is traced alone; None: not measured yet."""
        with self._lock:
            return self._measured(model).exact

    def usable(self, model, causal: bool) -> bool:
        """Whether this model may batch exactly now: measured at its first use (PROBE_ROWS sentences
        at PROBE_LENGTHS tokens, each row against its own forward). False while another thread
        measures it (that request is traced alone)."""
        with self._lock:
            m = self._measured(model)
            if m.exact is not None or m.busy:
                return bool(m.exact)
            m.busy = True
        exact = False
        try:
            exact = self._probe(model, causal)
        finally:
            with self._lock:
                m.busy = False
                if m.exact is None:
                    m.exact = exact
        return exact

    def _probe(self, model, causal: bool) -> bool:
        g = torch.Generator().manual_seed(0)
        vocab = max(2, min(model.cfg.vocab_size, 1000))
        for n in PROBE_LENGTHS:
            if n > model.cfg.max_len:
                continue
            ids = torch.randint(1, vocab, (PROBE_ROWS, n), generator=g)
            try:
                batch = model.trace(ids, causal=causal)
                same = all(same_bits(unbatch(batch, r, n), model.trace(ids[r:r + 1], causal=causal))
                           for r in range(PROBE_ROWS))
            except Exception:  # noqa: BLE001  a model that cannot be probed is traced alone
                return False
            del batch
            self.record(model, PROBE_ROWS, n, causal, None, same)
            if not same:
                return False
        return True

    @staticmethod
    def _depth(model, stop_after: int | None) -> int:
        return len(model.blocks) if stop_after is None else stop_after  # the whole pass: the final norm too

    def checked(self, model, rows: int, n: int, causal: bool, stop_after: int | None) -> bool:
        """Whether a batch of this shape, down to this layer, was checked bit for bit."""
        with self._lock:
            m = self._measured(model)
            return bool(m.exact) and m.checked.get((rows, n, bool(causal)), -1) >= self._depth(model, stop_after)

    def record(self, model, rows: int, n: int, causal: bool, stop_after: int | None, same: bool) -> None:
        """The outcome of checking a batch of this shape (each row against its own forward)."""
        with self._lock:
            m = self._measured(model)
            if not same:
                m.exact = False
                m.checked.clear()
                return
            key, depth = (rows, n, bool(causal)), self._depth(model, stop_after)
            if key in m.checked or len(m.checked) < MAX_CHECKED_SHAPES:
                m.checked[key] = max(depth, m.checked.get(key, -1))


_MEASURED = ExactBatching()  # batchable(exact=True)'s measurements


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
    the app's one torch thread); pad: pad sentences of different lengths into one batch (else exact:
    only where this machine measured it bit for bit, `exactness`)."""

    def __init__(self, slots: int = 2, max_rows: int = 8, max_tokens: int = 1024, pad: bool = False):
        if slots < 1 or max_rows < 1 or max_tokens < 1:
            raise ValueError("slots, max_rows and max_tokens must be at least 1")
        self.slots, self.max_rows, self.max_tokens, self.pad = slots, max_rows, max_tokens, pad
        self.exactness = ExactBatching()
        self.checks = 0  # batches checked row by row against their own forwards (exact mode)
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
        if (self.max_rows == 1 or len(ids) < MIN_BATCH_TOKENS or not batchable(model)
                or not (self.pad or self.exactness.usable(model, causal))):
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
            if len(seqs) > 1 and not self.pad and not self.exactness.checked(model, len(seqs), len(seqs[0]), causal,
                                                                             stop_after):
                # the first batch of this shape: each row against its own forward; the callers get
                # their own forwards' traces, and the shape batches from now on only if every bit matched
                alone = {s: model.trace(torch.tensor([s], dtype=torch.long), causal=causal, stop_after=stop_after,
                                        record_from=record_from) for s in seqs}
                same = all(same_bits(cuts[s], alone[s]) for s in seqs)
                self.exactness.record(model, len(seqs), len(seqs[0]), causal, stop_after, same)
                cuts = alone
                with self._lock:
                    self.checks += 1
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
