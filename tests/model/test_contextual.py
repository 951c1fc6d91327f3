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


def test_words_match_across_a_byte_level_space_marker():
    """Issue 33: SmolLM2 labels " bank" as "·bank"; the page offered only "i" (token 0) and opened
    on it. The space marker and special tokens are not part of the word."""
    la = ["I", "·sat", "·on", "·the", "·river", "·bank", "."]
    lb = ["I", "·deposited", "·money", "·at", "·the", "·bank", "."]
    assert contextual.common_words(la, lb) == ["i", "the", "bank", "."]
    assert contextual.find_word(la, "bank") == 5 and contextual.find_word(lb, "Bank") == 5
    assert contextual.common_words(["[CLS]", "bank", "[SEP]"], ["[CLS]", "a", "bank", "[SEP]"]) == ["bank"]
    assert contextual.common_words(["<bos>", "bank"], ["<bos>", "bank"]) == ["bank"]


def test_default_word_skips_a_word_whose_causal_context_is_the_same():
    la, lb = ["I", "·sat", "·on", "·the", "·river", "·bank"], ["I", "·deposited", "·money", "·at", "·the", "·bank"]
    ids_a, ids_b = [57, 2643, 335, 260, 6, 9], [57, 18618, 2478, 418, 260, 9]
    words = contextual.common_words(la, lb)
    assert contextual.same_context(ids_a, ids_b, 0, 0, causal=True)  # "I" at 0 in both: identical vectors
    assert not contextual.same_context(ids_a, ids_b, 0, 0, causal=False)  # bidirectional: it sees the rest
    assert not contextual.same_context(ids_a, ids_b, 5, 5, causal=True)  # different words before "bank"
    assert contextual.default_word(words, ids_a, ids_b, la, lb, True, preferred="bank") == "bank"
    assert contextual.default_word(words, ids_a, ids_b, la, lb, True, preferred="pear") == "the"
    assert contextual.default_word(words, ids_a, ids_b, la, lb, False) == "i"
    assert contextual.default_word([], ids_a, ids_b, la, lb, True) is None

