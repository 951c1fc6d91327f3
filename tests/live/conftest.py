"""Fixtures of the live-class tests: each backend of the room store (SQLite, the default; the
in-memory test double; Redis), a real redis-server (Debian's package, started on a free port
with nothing saved to disk, stopped at the end) and the room store under test, once per backend.
Without redis-server the Redis cases are skipped with a banner in the summary, or fail under CI=true."""
from __future__ import annotations

import os
import time

import pytest

from classroom.live import open_store
from deploy.redis_local import LocalRedis, RedisUnavailable, find_redis


class FakeClock:
    """A clock the test moves by hand (starting at the real time: Redis scores stay sane)."""

    def __init__(self):
        self.t = time.time()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def redis_or_skip() -> None:
    try:
        find_redis()
    except RedisUnavailable as exc:
        msg = f"REDIS MISSING - the Redis store tests did not run: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def redis_server():
    redis_or_skip()
    with LocalRedis() as r:
        yield r


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture(autouse=True)
def _fresh_data_dir(tmp_path, monkeypatch):
    """Each test's default room store (SQLite under the data folder) is a file of its own, and the
    app's store cache (ui.live) starts empty: no room or per-client limit leaks between tests."""
    monkeypatch.setenv("ATTN_LAB_DATA_DIR", str(tmp_path / "data"))
    _forget_app_stores()
    yield
    _forget_app_stores()


def _forget_app_stores():
    import sys
    live = sys.modules.get("ui.live")
    if live is not None:
        with live._stores_lock:
            stores, live._stores = dict(live._stores), {}
        for s in stores.values():
            s.close()


@pytest.fixture(params=["sqlite", "memory", "redis"])
def backend(request, tmp_path):
    """The ROOM_STORE url of each backend: "" is the default (SQLite under ATTN_LAB_DATA_DIR, a
    fresh folder per test); the Redis database is emptied before each test."""
    if request.param == "sqlite":
        return ""
    if request.param == "memory":
        return "memory"
    r = request.getfixturevalue("redis_server")
    import redis
    redis.Redis.from_url(r.url).flushdb()
    return r.url


@pytest.fixture
def make_store(backend, clock):
    made = []

    def make(**kw):
        kw.setdefault("clock", clock)
        s = open_store(backend, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def store(make_store):
    return make_store()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missing = [r for r in terminalreporter.stats.get("skipped", []) if "REDIS MISSING" in str(getattr(r, "longrepr", ""))]
    if missing:
        terminalreporter.write_sep("!", f"{len(missing)} Redis tests SKIPPED: redis-server missing (make redis)",
                                   red=True, bold=True)
