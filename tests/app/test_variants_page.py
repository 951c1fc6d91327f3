"""AppTest of the Variants and KV-cache pages (issue 20): the heads drawn are the engine's, the
shuffle test separates no-positions from sinusoidal, the calculator's numbers are 2·L·H_kv·d·bytes,
and bad input gets a message, never a traceback."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch

from classroom import variants
from model.config import ModelConfig
from model.transformer import Transformer
from tests.helpers import fig_titled, app_test, decode, errors, figures
from ui import models, state


def start(page, **params):
    at = app_test(default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    for k, v in params.items():  # the first (home page) run keeps only the keys it binds in the URL
        at.query_params[k] = str(v)
    at.switch_page(f"pages/{page}.py").run()
    assert not errors(at), errors(at)
    return at


fig = fig_titled


def frame(at, column):
    for df in at.dataframe:
        v = df.value
        if column in v.columns:
            return v
    raise AssertionError(f"no table with column {column!r}")


def test_variants_page_heads_window_band_and_shuffle():
    at = start("variants", var_window=2)
    tok = models.fresh_tokenizer()
    enc = tok.encode(state.DEFAULT_TEXT)
    T = len(enc.ids)
    # sliding window w = 2, causal (the sidebar's default): a band i - 2 < j <= i, hand-made here
    f = fig(at, "Sliding window (w = 2)")
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    band = (j <= i) & (j > i - 2)
    for h, tr in enumerate(f["data"]):
        z = decode(tr["z"]).reshape(T, T)
        np.testing.assert_array_equal(~np.isnan(z), band)
        np.testing.assert_allclose(np.nansum(z, axis=1), 1.0, rtol=1e-5)
    # the sinusoidal heads are the engine's: a plain Transformer with the page's base config, seed 0
    cfg = ModelConfig(vocab_size=len(tok), max_len=variants.MAX_LEN, **asdict(variants.BASE))
    w = Transformer(cfg, seed=0).trace(torch.tensor([enc.ids]), causal=True).layers[0].attn.weights[0].numpy()
    for h, tr in enumerate(fig(at, "Sinusoidal positions")["data"]):
        np.testing.assert_allclose(np.nan_to_num(decode(tr["z"]).reshape(T, T)), w[h], atol=1e-6)
    # shuffle: no positions ~ 0 (float rounding), sinusoidal clearly not
    gaps = frame(at, "max |W_shuffled − P W Pᵀ|")["max |W_shuffled − P W Pᵀ|"]
    assert gaps["No positions"] < 1e-6
    assert gaps["Sinusoidal positions"] > 1e-2 and gaps["Learned positions"] > 1e-2
    assert gaps["Rotary (RoPE)"] > 1e-2 and gaps["ALiBi"] > 1e-2
    # MQA: every panel names K/V head 0
    titles = [a["text"] for a in fig(at, "Multi-query (MQA)")["layout"]["annotations"] if a["text"].startswith("head")]
    assert titles == [f"head {h} · K/V 0" for h in range(4)]


def test_variants_page_bad_window_and_too_large_window():
    at = start("variants", var_window=0)
    assert any("window of 0" in e.value for e in at.error)
    assert not [f for f in figures(at) if ((f["layout"].get("title") or {}).get("text") or "").startswith("Sliding")]
    at = start("variants", var_window=200)
    assert any("removes nothing" in i.value for i in at.info)
    big = fig(at, "Sliding window (w = 200)")["data"]
    plain = fig(at, "Sinusoidal positions")["data"]
    for a, b in zip(big, plain):  # the limit case: the window heads are the sinusoidal ones
        np.testing.assert_array_equal(decode(a["z"]), decode(b["z"]))


def test_kv_cache_page_smollm2_numbers():
    at = start("kv-cache", kv_preset="SmolLM2-135M", kv_dtype="fp32", kv_context=1000, kv_window=100)
    df = frame(at, "bytes per token")
    per = dict(zip(df["K/V heads"], df["bytes per token"]))
    assert per[3] == 2 * 30 * 3 * 64 * 4 == 46_080
    assert per[9] == 2 * 30 * 9 * 64 * 4 and per[1] == 2 * 30 * 1 * 64 * 4
    win = df[df.index.str.startswith("sliding window")]
    assert list(win["tokens cached"]) == [100]
    chart = fig(at, "KV cache for 1,000 tokens")
    want = [2 * 30 * 9 * 64 * 4 * 1000, 46_080 * 1000, 2 * 30 * 64 * 4 * 1000, 46_080 * 100]
    np.testing.assert_array_equal(decode(chart["data"][0]["customdata"]), want)
    # one unit for the axis and the bar labels (issue 33: the axis was in bytes, the labels in MiB)
    np.testing.assert_allclose(decode(chart["data"][0]["y"]), np.array(want) / 2**20)
    assert chart["layout"]["yaxis"]["title"]["text"] == "KV cache (MiB)"
    assert chart["data"][0]["text"][1] == "43.9 MiB"


def test_kv_cache_page_fp16_and_bad_input():
    at = start("kv-cache", kv_preset="GPT-2 small", kv_dtype="fp16 / bf16", kv_context=10)
    df = frame(at, "bytes per token")
    assert df["bytes per token"].iloc[0] == 2 * 12 * 12 * 64 * 2
    at = start("kv-cache", kv_preset="your own", kv_H=9, kv_Hkv=2)
    assert any("cannot be shared evenly" in e.value for e in at.error)
    at = start("kv-cache", kv_window=0, kv_context=0)
    msgs = " ".join(e.value for e in at.error)
    assert "window must be at least 1" in msgs and "context must be at least 1" in msgs
