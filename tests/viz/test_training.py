"""viz.train.py: loss curve and per-head score curves (pure figures)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import decode
from viz.train import loss_curve, moving_average, score_curves


def _y(trace) -> np.ndarray:
    return np.asarray(decode(trace["y"]) if isinstance(trace["y"], dict) else trace["y"], dtype=float)


def test_moving_average_matches_a_loop():
    rng = np.random.default_rng(0)
    v = rng.normal(size=37)
    for window in (1, 3, 10, 50):
        expect = np.array([v[max(0, i - window + 1): i + 1].mean() for i in range(len(v))])
        np.testing.assert_allclose(moving_average(v, window), expect, rtol=1e-12)


def test_moving_average_skips_non_finite():
    v = np.array([1.0, np.nan, 3.0, np.inf, 5.0])
    np.testing.assert_allclose(moving_average(v, 2), [1.0, 1.0, 3.0, 3.0, 5.0])
    assert np.isnan(moving_average(np.array([np.nan, np.nan]), 2)).all()
    with pytest.raises(ValueError, match="window"):
        moving_average(v, 0)


def test_loss_curve_data_and_range():
    losses = np.linspace(5.0, 2.0, 40)
    fig = loss_curve(losses, total_steps=100, window=5, baseline=np.log(300)).to_plotly_json()
    raw, avg = fig["data"]
    np.testing.assert_allclose(_y(raw), losses)
    np.testing.assert_array_equal(np.asarray(decode(raw["x"]) if isinstance(raw["x"], dict) else raw["x"]),
                                  np.arange(1, 41))
    np.testing.assert_allclose(_y(avg), moving_average(losses, 5))
    assert avg["name"] == "mean of last 5"
    assert fig["layout"]["xaxis"]["range"] == [0, 100.5]  # the live curve grows towards step 100
    assert fig["layout"]["shapes"][0]["y0"] == pytest.approx(np.log(300))


def test_loss_curve_nonfinite_become_gaps_and_empty_is_fine():
    fig = loss_curve([4.0, float("inf"), 3.0]).to_plotly_json()
    y = _y(fig["data"][0])
    assert y[0] == 4.0 and np.isnan(y[1]) and y[2] == 3.0
    empty = loss_curve([], total_steps=50).to_plotly_json()
    assert "waiting" in empty["layout"]["annotations"][0]["text"]
    with pytest.raises(ValueError, match="total_steps"):
        loss_curve([1.0, 2.0, 3.0], total_steps=2)
    with pytest.raises(ValueError, match="1-D"):
        loss_curve(np.zeros((2, 2)))


def test_score_curves_one_line_per_head_escaped():
    steps = np.array([0, 10, 20])
    scores = np.array([[0.1, 0.2], [0.3, 0.5], [0.7, 0.9]])
    fig = score_curves(steps, scores, ["L0 H0", "<b>x</b>"], score_name="previous-token score",
                       highlight=10).to_plotly_json()
    assert [t["name"] for t in fig["data"]] == ["L0 H0", "&lt;b&gt;x&lt;/b&gt;"]
    np.testing.assert_allclose(_y(fig["data"][1]), [0.2, 0.5, 0.9])
    assert fig["layout"]["shapes"][0]["x0"] == 10
    with pytest.raises(ValueError, match="one row per snapshot"):
        score_curves(steps[:2], scores, ["a", "b"])
    with pytest.raises(ValueError, match="one name per head"):
        score_curves(steps, scores, ["a"])
