"""A least-recently-used cache bounded by bytes, for traces shared between sessions.

`st.cache_resource(max_entries=...)` bounds a cache by count, but a trace's size varies 1,000-fold:
a toy model's 11-token trace is ~50 kB, SmolLM2-135M's is ~32 MB at 14 tokens and ~300 MB at 128.
Measured under load (benchmarks/ws_load.py --src smollm2-135m, 30 sessions with their own
sentences): 48 cached SmolLM2 traces took the server to 3.9 GB. This cache evicts the least recently
used entries once their arrays pass a byte budget (ATTN_LAB_TRACE_CACHE_MB, default 512), and
computes each key once even when many sessions ask for it at the same moment (a class opening the
same link). Values are read-only (numpy arrays with writeable=False), so sharing them is safe.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

DEFAULT_BUDGET_MB = 512


def nbytes(obj: Any) -> int:
    """Bytes of every distinct numpy buffer reachable from obj (dataclasses, lists, tuples, dicts);
    views of one buffer count once."""
    seen: set[int] = set()
    total = 0

    def walk(o: Any) -> None:
        nonlocal total
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in seen:
                seen.add(id(base))
                total += base.nbytes
        elif dataclasses.is_dataclass(o) and not isinstance(o, type):
            # the instance's own values: a field computed on first read (model.trace.derived) is
            # counted once computed, and is not computed by being counted
            for x in vars(o).values():
                walk(x)
        elif isinstance(o, (list, tuple)):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            for x in o.values():
                walk(x)

    walk(obj)
    return total


class BudgetCache:
    """get(key, make) -> make()'s value, cached; least recently used entries go first once the
    cached bytes pass `budget` (the newest entry always stays, however big) or there are more than
    `max_entries`. Thread-safe; concurrent calls for one key wait for the first to compute it."""

    def __init__(self, budget: int | None = None, max_entries: int = 48,
                 size: Callable[[Any], int] = nbytes):
        mb = os.environ.get("ATTN_LAB_TRACE_CACHE_MB")
        self.budget = budget if budget is not None else int(float(mb or DEFAULT_BUDGET_MB) * 2**20)
        self.max_entries = max_entries
        self._size = size
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Lock] = {}
        self.bytes = 0

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            else:
                gate = self._pending.setdefault(key, threading.Lock())
        if hit is not None:
            return self._recount(key, *hit)
        with gate:  # one computation per key; the others wait here, then find it cached
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
            try:
                value = make()
                n = self._size(value)
            except BaseException:
                with self._lock:
                    self._pending.pop(key, None)
                raise
            with self._lock:
                self._pending.pop(key, None)
                self._items[key] = (value, n)
                self.bytes += n
                self._evict()
            return value

    def _recount(self, key: Hashable, value: Any, counted: int) -> Any:
        """A hit: count the entry again. Fields computed on first read since it was cached (a
        trace's logits and probabilities, model.trace.derived) grow it after the fact; without
        this, the cache would hold more than its budget."""
        n = self._size(value)
        if n != counted:
            with self._lock:
                item = self._items.get(key)
                if item is not None and item[0] is value:
                    self._items[key] = (value, n)
                    self.bytes += n - item[1]
                    self._evict()
        return value

    def _evict(self) -> None:
        """Drop least recently used entries until within budget and count (caller holds the lock)."""
        while len(self._items) > 1 and (self.bytes > self.budget or len(self._items) > self.max_entries):
            _, (_, m) = self._items.popitem(last=False)
            self.bytes -= m

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
