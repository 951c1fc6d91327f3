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
    assert wt.tied and wt.max_diff < 1e-4 and wt.shape == (30, 16) and wt.positions == wt.of == len(ids)
    bad = arr.logits[0].copy()
    bad[len(ids) - 1, 3] += 1.0  # the last position is always among those checked
    few = ffn_output.weight_tying(model, arr.final[0], bad, max_positions=2)
    assert few.positions == 2 and few.of == len(ids) and few.max_diff == pytest.approx(1.0, abs=1e-4)
    untied = Transformer(cfg.replace(tie_weights=False), seed=3)
    a2 = untied.trace(torch.tensor([ids])).numpy()
    assert not ffn_output.weight_tying(untied, a2.final[0], a2.logits[0]).tied
    view = ffn_output.output_layer_view(untied, a2.final[0], a2.logits[0], 4)
    assert not view.tying.tied and view.tying.max_diff < 1e-4
    np.testing.assert_array_equal(view.embedding_rows, untied.tok_emb.weight.detach().numpy()[:4])
    np.testing.assert_array_equal(view.output_rows, untied.output_matrix.detach().numpy()[:4])
    assert not np.array_equal(view.embedding_rows, view.output_rows)


def test_topk_equals_a_stable_sort_with_ties_and_nan():
    """topk sorts only each row's candidates (np.partition): the same indices as a full stable sort
    of −p, ties lower index first and NaN last, for rows far longer than k (a vocabulary)."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n, rows, k = int(rng.integers(1, 300)), int(rng.integers(1, 4)), int(rng.integers(0, 12))
        p = (rng.integers(0, 6, size=(rows, n)) / 5).astype(np.float32)  # many ties
        if trial % 3 == 0:
            p[rng.random(p.shape) < 0.3] = np.nan
        p = p[0] if trial % 5 == 0 else p
        kk = max(1, min(k, n))
        want = np.argsort(-p.astype(np.float64), axis=-1, kind="stable")[..., :kk]
        np.testing.assert_array_equal(ffn_output.topk(p, k), want)
    big = rng.random((3, 49_152)).astype(np.float32)
    big[1, [7, 900, 40_000]] = 2.0  # a three-way tie at the top
    np.testing.assert_array_equal(ffn_output.topk(big, 5), np.argsort(-big, axis=-1, kind="stable")[:, :5])
    assert list(ffn_output.topk(big, 5)[1, :3]) == [7, 900, 40_000]


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


def test_fill_blank_is_a_capability_not_a_model_name():
    """Issue 33 item 3: any masked LM with its head plugs in (a BERT/RoBERTa opened from disk);
    an encoder without one gets the honest stand-in; causal LMs and fresh weights get neither."""
    from classroom.ffn_output import ENCODER_ONLY, MLM_HEAD, fill_blank_capability, is_special_token
    bert, roberta, toy = ["[PAD]", "[CLS]", "[MASK]", "cat"], ["<s>", "<mask>", "cat"], ["<pad>", "the"]
    assert fill_blank_capability(True, bert, True) == MLM_HEAD
    assert fill_blank_capability(True, roberta, True) == MLM_HEAD
    assert fill_blank_capability(False, bert, True) == ENCODER_ONLY  # MiniLM
    assert fill_blank_capability(True, toy, True) is None  # no mask token
    assert fill_blank_capability(True, bert, False) is None  # trained causally
    assert fill_blank_capability(True, bert, None) is None  # objective unknown (fresh weights)
    assert is_special_token("[CLS]") and is_special_token("<bos>") and not is_special_token("<") and not is_special_token("cat")


def test_nearest_rows_against_numpy():
    import torch

    from classroom.ffn_output import nearest_rows
    from model.config import ModelConfig
    from model.transformer import Transformer
    model = Transformer(ModelConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=16,
                                    output_head=False), seed=2).eval()
    ids = [1, 5, 7, 9, 2]
    res = nearest_rows(model, ids, 2, mask=3, k=4, skip=[0, 1, 2, 3])
    with torch.no_grad():
        h = model.trace(torch.tensor([[1, 5, 3, 9, 2]]), causal=False).final[0, 2].double().numpy()
    E = model.tok_emb.weight.detach().double().numpy()
    cos = E @ h / (np.linalg.norm(E, axis=1) * np.linalg.norm(h))
    cos[[0, 1, 2, 3]] = -np.inf
    order = np.argsort(-cos, kind="stable")
    np.testing.assert_array_equal(res.top_ids, order[:4])
    np.testing.assert_allclose(res.top_cos, cos[order[:4]], atol=1e-12)
    assert res.masked_ids == [1, 5, 3, 9, 2] and res.true_id == 7 and res.compared == 26
    assert res.true_rank == int((cos > cos[7]).sum()) + 1
