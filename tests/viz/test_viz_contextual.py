"""viz/contextual.py: the cosine-by-depth chart."""
import pytest

from viz.contextual import MIN_SPAN, cosine_by_depth


def test_cosine_chart_does_not_blow_float_noise_up():
    """Issue 33: cosine 1.0 ± 1e-7 at every stage autoscaled into a zig-zag. The axis reaches 1 and
    spans at least 0.1; a real spread is shown whole."""
    flat = cosine_by_depth(["a", "b", "c"], [1.0, 1 - 1e-7, 1 + 1e-7], name="x")
    lo, hi = flat.layout.yaxis.range
    assert hi >= 1.0 and hi - lo >= MIN_SPAN
    wide = cosine_by_depth(["a", "b"], [1.0, -0.3], name="x")
    lo, hi = wide.layout.yaxis.range
    assert lo < -0.3 and hi >= 1.0
    with pytest.raises(ValueError, match="one value per stage"):
        cosine_by_depth(["a"], [1.0, 0.5], name="x")
