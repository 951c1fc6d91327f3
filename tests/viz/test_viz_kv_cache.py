"""viz/kv_cache.py: the bars carry the bytes given, names are escaped, and bad input raises
ValueError saying what to fix."""
import numpy as np
import plotly.graph_objects as go
import pytest

from tests.helpers import decode
from viz.kv_cache import bytes_bars


def test_bytes_bars():
    fig = bytes_bars(["MHA", "<i>GQA</i>"], [10.0, 5.0], title="t")
    go.Figure(fig.to_dict())
    np.testing.assert_array_equal(decode(fig.to_plotly_json()["data"][0]["y"]), [10.0, 5.0])
    assert list(fig.data[0].text) == ["10 B", "5 B"]
    assert fig.data[0].x[1] == "&lt;i&gt;GQA&lt;/i&gt;"
    with pytest.raises(ValueError, match="one name per value"):
        bytes_bars(["a"], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        bytes_bars(["a"], [float("nan")])


def test_bytes_bars_axis_and_bar_labels_share_one_unit():
    """Issue 33: the axis was in bytes beside bar labels in MiB. SmolLM2's cache for 2,048 tokens
    (94,371,840 bytes) is 90.0 MiB on the bar, on the axis and in the hover."""
    mha, mqa = 46_080 * 3 * 2048, 46_080 // 3 * 2048  # 270.0 MiB, 30.0 MiB
    fig = bytes_bars(["MHA", "GQA", "MQA"], [mha, 46_080 * 2048, mqa])
    np.testing.assert_allclose(decode(fig.to_plotly_json()["data"][0]["y"]), [270.0, 90.0, 30.0])
    assert list(fig.data[0].text) == ["270.0 MiB", "90.0 MiB", "30.0 MiB"]
    assert fig.layout.yaxis.title.text == "KV cache (MiB)"
    assert "MiB" in fig.data[0].hovertemplate
    np.testing.assert_array_equal(decode(fig.to_plotly_json()["data"][0]["customdata"]), [mha, 46_080 * 2048, mqa])
