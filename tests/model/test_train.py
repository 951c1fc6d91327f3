"""The training library: loss goes down, determinism, copies never mutate, snapshots, stop,
masked-LM corruption, checkpoint round trip. Tiny models, a few steps each."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model.checkpoint import load_checkpoint, save_checkpoint, to_bytes
from model.config import ModelConfig
from model.transformer import Transformer
from training import corpus
from training import train as training

TEXTS = corpus.generate().train[:400]


def tiny_cfg(tok, **kw) -> ModelConfig:
    base = dict(vocab_size=len(tok), d_model=32, n_heads=4, n_layers=1, d_ff=64, max_len=32)
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture(scope="module")
def tok():
    return training.tokenizer_for("causal")


@pytest.fixture(scope="module")
def mtok():
    return training.tokenizer_for("mlm")


def test_a_few_steps_reduce_the_loss(tok):
    res = training.train(tiny_cfg(tok), tok, TEXTS, steps=40, lr=1e-2, seed=0, batch_size=16)
    assert len(res.losses) == 40 and res.steps_done == 40 and not res.stopped
    first, last = np.mean(res.losses[:3]), np.mean(res.losses[-5:])
    assert last < first - 1.0, (first, last)
    assert not res.model.training  # handed back in eval mode


def test_masked_lm_steps_reduce_the_loss(mtok):
    res = training.train(tiny_cfg(mtok), mtok, TEXTS, steps=40, lr=1e-2, seed=0, objective="mlm", batch_size=16)
    assert np.mean(res.losses[-5:]) < np.mean(res.losses[:3]) - 1.0


def test_same_seed_same_loss_curve_other_seed_differs(tok):
    a = training.train(tiny_cfg(tok), tok, TEXTS, steps=6, lr=3e-3, seed=3, batch_size=8)
    b = training.train(tiny_cfg(tok), tok, TEXTS, steps=6, lr=3e-3, seed=3, batch_size=8)
    c = training.train(tiny_cfg(tok), tok, TEXTS, steps=6, lr=3e-3, seed=4, batch_size=8)
    assert a.losses == b.losses
    assert a.losses != c.losses
    for (k, v), (_, w) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(v, w), k


def test_masked_lm_is_deterministic(mtok):
    a = training.train(tiny_cfg(mtok), mtok, TEXTS, steps=4, seed=1, objective="mlm", batch_size=8)
    b = training.train(tiny_cfg(mtok), mtok, TEXTS, steps=4, seed=1, objective="mlm", batch_size=8)
    assert a.losses == b.losses


def test_trains_a_copy_never_the_model_passed_in(tok):
    base = Transformer(tiny_cfg(tok), seed=0)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    res = training.train(None, tok, TEXTS, steps=3, lr=1e-2, seed=0, init_model=base, batch_size=8)
    assert res.model is not base
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k]), k
    changed = [k for k, v in res.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # the copy did train


def test_callback_snapshots_and_stop(tok):
    seen, live = [], []
    probe = tok.encode(corpus.DEFAULT_SENTENCE).ids
    res = training.train(tiny_cfg(tok, n_layers=2), tok, TEXTS, steps=10, seed=0, batch_size=8,
                  callback=lambda s, l: seen.append((s, l)), snapshot_every=4, snapshot_ids=probe,
                  on_snapshot=lambda sn: live.append((sn.step, len(seen))))
    # each snapshot is handed over as it is taken (after that step's callback), not at the end
    assert live == [(0, 0), (4, 4), (8, 8), (10, 10)]
    assert [s for s, _ in seen] == list(range(1, 11))
    assert [l for _, l in seen] == res.losses
    assert [s.step for s in res.snapshots] == [0, 4, 8, 10]
    w = res.snapshots[-1].weights
    assert w.shape == (2, 4, len(probe), len(probe))
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(w, k=1) == 0)  # causal probe
    assert not np.allclose(res.snapshots[0].weights, w)  # heads moved during training
    # the last snapshot is the returned model's attention
    np.testing.assert_allclose(training.probe_weights(res.model, probe, True), w, atol=1e-6)

    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] > 3

    res2 = training.train(tiny_cfg(tok), tok, TEXTS, steps=50, seed=0, batch_size=8, should_stop=stop,
                   snapshot_every=100, snapshot_ids=probe)
    assert res2.stopped and res2.steps_done == 3 and len(res2.losses) == 3
    assert [s.step for s in res2.snapshots] == [0, 3]


def test_pre_encoded_ids_train_exactly_like_the_sentences(tok, mtok):
    cfg = tiny_cfg(tok, max_len=12)
    ids, _ = training.encode_texts(tok, TEXTS, 64)  # longer than cfg.max_len: train() cuts them as it cuts sentences
    assert ids.shape[1] > cfg.max_len
    a = training.train(cfg, tok, TEXTS, steps=5, seed=2, batch_size=8)
    b = training.train(cfg, tok, ids, steps=5, seed=2, batch_size=8)
    assert a.losses == b.losses and len(a.losses) == 5
    m = training.train(tiny_cfg(mtok), mtok, training.encode_texts(mtok, TEXTS, 32)[0], steps=3, seed=2, objective="mlm",
                batch_size=8)
    assert m.losses == training.train(tiny_cfg(mtok), mtok, TEXTS, steps=3, seed=2, objective="mlm", batch_size=8).losses
    with pytest.raises(ValueError, match="vocabulary"):
        training.train(cfg, tok, ids + len(tok), steps=1)
    with pytest.raises(ValueError, match=r"\(N, T\) long"):
        training.train(cfg, tok, ids.float(), steps=1)
    with pytest.raises(ValueError, match=r"\(N, T\) long"):
        training.train(cfg, tok, ids[0], steps=1)


def test_bad_arguments_raise_clear_errors(tok):
    with pytest.raises(ValueError, match="vocab_size"):
        training.train(tiny_cfg(tok, vocab_size=len(tok) + 1), tok, TEXTS, steps=1)
    with pytest.raises(ValueError, match="<mask>"):
        training.train(tiny_cfg(tok), tok, TEXTS, steps=1, objective="mlm")
    with pytest.raises(ValueError, match="objective"):
        training.train(tiny_cfg(tok), tok, TEXTS, steps=1, objective="seq2seq")
    with pytest.raises(ValueError, match="steps"):
        training.train(tiny_cfg(tok), tok, TEXTS, steps=-1)


def test_mask_tokens_only_corrupts_real_words(mtok):
    ids, _ = training.encode_texts(mtok, TEXTS[:64], 32)
    gen = torch.Generator().manual_seed(0)
    inputs, targets = training.mask_tokens(ids, mtok, gen)
    pick = targets != -100
    assert pick.any(dim=1).all()  # at least one prediction per sentence
    assert torch.equal(targets[pick], ids[pick])
    assert not pick[:, 0].any()  # never <bos>
    assert not pick[ids == mtok.pad_id].any()  # never padding
    assert torch.equal(inputs[~pick], ids[~pick])
    mask_id = mtok.index[corpus.MASK]
    frac_masked = (inputs[pick] == mask_id).float().mean().item()
    assert 0.6 < frac_masked < 0.95  # ~80 % become <mask>
    rate = pick.sum().item() / (ids > 4).sum().item()
    assert 0.12 < rate < 0.3


def test_checkpoint_round_trip_is_bit_identical(tok, tmp_path):
    res = training.train(tiny_cfg(tok, pos_encoding="learned"), tok, TEXTS, steps=3, seed=0, batch_size=8)
    save_checkpoint(res.model, tok, tmp_path / "ck", extra={"preset": "test"})
    model, tok2 = load_checkpoint(tmp_path / "ck")
    assert tok2.vocab == tok.vocab and tok2.add_bos
    sd1, sd2 = res.model.state_dict(), model.state_dict()
    assert sd1.keys() == sd2.keys()
    for k in sd1:
        assert sd1[k].dtype == sd2[k].dtype and torch.equal(sd1[k], sd2[k]), k
    assert to_bytes(model, tok2, {"preset": "test"}) == (tmp_path / "ck" / "model.safetensors").read_bytes()
    ids = torch.tensor([tok.encode(corpus.DEFAULT_SENTENCE).ids])
    assert torch.equal(res.model(ids), model(ids))


def test_cli_trains_saves_and_logs(tmp_path, capsys):
    out = tmp_path / "cli"
    n_threads = torch.get_num_threads()
    try:
        training.main(["--preset", "causal-lm", "--steps", "2", "--out", str(out), "--threads", "1"])
    finally:
        torch.set_num_threads(n_threads)
    text = capsys.readouterr().out
    assert "step 2/2" in text and "[" in text
    model, tok = load_checkpoint(out)
    meta = __import__("json").loads((out / "config.json").read_text())
    assert meta["extra"]["preset"] == "causal-lm" and meta["extra"]["steps"] == 2
    assert "next_token_acc" in meta["extra"]["heldout"]
    log = (out / "loss_log.csv").read_text().splitlines()
    assert log[0] == "step,loss" and len(log) == 3


def test_mask_tokens_focus_masks_agreement_verbs_more_often(mtok):
    """Training's targeted masking: agreement verbs are picked at focus_rate, other words at rate."""
    ids, _ = training.encode_texts(mtok, corpus.generate().train[:2000], 32)
    focus = training.focus_ids(mtok)
    assert sorted(mtok.vocab[i] for i in focus) == sorted(training.AGREEMENT_VERBS)
    is_verb = torch.isin(ids, torch.tensor(focus))
    other = (ids > 4) & ~is_verb
    _, targets = training.mask_tokens(ids, mtok, torch.Generator().manual_seed(0), 0.15, focus=focus, focus_rate=0.6)
    pick = targets != -100
    verb_rate = pick[is_verb].float().mean().item()
    other_rate = pick[other].float().mean().item()
    assert is_verb.sum() > 500
    assert 0.55 < verb_rate < 0.7, verb_rate  # ~0.6 (+ the at-least-one-per-row picks)
    assert 0.12 < other_rate < 0.25, other_rate
    # without focus every word is picked at the plain rate
    _, t2 = training.mask_tokens(ids, mtok, torch.Generator().manual_seed(0), 0.15)
    assert (t2 != -100)[is_verb].float().mean().item() < 0.25


