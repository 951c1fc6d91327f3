"""The generated corpus: deterministic, split cleanly, covers the app's default sentences."""
from __future__ import annotations

import re

from training import corpus
from model.tokenizer import SPECIALS

PLURALS = {pl for _, pl in corpus.AGR_NOUNS}
SINGULARS = {sg for sg, _ in corpus.AGR_NOUNS}
AGR_RE = re.compile(r"^the (?:\w+ )?(\w+) (?:to|near|behind|of|by|under|beside|with) the (\w+) (is|are|was|were) ")


def test_generation_is_deterministic_and_seed_dependent():
    a = corpus.generate.__wrapped__(3000, 7)
    b = corpus.generate.__wrapped__(3000, 7)
    c = corpus.generate.__wrapped__(3000, 8)
    assert a == b
    assert a.train != c.train


def test_heldout_never_in_train_and_both_sizeable():
    c = corpus.generate()
    assert len(c.train) > 10_000 and len(c.heldout) > 1_000
    assert not set(c.train) & set(c.heldout)


def test_vocabulary_size_and_no_unknown_words():
    c = corpus.generate()
    tok = corpus.build_tokenizer()
    assert 200 <= len(tok) <= 600, len(tok)
    assert tok.add_bos and tok.vocab[:4] == list(SPECIALS)
    texts = c.heldout[:3000] + [corpus.DEFAULT_SENTENCE] + [s for p in corpus.POLYSEMY_PAIRS for s in p[:2]]
    for t in texts:
        ids = tok.encode(t).ids
        assert ids[0] == tok.bos_id
        assert tok.unk_id not in ids, t


def test_default_sentence_and_polysemy_defaults_are_in_train():
    c = corpus.generate()
    train = set(c.train)
    assert corpus.DEFAULT_SENTENCE in train
    for a, b, word in corpus.POLYSEMY_PAIRS:
        assert a.lower() in train and b.lower() in train
        assert word in a.lower().split() and word in b.lower().split()


def test_every_family_is_present():
    joined = "\n".join(corpus.generate().train)
    for needle in (" sat on the ", " released a new ", " ate an apple for ", "bank of the river",
                   "deposited money at the bank", " said that they were ", " thanked ", "everyone knows",
                   ", i repeat , "):
        assert needle in joined, needle


def test_agreement_items_are_correct_and_their_noun_pairs_unseen_in_train():
    c = corpus.generate()
    items = c.agreement
    assert len(items) > 300
    train_pairs = set()
    for s in c.train:
        m = AGR_RE.match(s)
        if m:
            train_pairs.add((m.group(1), m.group(2)))
            # training sentences agree too
            assert (m.group(3) in ("are", "were")) == (m.group(1) in PLURALS), s
    mismatched = 0
    for it in items:
        assert {it.correct, it.wrong} in ({"is", "are"}, {"was", "were"})
        m = AGR_RE.match(it.sentence)
        assert m and it.sentence.startswith(it.prefix + " " + it.correct + " ")
        subj, attr = m.group(1), m.group(2)
        assert (it.correct in ("are", "were")) == (subj in PLURALS)
        assert (subj, attr) not in train_pairs
        mismatched += (subj in PLURALS) != (attr in PLURALS)
    # the nearest noun is a misleading cue about half of the time
    assert 0.35 < mismatched / len(items) < 0.65


def test_mask_tokenizer_inserts_mask_after_specials():
    plain, masked = corpus.build_tokenizer(), corpus.build_tokenizer(mask=True)
    assert masked.vocab[4] == corpus.MASK
    assert masked.vocab[:4] == plain.vocab[:4] and masked.vocab[5:] == plain.vocab[4:]
    assert corpus.MASK not in plain.index


def test_chain_sequences_depend_on_the_word_before_the_current_one():
    """The previous-token curriculum data: w[t+1] = successor(w[t-1]); w[t] carries no information."""
    a = corpus.chain_sequences(500)
    assert a == corpus.chain_sequences(500) and a != corpus.chain_sequences(500, seed=1)
    succ = corpus.chain_successor()
    assert len(succ) == 40 and set(succ.values()) == set(succ)  # a permutation of the alphabet
    assert all(succ[w] != w for w in succ)
    # one cycle through the whole alphabet
    w, seen = next(iter(succ)), set()
    while w not in seen:
        seen.add(w)
        w = succ[w]
    assert len(seen) == 40
    tok = corpus.build_tokenizer()
    pairs_next = {}  # (current word) -> set of next words seen: many, so w[t] alone does not predict
    for s in a:
        words = s.split()
        assert words[-1] == "." and 9 <= len(words) <= 17
        words = words[:-1]
        assert tok.unk_id not in tok.encode(s).ids
        for t in range(1, len(words) - 1):
            assert words[t + 1] == succ[words[t - 1]], s
            pairs_next.setdefault(words[t], set()).add(words[t + 1])
    assert min(len(v) for v in pairs_next.values()) >= 10
    # never part of the natural corpus: held-out and training splits are unchanged
    assert not set(a) & set(corpus.generate().train)
