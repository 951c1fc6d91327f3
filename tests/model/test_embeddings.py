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
    np.testing.assert_allclose([r.loss for r in rows], ce, rtol=1e-9)
    np.testing.assert_allclose([r.p_target for r in rows], np.exp(-ce), rtol=1e-9)
    assert [r.position for r in rows] == list(range(len(ids) - 1))
    assert [r.target_index for r in rows] == ids[1:]
    assert [r.target_token for r in rows] == [tok.vocab[i] for i in ids[1:]]
    assert [r.argmax for r in rows] == [tok.vocab[i] for i in logits[:-1].argmax(-1).tolist()]
    assert emb.mean_loss(rows) == pytest.approx(float(ce.mean()), rel=1e-12)


def test_neighbours_of_a_row_match_a_cosine_computed_here_and_skip_special_rows():
    g = torch.Generator().manual_seed(3)
    E = torch.randn(50, 8, generator=g)
    vocab = ["[PAD]", "[unused0]", "<|endoftext|>"] + [f"w{i}" for i in range(47)]
    skip = emb.special_rows(vocab)
    assert skip.tolist()[:4] == [True, True, True, False]
    got = emb.neighbours_of_row(E.numpy(), 10, k=5, skip=skip)
    cos = torch.nn.functional.cosine_similarity(E, E[10][None], dim=1).double()
    cos[[0, 1, 2, 10]] = -float("inf")
    want = torch.topk(cos, 5)
    assert [i for i, _ in got] == want.indices.tolist()
    np.testing.assert_allclose([c for _, c in got], want.values.numpy(), atol=1e-6)


def test_a_typed_word_finds_its_row_in_every_kind_of_vocabulary():
    from model.tokenizer import Tokenizer
    toy = Tokenizer.build(["the cat sat on the mat ."], add_bos=True)
    row, pieces = emb.resolve_word(toy, "cat")
    assert toy.vocab[row] == "cat" and pieces == []
    assert emb.resolve_word(toy, "zebra") == (None, [])  # unknown: no row, no pieces
    assert emb.resolve_word(toy, "") == (None, [])


def test_word_neighbours_name_the_nearest_rows_or_the_pieces():
    from model.tokenizer import Tokenizer
    toy = Tokenizer.build(["the cat sat on the mat ."], add_bos=True)
    g = torch.Generator().manual_seed(5)
    E = torch.randn(len(toy), 6, generator=g).numpy()
    skip = emb.special_rows(toy.vocab)
    row = toy.vocab.index("cat")
    nb = emb.word_neighbours(E, toy, "cat", 3, skip=skip)
    want = emb.neighbours_of_row(E, row, 3, skip=skip)
    assert nb.row_label == "cat" and nb.pieces == []
    assert nb.tokens == [toy.vocab[i] for i, _ in want] and nb.cosines == [c for _, c in want]
    assert len(nb.tokens) == 3 and not set(nb.tokens) & {"cat", "<bos>", "<pad>", "<unk>", "<eos>"}
    none = emb.word_neighbours(E, toy, "zebra", 3, skip=skip)
    assert none.row_label is None and none.tokens == [] and none.cosines == []


@pytest.mark.slow
def test_real_models_put_cat_near_dog_and_kings_near_queens():
    """Issue 22 point 4 on the real models: the pretrained embedding rows are not random."""
    from model.pretrained import load_pretrained
    for name, word, near in (("minilm-l6", "cat", {"dog", "kitten", "cats"}),
                             ("smollm2-135m", "king", {"·queen", "·King", "·kings"})):
        try:
            model, tok = load_pretrained(name)
        except ModuleNotFoundError as e:
            pytest.skip(str(e))
        row, pieces = emb.resolve_word(tok, word)
        assert row is not None, pieces
        E = model.tok_emb.weight.detach().numpy()
        got = [emb.row_label(tok, i) for i, _ in emb.neighbours_of_row(E, row, 8, emb.special_rows(tok.vocab))]
        assert near & set(got), (name, got)
        assert emb.row_label(tok, row) in (word, "·" + word)
