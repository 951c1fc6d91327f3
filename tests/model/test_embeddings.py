"""classroom/embeddings.py against torch's own functions (cosine_similarity, cross_entropy)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from classroom import embeddings as emb
from model.checkpoint import load_checkpoint
from tests.helpers import ROOT


def test_neighbours_match_torch_cosine_similarity():
    g = torch.Generator().manual_seed(0)
    E = torch.randn(12, 5, generator=g, dtype=torch.float64)
    vocab = ["<pad>", "<unk>"] + [f"w{i}" for i in range(10)]
    got = emb.nearest_neighbours(E.numpy(), vocab, "w3", k=4)
    cos = F.cosine_similarity(E, E[5][None], dim=1)
    cos[[0, 1, 5]] = -9  # specials and the word itself are left out
    idx = torch.argsort(cos, descending=True)[:4]
    assert [w for w, _ in got] == [vocab[i] for i in idx]
    np.testing.assert_allclose([c for _, c in got], cos[idx].numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="not in this model's vocabulary"):
        emb.nearest_neighbours(E.numpy(), vocab, "zebra")


def test_trained_model_puts_fruits_together():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "masked-lm")
    nn = emb.nearest_neighbours(model.tok_emb.weight.detach().numpy(), tok.vocab, "apple", k=4)
    assert {"peach", "pear", "orange"} & {w for w, _ in nn}


def test_next_token_losses_are_torch_cross_entropy():
    model, tok = load_checkpoint(ROOT / "checkpoints" / "causal-lm")
    ids = tok.encode("the cat sat on the mat .").ids
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]  # (T, V)
    rows = emb.next_token_losses(torch.softmax(logits.double(), -1).numpy(), ids, tok.vocab)
    ce = F.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]), reduction="none").numpy()
    np.testing.assert_allclose([r["loss −log p"] for r in rows], ce, rtol=1e-9)
    assert [r["target index"] for r in rows] == ids[1:]
    assert [r["target token"] for r in rows] == [tok.vocab[i] for i in ids[1:]]
