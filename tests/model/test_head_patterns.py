"""patterns.label_head on synthetic attention matrices with known answers."""
from __future__ import annotations

import numpy as np
import pytest

from model.patterns import THRESHOLDS, label_head, pattern_scores

T = 8


def causal_uniform(t: int) -> np.ndarray:
    w = np.tril(np.ones((t, t)))
    return w / w.sum(1, keepdims=True)


def test_identity_is_self_diagonal():
    hp = label_head(np.eye(T))
    assert hp.kind == "self/diagonal" and hp.score == pytest.approx(1.0)
    assert hp.scores["previous-token"] == 0 and hp.scores["first-token sink"] == 0


def test_shifted_identity_is_previous_token():
    w = np.zeros((T, T))
    w[0, 0] = 1
    w[np.arange(1, T), np.arange(T - 1)] = 1
    hp = label_head(w)
    assert hp.kind == "previous-token" and hp.score == pytest.approx(1.0)
    assert hp.scores["self/diagonal"] == 0


def test_all_weight_on_first_column_is_sink():
    w = np.zeros((T, T))
    w[:, 0] = 1
    hp = label_head(w)
    assert hp.kind == "first-token sink" and hp.score == pytest.approx(1.0)
    assert hp.scores["previous-token"] == pytest.approx(1 / (T - 1))


@pytest.mark.parametrize("t", [3, 4, 8, 16])
def test_causal_uniform_is_broad(t):
    hp = label_head(causal_uniform(t))
    assert hp.kind == "broad/uniform", hp.scores
    assert hp.score == pytest.approx(1.0)


def test_bidirectional_uniform_is_broad():
    hp = label_head(np.full((T, T), 1 / T))
    assert hp.kind == "broad/uniform" and hp.score == pytest.approx(1.0)


def test_random_sharp_pattern_is_other():
    rng = np.random.default_rng(0)
    w = np.zeros((T, T))
    # each row puts its weight on a "random" key that is never i, i-1 or 0
    targets = [3, 5, 6, 7, 1, 2, 3, 4]
    for i, j in enumerate(targets):
        assert j not in (i, i - 1, 0)
        w[i] = rng.dirichlet(np.full(T, 0.05)) * 0.1
        w[i, j] += 0.9
        w[i] /= w[i].sum()
    hp = label_head(w)
    assert hp.kind == "other"
    assert all(hp.scores[k] < THRESHOLDS[k] for k in THRESHOLDS), hp.scores
    assert hp.scores["broad/uniform"] < 0.5 and max(hp.scores.values()) < 0.4
    # "other" reports the score of the kind that came closest to its threshold
    best = max(THRESHOLDS, key=lambda k: hp.scores[k] - THRESHOLDS[k])
    assert hp.score == hp.scores[best] and hp.nearest == best
    # and the title says it fell short: "other (<nearest> <score> < <threshold>)"
    assert hp.title() == f"other ({best} {hp.scores[best]:.2f} < {THRESHOLDS[best]:g})"
    assert label_head(np.eye(T)).title() == "self/diagonal 1.00"


def test_fully_masked_rows_are_ignored():
    w = np.eye(T)
    w[5:] = 0  # padded query rows: all zeros
    hp = label_head(w)
    assert hp.kind == "self/diagonal" and hp.score == pytest.approx(1.0)


def test_scores_match_hand_computation():
    s = pattern_scores(causal_uniform(4))
    # rows 1..3 of causal uniform: weights 1/2, 1/3, 1/4 on key i-1, key 0 and key i
    assert s["previous-token"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert s["first-token sink"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert s["self/diagonal"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_entropy_score_matches_a_row_by_row_loop():
    rng = np.random.default_rng(3)
    w = np.where(np.tril(np.ones((T, T), bool)), rng.random((T, T)) ** 3, 0.0)
    w[2, 1] = 0.0  # a zero inside the allowed region: not counted as an allowed key
    w /= w.sum(1, keepdims=True)
    ent = []
    for i in range(1, T):
        p = w[i][w[i] > 0]
        if len(p) > 1:
            ent.append(-(p * np.log(p)).sum() / np.log(len(p)))
    assert pattern_scores(w)["broad/uniform"] == pytest.approx(np.mean(ent), rel=1e-12)


def test_rejects_wrong_rank():
    with pytest.raises(ValueError, match="Tq, Tk"):
        label_head(np.ones((2, 3, 3)))
