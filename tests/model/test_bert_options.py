"""BERT as options of the one ModelConfig/Transformer (issue 17): embedding LayerNorm, token-type
embeddings, no output head. Each piece is recorded in the trace; the defaults leave every other
model (and its parameter names, order and seeded weights) unchanged. No package needed."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from model import ModelConfig, Seq2SeqTransformer, Transformer, param_breakdown, param_count
from model.checkpoint import from_bytes, to_bytes
from model.tokenizer import SPECIALS, Tokenizer
from model.trace import LayerNormTrace, flat_arrays
from tests.model.norm_params import nontrivial_norms

BERT = dict(pos_encoding="learned", norm="post", activation="gelu", tie_weights=False, ln_eps=1e-12,
            emb_norm=True, type_vocab_size=2, output_head=False)


def small(**kw) -> ModelConfig:
    return ModelConfig(vocab_size=13, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=9, **kw)


@pytest.mark.parametrize("emb_norm,types,head,tie", list(itertools.product([False, True], [0, 1, 3],
                                                                            [True, False], [True, False])))
def test_param_count_counts_the_new_parts(emb_norm, types, head, tie):
    cfg = small(emb_norm=emb_norm, type_vocab_size=types, output_head=head, tie_weights=tie)
    model = Transformer(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert param_count(cfg) == n == sum(param_breakdown(cfg).values())
    parts = param_breakdown(cfg)
    assert parts.get("token_type_embedding", 0) == types * 8
    assert parts.get("embedding_norm", 0) == (16 if emb_norm else 0)


def test_defaults_keep_parameter_names_order_and_breakdown():
    """Checkpoints and the seeded init depend on the parameter names and their order."""
    names = [n for n, _ in Transformer(small(pos_encoding="learned", tie_weights=False)).named_parameters()]
    block = ["ln1.weight", "ln1.bias", "attn.q_proj.weight", "attn.q_proj.bias", "attn.k_proj.weight",
             "attn.k_proj.bias", "attn.v_proj.weight", "attn.v_proj.bias", "attn.o_proj.weight",
             "attn.o_proj.bias", "ln2.weight", "ln2.bias", "ffn.fc1.weight", "ffn.fc1.bias",
             "ffn.fc2.weight", "ffn.fc2.bias"]
    assert names == (["tok_emb.weight", "pos_emb.weight"] + [f"blocks.{i}.{b}" for i in range(2) for b in block]
                     + ["ln_f.weight", "ln_f.bias", "lm_head.weight"])
    assert list(param_breakdown(small())) == ["token_embedding", "position_embedding", "attention", "ffn",
                                              "layer_norm", "output"]
    bert_names = [n for n, _ in Transformer(small(**BERT)).named_parameters()]
    assert bert_names[:6] == ["tok_emb.weight", "pos_emb.weight", "type_emb.weight", "emb_ln.weight",
                              "emb_ln.bias", "blocks.0.ln1.weight"]
    assert not any(n.startswith(("ln_f", "lm_head")) for n in bert_names)


def test_default_trace_has_no_bert_fields_and_sum_is_token_plus_position():
    model = Transformer(small(), seed=1)
    tr = model.trace(torch.tensor([[1, 2, 3, 4]]))
    e = tr.embeddings
    assert e.token_type is None and e.ln is None and e.raw_sum is None and tr.token_type_ids is None
    assert torch.equal(e.sum, e.token + e.position)
    assert "embeddings.raw_sum" not in flat_arrays(tr)  # exports unchanged
    with pytest.raises(ValueError, match="no token-type embeddings"):
        model.trace(torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 0]]))


def test_bert_trace_records_token_types_and_embedding_layer_norm():
    cfg = small(**BERT)
    model = nontrivial_norms(Transformer(cfg, seed=2), seed=2)  # gamma != 1, beta != 0
    ids = torch.tensor([[1, 5, 6, 2, 7, 2], [1, 3, 2, 4, 2, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]])
    mask = torch.tensor([[True] * 6, [True] * 5 + [False]])
    tr = model.trace(ids, causal=False, key_padding_mask=mask, token_type_ids=types)
    e = tr.embeddings
    B, T, D = 2, 6, 8
    assert e.token.shape == e.token_type.shape == e.raw_sum.shape == e.sum.shape == (B, T, D)
    assert e.position.shape == (T, D)
    assert isinstance(e.ln, LayerNormTrace) and e.ln.mean.shape == e.ln.var.shape == (B, T, 1)
    assert torch.equal(e.token_type, model.type_emb.weight[types])
    assert torch.equal(e.raw_sum, e.token + e.token_type + e.position)
    assert torch.equal(e.ln.input, e.raw_sum) and torch.equal(e.sum, e.ln.output)
    expect = F.layer_norm(e.raw_sum, (D,), model.emb_ln.weight, model.emb_ln.bias, 1e-12)
    assert torch.equal(e.sum, expect)  # bit-exact: F.layer_norm's own output
    assert torch.equal(tr.layers[0].input, e.sum)  # `sum` is what block 0 sees
    assert torch.equal(tr.token_type_ids, types)
    assert tr.logits is None and tr.probs is None and tr.final_ln is None
    arrays = tr.numpy()
    assert arrays.logits is None and arrays.embeddings.ln.mean.shape == (B, T, 1)
    assert "embeddings.ln.var" in flat_arrays(tr) and "logits" not in flat_arrays(tr)
    # token types default to zeros
    tr0 = model.trace(ids, causal=False)
    assert torch.equal(tr0.token_type_ids, torch.zeros_like(ids))
    assert torch.equal(tr0.embeddings.token_type, model.type_emb.weight[torch.zeros_like(ids)])
    # forward: the same arithmetic, and (no output layer) the last hidden states
    out = model(ids, causal=False, key_padding_mask=mask, token_type_ids=types)
    assert torch.equal(out, tr.final) and out.shape == (B, T, D)
    with pytest.raises(ValueError, match="no output layer"):
        model.output_matrix


@pytest.mark.parametrize("bad,match", [
    (torch.tensor([[0, 1, 2]]), "in \\[0, 1\\]"),
    (torch.tensor([[0, 1]]), "shape"),
    (torch.tensor([[0.0, 1.0, 0.0]]), "torch.long"),
])
def test_token_type_ids_are_validated(bad, match):
    model = Transformer(small(**BERT))
    with pytest.raises(ValueError, match=match):
        model.trace(torch.tensor([[1, 2, 3]]), token_type_ids=bad)


def test_config_validation_of_the_new_options():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="type_vocab_size"):
            small(type_vocab_size=bad)
    with pytest.raises(ValueError, match="emb_norm"):
        small(emb_norm=1)
    with pytest.raises(ValueError, match="output_head"):
        small(output_head="no")
    assert small(ln_eps=1e-12).ln_eps == 1e-12  # BERT's epsilon is accepted
    assert small(**BERT).final_norm is False  # post-LN: no final norm by default
    assert ModelConfig.from_dict(small().to_dict()) == small()


def test_gelu_is_exact_erf():
    model = Transformer(small(activation="gelu"))
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))
    torch.testing.assert_close(model.blocks[0].ffn.act(x), exact, rtol=0, atol=1e-12)
    tanh = F.gelu(x, approximate="tanh")  # GPT-2's approximation is measurably different
    assert float((tanh - exact).abs().max()) > 1e-4


def test_bert_options_round_trip_through_a_checkpoint():
    vocab = list(SPECIALS) + [f"w{i}" for i in range(9)]
    tok = Tokenizer(vocab)
    model = nontrivial_norms(Transformer(small(**BERT), seed=4), seed=4)  # a loader keeping init's 1/0 would show
    loaded, _ = from_bytes(to_bytes(model, tok))
    assert loaded.cfg == model.cfg
    ids, types = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 1]])
    a = model.trace(ids, causal=False, token_type_ids=types)
    b = loaded.trace(ids, causal=False, token_type_ids=types)
    assert torch.equal(a.final, b.final)


def test_init_false_skips_initialisation_but_builds_the_same_modules():
    with torch.device("meta"):
        meta = Transformer(small(**BERT), init=False)
    real = Transformer(small(**BERT))
    assert [(n, p.shape) for n, p in meta.named_parameters()] == [(n, p.shape) for n, p in real.named_parameters()]
    assert all(p.is_meta for p in meta.parameters())


def test_seq2seq_unchanged_by_the_new_defaults():
    s2s = Seq2SeqTransformer(small(), seed=0)
    tr = s2s.trace(torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3]]))
    assert tr.encoder.embeddings.ln is None and tr.decoder.embeddings.token_type is None
