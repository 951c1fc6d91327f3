"""trace() rejects bad input with a clear ValueError (never a deep torch error)."""
from __future__ import annotations

import pytest
import torch

from model import ModelConfig, Transformer
from model.attention import attend, padding_allowed


@pytest.fixture(scope="module")
def model():
    return Transformer(ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=6,
                                   pos_encoding="learned"))


@pytest.mark.parametrize("ids,match", [
    (torch.tensor([[1, 2, 10]]), r"\[0, 9\]"),        # id == vocab_size
    (torch.tensor([[1, -1, 3]]), r"\[0, 9\]"),        # negative id
    (torch.tensor([[1.0, 2.0]]), "torch.long"),       # float dtype
    (torch.tensor([[1, 2]], dtype=torch.int32), "torch.long"),
    ([[1, 2, 3]], "torch.long"),                      # not a tensor
    (torch.tensor([1, 2, 3]), r"\(B, T\)"),           # 1-D
    (torch.zeros(1, 2, 3, dtype=torch.long), r"\(B, T\)"),
    (torch.zeros(1, 0, dtype=torch.long), r"\(B, T\)"),
    (torch.zeros(1, 7, dtype=torch.long), "max_len=6"),  # longer than the learned PE table
])
def test_trace_rejects_bad_ids(model, ids, match):
    with pytest.raises(ValueError, match=match):
        model.trace(ids)
    with pytest.raises(ValueError, match=match):
        model(ids)


def test_trace_accepts_exactly_max_len(model):
    assert model.trace(torch.zeros(1, 6, dtype=torch.long)).logits.shape == (1, 6, 10)


@pytest.mark.parametrize("kpm", [torch.ones(1, 3, dtype=torch.long), torch.ones(1, 4, dtype=torch.bool),
                                 torch.ones(3, dtype=torch.bool)])
def test_trace_rejects_bad_padding_mask(model, kpm):
    with pytest.raises(ValueError, match="key_padding_mask"):
        model.trace(torch.tensor([[1, 2, 3]]), key_padding_mask=kpm)


def test_attend_rejects_mismatched_shapes_and_non_bool_mask():
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match="d_k"):
        attend(q, torch.randn(3, 5), torch.randn(3, 4))
    with pytest.raises(ValueError, match="positions"):
        attend(q, torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match="bool"):
        attend(q, q, q, allowed=torch.ones(3, 3))
    with pytest.raises(ValueError, match="bool"):
        padding_allowed(torch.ones(1, 3))


def test_sinusoidal_model_also_bounded_by_max_len():
    m = Transformer(ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, max_len=4))
    with pytest.raises(ValueError, match="max_len=4"):
        m.trace(torch.zeros(1, 5, dtype=torch.long))
