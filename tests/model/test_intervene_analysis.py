"""classroom/intervene.py: head importance against a one-head-at-a-time loop, and attention rollout
on a 2-layer example computed by hand."""
import numpy as np
import pytest
import torch

from classroom import intervene as iv
from model.config import ModelConfig
from model.transformer import Transformer


def test_rollout_on_a_two_layer_example_by_hand():
    # one head per layer, 2 tokens
    A0 = np.array([[1.0, 0.0], [0.6, 0.4]])
    A1 = np.array([[1.0, 0.0], [0.2, 0.8]])
    w = np.stack([A0[None], A1[None]])  # (L=2, H=1, 2, 2)
    # by hand: Â0 = 0.5 I + 0.5 A0 = [[1, 0], [0.3, 0.7]]; Â1 = [[1, 0], [0.1, 0.9]]
    # R = Â1 Â0 = [[1, 0], [0.1 + 0.9·0.3, 0.9·0.7]] = [[1, 0], [0.37, 0.63]]
    R = iv.rollout(w)
    np.testing.assert_allclose(R, [[1.0, 0.0], [0.37, 0.63]], atol=1e-12)
    np.testing.assert_allclose(R.sum(-1), 1.0)
    # two heads are averaged first: heads A and the identity give 0.5 A + 0.5 I per layer
    w2 = np.stack([np.stack([A0, np.eye(2)]), np.stack([A1, np.eye(2)])])
    np.testing.assert_allclose(iv.rollout(w2, residual=0.0), iv.rollout(w, residual=0.5), atol=1e-12)
    with pytest.raises(ValueError):
        iv.rollout(np.ones((2, 2, 3)))
    # a trace's layers as a list (never stacked: long inputs) give the very same numbers
    g = np.random.default_rng(1)
    layers = [g.dirichlet(np.ones(6), size=(3, 6)).astype(np.float32) for _ in range(4)]  # 4 × (H=3, 6, 6)
    np.testing.assert_array_equal(iv.rollout(layers), iv.rollout(np.stack(layers)))
    assert not np.allclose(iv.rollout(layers), iv.rollout(layers[::-1]))  # the order of the layers counts
    with pytest.raises(ValueError):
        iv.rollout([layers[0], layers[1][:, :5, :5]])


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=32)
    return Transformer(cfg, seed=5).eval()


def test_importance_equals_ablating_each_head_alone(model):
    ids = [1, 4, 9, 2, 7, 3]
    res = iv.head_importance(model, ids, causal=True, batch=3)
    x = torch.tensor([ids])
    lp0 = torch.log_softmax(model(x)[0, -1].double(), -1)
    t = int(lp0.argmax())
    assert res.target == t and res.clean_logp == pytest.approx(float(lp0[t]), abs=1e-9)
    for l in range(2):
        for h in range(4):
            lp = torch.log_softmax(model.trace(x, ablate_heads=[(l, h)]).logits[0, -1].double(), -1)[t]
            assert res.score[l, h] == pytest.approx(float(lp0[t] - lp), abs=1e-5)
    top = res.top(3)  # the most important heads, best first
    order = np.argsort(-res.score.ravel())[:3]
    assert [(r.layer, r.head) for r in top] == [divmod(int(i), 4) for i in order]
    assert [r.score for r in top] == sorted(res.score.ravel(), reverse=True)[:3]


def test_compare_reports_later_layers_changing_and_earlier_not(model):
    out = iv.compare(model, [1, 4, 9, 2, 7, 3], [(0, 1)], causal=True)
    np.testing.assert_array_equal(out.w_clean[0], out.w_ablated[0])  # layer 0's weights: unchanged
    assert np.abs(out.w_clean[1] - out.w_ablated[1]).max() > 0  # layer 1 sees a changed input
    assert out.w_clean.shape == (2, 4, 6, 6)
    assert out.hidden_change.shape == (2, 6) and (out.hidden_change[0] > 0).any()
    assert abs(out.p_clean.sum() - 1) < 1e-6 and abs(out.p_ablated.sum() - 1) < 1e-6
    x = torch.tensor([[1, 4, 9, 2, 7, 3]])
    np.testing.assert_allclose(out.p_ablated, model.trace(x, ablate_heads=[(0, 1)]).probs[0, -1].double().numpy())


def test_prediction_change_lists_both_top_k_and_the_two_top_tokens():
    before = np.array([0.5, 0.3, 0.1, 0.05, 0.05])
    after = np.array([0.1, 0.2, 0.05, 0.6, 0.05])
    ch = iv.prediction_change(before, after, k=2)
    assert ch.ids == [0, 1, 3]  # before's top 2, then after's top 2 not already listed
    np.testing.assert_array_equal(ch.before, [0.5, 0.3, 0.05])
    np.testing.assert_array_equal(ch.after, [0.1, 0.2, 0.6])
    assert (ch.top_before, ch.top_after, ch.p_top_before, ch.p_top_after) == (0, 3, 0.5, 0.6)


