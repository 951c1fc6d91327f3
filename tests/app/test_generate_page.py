"""The Generate page (issue 18 point 5): greedy steps equal an argmax loop over the model written
here, seeded sampling repeats, the p(x) table adds up, the KV cache size follows the formula, and
SmolLM2 completes "The capital of France is" with " Paris"."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.pretrained import PRETRAINED, load_pretrained
from tests.helpers import ROOT, app_test, errors

PAGE = "pages/generate.py"


def open_page(**params):
    at = app_test(default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at), errors(at)
    assert not at.error, [e.value for e in at.error]
    return at


def steps(at, n):
    for _ in range(n):
        at.button(key="gen_step").click().run()
        assert not errors(at), errors(at)
    return at


def table(at):
    return next(d.value for d in at.dataframe if "Σ log p so far" in d.value.columns)


def test_greedy_steps_on_the_toy_model_equal_an_argmax_loop_and_add_up():
    at = steps(open_page(gen_prompt="the cat sat on the"), 5)
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode("the cat sat on the").ids
    logps = []
    with torch.no_grad():
        for _ in range(5):
            logits = model(torch.tensor([ids]))[0, -1].double()
            nxt = int(logits.argmax())
            logps.append(float(torch.log_softmax(logits, -1)[nxt]))
            ids.append(nxt)
    t = table(at)
    assert list(t["token id"]) == ids[-5:]
    np.testing.assert_allclose(t["log p"], logps, atol=1e-5)
    assert t["Σ log p so far"].iloc[-1] == pytest.approx(sum(logps), abs=1e-4)
    # the KV cache after the 5th token holds every position: 2 × L × kv_heads × d_head × 4 B each
    cfg = model.cfg
    n_ctx = len(ids)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Positions cached (rows per layer)"] == str(n_ctx)
    assert metrics["Per token"] == f"{2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * 4:,} B"
    assert metrics["KV cache now"] == f"{2 * cfg.n_layers * cfg.kv_heads * cfg.d_k * 4 * n_ctx / 1024:,.1f} KiB"
    at.checkbox(key="gen_check").check().run()
    gap = [m.value for m in at.markdown if "with and without the cache" in m.value][0]
    assert float(gap.split("**")[1]) < 1e-5


def test_seeded_sampling_repeats_after_reset_and_stays_inside_top_k():
    at = open_page(gen_prompt="the cat sat on the", gen_strategy="sample", gen_topk=3, gen_temp=1.5, gen_seed=4)
    first = list(table(steps(at, 4))["token id"])
    at.button(key="gen_reset").click().run()
    again = list(table(steps(at, 4))["token id"])
    assert first == again
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode("the cat sat on the").ids
    with torch.no_grad():
        for tid in first:  # each sampled token is one of the 3 most likely at its step
            top3 = torch.topk(model(torch.tensor([ids]))[0, -1], 3).indices.tolist()
            assert tid in top3
            ids.append(tid)


def test_models_that_cannot_continue_text_say_why():
    at = open_page(src="masked-lm")
    assert any("fill in blanks" in i.value for i in at.info)
    if PRETRAINED["minilm-l6"].installed():
        at = open_page(src="minilm-l6")
        assert any("no output layer" in i.value for i in at.info)


def test_a_long_prompt_is_cut_with_a_notice():
    at = open_page(gen_prompt=" ".join(["the cat sat on the mat ."] * 20), gen_max=16)
    assert any("it was cut to the first" in w.value for w in at.warning)


@pytest.mark.skipif(not PRETRAINED["smollm2-135m"].installed(), reason="SmolLM2 package not installed")
def test_smollm2_says_paris():
    at = steps(open_page(src="smollm2-135m", gen_prompt="The capital of France is"), 1)
    t = table(at)
    assert t["token"].iloc[0] == "·Paris"
    assert math.exp(t["log p"].iloc[0]) == pytest.approx(t["p(x_t | x_<t)"].iloc[0], rel=1e-6)
    assert t["p(x_t | x_<t)"].iloc[0] > 0.5
    model, _ = load_pretrained("smollm2-135m")
    cfg = model.cfg
    assert {m.label: m.value for m in at.metric}["Per token"] == f"{2 * 30 * 3 * 64 * 4:,} B"


def test_cache_chart_appears_once_there_is_a_line_to_draw():
    """Before any step the KV-cache chart held one point on empty axes (screenshot audit): an info
    until the first generated token, the chart after it."""
    from tests.helpers import figures

    def titles(at):
        return [str(f["layout"].get("title", {}).get("text", "")) for f in figures(at)]
    at = open_page(gen_prompt="the cat sat on the")
    assert "KV cache size (float32)" not in titles(at)
    assert any("cache growing" in i.value for i in at.info)
    assert "KV cache size (float32)" in titles(steps(at, 1))


def next_chart(at):
    from tests.helpers import figures
    return next(f for f in figures(at) if str(f["layout"].get("title", {}).get("text", "")).startswith("Next token"))


def test_distribution_chart_shows_temperature_top_k_and_the_kept_set():
    """Issue 33 item 4: the chart always showed temperature 1. Now: the model's distribution, after
    the temperature, after top-k (renormalised), the kept set banded, each checked in numpy."""
    from tests.helpers import decode
    at = open_page(gen_prompt="the cat sat on the", gen_strategy="sample", gen_temp=0.5, gen_topk=3)
    fig = next_chart(at)
    assert [t["name"] for t in fig["data"]] == ["model (temperature 1)", "÷ temperature 0.5",
                                                "top-k 3, top-p off: kept, renormalised"]
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode("the cat sat on the").ids]))[0, -1].double().numpy()
    p = np.exp(logits - logits.max()); p /= p.sum()
    z = logits / 0.5
    pt = np.exp(z - z.max()); pt /= pt.sum()
    top = np.argsort(-p, kind="stable")[:10]
    keep = np.zeros_like(pt, dtype=bool); keep[np.argsort(-pt, kind="stable")[:3]] = True
    rule = np.where(keep, pt, 0) / pt[keep].sum()
    np.testing.assert_allclose(decode(fig["data"][0]["x"]), p[top], atol=1e-6)
    np.testing.assert_allclose(decode(fig["data"][1]["x"]), pt[top], atol=1e-6)
    np.testing.assert_allclose(decode(fig["data"][2]["x"]), rule[top], atol=1e-6)
    bands = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert len(bands) == 3 and [s["y0"] + 0.5 for s in bands] == [0, 1, 2]
    assert [a["text"] for a in fig["layout"]["annotations"]] == ["✕ top-k"] * 7
    assert any("keep **3 of" in c.value for c in at.caption)
    # top-p as well: of the top 3, the smallest prefix reaching 0.5 of their mass (the crossing token kept)
    at.slider(key="gen_topp").set_value(0.5).run()
    fig = next_chart(at)
    top3 = pt[np.argsort(-pt, kind="stable")[:3]]
    before = np.cumsum(top3) - top3
    n_p = int(max(1, (before < 0.5 * top3.sum()).sum()))
    assert len([s for s in fig["layout"]["shapes"] if s["type"] == "rect"]) == n_p
    assert [a["text"] for a in fig["layout"]["annotations"]].count("✕ top-p") == 3 - n_p


def test_greedy_distribution_chart_puts_everything_on_the_top_token():
    fig = next_chart(open_page(gen_prompt="the cat sat on the"))
    from tests.helpers import decode
    assert len(fig["data"]) == 2  # no temperature under greedy
    np.testing.assert_array_equal(decode(fig["data"][1]["x"])[:3], [1.0, 0.0, 0.0])
    assert [a["text"] for a in fig["layout"]["annotations"]] == ["✕ greedy"] * 9


def test_cache_chart_ticks_whole_positions_in_one_unit():
    """Issue 33: with a few points Plotly ticked the cache chart at 5.5 positions; its y axis was
    KiB beside metrics in other units."""
    from tests.helpers import figures
    at = steps(open_page(gen_prompt="the cat sat on the"), 2)
    fig = next(f for f in figures(at) if "KV cache size" in str(f["layout"].get("title", {}).get("text", "")))
    assert fig["layout"]["xaxis"]["dtick"] == 1 and fig["layout"]["xaxis"]["tickformat"] == "d"
    assert fig["layout"]["yaxis"]["title"]["text"] == "KiB"
