"""benchmarks/bench_live.py on a small class (5 protocol-level students, one server): every student
follows every new sentence (the Sentence box and the URL's text=), with no error; the rows the
README gets are all there. No timing is asserted (the full benchmark reports the times)."""
from __future__ import annotations

import pytest

from benchmarks import bench_live

pytestmark = pytest.mark.slow


def test_small_class_follows_every_sentence():
    # in a thread of its own: the browser tier's sync Playwright keeps an event loop running in the
    # main thread when the whole suite runs in one pytest process (asyncio.run would refuse)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        rows = ex.submit(bench_live.run, quick=True, students=5, rounds=2, idle_s=2).result()
    assert len(rows) == 6
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["the same, max (s)"]["target"].startswith("(reported; 0 missed, 0 errors)")
    p50 = by_metric["lecturer's new sentence -> student's page shows it, p50 (s)"]["app"]
    assert 0 < p50 <= by_metric["the same, p90 (s)"]["app"] <= by_metric["the same, max (s)"]["app"]
    assert by_metric["idle following: server CPU per student check (ms)"]["app"] > 0
    assert next(r["app"] for m, r in by_metric.items() if m.startswith("server CPU per change and student")) > 0
