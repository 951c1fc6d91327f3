"""model/hooks.py: the attention layer's variants and interventions as hook objects called at fixed
points. Each hook class against a reference written here in numpy (never the engine's own helper
it calls), the dispatch (which points a class is called at, in what order), and a hook class
defined in this file plugging into the one forward without any change to it."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.generate import CachedKV, KVSink
from model.hooks import AttentionCall, AttentionHook, HookSet, PassContext
from model.intervene import EditedRows, HeadAblation, Intervention
from model.layers import (AdditiveScore, AlibiBias, MultiHeadAttention, Rotary, SlidingWindow,
                          attention_variants)

G = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G)


def call(allowed=None, scale=1.0, t_q=0, t_k=0, layer=None, rope=None) -> AttentionCall:
    c = AttentionCall(layer, rope, allowed, scale)
    c.t_q, c.t_k = t_q, t_k
    return c


def np_softmax_rows(x: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    x = np.where(allowed, x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_rotate(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Rotary positions as complex multiplication: pair (i, i + d/2) is the complex number
    x_i + i x_{i+d/2}, turned by the angle position * theta^(-2i/d)."""
    d = x.shape[-1]
    freq = theta ** (-np.arange(0, d, 2) / d)  # (d/2,)
    z = (x[..., : d // 2] + 1j * x[..., d // 2:]) * np.exp(1j * positions[:, None] * freq)  # (..., T, d/2)
    return np.concatenate([z.real, z.imag], -1)


# ---- variants -----------------------------------------------------------------------------------

@pytest.mark.parametrize("start", [0, 5])
def test_rotary_turns_q_and_k_by_their_positions(start):
    from model.layers import rope_tables
    q, k = randn(2, 3, 4, 8), randn(2, 1, 4, 8)
    c = call(rope=None if start == 0 else rope_tables(torch.arange(start, start + 4), 8, 500.0))
    q2, k2 = Rotary(8, 500.0).qk(q, k, c)
    pos = np.arange(start, start + 4, dtype=np.float64)
    np.testing.assert_allclose(q2.numpy(), np_rotate(q.double().numpy(), pos, 500.0), atol=1e-5)
    np.testing.assert_allclose(k2.numpy(), np_rotate(k.double().numpy(), pos, 500.0), atol=1e-5)
    assert c.fields["q_pre_rope"] is q and c.fields["k_pre_rope"] is k


@pytest.mark.parametrize("t_q,t_k,window", [(6, 6, 2), (6, 6, 1), (2, 7, 3), (5, 5, 9)])
def test_sliding_window_ands_its_band_into_the_mask(t_q, t_k, window):
    prior = torch.rand(2, 1, t_q, t_k, generator=G) > 0.3  # some mask already there
    c = call(allowed=prior, t_q=t_q, t_k=t_k)
    SlidingWindow(window).scores(c)
    i = np.arange(t_k - t_q, t_k)[:, None]  # the query rows sit at the last t_q positions
    band = np.abs(i - np.arange(t_k)[None]) < window
    np.testing.assert_array_equal(c.fields["band"].numpy(), band)
    np.testing.assert_array_equal(c.allowed.numpy(), prior.numpy() & band)
    c0 = call(allowed=None, t_q=t_q, t_k=t_k)  # nothing masked before: the band alone
    SlidingWindow(window).scores(c0)
    np.testing.assert_array_equal(c0.allowed.numpy(), band)


@pytest.mark.parametrize("H,slopes", [(4, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]),
                                      (6, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])])
