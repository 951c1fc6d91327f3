"""model.batcher.TraceBatcher: threads asking at once (a class's sessions) get their own sentence's
trace, never a neighbour's, through shared forwards; a lone request runs at once; identical
sentences share a row; a failing batch leaves each caller its own result or error.

Batching is made deterministic without timing: the model's first forward waits at a gate until
every other request has queued behind it, so the next forward must take them together. Exact mode
checks the first batch of each shape row by row against each row's own forward (model.batcher
ExactBatching): those checks are forwards of one sentence after the batch's; the first-use probe is
taken as passed here (`exact_batcher`), so what is tested does not depend on this CPU's kernels."""
import threading

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.batcher import TraceBatcher
from model.trace import flat_arrays
from tests.model.test_batch_trace import ProbePassed

CFG = dict(vocab_size=50, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32, pos_encoding="rope",
           norm_kind="rmsnorm", activation="swiglu", bias=False, d_ff=64)


class GatedModel(Transformer):
    """A Transformer whose first trace waits until `release` is set (nothing else changes)."""

    def __init__(self):
        super().__init__(ModelConfig(**CFG), seed=5)
        self.release = threading.Event()
        self.calls: list[int] = []  # batch size of each trace

    def trace(self, ids, **kw):
        self.calls.append(ids.shape[0])
        if len(self.calls) == 1:
            assert self.release.wait(30), "the test never released the first forward"
        return super().trace(ids, **kw)


def exact_batcher(**kw) -> TraceBatcher:
    """An exact-mode batcher whose first-use probe passed (every batch shape is still checked)."""
    b = TraceBatcher(**kw)
    b.exactness = ProbePassed()
    return b


def batched(calls: list[int]) -> list[int]:
    """The batch sizes of the forwards of more than one sentence, in order (not the checks' forwards
    of one sentence each)."""
    return [c for c in calls if c > 1]


def sentences(n: int, lengths=(6, 6, 9, 6, 9, 5)) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 50, (lengths[i % len(lengths)],), generator=g).tolist() for i in range(n)]


def run_together(batcher, model, sents, causal=True):
    """Start one thread per sentence: the first one's forward holds the gate until all others have
    queued; returns each thread's trace (or exception)."""
    out: list = [None] * len(sents)

    def go(i):
        try:
            out[i] = batcher.trace(model, sents[i], causal)
        except Exception as e:  # noqa: BLE001  reported per caller
            out[i] = e

    first = threading.Thread(target=go, args=(0,))
    first.start()
    while len(model.calls) < 1:
        threading.Event().wait(0.001)
    rest = [threading.Thread(target=go, args=(i,)) for i in range(1, len(sents))]
    for t in rest:
        t.start()
    for _ in range(30_000):  # every other request waits in the queue (whatever the queues' keys)
        with batcher._lock:
            if sum(len(q.pending) for q in batcher._queues.values()) == len(sents) - 1:
                break
        threading.Event().wait(0.001)
    else:
        pytest.fail("requests did not queue")
    model.release.set()
    for t in [first, *rest]:
        t.join(60)
        assert not t.is_alive(), "a caller never got its trace"
    return out


def assert_own_trace(model, tr, sent, causal, exact):
    alone = Transformer.trace(model, torch.tensor([sent]), causal=causal)  # not through the gate
    assert tr.ids.tolist() == [sent], "a neighbour's sentence"
    a, b = flat_arrays(tr), flat_arrays(alone)
    assert a.keys() == b.keys()
    for k in b:
        assert a[k].shape == b[k].shape, k
        if exact:
            assert np.array_equal(a[k], b[k]), k
        else:  # padded rows sum over more keys in another order: to 1e-5 of the field's scale
            scale = max(1.0, float(np.abs(b[k][np.isfinite(b[k])]).max())) if b[k].dtype.kind == "f" else 1.0
            np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-5 * scale, err_msg=k)


