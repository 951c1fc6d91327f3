"""ui/budget_cache.py with traces: the byte bound holds with derived fields (logits, probabilities,
scores ... computed when a page first reads them, after the trace was cached), counted the moment
they are computed; every buffer counts once (numpy views of one torch storage, fields sharing a
tensor); a cut trace (model.batching.unbatch) counts its own copy only."""
import gc
import weakref

import numpy as np
import torch

from model import ModelConfig, Transformer
from model.batching import unbatch
from ui.budget_cache import BudgetCache, Footprint, nbytes

IDS = torch.tensor([[1, 5, 7, 9, 5, 2, 11, 3]])


def model() -> Transformer:
    m = Transformer(ModelConfig(vocab_size=400, d_model=32, n_heads=4, n_layers=2, max_len=32), seed=2)
    for p in m.parameters():
        p.requires_grad_(False)  # frozen, as the app's models: logits on first read
    return m


def distinct_bytes(tree) -> int:
    """The bytes of the distinct torch storages behind a numpy trace, counted by hand."""
    seen, total, stack = set(), 0, [tree]
    while stack:
        o = stack.pop()
        if isinstance(o, np.ndarray):
            t = o.base
            while isinstance(t, np.ndarray):
                t = t.base
            st = t.untyped_storage() if isinstance(t, torch.Tensor) else None
            key = st.data_ptr() if st is not None else id(t)
            if key not in seen:
                seen.add(key)
                total += st.nbytes() if st is not None else t.nbytes
        elif isinstance(o, tuple):
            stack.extend(o)
        elif hasattr(o, "__dataclass_fields__"):
            stack.extend(vars(o).values())
    return total


def test_each_buffer_counts_once():
    tr = model().trace(IDS).numpy()
    # a block's input is the previous block's output, ln2's output is the FFN's input: one buffer
    assert np.shares_memory(tr.layers[1].input, tr.layers[0].resid_out)
    naive = sum(a.nbytes for a in _arrays(tr))
    assert nbytes(tr) == distinct_bytes(tr) < naive


def _arrays(o):
    if isinstance(o, np.ndarray):
        yield o
    elif isinstance(o, tuple):
        for x in o:
            yield from _arrays(x)
    elif hasattr(o, "__dataclass_fields__"):
        for x in vars(o).values():
            yield from _arrays(x)


def test_derived_fields_count_when_computed_and_the_bound_holds_at_once():
    m = model()
    sizes = [nbytes(m.trace(IDS[:, : 8 - k]).numpy()) for k in range(3)]
    grown = 2 * 8 * 400 * 4  # logits and probs of the first, (1, 8, 400) float32 each
    cache = BudgetCache(budget=sum(sizes) + grown // 2)  # the three fit, unread
    runs = [cache.get(k, lambda k=k: m.trace(IDS[:, : 8 - k]).numpy()) for k in range(3)]
    assert len(cache) == 3 and cache.bytes == sum(sizes)
    probs = runs[0].probs  # a page reads the oldest entry's probabilities (and so its logits)
    assert 2 * probs.nbytes == grown  # more than the slack: the cache is now over its budget ...
    # ... and has already evicted (no further get needed): the least recently used other entry
    assert cache.bytes <= cache.budget and len(cache) == 2
    assert cache.bytes == nbytes(runs[0]) + nbytes(runs[2]) == sum(nbytes(v) for v, *_ in cache._items.values())
    assert cache.get(0, lambda: None) is runs[0] and cache.get(1, lambda: "recomputed") == "recomputed"


def test_every_derived_field_is_counted():
    m = model()
    cache = BudgetCache(budget=10**9)
    tr = cache.get("a", lambda: m.trace(IDS).numpy())
    before = cache.bytes
    a = tr.layers[0].attn
    extra = [a.scores, a.scaled, a.masked, tr.layers[1].ln1.var, tr.layers[1].ln1.normalized, tr.logits, tr.probs]
    assert cache.bytes == before + sum(x.nbytes for x in extra) == nbytes(tr)
    a.scores  # noqa: B018  read again: cached on the trace, counted once
    assert cache.bytes == nbytes(tr)


def test_an_evicted_entry_reading_its_fields_changes_nothing():
    m = model()
    cache = BudgetCache(budget=1)  # only the newest entry stays
    old = cache.get("old", lambda: m.trace(IDS).numpy())
    new = cache.get("new", lambda: m.trace(IDS[:, :4]).numpy())
    assert len(cache) == 1 and cache.bytes == nbytes(new)
    old.probs  # noqa: B018  a session still rendering the evicted trace reads its probabilities
    assert len(cache) == 1 and cache.bytes == nbytes(new) and cache.get("new", lambda: None) is new


def test_an_evicted_trace_is_freed():
    """Nothing the cache sets up to follow a trace's derived fields keeps the trace alive once it
    has left the cache and its readers are done (a leak here kept every SmolLM2 trace of a load
    run: 13 GB after 600 reruns)."""
    m = model()
    cache = BudgetCache(budget=1)  # only the newest entry stays
    old = cache.get("old", lambda: m.trace(IDS).numpy())
    old.layers[0].attn.scores  # noqa: B018  one derived field read while cached, the others not
    gone = weakref.ref(old)
    cache.get("new", lambda: m.trace(IDS[:, :4]).numpy())  # evicts "old"
    del old
    gc.collect()
    assert gone() is None
    kept = weakref.ref(cache.get("new", lambda: None))
    gc.collect()
    assert kept() is not None  # the cached one stays


def test_a_cut_trace_counts_its_own_copy_only():
    m = model()
    batch = m.trace(torch.cat([IDS, IDS.flip(1), IDS.roll(1, 1)]))
    cut = unbatch(batch, 1, 8).numpy()
    alone = m.trace(IDS.flip(1)).numpy()
    # the cut holds its row: as many bytes as the sentence's own trace, not the batch's three
    # rows; except its position vectors, a copy of their 8 rows where the trace of its own forward
    # holds a view of the model's whole (max_len, D) table (counted whole, to be safe)
    assert Footprint(cut).bytes == nbytes(alone) - m.pe_table.nbytes + cut.embeddings.position.nbytes
    assert cut.embeddings.position.nbytes < m.pe_table.nbytes
