"""classroom/contextual.py: one word's states in two sentences."""

import pytest
import torch

from classroom import contextual


def test_contextual_similarity(tiny):
    cfg, model, ids, arr = tiny
    other = model.trace(torch.tensor([[3, 7, 8]]), causal=False).numpy()  # id 7 = "apple"
    names, sa = contextual.stage_states(arr)
    _, sb = contextual.stage_states(other)
    la, lb = ["<bos>", "a", "apple", "b", "apple", "c"], ["x", "Apple", "z"]
    assert contextual.common_words(la, lb) == ["apple"]
    ia, ib = contextual.find_word(la, "APPLE"), contextual.find_word(lb, "apple")
    assert (ia, ib) == (2, 1) and contextual.find_word(la, "pear") is None
    res = contextual.contextual_similarity(sa, sb, ia, ib, la, lb, k=2)
    assert res.cosine[0] == pytest.approx(1.0)  # same token id -> same embedding row
    assert res.cosine[1] < 0.999  # different positions added
    assert res.cosine[-1] < 0.999
    assert len(res.nearest_a) == len(names) and len(res.nearest_a[0]) == 2
    assert all(not lab.startswith("A2:") for lab, _ in res.nearest_a[0])  # itself excluded
