"""classroom/causal_vs_bidirectional.py: top-k change, total variation, the per-token state change."""
import math

import numpy as np
import pytest

from classroom import (
    causal_vs_bidirectional,
    ffn_output,
)


def test_one_topk_and_total_variation():
    p = np.array([0.1, 0.4, 0.1, 0.4])
    assert ffn_output.topk(p, 3).tolist() == [1, 3, 0]  # ties: lower index first
    assert ffn_output.topk(p, 0).tolist() == [1] and ffn_output.topk(p, 99).tolist() == [1, 3, 0, 2]
    assert ffn_output.topk(np.stack([p, p[::-1]]), 1).tolist() == [[1], [0]]
    q = np.array([0.4, 0.1, 0.4, 0.1])
    assert causal_vs_bidirectional.total_variation(p, q) == pytest.approx(0.6)
    assert causal_vs_bidirectional.total_variation(p, p) == 0.0
    assert causal_vs_bidirectional.total_variation([1.0, 0.0], [0.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match="same shape"):
        causal_vs_bidirectional.total_variation(p, q[:3])


def test_state_change_per_token():
    a = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    b = np.array([[0.0, 2.0], [6.0, 8.0], [1.0, 0.0]])
    c = causal_vs_bidirectional.state_change(a, b)
    np.testing.assert_allclose(c.cosine, [0.0, 1.0, 0.0])  # orthogonal, same direction, a zero vector
    np.testing.assert_allclose(c.distance, [math.sqrt(5.0), 5.0, 1.0])
    np.testing.assert_allclose(c.norm_a, [1.0, 5.0, 0.0])
    with pytest.raises(ValueError, match=r"\(T, D\)"):
        causal_vs_bidirectional.state_change(a, b[:2])