def test_alibi_adds_minus_slope_times_distance(H, slopes):
    c = call(t_q=2, t_k=5)
    c.add_bias(torch.full((H, 2, 5), 0.25))  # a bias already there is kept and added to
    AlibiBias(H).scores(c)
    dist = np.abs(np.arange(3, 5)[:, None] - np.arange(5)[None])  # rows at positions 3 and 4
    want = 0.25 - np.asarray(slopes)[:, None, None] * dist[None]
    np.testing.assert_allclose(c.bias.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(c.fields["alibi_slopes"].numpy(), slopes, rtol=1e-6)


def test_additive_score_registers_its_parameters_and_replaces_q_dot_k():
    cfg = ModelConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=1, attn_score="additive")
    mha = MultiHeadAttention(cfg)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=G) * 0.5)
    assert [n for n, _ in mha.named_parameters()][:3] == ["add_wq", "add_wk", "add_v"]
    c = call(layer=mha, scale=0.25)
    AdditiveScore(2, 8).scores(c)
    assert c.scale == 1.0 and c.energy_weights[0] is mha.add_wq and c.energy_weights[2] is mha.add_v
    x = randn(1, 4, 16)
    with torch.no_grad():
        _, tr = mha(x, allowed=torch.ones(4, 4, dtype=torch.bool).tril())
    P = {n: p.detach().double().numpy() for n, p in mha.named_parameters()}
    xd = x[0].double().numpy()
    q = (xd @ P["q_proj.weight"].T + P["q_proj.bias"]).reshape(4, 2, 8).transpose(1, 0, 2)
    k = (xd @ P["k_proj.weight"].T + P["k_proj.bias"]).reshape(4, 2, 8).transpose(1, 0, 2)
    e = np.einsum("hija,ha->hij", np.tanh((q @ P["add_wq"])[:, :, None] + (k @ P["add_wk"])[:, None]), P["add_v"])
    w = np_softmax_rows(e, np.tril(np.ones((4, 4), bool)))
    np.testing.assert_allclose(tr.weights[0].numpy(), w, atol=1e-5)
    np.testing.assert_allclose(tr.energies[0].numpy(), e, atol=1e-5)


def test_variants_are_chosen_once_from_the_config():
    names = lambda cfg, **kw: [type(h).__name__ for h in attention_variants(cfg, **kw)]
    assert names(ModelConfig()) == []
    full = ModelConfig(pos_encoding="rope", window=3, alibi=True, attn_score="additive")
    assert names(full) == ["Rotary", "SlidingWindow", "AlibiBias", "AdditiveScore"]
    assert names(full, cross=True) == ["AdditiveScore"]  # cross-attention: no positional variants
    mha = MultiHeadAttention(full)
    assert [type(h).__name__ for h in mha.variants.scores] == ["SlidingWindow", "AlibiBias", "AdditiveScore"]
    assert [type(h).__name__ for h in mha.variants.qk] == ["Rotary"] and mha.variants.heads == ()


# ---- interventions ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["zero", "mean"])
@pytest.mark.parametrize("per_row", [False, True])
def test_head_ablation_replaces_the_switched_off_heads(mode, per_row):
    z = randn(3, 4, 5, 2)  # (B, H, Tq, d_v)
    keep = torch.tensor([[1.0, 0, 1, 1], [1, 1, 1, 0], [0, 0, 1, 1]]) if per_row else torch.tensor([1.0, 0, 1, 0])
    c = call()
    out = HeadAblation(keep, mode).heads(z, c).numpy()
    zn, kn = z.numpy(), np.broadcast_to(keep.numpy(), (3, 4))
    for b in range(3):
        for h in range(4):
            want = zn[b, h] if kn[b, h] else (np.zeros_like(zn[b, h]) if mode == "zero"
                                                 else np.broadcast_to(zn[b, h].mean(0), zn[b, h].shape))
            np.testing.assert_allclose(out[b, h], want, atol=1e-7)
    assert c.fields["ablated"].tolist() == ((keep == 0).tolist() if per_row else [(keep == 0).tolist()])
    with pytest.raises(ValueError, match="mode"):
        HeadAblation(keep, "half")


def test_head_ablation_without_heads_changes_nothing_and_says_so():
    z, c = randn(1, 3, 4, 2), call()
    assert torch.equal(HeadAblation(None).heads(z, c), z)
    assert c.fields["ablated"].tolist() == [[False, False, False]]


def test_edited_rows_replace_renormalised_rows_and_respect_the_mask():
    w = torch.softmax(randn(2, 3, 4, 4), -1)
    w0 = w.clone()
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()
    new = EditedRows(((1, 3, [2.0, 0.0, 1.0, 1.0]), (2, 1, [0.0, 5.0, 0.0, 0.0]))).weights(w, call(allowed=allowed))
    want = w.numpy().copy()
    want[:, 1, 3] = [0.5, 0.0, 0.25, 0.25]
    want[:, 2, 1] = [0.0, 1.0, 0.0, 0.0]
    np.testing.assert_allclose(new.numpy(), want, atol=1e-7)
    assert torch.equal(w, w0)  # the weights it was given are not written to
    with pytest.raises(ValueError, match="masked"):
        EditedRows(((0, 1, [0.0, 1.0, 1.0, 0.0]),)).weights(w, call(allowed=allowed))  # key 2 > query 1
    with pytest.raises(ValueError, match="sums to 0"):
        EditedRows(((0, 1, [0.0, 0.0, 0.0, 0.0]),)).weights(w, call(allowed=allowed))