@pytest.mark.parametrize("causal", [True, False])
def test_exact_mode_batches_sentences_of_one_length(causal):
    model, b = GatedModel(), exact_batcher(slots=1)
    sents = sentences(12)
    out = run_together(b, model, sents, causal)
    for tr, s in zip(out, sents):
        assert_own_trace(model, tr, s, causal, exact=True)
    # the gated first forward, then one forward per length among the 11 that queued (6, 9 and 5),
    # each a new shape: checked against the 2 + 4 + 5 sentences' own forwards
    assert model.calls[0] == 1 and sorted(batched(model.calls[1:])) == [2, 4, 5]
    assert len(model.calls) == 1 + 3 + 11 and b.checks == 3
    assert b.forwards == 4 and b.rows_traced == 12


def test_pad_mode_takes_every_length_into_one_forward():
    model, b = GatedModel(), TraceBatcher(slots=1, pad=True, max_rows=16)
    sents = sentences(12)
    out = run_together(b, model, sents)
    for tr, s in zip(out, sents):
        assert_own_trace(model, tr, s, True, exact=False)
    assert model.calls == [1, 11] and b.forwards == 2


def test_limits_split_the_queue():
    model, b = GatedModel(), TraceBatcher(slots=1, pad=True, max_rows=4)
    sents = sentences(11)
    run_together(b, model, sents)
    assert model.calls == [1, 4, 4, 2]


def test_identical_sentences_share_a_row():
    model, b = GatedModel(), exact_batcher(slots=1)
    sents = sentences(1) + [[7, 8, 9, 10, 11]] * 5 + [[7, 8, 9, 10, 12]]
    out = run_together(b, model, sents)
    assert batched(model.calls) == [2]  # five identical requests, one other: two rows
    for tr, s in zip(out, sents):
        assert_own_trace(model, tr, s, True, exact=True)


def test_a_lone_request_runs_at_once_with_its_own_forward():
    model, b = GatedModel(), exact_batcher(slots=2)
    model.release.set()
    tr = b.trace(model, [5, 6, 7, 8, 9])
    assert model.calls == [1] and tr.ids.shape == (1, 5)
    assert b._queues == {} and b._models == {}  # nothing left behind
    short = b.trace(model, [5, 6])  # 1-3 tokens: alone, outside the queue
    assert short.ids.tolist() == [[5, 6]] and b.forwards == 1


def test_a_failing_batch_leaves_each_caller_its_own_result():
    model, b = GatedModel(), exact_batcher(slots=1)
    sents = sentences(6, lengths=(6,))
    sents[3] = [5, 6, 7, 8, 9, 99]  # 99 is not in the vocabulary: this sentence's own ValueError
    out = run_together(b, model, sents)
    for i, (tr, s) in enumerate(zip(out, sents)):
        if i == 3:
            assert isinstance(out[3], ValueError) and "token ids" in str(out[3])
        else:
            assert_own_trace(model, tr, s, True, exact=True)


