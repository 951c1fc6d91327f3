"""ui/budget_cache.py: traces shared by sessions are evicted by bytes, least recently used first, and
one key is computed once however many sessions ask for it at the same moment."""
import threading
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ui.budget_cache import BudgetCache, nbytes


@dataclass
class Fake:
    a: np.ndarray
    parts: list


def test_nbytes_counts_each_buffer_once():
    x = np.zeros((4, 8), dtype=np.float32)  # 128 bytes
    y = np.ones(10, dtype=np.float64)  # 80 bytes
    v = x[1:]  # a view of x: not counted again
    assert nbytes(Fake(x, [v, {"y": y}, (y,), None, "text", 3])) == 128 + 80


def test_nbytes_walks_dict_values():
    """A buffer reached only through a dict's values (a trace's per-layer dicts) is the entry's memory."""
    x = np.zeros(16, dtype=np.float32)  # 64 bytes
    y = np.zeros(5, dtype=np.float64)  # 40 bytes
    assert nbytes({"x": x}) == 64
    assert nbytes(Fake(np.zeros(3, dtype=np.uint8), [{"x": x, "inner": {"y": y, "again": x[2:]}}])) == 3 + 64 + 40
    c = BudgetCache(budget=100, max_entries=10)
    c.get("a", lambda: {"x": np.zeros(60, dtype=np.uint8)})
    c.get("b", lambda: {"x": np.zeros(60, dtype=np.uint8)})  # 120 bytes > 100: "a" goes
    assert "a" not in c and "b" in c


@dataclass
class WithShared:
    own: np.ndarray
    table: np.ndarray  # the model's, shared by every entry
    FOOTPRINT_SHARED: ClassVar[tuple[str, ...]] = ("table",)


def test_shared_fields_are_not_the_entrys_bytes():
    """A field every entry of a model shares (a run's vocabulary, config) is not counted (evicting
    the entry frees none of it) nor walked; the others are."""
    table = np.zeros(1000, dtype=np.uint8)
    assert nbytes(WithShared(np.zeros(10, dtype=np.uint8), table)) == 10
    assert nbytes(Fake(np.zeros(10, dtype=np.uint8), [WithShared(table[:0], table)])) == 10 + 1000  # its own, via `own`
    from ui.runs import Run
    assert set(Run.FOOTPRINT_SHARED) == {"cfg", "vocab", "source"}


def test_evicts_least_recently_used_past_the_budget():
    c = BudgetCache(budget=250, max_entries=10)
    mk = lambda n: (lambda: np.zeros(n, dtype=np.uint8))  # noqa: E731
    c.get("a", mk(100)), c.get("b", mk(100))
    assert len(c) == 2 and c.bytes == 200
    c.get("a", mk(100))  # a is now the most recent
    c.get("c", mk(100))  # 300 > 250: b (least recent) goes
    assert len(c) == 2 and c.bytes == 200
    calls = []
    c.get("a", lambda: calls.append("a") or np.zeros(100, dtype=np.uint8))
    c.get("b", lambda: calls.append("b") or np.zeros(100, dtype=np.uint8))
    assert calls == ["b"]  # a was kept, b was recomputed
    big = c.get("huge", mk(10_000))  # bigger than the budget: kept alone (the newest always stays)
    assert len(c) == 1 and c.bytes == 10_000 and big.size == 10_000


def test_keep_large_holds_two_long_traces_outside_the_budget():
    """keep_large=2 (the app's trace cache): the two most recently used entries bigger than the
    budget stay, while small entries still come and go within the budget."""
    c = BudgetCache(budget=250, max_entries=10, keep_large=2)
    mk = lambda n: (lambda: np.zeros(n, dtype=np.uint8))  # noqa: E731
    c.get("small", mk(10))
    c.get("causal", mk(1_000)), c.get("bidirectional", mk(2_000))  # each over the budget alone
    assert list(c._items) == ["small", "causal", "bidirectional"] and c.bytes == 3_010
    for k in "abc":  # a page's small entries: within the budget, beside the two big ones
        c.get(k, mk(100))
    assert list(c._items) == ["causal", "bidirectional", "b", "c"] and c.bytes == 3_200
    assert c.get("causal", lambda: pytest.fail("recomputed")) is not None  # the next page finds it
    c.get("long", mk(1_500))  # a third big entry: the least recently used big one goes
    assert list(c._items) == ["b", "c", "causal", "long"] and c.bytes == 2_700
    one = BudgetCache(budget=250, max_entries=10)  # the default: only the newest stays past the budget
    one.get("causal", mk(1_000)), one.get("x", mk(10))
    assert list(one._items) == ["x"]
    d = BudgetCache(budget=10**9, max_entries=1, keep_large=2)  # max_entries still wins
    d.get("a", mk(1)), d.get("b", mk(1))
    assert list(d._items) == ["b"]
    from ui.runs import TRACES
    assert TRACES.keep_large == 2


def test_max_entries_still_bounds_the_count():
    c = BudgetCache(budget=10**9, max_entries=3)
    for k in range(5):
        c.get(k, lambda: np.zeros(1))
    assert len(c) == 3


def test_one_computation_per_key_under_concurrency():
    c = BudgetCache(budget=10**9)
    calls = []

    def make():
        calls.append(1)
        time.sleep(0.2)
        return np.zeros(3)

    out = []
    threads = [threading.Thread(target=lambda: out.append(c.get("same", make))) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(calls) == 1 and len(out) == 8 and all(o is out[0] for o in out)


def test_a_failed_computation_is_not_cached():
    c = BudgetCache(budget=10**9)

    def boom():
        raise ValueError("bad input")

    for _ in range(2):
        try:
            c.get("k", boom)
        except ValueError:
            pass
    assert len(c) == 0 and c.get("k", lambda: np.zeros(2)).size == 2


def test_env_sets_the_budget(monkeypatch):
    monkeypatch.setenv("ATTN_LAB_TRACE_CACHE_MB", "64")
    assert BudgetCache().budget == 64 * 2**20
