"""A live class across server processes, in real Chromium: 2 replicas behind nginx
(deploy/replicas.py) sharing a Redis room store (a real redis-server, deploy/redis_local.py).

The lecturer's tab is on replica 0; students join through nginx (cookie stickiness spreads them
over both replicas), so a student on replica 1 follows a lecturer on replica 0. Then replica 1 is
killed mid-class (SIGKILL) while a poll is open and the lecturer types a new sentence: the students
who were on it reconnect through nginx (Streamlit's own reconnect) to replica 0 and follow again;
the room and its poll are still there. The seconds from the kill to each student showing the new
sentence are printed (the issue's budget: 10 s; the wait allows 60 s so a loaded machine does not
make the test flaky)."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.e2e.browser import Guard, exceptions, guarded_page, wait_idle
from tests.e2e.test_live_e2e import open_poll

pytestmark = pytest.mark.e2e

TICKS = "[data-testid=stPlotlyChart] g[class^=x][class$=tick] text"


def wait_tick(page, tick: str, timeout: float = 20_000) -> None:
    page.wait_for_function(f"(t) => [...document.querySelectorAll('{TICKS}')].some(e => e.textContent === t)",
                           arg=tick, timeout=timeout)


@pytest.fixture
def deployment(monkeypatch, tmp_path):
    from deploy import replicas as R
    from deploy.redis_local import LocalRedis, RedisUnavailable, find_redis
    try:
        R.find_nginx(install=False)
        find_redis()
    except (R.NginxUnavailable, RedisUnavailable) as exc:
        msg = f"NGINX OR REDIS MISSING - the live replica test did not run: {exc} (make system-deps)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    with LocalRedis() as red:
        monkeypatch.setenv("ROOM_STORE", red.url)  # inherited by the replicas (deploy.server.Server)
        with R.Deployment(replicas=2, log_dir=tmp_path) as d:  # replica-<i>.log: each server's console
            yield d


def test_students_follow_across_replicas_and_survive_a_killed_replica(deployment, browser):
    d = deployment
    r0, r1 = d.replicas
    with guarded_page(browser, 1280, 900) as lec:
        lec.goto(r0.url)
        wait_idle(lec)
        lec.get_by_role("button", name="Start a live class").click()
        wait_idle(lec)
        link = lec.locator('.st-key-live_card [data-testid="stCode"]').inner_text().strip()
        code = re.search(r"room=([A-Z0-9]{5})", link).group(1)
        box = lec.get_by_role("textbox", name="Sentence", exact=True)
        box.fill("the dog sat on the mat .")
        box.press("Enter")
        wait_idle(lec)

        students, where = [], []
        ctxs = []
        try:
            for _ in range(8):  # until at least one student is on each replica
                ctx = browser.new_context(viewport={"width": 1000, "height": 900})
                guard = Guard()
                ctx.route("**/*", guard.route)
                ctxs.append((ctx, guard))
                pg = ctx.new_page()
                resp = pg.goto(f"{d.url}/?room={code}")
                where.append(resp.headers.get("x-lab-replica", ""))
                students.append(pg)
                if len(set(where)) == 2 and len(students) >= 3:
                    break
            assert {f"127.0.0.1:{r0.port}", f"127.0.0.1:{r1.port}"} <= set(where), where
            for i, pg in enumerate(students):
                try:
                    wait_tick(pg, "2:dog", 60_000)  # followed the lecturer, whichever replica serves it
                except Exception as exc:  # noqa: BLE001  say which student, on which replica, saw what
                    seen = pg.locator('[data-testid="stApp"]').inner_text()[:600]
                    raise AssertionError(f"student {i} of {len(students)} (replica {where[i]}) did not follow "
                                         f"within 60 s; its page read: {seen!r}") from exc

            # a poll is open when the replica dies
            open_poll(lec)
            for i, pg in enumerate(students):
                try:  # (a loaded machine: each student's own check comes every 3 s)
                    pg.locator(".st-key-live_student_poll").wait_for(timeout=60_000)
                except Exception as exc:  # noqa: BLE001  say which student, on which replica, saw what
                    seen = pg.locator('[data-testid="stApp"]').inner_text()[:600]
                    raise AssertionError(f"student {i} of {len(students)} (replica {where[i]}) got no poll within "
                                         f"60 s; its page read: {seen!r}") from exc

            os.kill(r1.proc.pid, signal.SIGKILL)
            t0 = time.perf_counter()
            box.fill("a bird flew to the tree .")
            box.press("Enter")
            wait_idle(lec)
            took = []
            for pg, w in zip(students, where):
                wait_tick(pg, "2:bird", 60_000)
                took.append((w.endswith(str(r1.port)), time.perf_counter() - t0))
                pg.locator(".st-key-live_student_poll").wait_for(timeout=60_000)  # the poll survived
                assert pg.get_by_text(f"Following room {code}").count() == 1
                assert exceptions(pg) == 0
            moved = [t for on_dead, t in took if on_dead]
            print(f"\nkilled replica: {len(moved)} students reconnected and followed after "
                  f"{', '.join(f'{t:.1f}' for t in moved)} s; the others after "
                  f"{', '.join(f'{t:.1f}' for on_dead, t in took if not on_dead)} s")
            assert moved and exceptions(lec) == 0
        finally:
            for ctx, guard in ctxs:
                ctx.close()
                assert not guard.offsite, guard.offsite[:5]
