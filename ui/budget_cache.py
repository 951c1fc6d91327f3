"""A least-recently-used cache bounded by bytes, for traces shared between sessions.

`st.cache_resource(max_entries=...)` bounds a cache by count, but a trace's size varies 1,000-fold:
a toy model's 11-token trace is ~50 kB, SmolLM2-135M's is ~20 MB at 14 tokens and ~200 MB at 128.
Measured under load (benchmarks/ws_load.py --src smollm2-135m, 30 sessions with their own
sentences): 48 cached SmolLM2 traces took the server to 3.9 GB. This cache evicts the least recently
used entries once their arrays pass a byte budget (ATTN_LAB_TRACE_CACHE_MB, default 512), and
computes each key once even when many sessions ask for it at the same moment (a class opening the
same link). Values are read-only (numpy arrays with writeable=False), so sharing them is safe.

Bytes are counted once per entry when it is stored (Footprint: every distinct buffer once, whether
numpy's own or a torch tensor's memory seen through numpy), and then grow with the trace's derived
fields (model.trace.derived: logits, probabilities, scores, ... computed when a page first reads
them): the trace tells the footprint as each is computed (model.trace.on_derived), and the cache
evicts right then, so it stays within its budget without walking its entries again.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np
import torch

from model.trace import TraceNode, derived_slots, on_derived

DEFAULT_BUDGET_MB = 512


def _buffer(a: np.ndarray | torch.Tensor) -> tuple[tuple, int]:
    """(key, bytes) of the memory behind an array: numpy views of one array, and numpy arrays over
    one torch storage (a trace's `.numpy()`: fields sharing a tensor), share a key."""
    if isinstance(a, torch.Tensor):
        st = a.untyped_storage()
        return ("t", st.data_ptr()), st.nbytes()
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    if isinstance(base.base, torch.Tensor):
        return _buffer(base.base)
    return ("n", id(base)), base.nbytes


_ATOMS = frozenset({int, float, bool, str, bytes, complex})  # hold no buffer: not walked


class Footprint:
    """The bytes of every distinct buffer reachable from a value (dataclasses, lists, tuples,
    dicts), counted once; `grow(callback)` then keeps the count as the value's derived trace
    fields are computed, calling callback(added_bytes) each time. A derived field not computed
    yet is not computed by being counted. A dataclass may name fields that every value of a model
    shares (`FOOTPRINT_SHARED`, e.g. a run's vocabulary): they are not the entry's memory (evicting
    it frees none of it) and are not walked (SmolLM2's 49,152 labels were a sixth of a rerun)."""

    def __init__(self, obj: Any):
        self.seen: set[tuple] = set()
        self.bytes = 0
        self._nodes: list = []  # trace nodes with derived fields not computed yet
        self._walk(obj)

    def _walk(self, o: Any) -> None:
        if isinstance(o, (np.ndarray, torch.Tensor)):
            key, n = _buffer(o)
            if key not in self.seen:
                self.seen.add(key)
                self.bytes += n
        elif o is None or type(o) in _ATOMS:  # most values of a trace node that are not arrays
            return
        elif isinstance(o, TraceNode) or (dataclasses.is_dataclass(o) and not isinstance(o, type)):
            # (isinstance first: dataclasses.is_dataclass was the hottest line of this walk under load)
            d = vars(o)  # the instance's own values (a derived field in its slot, None until read)
            slots = derived_slots(type(o))
            if any(d.get(s) is None for s in slots):
                self._nodes.append(o)
            shared = getattr(type(o), "FOOTPRINT_SHARED", ())
            for k, x in d.items():
                if k not in shared:
                    self._walk(x)
        elif isinstance(o, (list, tuple)):
            for x in o:
                self._walk(x)
        elif isinstance(o, dict):
            for x in o.values():
                self._walk(x)

    def add(self, value: Any) -> int:
        """Count a newly computed value; returns the bytes it added (0 if already counted)."""
        before = self.bytes
        self._walk(value)
        return self.bytes - before

    def grow(self, callback: Callable[[Any], None]) -> None:
        """callback(value) each time a derived field of the counted value is computed."""
        for node in self._nodes:
            on_derived(node, callback)
        self._nodes = []


def nbytes(obj: Any) -> int:
    """Bytes of every distinct buffer reachable from obj (dataclasses, lists, tuples, dicts);
    views of one buffer count once."""
    return Footprint(obj).bytes


class BudgetCache:
    """get(key, make) -> make()'s value, cached; least recently used entries go first once the
    cached bytes pass `budget` or there are more than `max_entries`; the newest entry always
    stays, however big. keep_large: the most recently used entries that are each bigger than the
    whole budget (a long input's trace) stay too, up to this many, and are not counted against the
    budget while they stay: small entries still come and go within it. The cache then holds at most
    budget + keep_large such entries (+ the newest). Thread-safe; concurrent calls for one key wait for the first to compute it.
    `size`: a value's bytes when stored (default: its Footprint, which then follows its derived
    fields); a custom size is counted once."""

    def __init__(self, budget: int | None = None, max_entries: int = 48,
                 size: Callable[[Any], int] | None = None, keep_large: int = 0):
        mb = os.environ.get("ATTN_LAB_TRACE_CACHE_MB")
        self.budget = budget if budget is not None else int(float(mb or DEFAULT_BUDGET_MB) * 2**20)
        self.max_entries = max_entries
        self.keep_large = max(0, int(keep_large))
        self._size = size
        self._items: OrderedDict[Hashable, list] = OrderedDict()  # key -> [value, bytes, Footprint or None]
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Lock] = {}
        self.bytes = 0

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit[0]
            gate = self._pending.setdefault(key, threading.Lock())
        with gate:  # one computation per key; the others wait here, then find it cached
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
            try:
                value = make()
                fp = None if self._size is not None else Footprint(value)
                n = self._size(value) if fp is None else fp.bytes
            except BaseException:
                with self._lock:
                    self._pending.pop(key, None)
                raise
            with self._lock:
                self._pending.pop(key, None)
                self._items[key] = [value, n, fp]
                self.bytes += n
                gone = self._evict()
            del gone  # the evicted values are freed here, outside the lock (freeing a trace takes time)
            if fp is not None:
                # the callback holds the cache, the key and the footprint, never the value: the
                # trace's nodes keep it (model.trace.on_derived), and a callback that held the value
                # would keep every trace ever cached alive
                fp.grow(lambda v: self._grown(key, fp, v))
            return value

    def peek(self, key: Hashable) -> Any:
        """The cached value of key (now the most recently used), or None: nothing is computed."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def _grown(self, key: Hashable, fp: Footprint, value: Any) -> None:
        """A derived field of a cached value was computed (model.trace.on_derived): count it, and
        evict others if the cache is now over budget (the entry was just read: it counts as the
        most recently used). Nothing if the entry has left the cache."""
        gone = []
        with self._lock:
            added = fp.add(value)
            item = self._items.get(key)
            if added and item is not None and item[2] is fp:
                item[1] += added
                self.bytes += added
                self._items.move_to_end(key)
                gone = self._evict()
        del gone  # freed outside the lock

    def _evict(self) -> list:
        """Drop least recently used entries until within budget and count (caller holds the lock);
        returns the dropped values, for the caller to let go of once it has released the lock.
        The newest entry and the keep_large most recently used entries bigger than the budget stay
        (their bytes are not counted against the budget while they do)."""
        gone = []
        while len(self._items) > 1 and len(self._items) > self.max_entries:
            _, (v, m, _) = self._items.popitem(last=False)
            gone.append(v)
            self.bytes -= m
        if self.bytes <= self.budget:
            return gone
        large = [k for k in reversed(self._items) if self._items[k][1] > self.budget][: self.keep_large]
        kept = {next(reversed(self._items)), *large}
        counted = self.bytes - sum(self._items[k][1] for k in large)  # what is held against the budget
        for k in [k for k in self._items if k not in kept]:  # least recently used first
            if counted <= self.budget:
                break
            v, m, _ = self._items.pop(k)
            gone.append(v)
            self.bytes -= m
            counted -= m
        return gone

    def __contains__(self, key: Hashable) -> bool:
        """Whether key is cached (it does not count as a use)."""
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
