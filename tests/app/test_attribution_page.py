"""The "Why this token?" page in AppTest, on the toy model (causal-lm), MiniLM and SmolLM2. The
numbers on its charts are checked against references computed here from the model's modules by
plain torch (each head's vector through the final norm with its scale frozen; the corrupted
prompt run with one head's output swapped, whole passes), never through classroom/attribution.py.
Patching runs in a background thread: the test reruns the page until the maps appear (an app
signal, not a fixed sleep)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint
from model.intervene import Intervention
from model.hooks import AttentionHook
from model.pretrained import PRETRAINED, load_pretrained
from tests.helpers import ROOT, all_text, app_test, decode, errors, figures
from ui.attribution import PAIRS

PAGE = "pages/attribution.py"
NAMES = PAIRS["Names (indirect object)"]


def open_page(src: str | None = None, **params):
    at = app_test(default_timeout=300)
    if src:
        at.query_params["src"] = src
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page(PAGE).run()
    assert not errors(at), errors(at)
    return at


def until_patched(at, limit_s: float = 900):
    """Rerun until the patching maps are drawn (or the page says why not)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        text = all_text(at)
        if "Metric: clean" in text or "cancelled" in text:
            return at
        time.sleep(0.5)
        at.run()
        assert not errors(at), errors(at)
    raise AssertionError("patching did not finish")


def chart(at, title_start: str) -> dict:
    for f in figures(at):
        t = ((f.get("layout") or {}).get("title") or {}).get("text", "")
        if t.startswith(title_start):
            return f
    raise AssertionError(f"no chart titled {title_start!r}: {[((f.get('layout') or {}).get('title') or {}).get('text') for f in figures(at)]}")


def z_of(fig: dict) -> np.ndarray:
    return decode(fig["data"][0]["z"]).astype(np.float64)


@torch.no_grad()
def head_shares(model, ids, target) -> np.ndarray:
    """(L, H) each head's output (its slice of the o_proj input times that slice of W_O) read
    through the final norm frozen at the last position, by the model's modules and plain torch."""
    seen = {}
    hooks = [b.attn.o_proj.register_forward_pre_hook(lambda m, a, l=l: seen.__setitem__(l, a[0]))
             for l, b in enumerate(model.blocks)]
    hooks.append(model.ln_f.register_forward_pre_hook(lambda m, a: seen.__setitem__("f", a[0])))
    try:
        model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    x = seen["f"][0, -1].double()
    ln = model.ln_f
    layer_norm = hasattr(ln, "bias")  # LayerNorm (the toy model); RMSNorm has no shift (SmolLM2)
    ms = x.var(unbiased=False) if layer_norm else (x * x).mean()
    u = ln.weight.double() / torch.sqrt(ms + ln.eps) * model.output_matrix[target].double()
    if layer_norm:  # centred
        u = u - u.mean()
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.zeros((L, H))
    for l, b in enumerate(model.blocks):
        z = seen[l][0, -1].double()
        W = b.attn.o_proj.weight.double()
        dv = z.shape[0] // H
        for h in range(H):
            out[l, h] = float((W[:, h * dv:(h + 1) * dv] @ z[h * dv:(h + 1) * dv]) @ u)
    return out


class Swap(AttentionHook):
    def __init__(self, head, z):
        self.head, self.z = head, z

    def heads(self, z, c):
        z = z.clone()
        z[:, self.head] = self.z[:, self.head]
        return z


@torch.no_grad()
def head_patch(model, clean, corrupt, target, foil, l, h) -> float:
    """The corrupted prompt traced whole with head h of layer l swapped for the clean run's."""
    def metric(tr):
        lg = tr.final[0, -1].double() @ model.output_matrix.double().T
        return float(lg[target] - lg[foil])
    tc, tx = model.trace(torch.tensor([clean])), model.trace(torch.tensor([corrupt]))
    swapped = model.trace(torch.tensor([corrupt]),
                          intervention=Intervention(hooks=((l, Swap(h, tc.layers[l].attn.heads)),)))
    return (metric(swapped) - metric(tx)) / (metric(tc) - metric(tx))


@pytest.fixture(scope="module")
def toy():
    return load_checkpoint(ROOT / "checkpoints" / "causal-lm")


TOY_CLEAN = "mary and john went to the bank . john gave a book to"
TOY_CORRUPT = "john and mary went to the bank . mary gave a book to"