def test_many_threads_many_slots_no_one_left_waiting():
    """No gate: 40 threads, 2 slots, random lengths; everyone gets their own trace."""
    model = Transformer(ModelConfig(**CFG), seed=5)
    b = TraceBatcher(slots=2, pad=True)
    sents = sentences(40, lengths=(4, 5, 6, 7, 8, 9, 10))
    out: list = [None] * 40
    start = threading.Barrier(40)

    def go(i):
        start.wait()
        out[i] = b.trace(model, sents[i])

    ts = [threading.Thread(target=go, args=(i,)) for i in range(40)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
        assert not t.is_alive()
    for tr, s in zip(out, sents):
        assert_own_trace(model, tr, s, True, exact=False)
    assert b.rows_traced == 40 and b._queues == {}


def test_a_shape_checked_once_batches_without_checks():
    """The second batch of a shape whose check found the same bits runs one forward, no checks; a
    shape whose check found a differing bit leaves the model traced alone (whichever this CPU does)."""
    model, b = GatedModel(), exact_batcher(slots=1)
    run_together(b, model, sentences(5, lengths=(6,)))  # the gated one, then 4 of 6 tokens: checked
    assert b.checks == 1 and batched(model.calls) == [4]
    model.calls.clear()
    model.release.clear()
    if b.exactness.verdict(model):
        again = sentences(5, lengths=(6,))[::-1]
        out = run_together(b, model, again)
        assert batched(model.calls) == [4] and len(model.calls) == 2 and b.checks == 1  # no check this time
        for tr, s in zip(out, again):
            assert_own_trace(model, tr, s, True, exact=True)
    else:
        model.release.set()
        forwards = b.forwards
        assert_own_trace(model, b.trace(model, sentences(1, lengths=(6,))[0]), sentences(1, lengths=(6,))[0],
                         True, exact=True)
        assert b.forwards == forwards  # alone


def test_the_batch_is_freed_before_its_callers_wake():
    """The thread that ran a batch cuts every sentence out and drops the batch before it wakes
    anyone: what a caller holds is its own copy, and no batch outlives its forward."""
    import weakref

    batches: list = []

    class Recording(GatedModel):
        def trace(self, ids, **kw):
            tr = super().trace(ids, **kw)
            if ids.shape[0] > 1:
                batches.append(weakref.ref(tr))
            return tr

    model, b = Recording(), exact_batcher(slots=1)
    alive_after_return: list[int] = []
    sents = sentences(8, lengths=(6,))
    orig = b.trace

    def trace_and_look(*a, **kw):
        tr = orig(*a, **kw)
        alive_after_return.append(sum(r() is not None for r in batches))
        return tr

    b.trace = trace_and_look
    out = run_together(b, model, sents)
    assert len(batches) == 1 and batched(model.calls) == [7]
    assert alive_after_return == [0] * 8  # no caller ever saw the batch alive
    for tr, s in zip(out, sents):
        assert_own_trace(model, tr, s, True, exact=True)


def test_requests_for_other_layers_never_share_a_forward():
    """Partial traces (the heads page's one layer): requests recording layer 1 only (record_from=1)
    and layers 0 and 1 (record_from=0) meet in the batcher at the same moment. Each caller gets the partial
    trace of its own layers, as model.trace gives it alone, and no forward mixes the two."""
    forwards: list[tuple[int, list]] = []  # (record_from, the sentences) of each forward

    class Recording(GatedModel):
        def trace(self, ids, **kw):
            forwards.append((kw.get("record_from", 0), ids.tolist()))
            return super().trace(ids, **kw)

    model, b = Recording(), TraceBatcher(slots=1, pad=True, max_rows=8)
    sents = sentences(4, lengths=(6,))
    layers = [1, 0, 1, 0]  # record_from of each request; every one stops after layer 1
    out: list = [None] * 4

    def go(i):
        try:
            out[i] = b.trace(model, sents[i], True, stop_after=1, record_from=layers[i])
        except Exception as e:  # noqa: BLE001  reported per caller
            out[i] = e

    first = threading.Thread(target=go, args=(0,))
    first.start()
    while not forwards:  # the first request's forward holds the gate
        threading.Event().wait(0.001)
    rest = [threading.Thread(target=go, args=(i,)) for i in (1, 2, 3)]
    for t in rest:
        t.start()
    # Layers 0..1 need nothing of the held forward: those two callers finish while it waits. (Were
    # they queued behind it, the bound below lets the gate go and the results tell.)
    for i in (1, 3):
        rest[i - 1].join(5)
    model.release.set()
    for t in [first, *rest]:
        t.join(60)
        assert not t.is_alive(), "a caller never got its trace"
    for s, tr, rf in zip(sents, out, layers):
        assert not isinstance(tr, Exception), tr
        assert tr.ids.tolist() == [s] and tr.recorded_from == rf
        assert (tr.layers[0] is None) == (rf == 1) and tr.layers[1] is not None
        alone = Transformer.trace(model, torch.tensor([s]), stop_after=1, record_from=rf)  # not through the gate
        assert tr.stopped_after == alone.stopped_after
        alone, got = flat_arrays(alone), flat_arrays(tr)
        assert got.keys() == alone.keys()
        for k in alone:  # pad mode's bound: 1e-5 of the field's scale
            scale = max(1.0, float(np.abs(alone[k][np.isfinite(alone[k])]).max())) if alone[k].dtype.kind == "f" else 1.0
            np.testing.assert_allclose(got[k], alone[k], rtol=0, atol=1e-5 * scale, err_msg=k)
    for rf, rows in forwards:
        assert all(layers[sents.index(r)] == rf for r in rows), (rf, rows)
