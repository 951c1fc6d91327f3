"""model/batching.py: right padding and the key_padding_mask, and that a padded batch traces each
sentence as it traces alone (the padding keys get zero weight)."""
import pytest
import torch

import training.batching
from model import ModelConfig, Transformer
from model.batching import Batch, pad_batch


def test_pad_batch_pads_right_and_marks_real_tokens():
    b = pad_batch([[5, 6, 7], [8], [9, 10]], pad_id=2)
    assert b.ids.dtype == torch.long and b.key_padding_mask.dtype == torch.bool
    assert b.ids.tolist() == [[5, 6, 7], [8, 2, 2], [9, 10, 2]]
    assert b.key_padding_mask.tolist() == [[True, True, True], [True, False, False], [True, True, False]]
    assert b.lengths == [3, 1, 2]


def test_pad_batch_cuts_to_max_len_and_refuses_empty_input():
    b = pad_batch([[1, 2, 3, 4], [5, 6]], pad_id=0, max_len=3)
    assert b.ids.tolist() == [[1, 2, 3], [5, 6, 0]] and b.lengths == [3, 2]
    for bad in ([], [[1], []]):
        with pytest.raises(ValueError, match="at least one sequence"):
            pad_batch(bad, pad_id=0)


def test_training_uses_the_engines_padding():
    assert training.batching.pad_batch is pad_batch and training.batching.Batch is Batch


@pytest.mark.parametrize("causal", [True, False])
def test_a_padded_sentence_traces_as_it_does_alone(causal):
    m = Transformer(ModelConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=2, max_len=16), seed=4)
    short, long = [3, 4, 5], [6, 7, 8, 9, 10, 11]
    b = pad_batch([short, long], pad_id=0)
    tr = m.trace(b.ids, causal=causal, key_padding_mask=b.key_padding_mask)
    alone = m.trace(torch.tensor([short]), causal=causal)
    torch.testing.assert_close(tr.final[0, :3], alone.final[0], rtol=0, atol=1e-5)
    assert float(tr.layers[0].attn.weights[0, :, :, 3:].abs().max()) == 0.0  # padding keys unread
