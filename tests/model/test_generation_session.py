"""classroom/generation.py: greedy steps equal an argmax loop over the uncached model, sampling is
seeded and follows a top-k/top-p rule written here, the factorisation adds up, the cache size
follows the formula."""
import math

import numpy as np
import pytest
import torch

from classroom.generate import Session, Settings, cache_growth
from model.config import ModelConfig
from model.transformer import Transformer


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=64, n_kv_heads=2,
                      pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False)
    return Transformer(cfg, seed=3).eval()


def test_greedy_steps_equal_an_uncached_argmax_loop(model):
    gen = Session.start(model, [1, 5, 7], Settings())
    for _ in range(6):
        gen = gen.step(model)
    ids = [1, 5, 7]
    with torch.no_grad():
        for _ in range(6):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    assert gen.ids == ids
    assert float((gen.uncached_logits(model) - gen.logits).abs().max()) < 1e-5
    # the factorisation: p_model is softmax of the uncached logits at each step
    with torch.no_grad():
        full = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0].double(), -1)
    want = [float(full[t - 1, ids[t]]) for t in range(3, len(ids))]
    rows = gen.factorisation()
    np.testing.assert_allclose([r.logp for r in rows], want, atol=1e-5)
    np.testing.assert_allclose([r.p for r in rows], np.exp(want), rtol=1e-4)
    assert [r.step for r in rows] == list(range(1, 7)) and [r.token for r in rows] == ids[3:]
    assert rows[-1].logp_so_far == pytest.approx(sum(want), abs=1e-4)
    assert rows[-1].p_so_far == pytest.approx(math.exp(sum(want)), rel=1e-4)


def test_sampling_is_seeded_and_stays_inside_top_k(model):
    s = Settings(strategy="sample", temperature=1.5, top_k=3, seed=7)
    a, b = Session.start(model, [2, 3], s), Session.start(model, [2, 3], s)
    for _ in range(8):
        probs = a.model_probs()
        allowed = set(torch.topk(probs, 3).indices.tolist())
        a, b = a.step(model), b.step(model)
        assert a.records[-1].token in allowed
    assert a.ids == b.ids  # same seed, same text
    c = Session.start(model, [2, 3], Settings(strategy="sample", temperature=1.5, top_k=3, seed=8))
    for _ in range(8):
        c = c.step(model)
    assert c.ids != a.ids  # (this seed differs within 8 draws)


def test_top_p_rule_against_a_rule_written_here(model):
    gen = Session.start(model, [4, 9], Settings(strategy="sample", temperature=1.0, top_p=0.5))
    p = torch.softmax(gen.logits.double(), -1).numpy()
    order = np.argsort(-p, kind="stable")
    keep, mass = [], 0.0
    for i in order:
        keep.append(i)
        mass += p[i]
        if mass >= 0.5:
            break
    rule = gen.next_distribution().numpy()
    assert set(np.nonzero(rule)[0]) == set(keep)
    np.testing.assert_allclose(rule[keep], p[keep] / p[keep].sum(), atol=1e-6)
    nt = gen.next_token(k=4)  # what the page shows: the model's top 4 beside the rule's probabilities
    np.testing.assert_array_equal(nt.top_ids, order[:4])
    np.testing.assert_allclose(nt.p_model, p[order[:4]], atol=1e-12)
    np.testing.assert_allclose(nt.p_rule, rule[order[:4]], atol=1e-12)
    assert nt.kept == len(keep) and nt.vocab_size == len(p)