def test_an_intervention_gives_each_layer_its_hooks():
    iv = Intervention(ablate=((1, 2),), edit_rows=((0, 1, 2, [1, 1, 0]),), mode="mean")
    assert [type(h).__name__ for h in iv.layer_hooks(0, 4)] == ["EditedRows", "HeadAblation"]
    assert [type(h).__name__ for h in iv.layer_hooks(1, 4)] == ["HeadAblation"]
    assert iv.layer_hooks(2, 4) == ()
    l1 = iv.layer_hooks(1, 4)[0]
    assert l1.keep.tolist() == [1, 1, 0, 1] and l1.mode == "mean"
    assert iv.layer_hooks(0, 4)[1].keep is None  # edits only: no head switched off
    with pytest.raises(ValueError, match="layer 5"):
        Intervention(hooks=((5, HeadAblation(None)),)).check(3, 4)
    with pytest.raises(ValueError, match="AttentionHook"):
        Intervention(hooks=((0, "not a hook"),)).check(3, 4)


# ---- the KV cache as hooks ----------------------------------------------------------------------

def test_cached_kv_goes_in_front_and_the_sink_collects_the_context():
    past_k, past_v, k, v = randn(1, 2, 3, 4), randn(1, 2, 3, 5), randn(1, 2, 1, 4), randn(1, 2, 1, 5)
    k2, v2 = CachedKV(past_k, past_v).kv(k, v, call())
    np.testing.assert_array_equal(k2.numpy(), np.concatenate([past_k.numpy(), k.numpy()], axis=2))
    np.testing.assert_array_equal(v2.numpy(), np.concatenate([past_v.numpy(), v.numpy()], axis=2))
    out: list = []
    assert KVSink(out).kv(k2, v2, call()) == (k2, v2) and out == [(k2, v2)]


# ---- the dispatch ------------------------------------------------------------------------------

class Log(AttentionHook):
    """Records the order it is called in, at the points it overrides (qk, scores, heads)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def qk(self, q, k, c):
        self.log.append(("qk", self.name))
        return q, k

    def scores(self, c):
        self.log.append(("scores", self.name))

    def heads(self, z, c):
        self.log.append(("heads", self.name))
        return z


def test_hooks_run_at_their_points_in_order_variants_first():
    log: list = []
    a, b = Log("a", log), Log("b", log)
    hs = HookSet((a,)).plus((b, HeadAblation(None)))
    assert hs.qk == (a, b) and hs.kv == () and hs.weights == () and hs.heads[:2] == (a, b)
    assert HookSet((a,)).plus(()).all == (a,)
    with pytest.raises(ValueError, match="AttentionHook"):
        HookSet((a, object()))
    mha = MultiHeadAttention(ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1))
    mha.variants = HookSet((a,))  # on a layer of this test's own: never a shared model
    mha(randn(1, 3, 8), ctx=PassContext(hooks=(b,)))
    assert log == [("qk", "a"), ("qk", "b"), ("scores", "a"), ("scores", "b"), ("heads", "a"), ("heads", "b")]


# ---- a new kind is one class --------------------------------------------------------------------

class SoftCap(AttentionHook):
    """Gemma 2's attention soft-capping, written here as a test would add a new family: the
    scaled scores become cap * tanh(x / cap) before the mask. One class; the forward is unchanged."""

    def __init__(self, cap: float):
        self.cap = cap

    def scores(self, c):
        c.maps.append(lambda x: self.cap * torch.tanh(x / self.cap))


class DoubleHead(AttentionHook):
    """A new intervention: head h's output doubled (a heads-point hook)."""

    def __init__(self, head: int):
        self.head = head

    def heads(self, z, c):
        z = z.clone()
        z[:, self.head] *= 2
        return z


