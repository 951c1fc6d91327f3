"""viz.flash: figures carry the numbers they are given, mark the tile, and reject bad shapes."""
import numpy as np
import pytest

from viz.flash import output_progress, running_stats, tile_scores


def test_tile_scores_marks_blocks_and_blanks_masked():
    s = np.arange(25, dtype=float).reshape(5, 5)
    allowed = np.tril(np.ones((5, 5), bool))
    fig = tile_scores(s, allowed, list("abcde"), k_start=2, k_end=4, tile=2)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[4, 2] == 22.0
    shapes = fig.layout.shapes
    current = [sh for sh in shapes if sh.line.width == 4][0]
    assert (current.x0, current.x1) == (1.5, 3.5)
    veil = [sh for sh in shapes if sh.fillcolor][0]
    assert (veil.x0, veil.x1) == (3.5, 4.5)  # key 4 not read yet
    assert len([sh for sh in shapes if sh.line.width == 1.5]) == 1  # block 0..1 already read
    assert list(fig.data[0].x)[:2] == ["0:a", "1:b"]


def test_tile_scores_escapes_labels_and_checks_range():
    fig = tile_scores(np.zeros((2, 2)), None, ["<b>", "x"], k_start=0, k_end=2, tile=2)
    assert "<b>" not in "".join(fig.data[0].x)
    with pytest.raises(ValueError, match="outside"):
        tile_scores(np.zeros((2, 2)), None, ["a", "b"], k_start=1, k_end=3, tile=2)
    with pytest.raises(ValueError, match="labels"):
        tile_scores(np.zeros((2, 2)), None, ["a"], k_start=0, k_end=1, tile=1)


def test_running_stats_gap_for_minus_inf():
    m = np.array([1.0, -np.inf])
    fig = running_stats(m, np.array([2.0, 0.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0]), ["a", "b"])
    y = np.asarray(fig.data[0].y, dtype=float)
    assert y[0] == 1.0 and np.isnan(y[1])  # no allowed key read yet: a gap, not -inf
    assert list(np.asarray(fig.data[3].y, dtype=float)) == [5.0, 6.0]
    with pytest.raises(ValueError, match="one value per query"):
        running_stats(m, np.zeros(3), m, m, ["a", "b"])


def test_output_progress_shapes():
    a, b = np.ones((3, 4)), np.zeros((3, 4))
    fig = output_progress(a, b, ["x", "y", "z"])
    assert np.array_equal(np.asarray(fig.data[0].z), a) and np.array_equal(np.asarray(fig.data[1].z), b)
    with pytest.raises(ValueError, match="same shape"):
        output_progress(a, np.zeros((3, 5)), ["x", "y", "z"])