def test_prelude_curriculum_draws_the_first_batches_from_the_prelude(tok):
    """prelude_steps batches come from `prelude`, the rest from `data` (same generator stream)."""
    chains = corpus.chain_sequences(200)
    seen = []
    orig = training.batch_loss

    def spy(model, ids, objective, tk, gen=None):
        seen.append({tk.vocab[int(i)] for i in ids.flatten()})
        return orig(model, ids, objective, tk, gen)

    training.batch_loss = spy
    try:
        res = training.train(tiny_cfg(tok), tok, TEXTS, steps=5, seed=0, batch_size=8, prelude=chains, prelude_steps=3)
    finally:
        training.batch_loss = orig
    alphabet = set(corpus.chain_successor()) | {".", "<bos>", "<pad>"}
    assert res.steps_done == 5
    assert all(s <= alphabet for s in seen[:3])
    assert not seen[3] <= alphabet and not seen[4] <= alphabet
    with pytest.raises(ValueError, match="prelude"):
        training.train(tiny_cfg(tok), tok, TEXTS, steps=2, prelude_steps=1)


def test_causal_presets_mix_chain_sequences_masked_lm_does_not():
    for name, p in training.TRAIN_PRESETS.items():
        data, prelude = training.training_texts(p)
        natural = corpus.generate().train
        assert data[:len(natural)] == natural
        assert len(data) - len(natural) == p.chain_mix
        if p.objective == "causal":
            assert p.chain_prelude > 0 and p.chain_mix > 0 and len(prelude) >= p.chain_mix
            assert data[len(natural):] == prelude[:p.chain_mix]
        else:
            assert prelude == [] and p.chain_mix == 0
