"""classroom/search.py: the search-engine analogy is the attention formula (numpy reference)."""
import numpy as np
import pytest

from classroom import search as se


@pytest.mark.parametrize("scale", [True, False])
def test_search_is_softmax_qkT_v(scale):
    q = np.array([2.0, -1.0, 0.5])
    r = se.search(q, scale=scale)
    K, V = se.LIBRARY.keys, se.LIBRARY.values
    z = K @ q / (np.sqrt(3) if scale else 1.0)
    w = np.exp(z - z.max())
    w /= w.sum()
    np.testing.assert_allclose(r.scores, K @ q, rtol=1e-12)
    assert r.scale == pytest.approx(1 / np.sqrt(3) if scale else 1.0, rel=1e-12)
    np.testing.assert_allclose(r.scaled, z, rtol=1e-12)
    np.testing.assert_allclose(r.weights, w, rtol=1e-12)
    np.testing.assert_allclose(r.output, w @ V, rtol=1e-12)
    assert r.weights.sum() == pytest.approx(1.0)


def test_search_rejects_a_query_of_the_wrong_width():
    with pytest.raises(ValueError, match="3 numbers"):
        se.search([1.0, 2.0])