def test_cache_bytes_follow_the_formula(model):
    gen = Session.start(model, [1, 2, 3, 4], Settings())
    for _ in range(3):
        gen = gen.step(model)
    cfg = model.cfg
    per_token = 2 * cfg.n_layers * 2 * cfg.d_k * 4  # K and V, 2 layers, 2 K/V heads, float32
    assert [r.cache_bytes for r in gen.records] == [per_token * t for t in (5, 6, 7)]
    g = cache_growth(cfg, 4, 3)
    assert list(g.context) == [4, 5, 6, 7]
    assert list(g.this_model) == [per_token * t for t in range(4, 8)]
    assert list(g.without_gqa) == [2 * per_token * t for t in range(4, 8)]
    assert g.bytes_per_token == per_token and g.bytes_per_token_without_gqa == 2 * per_token
    assert gen.records[-1].attention.shape == (2, 4, 7)
    np.testing.assert_allclose(gen.records[-1].attention.sum(-1), 1.0, atol=1e-6)


def numpy_rule(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None):
    """Sampling written here in numpy: softmax(logits / T), keep the top_k most likely, then the
    smallest prefix reaching top_p (the crossing token kept), renormalise. Returns (tempered, keep,
    reason) with reason "top-k" / "top-p" / "" per token."""
    z = logits.astype(np.float64) / temperature
    tempered = np.exp(z - z.max())
    tempered /= tempered.sum()
    order = np.argsort(-tempered, kind="stable")
    keep = np.zeros(len(z), dtype=bool)
    reason = np.array([""] * len(z), dtype=object)
    for r, i in enumerate(order):
        if top_k is not None and r >= top_k:
            reason[i] = "top-k"
    candidates = [i for i in order if reason[i] == ""]
    mass = sum(tempered[i] for i in candidates)
    before = 0.0
    for n, i in enumerate(candidates):
        if top_p is not None and n > 0 and before >= top_p * mass:
            reason[i] = "top-p"
        else:
            keep[i] = True
        before += tempered[i]
    return tempered, keep, reason


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 5, 0.6), (1.5, None, 0.3), (0.4, 3, None),
                                                       (1.0, None, None), (2.0, 12, 0.9)])
def test_next_token_stages_equal_numpy(model, temperature, top_k, top_p):
    """Issue 33 item 4: the Generate page shows the distribution before and after the temperature,
    top-k and top-p, the kept set marked. Each stage against the rule written here in numpy."""
    gen = Session.start(model, [4, 9, 2], Settings(strategy="sample", temperature=temperature, top_k=top_k, top_p=top_p))
    logits = gen.logits.double().numpy()
    tempered, keep, reason = numpy_rule(logits, temperature, top_k, top_p)
    model_p = np.exp(logits - logits.max())
    model_p /= model_p.sum()
    nt = gen.next_token(k=15)
    top = np.argsort(-model_p, kind="stable")[:15]
    np.testing.assert_array_equal(nt.top_ids, top)
    np.testing.assert_allclose(nt.p_model, model_p[top], atol=1e-6)
    np.testing.assert_allclose(nt.p_tempered, tempered[top], atol=1e-6)
    np.testing.assert_array_equal(nt.kept_mask, keep[top])
    assert nt.dropped_by == list(reason[top])
    assert nt.kept == int(keep.sum())
    np.testing.assert_allclose(nt.kept_mass, tempered[keep].sum(), atol=1e-6)
    np.testing.assert_allclose(nt.p_rule, np.where(keep, tempered, 0.0)[top] / tempered[keep].sum(), atol=1e-6)
    if temperature != 1.0:  # the temperature really changed the distribution shown
        assert np.abs(nt.p_tempered - nt.p_model).max() > 1e-3


def test_next_token_stages_under_greedy(model):
    gen = Session.start(model, [4, 9, 2], Settings())
    nt = gen.next_token(k=5)
    np.testing.assert_allclose(nt.p_tempered, nt.p_model, atol=1e-6)
    assert list(nt.kept_mask) == [True, False, False, False, False] and nt.kept == 1
    assert nt.dropped_by == ["", "greedy", "greedy", "greedy", "greedy"]
    assert nt.p_rule[0] == 1.0 and nt.kept_mass == pytest.approx(nt.p_model[0], abs=1e-6)