def test_toy_model_page_numbers(toy):
    model, tok = toy
    at = open_page(attr_pair="Your own", attr_clean=TOY_CLEAN, attr_corrupt=TOY_CORRUPT)
    clean, corrupt = tok.encode(TOY_CLEAN).ids, tok.encode(TOY_CORRUPT).ids
    assert len(clean) == len(corrupt) and tok.unk_id not in clean
    target = int(at.selectbox(key="attr_target").value)
    foil = int(at.selectbox(key="attr_foil").value)
    lc = model(torch.tensor([clean]))[0, -1]
    assert target == int(lc.argmax())  # the default target: the model's top prediction
    np.testing.assert_allclose(z_of(chart(at, "Each head's share")), head_shares(model, clean, target), atol=1e-5)
    at = until_patched(at)
    assert "Metric: clean" in all_text(at)
    res = z_of(chart(at, "Residual stream patched"))
    first = next(i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b)
    assert res.shape == (model.cfg.n_layers, len(clean))
    assert (res[:, :first] == 0).all() and res[0, first] != 0
    heads = z_of(chart(at, "Heads patched"))
    for l, h in [(0, 0), (1, 2), tuple(np.unravel_index(np.argmax(np.abs(heads)), heads.shape))]:
        assert heads[l, h] == pytest.approx(head_patch(model, clean, corrupt, target, foil, int(l), int(h)), abs=1e-4)
    # everything is in the URL: prompts, target, foil
    other = next(int(i) for i in lc.topk(5).indices if int(i) not in (target, foil))
    at.selectbox(key="attr_foil").set_value(other).run()
    assert "attr_foil" in at.query_params and at.query_params["attr_clean"] == TOY_CLEAN
    # CSV downloads of every map
    assert len(at.get("download_button")) >= 4


def test_ready_pair_fills_both_prompts_and_the_link():
    at = open_page()
    at.selectbox(key="attr_pair").set_value("Fact (subject swapped)").run()
    assert not errors(at)
    assert at.text_input(key="attr_clean").value == PAIRS["Fact (subject swapped)"][0]
    assert at.query_params["attr_pair"] == "Fact (subject swapped)"
    assert at.query_params["attr_corrupt"] == PAIRS["Fact (subject swapped)"][1]


def test_prompts_of_different_lengths_are_explained():
    at = open_page(attr_pair="Your own", attr_clean="mary and john went to the bank",
                   attr_corrupt="mary went to the bank")
    assert "same number of tokens" in all_text(at)
    assert not [f for f in figures(at) if "Residual" in str(f)]


def test_minilm_says_there_is_no_output_layer():
    if not PRETRAINED["minilm-l6"].installed():
        pytest.skip("SKIPPED LOUDLY: MiniLM is not installed")
    at = open_page("minilm-l6")
    text = all_text(at)
    assert "no output layer" in text and "Its 6 layers end at hidden states of 384 numbers per token" in text
    assert not figures(at) or all("share" not in str(f) for f in figures(at))


def test_smollm2_names_pair():
    if not PRETRAINED["smollm2-135m"].installed():
        pytest.skip("SKIPPED LOUDLY: SmolLM2 is not installed")
    model, tok = load_pretrained("smollm2-135m")
    for clean, corrupt, _ in PAIRS.values():  # every ready pair fits SmolLM2 (same number of tokens)
        assert len(tok.encode(clean).ids) == len(tok.encode(corrupt).ids), clean
    at = open_page("smollm2-135m")
    assert at.selectbox(key="attr_target").format_func(at.selectbox(key="attr_target").value).startswith("·Mary")
    assert at.selectbox(key="attr_foil").format_func(at.selectbox(key="attr_foil").value).startswith("·John")
    ids = tok.encode(NAMES[0]).ids
    mary = tok.encode(" Mary").ids[-1]
    np.testing.assert_allclose(z_of(chart(at, "Each head's share")), head_shares(model, ids, mary), atol=1e-4)
    assert "30 layers each adding 9 heads" in all_text(at) and "RMSNorm" in all_text(at)
    at = until_patched(at)
    res = z_of(chart(at, "Residual stream patched"))
    assert res.shape == (30, len(ids)) and (res[:, 0] == 0).all()


def test_a_click_on_a_head_button_opens_that_head(toy):
    """The buttons name the heads with the largest shares (in size, from the engine's attribution);
    a click opens that head's attention and value-weighted attention."""
    model, tok = toy
    at = open_page(attr_pair="Your own", attr_clean=TOY_CLEAN, attr_corrupt=TOY_CORRUPT)
    target = int(at.selectbox(key="attr_target").value)
    shares = head_shares(model, tok.encode(TOY_CLEAN).ids, target)
    order = np.argsort(-np.abs(shares), axis=None)
    H = shares.shape[1]
    pills = at.button_group(key="attr_pick")
    shown = [getattr(o, "content", o) for o in pills.options]
    assert shown == [f"layer {i // H} · head {i % H}" for i in order[:6]], shown
    third = f"L{order[2] // H} H{order[2] % H}"
    pills.set_value(third).run()
    assert not errors(at) and at.session_state["attr_head"] == third
    assert chart(at, f"{third}: attention weights") and chart(at, f"{third}: weighted by what it moves")
    assert at.query_params["attr_head"] == third
