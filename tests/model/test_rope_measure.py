"""classroom/positional.py against references written here: a rotation by the paper's angles in numpy,
and the relative-position property checked on a pair of positions by hand."""
import numpy as np
import pytest

from classroom import positional


def rotate(x, pos, theta):
    """RoFormer's rotation in numpy, pairs (i, i + d/2): [x_i, x_{i+d/2}] turned by pos·theta^(-2i/d)."""
    d = x.shape[0]
    half = d // 2
    out = x.astype(np.float64).copy()
    for i in range(half):
        a = pos * theta ** (-2 * i / d)
        c, s = np.cos(a), np.sin(a)
        out[i], out[i + half] = c * x[i] - s * x[i + half], s * x[i] + c * x[i + half]
    return out


def test_scores_depend_on_the_offset_only_and_match_a_numpy_rotation():
    g = np.random.default_rng(0)
    q, k = g.normal(size=64), g.normal(size=64)
    res = positional.relative_scores(q, k, 24, 100000.0)
    S = res.S
    for m, n in ((5, 2), (20, 17), (0, 3), (23, 0)):
        assert S[m, n] == pytest.approx(rotate(q, m, 1e5) @ rotate(k, n, 1e5), abs=1e-4)
    assert res.spread < 1e-4 < res.range  # constant along diagonals, not constant overall
    assert S[5, 2] == pytest.approx(S[20, 17], abs=1e-4)
    assert res.by_offset[list(res.offsets).index(3)] == pytest.approx(S[5, 2], abs=1e-4)


def test_pair_rotation_turns_by_the_frequency_times_the_position_and_keeps_length():
    g = np.random.default_rng(1)
    q = g.normal(size=8)
    pos = 3
    post = rotate(q, pos, 10000.0)
    got = positional.pair_rotation(q, post, [0, 1, 3])
    freqs = positional.pair_frequencies(8, 10000.0)
    for row in got:
        i = row.pair
        want = np.degrees(pos * 10000.0 ** (-2 * i / 8))
        assert row.angle_deg == pytest.approx((want + 180) % 360 - 180, abs=1e-4)
        assert row.norm_after == pytest.approx(row.norm_before)
        assert freqs[i] == pytest.approx(10000.0 ** (-2 * i / 8), rel=1e-5)
    with pytest.raises(ValueError):
        positional.pair_rotation(q, post, [4])
