"""classroom/ffn_output.py: the FFN per position, weight tying, top-k and sequence probability, the last layer's view."""
import math

import numpy as np
import pytest
import torch

from classroom import (
    causal_vs_bidirectional,
    ffn_output,
)
from model.transformer import Transformer


def test_ffn_position_check_and_weight_tying(tiny):
    cfg, model, ids, arr = tiny
    assert ffn_output.ffn_position_check(model, 1, arr.layers[1].ffn.input[0], arr.layers[1].ffn.output[0]) < 1e-5
    wt = ffn_output.weight_tying(model, arr.final[0], arr.logits[0])
    assert wt.tied and wt.max_diff < 1e-4 and wt.shape == (30, 16)
    untied = Transformer(cfg.replace(tie_weights=False), seed=3)
    a2 = untied.trace(torch.tensor([ids])).numpy()
    assert not ffn_output.weight_tying(untied, a2.final[0], a2.logits[0]).tied
    view = ffn_output.output_layer_view(untied, a2.final[0], a2.logits[0], 4)
    assert not view.tying.tied and view.tying.max_diff < 1e-4
    np.testing.assert_array_equal(view.embedding_rows, untied.tok_emb.weight.detach().numpy()[:4])
    np.testing.assert_array_equal(view.output_rows, untied.output_matrix.detach().numpy()[:4])
    assert not np.array_equal(view.embedding_rows, view.output_rows)


def test_topk_and_sequence_logprob(tiny):
    cfg, model, ids, arr = tiny
    probs = arr.probs[0]
    p, toks = ffn_output.topk_next(probs, [f"w{i}" for i in range(30)], 3)
    assert p.shape == (len(ids), 3) and np.all(np.diff(p, axis=1) <= 0)
    assert toks[0][0] == f"w{int(np.argmax(probs[0]))}"
    sp = ffn_output.sequence_logprob(probs, ids)
    manual = sum(math.log(probs[t - 1, ids[t]]) for t in range(1, len(ids)))
    assert sp.total_logp == pytest.approx(manual, rel=1e-6)
    assert len(sp.p) == len(ids) - 1
    np.testing.assert_allclose(sp.logp, np.log(sp.p), rtol=1e-12)
    assert sp.total_p == pytest.approx(math.exp(manual), rel=1e-6)
    assert sp.perplexity == pytest.approx(math.exp(-manual / (len(ids) - 1)), rel=1e-6)
    one = ffn_output.sequence_logprob(probs[:1], ids[:1])
    assert one.total_logp == 0.0 and one.total_p == 1.0 and len(one.p) == 0 and math.isnan(one.perplexity)


def test_active_share_last_layer_view_and_state_change():
    h = np.array([[-0.1, 0.0, 0.03, 0.2], [0.06, -1.0, 1.0, 0.05]])
    assert ffn_output.active_share(h, "relu") == 5 / 8  # > 0
    assert ffn_output.active_share(h, "gelu") == 3 / 8  # > 0.05
    x = np.array([[3.0, 4.0], [0.0, 2.0], [-3.0, -4.0]])
    last = ffn_output.last_layer_view(x)
    np.testing.assert_allclose(last.norms, [5.0, 2.0, 5.0])
    np.testing.assert_allclose(last.cosine[0], [1.0, 0.8, -1.0], atol=1e-12)
    np.testing.assert_allclose(last.mean, [0.0, 2 / 3])
    b = x.copy()
    b[1] = [2.0, 0.0]
    ch = causal_vs_bidirectional.state_change(x, b)
    np.testing.assert_allclose(ch.cosine, [1.0, 0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(ch.distance, [0.0, math.sqrt(8), 0.0])
    np.testing.assert_allclose(ch.norm_a, [5.0, 2.0, 5.0])
