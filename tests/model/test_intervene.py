"""model/intervene.py: head ablation and edited attention rows as trace arguments, against
references built here by changing a COPY of the model's weights (never the model itself)."""
from __future__ import annotations

import copy
import hashlib

import numpy as np
import pytest
import torch

from model.config import ModelConfig
from model.intervene import Intervention
from model.transformer import Transformer
from tests.helpers import assert_scaled_close


def fingerprint(model) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(params=["mha", "gqa"])
def model(request):
    kw = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_len=32)
    if request.param == "gqa":
        kw.update(n_kv_heads=2, pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False)
    return Transformer(ModelConfig(**kw), seed=1).eval()


IDS = torch.tensor([[3, 7, 9, 11, 4, 20, 5]])


def test_zero_ablation_equals_zeroing_that_heads_columns_of_w_o_in_a_copy(model):
    before = fingerprint(model)
    tr = model.trace(IDS, ablate_heads=[(1, 2), (2, 0)])
    ref = copy.deepcopy(model)
    d = model.cfg.d_value
    with torch.no_grad():
        for l, h in ((1, 2), (2, 0)):
            ref.blocks[l].attn.o_proj.weight[:, h * d:(h + 1) * d] = 0.0
        want = ref(IDS)
    assert_scaled_close(tr.logits, want)
    clean = model.trace(IDS)
    assert float((clean.logits - tr.logits).abs().max()) > 1e-4  # it did change something
    np.testing.assert_array_equal(tr.layers[0].attn.weights.numpy(), clean.layers[0].attn.weights.numpy())
    assert tr.layers[1].attn.ablated.tolist() == [[False, False, True, False]]
    assert float(tr.layers[1].attn.heads[0, 2].abs().max()) == 0.0
    assert fingerprint(model) == before  # the shared model is bit-identical after interventions


def test_mean_ablation_equals_a_constant_in_place_of_the_head(model):
    l, h = 1, 3
    clean = model.trace(IDS)
    z_mean = clean.layers[l].attn.heads[0, h].mean(0)  # (d_v,) the head's mean output (layer l's
    # inputs are not changed by an ablation at layer l, so the clean mean is the one used)
    ref = copy.deepcopy(model)
    d = model.cfg.d_value
    with torch.no_grad():
        W = ref.blocks[l].attn.o_proj.weight
        const = W[:, h * d:(h + 1) * d] @ z_mean  # (D,) what the head now adds at every position
        W[:, h * d:(h + 1) * d] = 0.0
        if ref.blocks[l].attn.o_proj.bias is None:
            ref.blocks[l].attn.o_proj.bias = torch.nn.Parameter(const.clone())
        else:
            ref.blocks[l].attn.o_proj.bias += const
        want = ref(IDS)
    got = model.trace(IDS, ablate_heads=[(l, h)], ablation="mean")
    assert_scaled_close(got.logits, want)


def test_an_edited_row_is_renormalised_and_downstream_recomputes(model):
    T = IDS.shape[1]
    row = [0.0] * T
    row[0], row[2] = 3.0, 1.0  # query 4 looks at keys 0 and 2 only, 3:1
    tr = model.trace(IDS, edit_rows=[(0, 1, 4, row)])
    w = tr.layers[0].attn.weights[0, 1, 4].numpy()
    np.testing.assert_allclose(w[[0, 2]], [0.75, 0.25], atol=1e-7)
    assert abs(w.sum() - 1) < 1e-6
    v = tr.layers[0].attn.v[0, tr.layers[0].attn.kv_head[1] if tr.layers[0].attn.kv_head is not None else 1]
    np.testing.assert_allclose(tr.layers[0].attn.heads[0, 1, 4].numpy(), (0.75 * v[0] + 0.25 * v[2]).numpy(), atol=1e-6)
    clean = model.trace(IDS)
    assert float((clean.layers[1].attn.weights - tr.layers[1].attn.weights).abs().max()) > 0  # layer 1 recomputed
    with pytest.raises(ValueError, match="sums to 0"):
        model.trace(IDS, edit_rows=[(0, 1, 4, [0.0] * T)])
    with pytest.raises(ValueError, match="masked"):
        model.trace(IDS, edit_rows=[(0, 1, 2, [0, 0, 0, 1, 0, 0, 0])])  # causal: query 2 cannot see key 3


def test_ablating_every_head_stays_finite_and_empty_means_no_intervention(model):
    L, H = model.cfg.n_layers, model.cfg.n_heads
    tr = model.trace(IDS, ablate_heads=[(l, h) for l in range(L) for h in range(H)])
    assert torch.isfinite(tr.logits).all() and torch.isfinite(tr.probs).all()
    np.testing.assert_array_equal(model.trace(IDS, ablate_heads=[]).logits.numpy(), model.trace(IDS).logits.numpy())
    with pytest.raises(ValueError, match="do not exist"):
        model.trace(IDS, ablate_heads=[(L, 0)])


def test_a_batch_of_single_head_ablations_equals_one_at_a_time(model):
    L, H = model.cfg.n_layers, model.cfg.n_heads
    keep = torch.ones(L * H, L, H)
    for i in range(L * H):
        keep[i, i // H, i % H] = 0.0
    with torch.no_grad():
        batched = model.run(IDS.expand(L * H, -1), True, None, record=False,
                            intervention=Intervention(keep=keep))  # (L*H, T, V)
    for i in (0, 5, L * H - 1):
        one = model.trace(IDS, ablate_heads=[(i // H, i % H)]).logits[0]
        np.testing.assert_allclose(batched[i].numpy(), one.numpy(), atol=1e-5)
