"""Sessions typing at the same moment into one server get their own sentence's attention, never a
neighbour's (issue 31: their traces may share one batched forward, model/batcher.py).

Eight sessions speak Streamlit's WebSocket protocol (benchmarks/stclient.py) to a real server with
one forward slot (ATTN_LAB_BATCH_SLOTS=1, so requests that arrive during a forward queue and share
the next one) and type, all at once, sentences of the same length made of different words. Each
session's heads grid must label its own tokens, and its first head's weights must be what the
engine gives for that sentence alone: bit for bit on SmolLM2 with the default exact batching
(which shares a forward only where this machine measured it bit for bit: model.batcher.ExactBatching),
within pad mode's bound (model.batcher.PAD_BOUND) on the default toy model told to pad
(ATTN_LAB_BATCH=pad)."""
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
from labels import token_labels
from model.batcher import PAD_BOUND
from model.checkpoint import load_checkpoint
from model.pretrained import PRETRAINED, load_pretrained

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


async def class_types(url: str, rounds: list[list[str]], query: str) -> list[list[dict]]:
    clients = [StClient(url, query=query, timeout=180) for _ in range(SESSIONS)]
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


def alone_weights(model, ids) -> np.ndarray:
    """Head 0 of layer 0 for this sentence traced alone, with the app's one torch thread
    (ui/runtime.py; two threads split the kernels elsewhere and move the last bits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return model.trace(torch.tensor([ids]), causal=True).layers[0].attn.weights[0, 0].numpy()
    finally:
        torch.set_num_threads(threads)


SMOL = PRETRAINED["smollm2-135m"]


@pytest.mark.parametrize("src,mode", [("", "pad"), ("smollm2-135m", "exact")])
def test_sessions_typing_at_once_get_their_own_trace(src, mode):
    if src and not SMOL.installed():
        pytest.skip(f"SKIPPED LOUDLY: {SMOL.package} is not installed; run {SMOL.install}")
    model, tok = load_pretrained(src) if src else load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    rng = random.Random(31)
    rounds = [[" ".join(["the"] + rng.sample(WORDS, 5)) for _ in range(SESSIONS)] for _ in range(ROUNDS)]
    n = len(tok.encode(rounds[0][0]).ids)
    with Server("app.py", env={"ATTN_LAB_BATCH_SLOTS": "1", "ATTN_LAB_BATCH": mode}) as s:
        got = run_async(class_types(s.url, rounds, f"src={src}" if src else ""))
    for sentences, results in zip(rounds, got):
        for text, res in zip(sentences, results):
            assert res["ok"], res["exceptions"]
            enc = tok.encode(text)
            assert len(enc.ids) == n  # one length: they may share a forward
            first = res["chart"]["data"][0]  # head 0 of layer 0, the panel that carries the labels
            assert list(first["x"]) == token_labels(enc.labels), (text, first["x"])  # escaped as the app does
            z = typed_array(first["z"]).reshape(n, n)
            alone = alone_weights(model, enc.ids)
            shown = np.isfinite(z)  # masked cells are blank (NaN)
            assert shown.sum() == n * (n + 1) // 2  # the causal triangle
            if mode == "exact":
                assert np.array_equal(z[shown], alone[shown]), text
            else:  # a batch of one length, not padded: the last bits move (model.batcher)
                np.testing.assert_allclose(z[shown], alone[shown], rtol=0, atol=PAD_BOUND, err_msg=text)
