"""patterns.label_head on synthetic attention matrices with known answers."""
from __future__ import annotations

import numpy as np
import pytest

from model.patterns import THRESHOLDS, label_head, label_heads, pattern_scores, pattern_scores_all

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


def _sharp_random(peak: float) -> np.ndarray:
    """Each row puts `peak` of its weight on a "random" key that is never i, i-1, i+1 or 0."""
    rng = np.random.default_rng(0)
    w = np.zeros((T, T))
    targets = [3, 5, 7, 5, 1, 2, 3, 4]
    for i, j in enumerate(targets):
        assert j not in (i, i - 1, i + 1, 0)
        w[i] = rng.dirichlet(np.full(T, 0.05)) * (1 - peak)
        w[i, j] += peak
        w[i] /= w[i].sum()
    return w


def test_random_sharp_pattern_is_focused():
    """A content-based head (each query on one key, no fixed offset) is "focused", scored by the
    mean of the rows' largest weights (rows i >= 1: all 8 keys allowed); issue 21: the masked LM's
    heads are like this and were all "other"."""
    w = _sharp_random(0.9)
    hp = label_head(w)
    assert hp.kind == "focused", hp.scores
    assert hp.score == pytest.approx(np.mean([w[i].max() for i in range(1, T)]))
    assert all(hp.scores[k] < THRESHOLDS[k] for k in THRESHOLDS if k != "focused"), hp.scores


def test_half_sharp_random_pattern_is_other():
    w = _sharp_random(0.35)
    hp = label_head(w)
    assert hp.kind == "other"
    assert all(hp.scores[k] < THRESHOLDS[k] for k in THRESHOLDS), hp.scores
    assert hp.scores["broad/uniform"] < 0.9 and max(hp.scores.values()) < 0.6
    # "other" reports the score of the kind that came closest to its threshold
    best = max(THRESHOLDS, key=lambda k: hp.scores[k] - THRESHOLDS[k])
    assert hp.score == hp.scores[best] and hp.nearest == best
    assert hp.threshold == THRESHOLDS[best] and hp.margin == pytest.approx(hp.score - THRESHOLDS[best])
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


def loop_scores(w: np.ndarray, special: np.ndarray | None = None) -> dict[str, float]:
    """The scores' definitions (module docstring) row by row, as a reference for the vectorised pass."""
    Tq, Tk = w.shape
    live = [i for i in range(1, min(Tq, Tk)) if w[i].sum() > 0.5]
    if Tq < 2 or Tk < 2 or not live:
        return {k: 0.0 for k in THRESHOLDS}
    ent = []
    for i in live:
        p = w[i][w[i] > 0]
        if len(p) > 1:
            ent.append(-(p * np.log(p)).sum() / np.log(len(p)))
    with_next = [i for i in live if i + 1 < Tk]
    spec = np.mean([w[i, special].sum() for i in live]) if special is not None and special.any() else 0.0
    return {"previous-token": np.mean([w[i, i - 1] for i in live]), "self/diagonal": np.mean([w[i, i] for i in live]),
            "first-token sink": np.mean([w[i, 0] for i in live]), "broad/uniform": np.mean(ent) if ent else 0.0,
            "next-token": np.mean([w[i, i + 1] for i in with_next]) if with_next else 0.0,
            "[CLS]/[SEP] sink": spec,
            "focused": np.mean(wide) if (wide := [w[i].max() for i in live if (w[i] > 0).sum() >= 4]) else 0.0}


@pytest.mark.parametrize("with_special", [False, True])
@pytest.mark.parametrize("shape", [(3, 6, 6), (2, 4, 9, 9), (5, 7, 4), (4, 1, 5), (2, 3, 1, 1)])
def test_vectorised_scores_and_labels_equal_the_row_loop_per_head(shape, with_special):
    rng = np.random.default_rng(sum(shape))
    w = rng.dirichlet(np.full(shape[-1], 0.3), size=shape[:-1])
    if shape[-2] == shape[-1] and shape[-1] > 2:
        w = np.where(np.tril(np.ones(shape[-2:], bool)), w, 0.0)  # causal, renormalised
        w = w / w.sum(-1, keepdims=True)
        w[..., -2:, :] = 0.0  # padded query rows: fully masked
    w.reshape(-1, *shape[-2:])[0] = np.eye(*shape[-2:])  # one head with a known label
    flat = w.reshape(-1, *shape[-2:])
    special = None
    if with_special:  # [CLS] first and [SEP] last, as WordPiece encodes a sentence
        special = np.zeros(shape[-1], bool)
        special[[0, -1]] = True
    got = pattern_scores_all(w, special)
    for k in THRESHOLDS:
        assert got[k].shape == shape[:-2]
    for i, head in enumerate(flat):
        ref = loop_scores(head, special)
        for k in THRESHOLDS:
            assert got[k].reshape(-1)[i] == pytest.approx(ref[k], abs=1e-12), (i, k)
    if w.ndim in (3, 4):
        labels = label_heads(w, special)
        labels = labels if w.ndim == 3 else [p for layer in labels for p in layer]
        assert len(labels) == len(flat)
        for got_p, ref_p in zip(labels, [label_head(head, special) for head in flat]):  # equal up to summation order
            assert (got_p.kind, got_p.nearest) == (ref_p.kind, ref_p.nearest)
            assert got_p.score == pytest.approx(ref_p.score, abs=1e-12)
            assert got_p.scores == pytest.approx(ref_p.scores, abs=1e-12)
        if min(shape[-2:]) > 2:
            assert labels[0].kind == "self/diagonal"


