"""The room store's own cost per follower check (RoomStore.state with a check-in, what a follower's
watch does every 1-3 s), per backend, in one run: the in-memory test double, SQLite (the default, a
file in a temporary folder) and Redis (a local redis-server, when installed). Prints microseconds per
check (median of 5 rounds of 2,000 checks by 100 sessions) and the ratio to the in-memory double.

    .venv/bin/python -m benchmarks.bench_room_store
"""
from __future__ import annotations

import statistics
import tempfile
import time

from classroom.live import new_token, open_store, token_hash

CHECKS, ROUNDS, SESSIONS = 2000, 5, 100


def per_check_us(store) -> float:
    h = token_hash(new_token())
    store.create("BENCH", h)
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for i in range(CHECKS):
            store.state("BENCH", seen=f"{i % SESSIONS:016x}.f")
        times.append((time.perf_counter() - t0) / CHECKS * 1e6)
    store.close()
    return statistics.median(times)


def measure(quick: bool = False) -> dict[str, float]:
    """{backend: microseconds per check}: the in-memory double, SQLite (a fresh temporary file)
    and Redis (a local redis-server, when installed)."""
    global CHECKS
    if quick:
        CHECKS = 200
    us = {"memory": per_check_us(open_store("memory"))}
    with tempfile.TemporaryDirectory() as d:
        us["sqlite"] = per_check_us(open_store(f"sqlite://{d}/rooms.sqlite3"))
    try:
        from deploy.redis_local import LocalRedis
        with LocalRedis() as r:
            us["redis"] = per_check_us(open_store(r.url))
    except Exception as exc:  # noqa: BLE001  no redis-server here
        print(f"redis: not measured ({exc})")
    return us


def run(quick: bool = False) -> list[dict]:
    """Benchmark table rows (benchmarks/run_all.py): each backend's cost per follower check, and
    its ratio to the in-memory double (measured in the same run)."""
    us = measure(quick)
    return [dict(benchmark="room store, one follower check (state + check-in)", metric=f"{name} (µs)",
                 app=v, bare=us["memory"], ratio=v / us["memory"], target="(reported)", ok=None)
            for name, v in us.items()]


def main() -> None:
    us = measure()
    for name, v in us.items():
        print(f"{name:7s} {v:8.1f} µs per check  ({v / us['memory']:.1f}x the in-memory double)")


if __name__ == "__main__":
    main()
