"""The toy translation task, the shipped translator checkpoint and the page's translate() API."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch

from model.seq2seq import Seq2SeqTransformer
from model.trace import flat_arrays
from model.tokenizer import UNK
from training.translation import (CHECKPOINT_DIR, LEXICON, SOURCE_WORDS, TARGET_WORDS, TrainPreset,
                               alignment, alignment_hits, build_tokenizer, exact_match,
                               load_translator, make_splits, train, translate, translate_words)

SENT = "the big dog sees a small cat in the old house ."
SENT_KALO = "woru gran ta kasa vek ta ni miso lit ke vidu ."


@lru_cache(maxsize=1)
def shipped():
    return load_translator(CHECKPOINT_DIR)


@lru_cache(maxsize=1)
def splits():
    return make_splits(0, 20000, 1000)


# ----------------------------------------------------------------------------- the language
def test_reference_translation_and_alignment() -> None:
    src = SENT.split()
    tgt, al = translate_words(src)
    assert " ".join(tgt) == SENT_KALO
    # woru<-dog(2) gran<-big(1) ta<-the(0) kasa<-house(10) vek<-old(9) ta<-the(8) ni<-in(7)
    # miso<-cat(6) lit<-small(5) ke<-a(4) vidu<-sees(3) .<-.(11)
    assert al == [2, 1, 0, 10, 9, 8, 7, 6, 5, 4, 3, 11]
    assert alignment(src, tgt + ["<eos>"]) == al
    assert alignment(src, tgt[:3]) == al[:3]
    assert all(LEXICON[src[a]] == t for t, a in zip(tgt, al))
    with pytest.raises(ValueError):
        alignment(src, ["miso"])
    for bad in ("dog sees the cat", "the dog the cat", "the dog sees a cat near", "the dog sees a cat cat"):
        with pytest.raises(ValueError):
            translate_words(bad.split())


def test_splits_are_deterministic_disjoint_and_not_diagonal() -> None:
    train_set, held = splits()
    assert len(train_set) == 20000 and len(held) == 1000
    assert make_splits(0, 50, 10) == make_splits(0, 50, 10)
    assert not {e.src for e in train_set} & {e.src for e in held}
    diag = total = 0
    for e in held:
        assert sorted(e.align) == list(range(len(e.src)))  # a permutation: one source word each
        diag += sum(a == j for j, a in enumerate(e.align))
        total += len(e.align)
    assert diag / total < 0.25  # the alignment is mostly off the diagonal
    assert not set(SOURCE_WORDS) & (set(TARGET_WORDS) - {"."})
    tok = build_tokenizer()
    assert len(tok) == len(set(SOURCE_WORDS) | set(TARGET_WORDS)) + 4


def test_training_is_deterministic_and_reduces_the_loss() -> None:
    tok = build_tokenizer()
    from training.translation import translator_config
    cfg = translator_config(len(tok)).replace(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    preset = TrainPreset(cfg=cfg, steps=30, batch=16, lr=1e-2, warmup=2, n_train=300, n_heldout=10)
    m1, _, h1 = train(preset, log=None)
    m2, _, h2 = train(preset, log=None)
    assert h1["losses"] == h2["losses"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert np.mean(h1["losses"][-5:]) < 0.8 * np.mean(h1["losses"][:5])


# ----------------------------------------------------------------------------- shipped checkpoint
def test_shipped_checkpoint_is_small_and_loads() -> None:
    size = sum(p.stat().st_size for p in CHECKPOINT_DIR.iterdir())
    assert size < 3 * 1024 * 1024
    model, tok, info = shipped()
    assert isinstance(model, Seq2SeqTransformer)
    assert tok.vocab == build_tokenizer().vocab
    assert info["exact_match_heldout"] >= 0.95
    assert info["alignment"]["best_head_acc_heldout"] >= 0.8


def test_shipped_translator_exact_match_on_heldout() -> None:
    model, tok, _ = shipped()
    _, held = splits()
    assert exact_match(model, tok, held[:500]) >= 0.95


def test_shipped_translator_cross_attention_aligns() -> None:
    """Last layer, best head (chosen on TRAIN sentences), scored on held-out: >= 80% of target
    words put their largest cross-attention weight on their own source word."""
    model, tok, info = shipped()
    train_set, held = splits()
    last = model.cfg.n_layers - 1
    tr_hits, _, _ = alignment_hits(model, tok, train_set[:300])
    best = int(np.argmax(tr_hits[last]))
    assert best == info["alignment"]["best_head"]
    hits, avg, n = alignment_hits(model, tok, held[:500])
    assert hits[last, best] / n >= 0.8
    assert avg[last] / n >= 0.8  # the head average works too
    # and it is not the diagonal: a model attending to position j would score far lower
    diag = sum(sum(a == j for j, a in enumerate(e.align)) for e in held[:500]) / n
    assert hits[last, best] / n > diag + 0.5


# ----------------------------------------------------------------------------- translate()
def test_translate_a_sentence_with_every_step() -> None:
    model, tok, _ = shipped()
    r = translate(model, tok, "The big dog sees a small cat in the old house.")
    assert r.output_text == SENT_KALO
    assert r.src_labels[:3] == ["The", "big", "dog"] and r.src_tokens[0] == "the"
    assert r.finished and not r.truncated and r.unknown == [] and r.notices == []
    assert len(r.steps) == len(r.tgt_tokens) + 1 and r.steps[-1].token == "<eos>"
    assert r.dec_labels == ["<bos>"] + r.tgt_tokens
    L, H, Ts = model.cfg.n_layers, model.cfg.n_heads, len(r.src_ids)
    cross = r.trace.decoder.layers[L - 1].cross_attn.weights
    assert cross.shape == (1, H, len(r.dec_labels), Ts)
    assert r.trace.encoder.layers[0].attn.weights.shape == (1, H, Ts, Ts)
    assert r.trace.decoder.layers[0].self_attn.weights.shape == (1, H, len(r.dec_labels), len(r.dec_labels))
    assert all(not np.isnan(v).any() if k.endswith(".masked") else np.isfinite(v).all()
                   for k, v in flat_arrays(r.trace).items())
    for t, st in enumerate(r.steps):
        assert st.cross_attn.shape == (L, H, Ts) and st.self_attn.shape == (L, H, t + 1)
        assert np.allclose(st.cross_attn.sum(-1), 1, atol=1e-5)
        assert np.allclose(st.cross_attn[-1], cross[0, :, t], atol=1e-5)
        assert st.top[0][0] == st.token and abs(st.top[0][1] - st.prob) < 1e-6
    # the new word looks at its own source word (head average of the last layer)
    gold = alignment([w.lower() for w in r.src_tokens], r.tgt_tokens)
    picks = [int(st.cross_attn[-1].mean(0).argmax()) for st in r.steps[:-1]]
    assert np.mean(np.array(picks) == np.array(gold)) >= 0.8


def test_translate_bad_input() -> None:
    model, tok, _ = shipped()
    for empty in ("", "   ", "\n\t"):
        with pytest.raises(ValueError, match="Type an English sentence"):
            translate(model, tok, empty)
    r = translate(model, tok, "the zebra sees a miso 🦓")
    assert r.unknown == [(1, "zebra"), (4, "miso"), (5, "🦓")]  # Kalo words are not English
    assert [r.src_tokens[i] for i, _ in r.unknown] == [UNK] * 3
    assert r.src_labels[1] == "zebra" and r.src_labels[5] == "🦓"
    assert any("zebra" in n for n in r.notices)
    long = " ".join([SENT] * 4)
    r = translate(model, tok, long, max_src_len=20)
    assert r.truncated and r.n_words == 48 and len(r.src_ids) == 20
    assert any("only the first 20" in n for n in r.notices)
    for res in (r, translate(model, tok, "!!! ???")):
        assert all(not np.isnan(v).any() if k.endswith(".masked") else np.isfinite(v).all()
                   for k, v in flat_arrays(res.trace).items())
        assert 1 <= len(res.steps) <= model.cfg.max_len
    with pytest.raises(ValueError):
        translate(model, tok, "the dog", max_src_len=0)
    with pytest.raises(ValueError):
        translate(model, tok, None)  # type: ignore[arg-type]
