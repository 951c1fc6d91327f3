"""Engine tests use tiny tensors: one intra-op thread is faster than two and avoids
oversubscription when several processes share the machine's cores."""
import pytest
import torch

from model.config import ModelConfig
from model.transformer import Transformer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    """(cfg, model, ids, numpy trace): a 2-layer, 4-head toy model and one sentence (the classroom analyses' tests)."""
    cfg = ModelConfig(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_len=32)
    model = Transformer(cfg, seed=3)
    ids = [1, 5, 7, 9, 5, 2]
    return cfg, model, ids, model.trace(torch.tensor([ids])).numpy()