def test_edit_row_follows_the_engine_and_reports_a_refused_row(model):
    ids = [1, 4, 9, 2, 7, 3]
    x = torch.tensor([ids])
    row = (1, 2, 5, (0.0, 1.0, 0.0, 3.0, 0.0, 0.0))
    ed = iv.edit_row(model, ids, True, row)
    want = model.trace(x, edit_rows=[row])
    assert ed.error is None
    np.testing.assert_allclose(ed.row, [0, 0.25, 0, 0.75, 0, 0], atol=1e-7)
    np.testing.assert_array_equal(ed.p_edited, want.probs[0, -1].double().numpy())
    np.testing.assert_array_equal(ed.p_clean, model.trace(x).probs[0, -1].double().numpy())
    assert ed.hidden_change == pytest.approx(float((want.final - model.trace(x).final).norm(dim=-1).max()))
    bad = iv.edit_row(model, ids, True, (1, 2, 5, (0.0,) * 6))
    assert "sums to 0" in bad.error and bad.row is None and bad.p_edited is None
    np.testing.assert_allclose(iv.flow_of(model, ids, True),
                               iv.attention_flow(iv.layer_weights(model.trace(x))), atol=0)


def test_attention_flow_on_the_two_layer_example_by_hand():
    A0 = np.array([[1.0, 0.0], [0.6, 0.4]])
    A1 = np.array([[1.0, 0.0], [0.2, 0.8]])
    w = np.stack([A0[None], A1[None]])
    # Â0 = [[1, 0], [0.3, 0.7]], Â1 = [[1, 0], [0.1, 0.9]]. From output token 1 to input token 0:
    # via token 0 of layer 1: min(0.1, 1) = 0.1; via token 1: min(0.9, 0.3) = 0.3 -> 0.4.
    # To input token 1: only via token 1: min(0.9, 0.7) = 0.7. Output token 0 keeps 1 on itself.
    F = iv.attention_flow(w)
    np.testing.assert_allclose(F, [[1.0, 0.0], [0.4, 0.7]], atol=1e-9)
    with pytest.raises(ValueError, match="at most"):
        iv.attention_flow(np.ones((1, 1, 30, 30)) / 30)


FAMILIES = {  # every option the sweep's own block loop must handle as Transformer.run does
    "gpt2-like": dict(),
    "post-LN relu learned": dict(norm="post", activation="relu", pos_encoding="learned"),
    "llama-like (rope, GQA, rmsnorm, swiglu)": dict(pos_encoding="rope", n_kv_heads=2, norm_kind="rmsnorm",
                                                    activation="swiglu", bias=False),
    "bert-like encoder (emb LN, token types, no output layer)": dict(emb_norm=True, type_vocab_size=2,
                                                                     output_head=False, final_norm=False),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("causal, mode", [(True, "zero"), (False, "mean")])
def test_importance_sweep_equals_whole_passes_with_each_head_off(family, causal, mode):
    """Issue 33 item 2: the sweep starts each pass at the ablated head's layer and scores only the
    last position. Against whole forward passes (model.run, one head off) on every family."""
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_len=32, **FAMILIES[family])
    model = Transformer(cfg, seed=7).eval()
    ids = [1, 4, 9, 2, 7, 3, 11]
    x = torch.tensor([ids])
    with torch.no_grad():
        clean = model(x, causal=causal)
        for batch in (4, 5, 32):  # one layer per pass, one layer (4 heads) + a partial, every layer at once
            res = iv.head_importance(model, ids, causal=causal, mode=mode, batch=batch)
            for l in range(3):
                for h in range(4):
                    out = model.trace(x, causal=causal, ablate_heads=[(l, h)], ablation=mode)
                    if cfg.output_head:
                        lp0 = torch.log_softmax(clean[0, -1].double(), -1)
                        want = float(lp0[res.target] - torch.log_softmax(out.logits[0, -1].double(), -1)[res.target])
                    else:
                        want = float((out.final - clean).norm(dim=-1).mean())
                    assert res.score[l, h] == pytest.approx(want, abs=1e-5), (family, batch, l, h)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("heads, mode", [([(1, 2)], "zero"), ([(2, 0), (1, 3)], "mean"), ([], "zero")])
def test_compare_from_the_runs_trace_equals_two_whole_traces(family, heads, mode):
    """Issue 33 item 2 (an ablation click took 4.6 s): compare reads the clean side from the page's
    trace and starts the ablated pass at the first layer with a head off. Against two whole traces."""
    cfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_len=32, **FAMILIES[family])
    model = Transformer(cfg, seed=7).eval()
    ids = [1, 4, 9, 2, 7, 3, 11]
    x = torch.tensor([ids])
    for causal in (True, False):
        clean = model.trace(x, causal=causal)
        abl = model.trace(x, causal=causal, ablate_heads=heads, ablation=mode)
        got = iv.compare(model, ids, heads, causal=causal, mode=mode, clean=clean.numpy())
        np.testing.assert_array_equal(got.w_clean, iv.layer_weights(clean))
        np.testing.assert_array_equal(got.w_ablated, iv.layer_weights(abl))
        want_dh = np.stack([(a.resid_out[0] - c.resid_out[0]).norm(dim=-1).numpy() for a, c in zip(abl.layers, clean.layers)])
        np.testing.assert_array_equal(got.hidden_change, want_dh)
        if cfg.output_head:
            np.testing.assert_array_equal(got.p_clean, clean.probs[0, -1].double().numpy())
            np.testing.assert_array_equal(got.p_ablated, abl.probs[0, -1].double().numpy())
        else:
            assert got.p_clean is None and got.p_ablated is None
