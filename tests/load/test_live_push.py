"""A live class's server reruns (ui.runtime.rerun_idle_sessions via ui/live._rerun_followers): the
lecturer's change reaches a follower on the same server without the follower's own check.

The students here speak Streamlit's protocol (benchmarks/stclient.py) and never send the follow
fragment's checks, which a browser sends every second: whatever they show of the lecturer's view,
the server pushed. A student exploring on its own gets no such run."""
from __future__ import annotations

import asyncio

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from benchmarks.bench_live import CODE_RE, PushbackWS, sentence_of
from benchmarks.stclient import StClient
from deploy.server import Server
from tests.load.test_stclient import run_async


async def pushed_run(c: StClient, seconds: float):
    """The next whole-page run the server starts by itself within `seconds` (None if none starts)."""
    if not isinstance(c.ws, PushbackWS):
        c.ws = PushbackWS(c.ws)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        try:
            raw = await asyncio.wait_for(c.ws.recv(), deadline - loop.time())
        except asyncio.TimeoutError:
            return None
        fm = ForwardMsg()
        fm.ParseFromString(raw)
        if fm.WhichOneof("type") == "new_session" and not fm.metadata.run.fragment_ids:
            c.ws.back.append(raw)  # StClient.receive reads the run from this message on
            return await c.receive()
    return None


@pytest.mark.e2e
def test_followers_get_the_lecturers_change_without_checking_and_explorers_do_not():
    async def drive(url: str) -> None:
        lec = StClient(url, timeout=120)
        await lec.connect()
        assert (await lec.rerun()).ok
        r = await lec.click("Start a live class")
        code = next(m.group(1) for t in r.markdown if (m := CODE_RE.search(t)))
        follower, explorer = (StClient(url, query=f"room={code}", timeout=120) for _ in range(2))
        for c in (follower, explorer):
            await c.connect()
            r = await c.rerun()
            assert r.ok and f"room={code}" in c.query, (r.exceptions, c.query)
        r = await explorer.click("Explore on my own")
        assert r.ok and "alone=true" in explorer.query, explorer.query
        before = sentence_of(explorer)
        for i in range(2):
            text = f"the lecturer pushes sentence {i} to the room ."
            lec.set_value("Sentence", text)
            assert (await lec.rerun()).ok
            r = await pushed_run(follower, 20)
            assert r is not None and r.ok, "no run reached the follower"
            assert sentence_of(follower) == text and "text=" in follower.query, (sentence_of(follower), follower.query)
        assert await pushed_run(explorer, 3) is None  # exploring alone: not rerun with the room
        assert sentence_of(explorer) == before
        for c in (lec, follower, explorer):
            await c.close()

    with Server("app.py", extra=["--client.showErrorDetails", "full"]) as s:
        run_async(drive(s.url))
