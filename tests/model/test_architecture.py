"""classroom/architecture.py: the model in words, from its config (issue 34 point 1). Every
parameter formula's terms add up to model.config's count and to the allocated model's; shapes,
biases, norms, ε's provenance and positions follow the config."""
from __future__ import annotations

import itertools

import pytest

from classroom.architecture import describe, eps_note, param_formulas
from model.config import PRESETS, ModelConfig, param_breakdown
from model.transformer import Transformer

SMOL = ModelConfig(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536, max_len=8192,
                   pos_encoding="rope", norm_kind="rmsnorm", activation="swiglu", bias=False, rope_theta=100000.0)
MINILM = ModelConfig(vocab_size=30522, d_model=384, n_heads=12, n_layers=6, d_ff=1536, max_len=512,
                     pos_encoding="learned", norm="post", emb_norm=True, type_vocab_size=2, output_head=False,
                     final_norm=False, ln_eps=1e-12, tie_weights=False)


def small_configs():
    """Every combination of the options that change a formula, at a small size."""
    for pe, act, nk, bias, kv, dv, score, use_norm, tie in itertools.product(
            ("sinusoidal", "learned", "rope", "none"), ("gelu", "relu", "swiglu"), ("layernorm", "rmsnorm"),
            (True, False), (None, 2), (0, 4), ("dot", "additive"), (True, False), (True, False)):
        yield ModelConfig(vocab_size=11, d_model=16, n_heads=4, n_kv_heads=kv, n_layers=2, d_ff=24, max_len=9,
                          pos_encoding=pe, activation=act, norm_kind=nk, bias=bias, d_v=dv, attn_score=score,
                          use_norm=use_norm, tie_weights=tie)


@pytest.mark.parametrize("cfg", [*PRESETS.values(), SMOL, MINILM], ids=[*PRESETS, "smollm2", "minilm"])
def test_formulas_add_up_to_the_config_count(cfg):
    pb = param_breakdown(cfg)
    fs = param_formulas(cfg)
    assert [f.part for f in fs] == list(pb)
    assert all(f.count == pb[f.part] for f in fs)


def test_formulas_add_up_for_every_option_and_match_the_allocated_model():
    n = 0
    for cfg in small_configs():
        fs = param_formulas(cfg)
        assert sum(f.count for f in fs) == Transformer(cfg, seed=0).num_parameters(), cfg
        n += 1
    assert n == 4 * 3 * 2 * 2 * 2 * 2 * 2 * 2 * 2


def test_smollm2_words():
    a = describe(SMOL)
    assert (a.w_q.shape, a.w_k.shape, a.w_v.shape, a.w_o.shape) == ("576 × 576", "576 × 192", "576 × 192", "576 × 576")
    assert a.w_k.formula == "d_model × h_kv·d_k" and not any(m.bias for m in (a.w_q, a.w_k, a.w_v, a.w_o))
    assert a.output_formula == "concat · W_O" and a.biases == "no linear map has a bias"
    assert a.norm.name == "RMSNorm" and a.norm.params == "γ only" and not a.norm.has_beta and a.norm.short == "pre-RMSNorm"
    assert not a.positions.added and "sinusoidal" not in a.positions.sentence and "θ = 100,000" in a.positions.sentence
    assert a.activation.gated and a.activation.ffn_formula == "FFN(x) = (SiLU(x W_gate) ⊙ (x W_up)) W₂"
    f = {x.part: x.formula for x in param_formulas(SMOL)}
    assert f["attention"].startswith("L × (2 d_model² + 2 d_model·h_kv·d_k)") and "no biases" in f["attention"]
    assert f["ffn"] == "L × (3 d_model·d_ff)  [W_gate, W_up, W₂; no biases]"
    assert f["layer_norm"] == "L × 2 × d_model (γ) + d_model (the final RMSNorm)"
    assert a.stack == "decoder-only" and "cross-attention" in a.stack_text


def test_gpt2_and_minilm_words():
    g = describe(PRESETS["gpt2-small"])
    assert g.output_formula == "concat · W_O + b_O" and g.activation.ffn_formula == "FFN(x) = GELU(x W₁ + b₁) W₂ + b₂"
    assert {x.part: x.formula for x in param_formulas(PRESETS["gpt2-small"])}["attention"] == \
        "L × (4 d_model² + 4 d_model)  [W_Q, W_K, W_V, W_O + biases]"
    m = describe(MINILM, eps_source="MiniLM-L6's config.json (layer_norm_eps)")
    assert m.norm.eps_note == "ε = 1e-12, read from MiniLM-L6's config.json (layer_norm_eps)."
    assert m.stack == "encoder-only" and m.norm.short == "post-LN" and m.norm.has_beta
    assert m.positions.input_x == "token embedding + position + token type, then LayerNorm"


def test_eps_provenance():
    assert "same as PyTorch's nn.LayerNorm" in eps_note(ModelConfig())
    assert "BERT" not in eps_note(ModelConfig()) and "BERT" not in eps_note(SMOL, "SmolLM2-135M's GGUF metadata")
    assert eps_note(ModelConfig(ln_eps=1e-6)).startswith("ε = 1e-06, set in this model's configuration")
