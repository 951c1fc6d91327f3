"""Fixtures of the live-class tests: a real redis-server (Debian's package, started on a free port
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


@pytest.fixture(params=["memory", "redis"])
def backend(request):
    """The ROOM_STORE url of each backend (the Redis database is emptied before each test)."""
    if request.param == "memory":
        return ""
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
