"""The Cost of attention page (AppTest) and its timing summary (classroom/cost.py): the fits, their error, the runs' spread."""
from __future__ import annotations


import numpy as np
import pytest

from tests.helpers import all_text, figures, open_page


# ---------------------------------------------------------------- point 10: the cost page
def test_timing_summary_follows_the_numbers():
    """'a fitted "theory" … and a caption saying the T² term shows at the longest lengths': the
    caption must be computed from the measurement. Fake timings with a known crossover."""
    from classroom.cost import fit_linear_quadratic, timing_summary
    Ts = [16, 32, 64, 128, 256, 512, 1024]
    c, a, b = 2e-4, 1e-6, 4e-9  # b·T² = c + a·T at T = (a + sqrt(a² + 4bc)) / 2b
    x = (a + np.sqrt(a * a + 4 * b * c)) / (2 * b)
    blk = [c + a * t + b * t * t for t in Ts]
    f = fit_linear_quadratic(Ts, blk)
    np.testing.assert_allclose([f.c, f.a, f.b], [c, a, b], rtol=1e-6)
    assert f.crossover == pytest.approx(x, rel=1e-6)
    np.testing.assert_allclose(f.quadratic, [b * t * t for t in Ts], rtol=1e-5)
    np.testing.assert_allclose(f.share, f.quadratic / f.fit, rtol=1e-12)
    att = [0.5 * v for v in blk]
    text = timing_summary(Ts, blk, att, max_len=128)
    assert f"half of the block's time at T ≈ {x:,.0f}" in text
    share = b * 1024 ** 2 / blk[-1]
    assert f"({100 * share:.0f}% at T = 1,024)" in text
    assert "reads at most 128 tokens" in text and "faster at a longer length" not in text
    # linear timings: no T² claim at all; a dip is called noise
    lin = [1e-4 + 1e-6 * t for t in Ts]
    lin[3] = lin[2] * 0.9
    text = timing_summary(Ts, lin, [0.1 * v for v in lin], max_len=2048)
    assert "no T² term" in text or "stays under half" in text
    assert "T = 64 → 128" in text and "reads at most" not in text
    # a noisy longest length (+40%) must not wipe out the fixed overhead seen at short lengths
    noisy = [5e-4 + 2e-8 * t * t for t in Ts]
    noisy[-1] *= 1.4
    assert abs(fit_linear_quadratic(Ts, noisy).c - 5e-4) < 0.1 * 5e-4
    # a tiny T² term: the crossing is beyond the lengths measured
    small = [1e-3 + 1e-6 * t + 1e-12 * t * t for t in Ts]
    assert "beyond the lengths measured" in timing_summary(Ts, small, small, max_len=128)


def test_timing_summary_states_the_fits_error_honestly():
    """Audit: the fitted curve sat ~30% under the measured time at T = 1,024 while the caption said
    nothing of it. The summary now gives the fit's error where it is largest, beside the runs' spread."""
    from classroom.cost import fit_linear_quadratic, timing_summary
    Ts = [16, 27, 45, 76, 128, 215, 362, 609, 1024]
    clean = [4e-4 + 3e-7 * t + 1.7e-8 * t * t for t in Ts]
    spread = [0.03] * len(Ts)
    text = timing_summary(Ts, clean, [0.3 * v for v in clean], max_len=128, spread=spread)
    assert "stays within 0% of every measured time (the runs at one length varied by up to 3%)" in text
    # the longest length 40% above a quadratic: the fit, weighing relative errors alike, stays under it
    steep = list(clean)
    steep[-1] *= 1.4
    f = fit_linear_quadratic(Ts, steep)
    err = f.rel_err[-1]
    assert err < -0.15  # the situation the audit saw
    text = timing_summary(Ts, steep, [0.3 * v for v in steep], max_len=128, spread=spread)
    assert f"{100 * abs(err):.0f}% under the measured time at T = 1,024" in text
    assert f"fit {1e3 * f.fit[-1]:.2f} ms, measured {1e3 * steep[-1]:.2f} ms" in text
    assert "more than the runs at that length varied (3%)" in text
    assert "grows faster there than c + a·T + b·T² allows" in text
    assert "stays within" not in text
    # without a spread (old callers) the sentence still states the error
    assert "under the measured time at T = 1,024" in timing_summary(Ts, steep, steep, max_len=128)


def test_block_timing_reports_the_runs_spread():
    from classroom.cost import measure_block_time
    from model.config import ModelConfig
    cfg = ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=64)
    r = measure_block_time(cfg, [8, 16, 32], repeats=3)
    for k in ("attention", "block", "attention_spread", "block_spread"):
        assert getattr(r, k).shape == (3,) and np.isfinite(getattr(r, k)).all(), k
    assert (r.block_spread >= 0).all() and (r.block > 0).all()
    assert (r.attention_spread >= 0).all() and (r.attention > 0).all()


def test_cost_page_measures_long_lengths_and_attention_alone():
    at = open_page("pages/cost.py")
    fig = next(f for f in figures(at) if "block" in str(f["layout"].get("title", {}).get("text", "")))
    names = [t.get("name") for t in fig["data"]]
    assert "attention alone (measured)" in names and "whole block (measured)" in names
    from tests.helpers import decode
    x = decode(fig["data"][0]["x"])
    assert x.max() >= 512  # past the toy model's 128
    text = all_text(at)
    assert "the T² term shows at the longest lengths" not in text
    assert "ms beside the whole block's" in text
    assert "The fitted curve" in text  # the fit's error, stated (stays within … / is … under …)
    cols = [c for d in at.dataframe for c in getattr(d.value, "columns", [])]
    assert "fit − measured (%)" in cols and "runs' spread, median vs best (%)" in cols


def test_the_measured_lengths_are_the_ones_said():
    """The caption named 1,024 tokens as the longest timed length while SmolLM2's toggle (and the
    grid, classroom.cost.block_time_grid) went to 8,192: the caption now reads the grid."""
    from model.pretrained import PRETRAINED
    if "smollm2-135m" not in PRETRAINED:
        pytest.skip("SmolLM2 is not installed")
    at = open_page("pages/cost.py", src="smollm2-135m")
    text = all_text(at)
    assert "timed at lengths up to 8,192 tokens" in text and "up to 1,024 tokens, the best" not in text
    assert "up to 8,192" in at.toggle(key="cost_measure").label
