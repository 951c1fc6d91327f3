"""classroom/multi_head.py: parameter rows and presets against the config's formulas, GQA groups and savings."""

import pytest

from classroom import multi_head
from model.config import PRESETS, ModelConfig, param_count


def test_param_rows_and_preset():
    g = PRESETS["gpt2-small"]
    rows = multi_head.param_rows(g)
    assert sum(r.parameters for r in rows) == 124_439_808 == param_count(g)
    assert sum(r.share_pct for r in rows) == pytest.approx(100.0)
    shapes = {r.step: r.shape for r in multi_head.shape_rows(g, 1024)}
    assert shapes["Q_j, K_j, V_j (one head)"] == "1024 × 64"
    assert shapes["scores Q_j K_jᵀ (one head)"] == "1024 × 1024"
    assert shapes["concat(Z_1 … Z_h)"] == "1024 × 768"


def test_gqa_groups_and_savings():
    cfg = ModelConfig(vocab_size=30, d_model=48, n_heads=6, n_kv_heads=2, n_layers=3, max_len=32)
    assert multi_head.groups([0, 0, 0, 1, 1, 1]) == {0: [0, 1, 2], 1: [3, 4, 5]}
    this, full = multi_head.savings(cfg, context=1000)
    assert (this.variant, this.kv_heads, full.variant, full.kv_heads) == ("this model", 2, "full multi-head", 6)
    assert this.kv_params == 3 * 48 * 2 * (8 + 8) and full.kv_params == 3 * this.kv_params
    assert this.cache_bytes_per_token == 2 * 3 * 2 * 8 * 4 and full.cache_bytes_per_token == 3 * this.cache_bytes_per_token
    assert this.context == 1000 and this.cache_mb == pytest.approx(this.cache_bytes_per_token * 1000 / 1e6)
