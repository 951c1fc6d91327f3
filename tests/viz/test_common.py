import numpy as np
import pytest

from viz.common import check_labels, masked_z, token_labels, visible


def test_token_labels_unique_escaped_and_visible():
    labs = token_labels(["the", "the", "<b>x</b>", "\x07", "\u200f", "", "😀你好"])
    assert len(set(labs)) == 7
    assert labs[0] == "0:the" and labs[1] == "1:the"
    assert labs[2] == "2:&lt;b&gt;x&lt;/b&gt;"
    assert labs[3] == "3:\\x07" and labs[4] == "4:\\u200f" and labs[5] == "5:∅"
    assert labs[6] == "6:😀你好"
    assert token_labels(["abcdefghijklmnopqrstuvwxyz"], max_chars=5) == ["0:abcd…"]


def test_visible_escapes_quotes():
    assert visible('a"b\'') == "a&#34;b&#x27;"  # numeric: Plotly shows "&quot;" literally


def test_masked_z_nan_where_not_allowed():
    w = np.full((3, 3), 0.5)
    z = masked_z(w, np.tril(np.ones((3, 3), bool)))
    assert z.dtype == np.float32
    assert np.isnan(z[0, 1]) and np.isnan(z[0, 2]) and np.isnan(z[1, 2]) and z[2, 0] == 0.5
    assert np.isnan(z).sum() == 3
    assert not np.isnan(masked_z(w, None)).any()


def test_check_labels_says_what_to_fix():
    with pytest.raises(ValueError, match="2 labels but the matrix has 3"):
        check_labels(["a", "b"], 3, "labels")


def test_one_label_formatter_plain_and_escaped():
    from labels import token_label
    toks = ["the", "<b>", "a_very_long_token_indeed"]
    assert token_labels(toks, plain=True) == ["0:the", "1:<b>", "2:a_very_long_token_indeed"]
    assert token_labels(toks) == ["0:the", "1:&lt;b&gt;", "2:a_very_long_t…"]
    assert token_labels(["x", "y"], plain=True, start=1) == ["1:x", "2:y"]
    assert token_label(3, "cat") == "3:cat" and token_label(3, "cat", sep=": ") == "3: cat"
    assert token_label(0, "<i>", plain=False) == "0:&lt;i&gt;"


def test_one_markdown_escape():
    from labels import md_escape
    assert md_escape("a*b_c [x](y) :smile: $x$ \\") == r"a\*b\_c \[x\]\(y\) \:smile\: \$x\$ \\"
    assert md_escape(3) == "3"