def shifted(t: int, by: int) -> np.ndarray:
    """Each query attends to the token `by` places back (or to token 0 when there is none)."""
    w = np.zeros((t, t))
    for i in range(t):
        w[i, max(i - by, 0)] = 1
    return w


def sink(t: int) -> np.ndarray:
    w = np.zeros((t, t))
    w[:, 0] = 1
    return w


def test_label_heads_keeps_layer_and_head_order():
    # 3 layers x 2 heads (not square, every cell different): a swap of the layer and head axes,
    # or a reshape in the wrong order, changes the answer.
    planted = [[np.eye(T), shifted(T, 1)],
               [sink(T), causal_uniform(T)],
               [shifted(T, 3), np.eye(T)[::-1]]]
    expected = [["self/diagonal", "previous-token"],
                ["first-token sink", "broad/uniform"],
                ["other", "other"]]
    w = np.array(planted)  # (L=3, H=2, T, T)
    assert w.shape == (3, 2, T, T)
    labels = label_heads(w)
    assert [len(layer) for layer in labels] == [2, 2, 2]
    assert [[p.kind for p in layer] for layer in labels] == expected
    # the two "other" cells are told apart by their nearest kind
    assert labels[2][0].nearest != labels[2][1].nearest or labels[2][0].score != labels[2][1].score
    for l in range(3):
        for h in range(2):
            assert labels[l][h].scores == label_head(planted[l][h]).scores, (l, h)
    assert [p.kind for p in label_heads(w[1])] == expected[1]
    assert [p.kind for p in label_heads(w[:, 1])] == [row[1] for row in expected]  # one head, every layer
    with pytest.raises(ValueError, match="H, Tq, Tk"):
        label_heads(np.eye(T))


# Patterns real models show (issue 17): planted in otherwise broad heads.

def planted(t: int, key_of_row, strength: float = 0.8) -> np.ndarray:
    """Bidirectional rows: `strength` on key_of_row(i) (when it exists), the rest spread evenly."""
    w = np.full((t, t), (1 - strength) / t)
    for i in range(t):
        j = key_of_row(i)
        if j is not None and 0 <= j < t:
            w[i, j] += strength
        else:
            w[i] = 1 / t
    return w


def test_planted_next_token_head():
    hp = label_head(planted(10, lambda i: i + 1))
    assert hp.kind == "next-token" and hp.score == pytest.approx(0.8 + 0.02)
    assert hp.scores["previous-token"] < 0.05


def test_next_token_is_zero_under_a_causal_mask():
    assert pattern_scores(causal_uniform(8))["next-token"] == 0.0


def test_planted_cls_sep_sink_needs_the_special_keys():
    t = 10
    special = np.zeros(t, bool)
    special[[0, t - 1]] = True  # [CLS] ... [SEP]
    w = np.full((t, t), 0.1 / (t - 2))
    w[:, 0], w[:, t - 1] = 0.5, 0.4  # 90% of every row on [CLS] and [SEP]
    w[:, 1:t - 1] = 0.1 / (t - 2)
    hp = label_head(w, special)
    assert hp.kind == "[CLS]/[SEP] sink" and hp.score == pytest.approx(0.9)
    plain = label_head(w)  # without knowing the special keys: the old kinds only
    assert plain.kind == "first-token sink" and plain.scores["[CLS]/[SEP] sink"] == 0.0


def test_planted_previous_token_head_in_a_bidirectional_model():
    hp = label_head(planted(10, lambda i: i - 1), np.eye(1, 10, 0, dtype=bool)[0])
    assert hp.kind == "previous-token" and hp.score == pytest.approx(0.82)


def test_special_must_have_one_flag_per_key():
    with pytest.raises(ValueError, match="special"):
        label_head(np.eye(4), np.ones(3, bool))


