"""The live class's limits per client, through the project's own nginx (deploy/replicas.py), from two
client addresses on loopback (127.0.0.1 and 127.0.0.2: nginx sees each as itself and appends it to
X-Forwarded-For; the replica trusts that entry only with nginx's secret header).

- at most 5 rooms started per client in 10 minutes: the sixth is refused in words that say when to
  try again; the other client still starts one; a forged X-Forwarded-For does not make a new client;
- at most 20 wrong codes per client per minute: the 21st attempt is refused before any look-up, the
  other client still joins a class;
- a client talking to a replica directly cannot claim another address (no secret header).
Sessions speak Streamlit's own protocol (benchmarks/stclient.py). Without nginx: skipped with a
banner, or failed under CI=true (tests/deploy/conftest.py)."""
from __future__ import annotations

import os
import re

import pytest

from benchmarks.stclient import StClient
from deploy import replicas as R
from tests.deploy.test_proxy import run_async

pytestmark = pytest.mark.e2e

A, B = "127.0.0.1", "127.0.0.2"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    try:
        R.find_nginx()
    except R.NginxUnavailable as exc:
        msg = (f"NGINX MISSING - the proxy tests did not run: {exc}. "
               "Install it with `make system-deps` (as root) or `sudo apt-get install -y nginx`.")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    old = os.environ.get("ATTN_LAB_DATA_DIR")
    os.environ["ATTN_LAB_DATA_DIR"] = str(tmp_path_factory.mktemp("limits-data"))  # a fresh room store
    try:
        with R.Deployment(replicas=1) as d:
            yield d
    finally:
        if old is None:
            os.environ.pop("ATTN_LAB_DATA_DIR", None)
        else:
            os.environ["ATTN_LAB_DATA_DIR"] = old


async def start_class(url: str, source: str, headers: dict | None = None) -> list[str]:
    """One fresh session presses "Start a live class": the alerts of that run."""
    async with StClient(url, page="", timeout=180, source=source, headers=headers) as c:
        r = await c.rerun()
        assert r.ok, r.exceptions[:1]
        r = await c.click("Start a live class")
        assert r.ok, r.exceptions[:1]
        started = any("Join the class with the code" in m for m in r.markdown)
        return (["started"] if started else []) + r.alerts


def test_rooms_started_per_client(deployment):
    async def main():
        url = deployment.url
        firsts = [await start_class(url, A) for _ in range(5)]
        sixth = await start_class(url, A)
        forged = await start_class(url, A, headers={"X-Forwarded-For": "10.20.30.40",
                                                    "X-Attention-Lab-Proxy": "guessed"})
        other = await start_class(url, B)
        direct = await start_class(deployment.replicas[0].url, B, headers={"X-Forwarded-For": "127.0.0.1"})
        return firsts, sixth, forged, other, direct

    firsts, sixth, forged, other, direct = run_async(main())
    assert all(f[:1] == ["started"] for f in firsts), firsts
    refused = [a for a in sixth if "started 5 live classes" in a]
    assert "started" not in sixth and refused, sixth
    assert re.search(r"Try again in (9|10) minutes", refused[0]), refused[0]
    assert "started" not in forged and any("started 5 live classes" in a for a in forged), forged
    assert other[:1] == ["started"], other  # another address is not touched
    # straight to the replica (no nginx, no secret): its own address counts (127.0.0.2, one room so far)
    assert direct[:1] == ["started"], direct


def test_wrong_codes_per_client(deployment):
    async def main():
        url = deployment.url
        lec = StClient(url, page="", timeout=180, source="127.0.0.3")  # a real class, from a third address
        await lec.connect()
        await lec.rerun()
        r = await lec.click("Start a live class")
        code = next(m for m in r.markdown if re.fullmatch(r"[A-Z2-9]{5}", m.strip())).strip()
        said = []
        async with StClient(url, page="", timeout=180, source=A) as c:
            for i in range(21):
                c.query = f"room=ZZZ{'23456789ABCDEFGHJKMNPQRSTUVWXY'[i]}Z"
                said.append((await c.rerun()).alerts)
            c.query = f"room={code}"  # even the right code waits now: guessing is what is refused
            right_a = (await c.rerun()).alerts
        async with StClient(url, page="", timeout=180, source=B, query=f"room={code}") as c:
            r = await c.rerun()
            joined_b = [m for m in r.alerts if f"Following room {code}" in m]
        await lec.close()
        return code, said, right_a, joined_b

    code, said, right_a, joined_b = run_async(main())
    assert all(any("No live class has the code" in a for a in s) for s in said[:20]), said[:20]
    last = [a for a in said[20] if "Too many wrong class codes" in a]
    assert last and re.search(r"Try again in \d+ seconds", last[0]) and not any("No live class" in a for a in said[20])
    assert any("Too many wrong class codes" in a for a in right_a), right_a
    assert joined_b, f"the other address could not join {code}"