class LookAtFirst(AttentionHook):
    """A new intervention at the weights point: every query of head h attends to key 0 only."""

    def __init__(self, head: int):
        self.head = head

    def weights(self, w, c):
        w = w.clone()
        w[:, self.head] = 0.0
        w[:, self.head, :, 0] = 1.0
        return w


@pytest.fixture(scope="module")
def model():
    return Transformer(ModelConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=2, max_len=16), seed=5)


IDS = torch.tensor([[3, 9, 4, 17, 4, 20]])


def test_a_new_score_hook_plugs_in_as_a_pass_hook(model):
    cap = 0.5  # small enough that the cap bends these scores
    tr = model.trace(IDS, intervention=Intervention(hooks=((1, SoftCap(cap)),)))
    clean = model.trace(IDS)
    assert torch.equal(tr.layers[0].attn.weights, clean.layers[0].attn.weights)  # layer 0 untouched
    a = tr.layers[1].attn
    s = a.q[0].double().numpy() @ a.k[0].double().numpy().transpose(0, 2, 1) / math.sqrt(8)  # (H, T, T)
    causal = np.tril(np.ones((6, 6), bool))
    np.testing.assert_allclose(a.weights[0].numpy(), np_softmax_rows(cap * np.tanh(s / cap), causal), atol=1e-6)
    np.testing.assert_allclose(a.masked[0].numpy(), np.where(causal, cap * np.tanh(s / cap), -np.inf), atol=1e-6)
    np.testing.assert_allclose(a.scaled[0].numpy(), s, atol=1e-5)  # `scaled` stays scores * scale
    assert float((a.weights - clean.layers[1].attn.weights).abs().max()) > 1e-2


def test_a_new_hook_as_a_variant_gives_what_it_gives_as_a_pass_hook(model):
    own = copy.deepcopy(model)  # a model of this test's own (the shared one is never changed)
    own.blocks[1].attn.variants = HookSet((SoftCap(0.5),))
    via_pass = model.trace(IDS, intervention=Intervention(hooks=((1, SoftCap(0.5)),)))
    assert torch.equal(own.trace(IDS).logits, via_pass.logits)
    assert torch.equal(own(IDS), via_pass.logits)  # record=False: the same arithmetic
    assert model.blocks[1].attn.variants.all == ()


def test_a_new_heads_hook_changes_what_enters_w_o(model):
    tr = model.trace(IDS, intervention=Intervention(hooks=((0, DoubleHead(1)),)))
    clean = model.trace(IDS)
    a, a0 = tr.layers[0].attn, clean.layers[0].attn
    np.testing.assert_allclose(a.heads[0, 1].numpy(), 2 * a0.heads[0, 1].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(a.heads[0, 0].numpy(), a0.heads[0, 0].numpy())
    W = model.blocks[0].attn.o_proj  # output = concat @ W_O^T + b, the doubled head included
    np.testing.assert_allclose(a.output[0].numpy(), (a.concat[0] @ W.weight.T + W.bias).detach().numpy(), atol=1e-6)
    assert float((tr.final - clean.final).abs().max()) > 1e-3


def test_a_new_weights_hook_gives_new_head_outputs(model):
    tr = model.trace(IDS, intervention=Intervention(hooks=((1, LookAtFirst(0)),)))
    clean = model.trace(IDS)
    a, a0 = tr.layers[1].attn, clean.layers[1].attn
    want = np.zeros((6, 6))
    want[:, 0] = 1.0
    np.testing.assert_array_equal(a.weights[0, 0].numpy(), want)
    np.testing.assert_array_equal(a.weights[0, 1].numpy(), a0.weights[0, 1].numpy())
    v = a.v[0].numpy()  # (H, T, d_v)
    np.testing.assert_allclose(a.heads[0, 0].numpy(), np.broadcast_to(v[0, 0], (6, 8)), atol=1e-6)  # Z = w @ v
    np.testing.assert_allclose(a.heads[0, 1].numpy(), a0.heads[0, 1].numpy(), atol=0)
    assert float((tr.final - clean.final).abs().max()) > 1e-3


def test_a_hook_recording_an_unknown_trace_field_fails_loudly(model):
    class Misnamed(AttentionHook):
        def scores(self, c):
            c.fields["not_a_field"] = 1

    with pytest.raises(TypeError, match="not_a_field"):
        model.trace(IDS, intervention=Intervention(hooks=((0, Misnamed()),)))
