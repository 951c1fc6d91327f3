"""A model with frozen weights (every model the app shows) leaves the logits to first read:
final @ W_out^T by the same matmul, bit for bit, on the torch trace and on its numpy tree; a model
that may still be trained computes them in the forward; a trace whose model changed in place
refuses to compute them rather than mix weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model import ModelConfig, Transformer
from model.trace import WeightRef, flat_arrays
from ui.budget_cache import BudgetCache, nbytes


def make(tie=True, frozen=True, **kw):
    cfg = ModelConfig(**{**dict(vocab_size=41, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=12,
                                tie_weights=tie), **kw})
    model = Transformer(cfg, seed=3)
    if frozen:
        model.requires_grad_(False)
    return model


IDS = torch.tensor([[1, 5, 9, 2, 7, 3], [4, 4, 8, 30, 11, 0]])


@pytest.mark.parametrize("tie", [True, False])
def test_frozen_model_computes_logits_on_first_read_bit_for_bit(tie):
    model = make(tie)
    tr = model.trace(IDS)
    assert tr.__dict__.get("_logits") is None and isinstance(tr.output_weight, WeightRef)
    want = model(IDS)  # the forward without a trace (B, T, V)
    assert torch.equal(tr.logits, want)
    assert torch.equal(torch.as_tensor(tr.probs), torch.softmax(want, -1))
    # the numpy tree of a trace whose logits were never read computes them from its own arrays
    npt = model.trace(IDS).numpy()
    assert npt.__dict__.get("_logits") is None
    assert isinstance(npt.logits, np.ndarray) and not npt.logits.flags.writeable
    np.testing.assert_array_equal(npt.logits, want.numpy())
    # independent: the output layer by hand from the last hidden states
    W = model.tok_emb.weight if tie else model.lm_head.weight  # (V, D)
    np.testing.assert_allclose(npt.logits, npt.final @ W.numpy().T, rtol=1e-5, atol=1e-5)


def test_export_has_logits_but_never_the_weight():
    model = make()
    flat = flat_arrays(model.trace(IDS).numpy())
    assert flat["logits"].shape == (2, 6, 41) and flat["probs"].shape == (2, 6, 41)
    assert not any("output_weight" in k for k in flat)


def test_asdict_and_deepcopy_share_the_weight_reference():
    import copy
    import dataclasses
    model = make()
    tr = model.trace(IDS)
    assert copy.deepcopy(tr).output_weight is tr.output_weight
    d = dataclasses.asdict(tr)
    assert d["output_weight"] is tr.output_weight and torch.equal(d["logits"], model(IDS))


def test_trainable_model_computes_logits_in_the_forward():
    model = make(frozen=False)
    tr = model.trace(IDS)
    assert tr.output_weight is None and tr.__dict__["_logits"] is not None
    assert torch.equal(tr.logits, model(IDS).detach())


def test_weights_changed_after_the_trace_refuse_instead_of_mixing():
    model = make()
    tr = model.trace(IDS)
    with torch.no_grad():
        model.tok_emb.weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="trace the sentence again"):
        tr.logits


def test_encoder_without_output_layer_has_none():
    model = make(output_head=False)
    tr = model.trace(IDS)
    assert tr.logits is None and tr.probs is None and tr.output_weight is None


def test_budget_cache_counts_fields_computed_after_caching():
    """A trace cached before its logits were read grows when a page reads them: the cache counts
    the entry again on its next hit and evicts others to stay within its budget."""
    model = make()
    cache = BudgetCache(budget=10**9)
    first = cache.get("a", lambda: model.trace(IDS).numpy())
    before = cache.bytes
    assert before == nbytes(first)
    first.logits, first.probs  # noqa: B018  a page reads them
    assert cache.get("a", lambda: pytest.fail("cached")) is first
    assert cache.bytes == before + 2 * first.logits.nbytes == nbytes(first)
    # a budget that holds both entries as cached (logits unread), not once a's logits count
    budget = nbytes(model.trace(IDS).numpy()) + nbytes(model.trace(IDS[:, :3]).numpy()) + 1
    cache2 = BudgetCache(budget=budget)
    a = cache2.get("a", lambda: model.trace(IDS).numpy())
    cache2.get("b", lambda: model.trace(IDS[:, :3]).numpy())  # fits beside a (a's logits unread)
    assert len(cache2) == 2
    a.logits, a.probs  # noqa: B018
    cache2.get("a", lambda: pytest.fail("cached"))  # a counted again: over budget, b goes
    assert len(cache2) == 1 and cache2.bytes == nbytes(a)
