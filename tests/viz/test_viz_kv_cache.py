"""viz/kv_cache.py: the bars carry the bytes given, names are escaped, and bad input raises
ValueError saying what to fix."""
import numpy as np
import plotly.graph_objects as go
import pytest

from tests.helpers import decode
from viz.kv_cache import bytes_bars


def test_bytes_bars():
    fig = bytes_bars(["MHA", "<i>GQA</i>"], [10.0, 5.0], text=["10 B", "5 B"], title="t")
    go.Figure(fig.to_dict())
    np.testing.assert_array_equal(decode(fig.to_plotly_json()["data"][0]["y"]), [10.0, 5.0])
    assert fig.data[0].x[1] == "&lt;i&gt;GQA&lt;/i&gt;"
    with pytest.raises(ValueError, match="one name per value"):
        bytes_bars(["a"], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        bytes_bars(["a"], [float("nan")])
