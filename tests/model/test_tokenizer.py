"""Tokenizer: word and character level, any Unicode, labels keep the user's text."""
from __future__ import annotations

import pytest

from model.tokenizer import BOS, SPECIALS, Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.build(["The cat sat on the mat.", "the dog sat, then it ran!"])


def test_specials_come_first(tok):
    assert tok.vocab[:4] == list(SPECIALS) == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab[4] == "the"  # most frequent first (3 times)
    assert len(tok) == len(set(tok.vocab))


def test_word_level_lowercases_and_splits_punctuation(tok):
    enc = tok.encode("The CAT sat, on the mat!")
    assert enc.labels == ["The", "CAT", "sat", ",", "on", "the", "mat", "!"]
    assert [tok.vocab[i] for i in enc.ids] == ["the", "cat", "sat", ",", "on", "the", "mat", "!"]
    assert enc.ids[0] == enc.ids[5]  # case folded to the same id
    assert tok.unk_id not in enc.ids


def test_unknown_words_map_to_unk_but_keep_label(tok):
    enc = tok.encode("The zebra sat")
    assert enc.ids[1] == tok.unk_id
    assert enc.labels == ["The", "zebra", "sat"]


UNICODE = [
    "I ❤️ 🐈‍⬛ and 👋🏽!",                    # emoji, ZWJ sequence, skin tone modifier
    "猫が座った。小猫在垫子上",                    # CJK, CJK punctuation
    "مرحبا بالعالم، القط جلس",                # Arabic (RTL), Arabic comma
    "שלום עולם",                               # Hebrew (RTL)
    "ctrl\x00chars\x07 and\ttabs\r\nnew",      # control characters
    "<b>bold</b> &amp; <script>alert(1)</script>",  # HTML text stays text
    "café naïve Ünïcödé ß",                      # accents (precomposed)
    "\u202eRLO override\u202c",                 # bidi controls
]


@pytest.mark.parametrize("text", UNICODE)
def test_any_unicode_encodes_and_labels_preserve_text(tok, text):
    enc = tok.encode(text)
    assert len(enc.ids) == len(enc.labels) > 0
    assert all(0 <= i < len(tok) for i in enc.ids)
    # labels are the user's text, in order: concatenated they give the text minus whitespace
    assert "".join(enc.labels) == "".join(text.split())
    pos = 0
    for label in enc.labels:
        pos = text.index(label, pos) + len(label)
    assert tok.unk_id in enc.ids


def test_html_is_split_not_interpreted(tok):
    enc = tok.encode("<b>hi</b>")
    assert enc.labels == ["<", "b", ">", "hi", "<", "/", "b", ">"]


def test_control_characters_become_their_own_tokens(tok):
    assert tok.encode("a\x00b").labels == ["a", "\x00", "b"]


def test_char_level():
    t = Tokenizer.build(["abc ab"], level="char")
    assert t.level == "char"
    enc = t.encode("abz c")
    assert enc.labels == ["a", "b", "z", " ", "c"]
    assert enc.ids[2] == t.unk_id and enc.ids[0] == t.vocab.index("a")
    assert t.decode(t.encode("ab ca").ids) == "ab ca"
    emoji = t.encode("a👋🏽")
    assert emoji.labels == ["a", "👋", "🏽"] and emoji.ids[1:] == [t.unk_id] * 2


def test_bos(tok):
    enc = tok.encode("the cat", add_bos=True)
    assert enc.ids[0] == tok.bos_id and enc.labels[0] == BOS and len(enc.ids) == 3
    assert tok.encode("the cat").ids[0] != tok.bos_id


def test_decode(tok):
    ids = tok.encode("The cat sat on the mat.").ids
    assert tok.decode(ids) == "the cat sat on the mat."
    assert tok.decode([tok.bos_id] + ids[:2] + [tok.eos_id, tok.pad_id]) == "the cat"
    assert tok.decode([tok.bos_id, 4], skip_special=False) == "<bos> the"
    assert tok.decode(tok.encode("sat, then ran!").ids) == "sat, then ran!"


def test_decode_rejects_out_of_range_ids(tok):
    with pytest.raises(ValueError):
        tok.decode([len(tok)])
    with pytest.raises(ValueError):
        tok.decode([-1])  # would silently wrap to the last word


def test_to_dict_from_dict_round_trip(tok):
    d = tok.to_dict()
    t2 = Tokenizer.from_dict(d)
    assert t2.vocab == tok.vocab and t2.level == tok.level and t2.add_bos == tok.add_bos
    text = "The zebra sat on the 🐈 mat!"
    assert t2.encode(text) == tok.encode(text)
    c = Tokenizer.build(["xy"], level="char", add_bos=True)
    c2 = Tokenizer.from_dict(c.to_dict())
    assert c2.level == "char" and c2.add_bos and c2.encode("xy") == c.encode("xy")


@pytest.mark.parametrize("bad", [None, {"vocab": "abc"}, {"vocab": ["<pad>", "<unk>", "<bos>", "<eos>", 3]},
                                 {"vocab": ["a", "b"]}, {"vocab": list(SPECIALS) + ["a", "a"]},
                                 {"vocab": list(SPECIALS), "level": "byte"}])
def test_from_dict_rejects_bad_vocab(bad):
    with pytest.raises(ValueError):
        Tokenizer.from_dict(bad)