# ---------------------------------------------------------------- the sink hidden (issue 35)
def sink_head(T: int, on_sink: float, rest) -> np.ndarray:
    """Causal rows t >= 1 giving `on_sink` to key 0 and the rest as rest(i) (a (T,) row over keys 1..i)."""
    w = np.zeros((T, T))
    w[0, 0] = 1.0
    for i in range(1, T):
        r = np.zeros(T)
        r[1:i + 1] = rest(i)[1:i + 1]
        r = r / r.sum() * (1 - on_sink)
        r[0] = on_sink
        w[i] = r
    return w


def prev_rest(i: int) -> np.ndarray:
    r = np.full(T, 0.02)
    r[i - 1] = 1.0  # mostly the previous token (key i - 1 >= 1 from row 2 on)
    return r


def loop_hidden(w: np.ndarray, keys: np.ndarray) -> np.ndarray:
    out = np.zeros_like(w, dtype=np.float64)
    for i in range(w.shape[0]):
        left = [j for j in range(w.shape[1]) if not keys[j]]
        tot = sum(w[i, j] for j in left)
        if tot > 1e-12:
            for j in left:
                out[i, j] = w[i, j] / tot
    return out


def test_hide_keys_against_loops():
    from model.patterns import hide_keys
    rng = np.random.default_rng(3)
    w = np.tril(rng.random((6, 6)))
    w /= w.sum(1, keepdims=True)
    for keys in (np.eye(1, 6, 0, dtype=bool)[0], np.array([1, 0, 0, 1, 0, 1], bool)):
        np.testing.assert_allclose(hide_keys(w, keys), loop_hidden(w, keys), atol=1e-12)
    # rows left with fewer than min_left keys of positive weight are dropped (all zero)
    out = hide_keys(w, np.eye(1, 6, 0, dtype=bool)[0], min_left=2)
    assert (out[:2] == 0).all() and np.allclose(out[2:].sum(1), 1)
    with pytest.raises(ValueError, match="shape"):
        hide_keys(w, np.ones(5, bool))


def test_a_sink_head_is_labelled_by_what_it_does_with_the_rest():
    w = sink_head(T, 0.9, prev_rest)
    keys = np.eye(1, T, 0, dtype=bool)[0]
    assert label_head(w).kind == "first-token sink"  # as computed: the sink wins
    hp = label_head(w, hide=keys)
    assert hp.kind == "previous-token" and hp.sink == pytest.approx(0.9)
    # the score on the renormalised rows 2..T-1 (row 1 is left with one key and dropped), by loops
    h = loop_hidden(w, keys)
    want = np.mean([h[i, i - 1] for i in range(2, T)])
    assert hp.score == pytest.approx(want)
    assert "first-token sink" not in hp.scores and "[CLS]/[SEP] sink" not in hp.scores
    assert hp.title() == f"previous-token {want:.2f} · sink 0.90"
    assert hp.short().endswith(" sink .90")
    assert label_head(w).sink is None and label_head(w).title() == "first-token sink 0.90"


def test_hidden_labels_for_a_stack_equal_one_head_at_a_time_and_bert_keys():
    rng = np.random.default_rng(5)
    heads = np.stack([sink_head(T, s, prev_rest) for s in (0.2, 0.6, 0.95)] +
                     [np.tril(rng.random((T, T))) for _ in range(3)])
    heads /= heads.sum(-1, keepdims=True)
    keys = np.zeros(T, bool)
    keys[[0, T - 1]] = True  # BERT: [CLS] and [SEP]
    stack = label_heads(heads.reshape(2, 3, T, T), keys, hide=keys)
    for n, head in enumerate(heads):
        one = label_head(head, keys, hide=keys)
        got = stack[n // 3][n % 3]
        assert (got.kind, got.nearest) == (one.kind, one.nearest)
        assert got.score == pytest.approx(one.score) and got.sink == pytest.approx(one.sink)
        want_sink = np.mean([head[i, 0] + head[i, T - 1] for i in range(1, T)])
        assert got.sink == pytest.approx(want_sink)
def test_other_title_never_reads_as_false_after_rounding():
    """Issue 33: "other (first-token sink 0.50 < 0.5)" for a score of 0.4996. The score is written
    with the digits it takes to stay below its threshold as shown."""
    from model.patterns import HeadPattern, below
    scores = {k: 0.0 for k in THRESHOLDS}
    scores["first-token sink"] = 0.4996
    hp = HeadPattern(kind="other", score=0.4996, scores=scores, nearest="first-token sink")
    assert hp.title() == "other (first-token sink 0.4996 < 0.5)"
    shown = hp.title().split("(first-token sink ")[1].split(" <")[0]
    assert float(shown) < 0.5
    assert below(0.37, 0.4) == "0.37" and below(0.395, 0.4) == "0.395" and below(0.3999999999, 0.4) == "0.399999"
    assert below(0.8951, 0.9) == "0.895"  # "0.90" would equal the threshold
