"""ModelConfig validation and parameter counting from the config alone."""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from model import PRESETS, ModelConfig, Transformer, param_breakdown, param_count


def test_gpt2_small_param_count_without_allocating(monkeypatch):
    def boom(*a, **k):  # any model allocation would fail the test
        raise AssertionError("param_count must not allocate a model")
    monkeypatch.setattr(Transformer, "__init__", boom)
    cfg = PRESETS["gpt2-small"]
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.max_len, cfg.vocab_size) == (768, 12, 12, 1024, 50257)
    assert cfg.pos_encoding == "learned" and cfg.tie_weights and cfg.bias and cfg.d_ff == 3072
    assert param_count(cfg) == 124_439_808
    assert sum(param_breakdown(cfg).values()) == 124_439_808


SMALL = [dict(norm=n, pos_encoding=p, activation=a, tie_weights=t, bias=b, final_norm=f)
         for n, p, a, t, b, f in itertools.product(["pre", "post"], ["learned", "sinusoidal"],
                                                   ["relu", "gelu"], [True, False], [True, False],
                                                   [None, True, False])]


@pytest.mark.parametrize("opts", SMALL, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_param_count_matches_allocated_model(opts):
    cfg = ModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=5, **opts)
    model = Transformer(cfg)
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    assert sum(param_breakdown(cfg).values()) == param_count(cfg)


def test_param_breakdown_parts():
    cfg = ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=3, d_ff=16, max_len=7,
                      pos_encoding="learned", tie_weights=False)
    b = param_breakdown(cfg)
    assert b["token_embedding"] == 80 and b["position_embedding"] == 56 and b["output"] == 80
    assert b["attention"] == 3 * 4 * (64 + 8)
    assert b["ffn"] == 3 * (8 * 16 + 16 + 16 * 8 + 8)
    assert b["layer_norm"] == 3 * 2 * 16 + 16  # pre-LN: final LN too


def test_d_ff_default_is_four_times_d_model():
    assert ModelConfig(d_model=24, n_heads=3).d_ff == 96
    assert ModelConfig(d_model=24, n_heads=3, d_ff=10).d_ff == 10
    assert ModelConfig(d_model=24, n_heads=3).d_k == 8


def test_rejects_d_model_not_divisible_by_heads_naming_valid_counts():
    with pytest.raises(ValueError) as e:
        ModelConfig(d_model=64, n_heads=6)
    msg = str(e.value)
    assert "n_heads" in msg and "64" in msg
    for h in ("1", "2", "4", "8", "16"):
        assert h in msg
    assert "[1, 2, 4, 8, 16, 32, 64]" in msg


@pytest.mark.parametrize("field", ["vocab_size", "d_model", "n_heads", "n_layers", "max_len"])
@pytest.mark.parametrize("value", [0, -3])
def test_rejects_non_positive_sizes(field, value):
    with pytest.raises(ValueError, match=field):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("kw,name", [({"d_ff": -1}, "d_ff"), ({"vocab_size": 3.5}, "vocab_size"),
                                     ({"n_layers": True}, "n_layers"), ({"ln_eps": 0.0}, "ln_eps")])
def test_rejects_bad_types(kw, name):
    with pytest.raises(ValueError, match=name):
        ModelConfig(**kw)


@pytest.mark.parametrize("kw", [{"pos_encoding": "rotary"}, {"norm": "sandwich"}, {"activation": "swish"}])
def test_rejects_unknown_options_listing_the_known_ones(kw):
    (field, bad), = kw.items()
    with pytest.raises(ValueError) as e:
        ModelConfig(**kw)
    assert field in str(e.value) and bad in str(e.value)
    assert any(ok in str(e.value) for ok in ("sinusoidal", "pre", "gelu"))


def test_from_dict_rejects_unknown_keys_and_round_trips():
    cfg = ModelConfig(vocab_size=12, d_model=8, n_heads=2, norm="post")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown config keys.*'n_head'"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_head": 2})
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        ModelConfig.from_dict(["not", "a", "dict"])


def test_config_is_frozen():
    cfg = ModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'd_model'"):
        cfg.d_model = 3  # type: ignore[misc]
    assert cfg.replace(n_layers=5).n_layers == 5 and cfg.n_layers == 2


def test_one_rule_for_the_offered_head_counts():
    """model.config.valid_heads is the app's one rule (sidebar and Train page): every offered count
    divides d_model, leaves d_k >= MIN_D_K, and builds a valid config."""
    from model.config import D_MODEL_CHOICES, HEAD_CHOICES, MIN_D_K, valid_heads
    for d in D_MODEL_CHOICES:
        heads = valid_heads(d)
        assert heads and heads == [h for h in HEAD_CHOICES if d % h == 0 and d // h >= MIN_D_K], d
        for h in heads:
            assert ModelConfig(d_model=d, n_heads=h).d_k >= MIN_D_K
    assert valid_heads(8) == [1, 2] and valid_heads(64) == [1, 2, 4, 8, 16]
