"""Sessions typing at the same moment into one server get their own sentence's attention, never a
neighbour's (issue 31: their traces may share one batched forward, model/batcher.py).

Eight sessions speak Streamlit's WebSocket protocol (benchmarks/stclient.py) to a real server with
one forward slot (ATTN_LAB_BATCH_SLOTS=1, so requests that arrive during a forward queue and share
the next one) and type, all at once, sentences of the same length (the default exact batching
shares a forward between sentences of one length) made of different words. Each session's heads
grid must label its own tokens, and its first head's weights must be bit for bit what the engine
gives for that sentence alone."""
from __future__ import annotations

import asyncio
import base64
import json
import random

import numpy as np
import pytest
import torch

from benchmarks.stclient import StClient
from deploy.server import ROOT, Server
from model.checkpoint import load_checkpoint

pytestmark = pytest.mark.e2e

SESSIONS, ROUNDS = 8, 3
WORDS = ["cat", "dog", "bird", "king", "queen", "river", "table", "tree", "box", "bank", "garden", "house"]


def run_async(coro):
    """asyncio.run in a fresh thread (as tests/load/test_load_small.py)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def typed_array(v) -> np.ndarray:
    """A figure's numpy data as Streamlit sends it ({"dtype", "bdata", "shape"}), or a plain list."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(x) for x in str(v["shape"]).split(",")]) if "shape" in v else a
    return np.asarray(v, dtype=float)


async def class_types(url: str, rounds: list[list[str]]) -> list[list[dict]]:
    clients = [StClient(url, timeout=120) for _ in range(SESSIONS)]
    for c in clients:
        await c.connect()
        r = await c.rerun()
        assert r.ok, r.exceptions
    out = []
    try:
        for sentences in rounds:
            results = await asyncio.gather(*(c.set_widget("Sentence", s) for c, s in zip(clients, sentences)))
            out.append([{"ok": r.ok, "exceptions": r.exceptions, "chart": json.loads(r.charts[0]) if r.charts else None}
                        for r in results])
    finally:
        for c in clients:
            await c.close()
    return out


def test_sessions_typing_at_once_get_their_own_trace():
    rng = random.Random(31)
    rounds = [[" ".join(["the"] + rng.sample(WORDS, 5)) for _ in range(SESSIONS)] for _ in range(ROUNDS)]
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")  # the app's default model
    with Server("app.py", env={"ATTN_LAB_BATCH_SLOTS": "1"}) as s:
        got = run_async(class_types(s.url, rounds))
    for sentences, results in zip(rounds, got):
        for text, res in zip(sentences, results):
            assert res["ok"], res["exceptions"]
            enc = tok.encode(text)
            assert len(enc.ids) == 7  # one length: they may share a forward
            first = res["chart"]["data"][0]  # head 0 of layer 0, the panel that carries the labels
            assert list(first["x"]) == [f"{i}:{lab}" for i, lab in enumerate(enc.labels)], (text, first["x"])
            z = typed_array(first["z"]).reshape(7, 7)
            alone = model.trace(torch.tensor([enc.ids]), causal=True).layers[0].attn.weights[0, 0].numpy()
            shown = np.isfinite(z)  # masked cells are blank (NaN)
            assert shown.sum() == 28  # the causal triangle
            assert np.array_equal(z[shown], alone[shown]), text
