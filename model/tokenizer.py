"""Word-level (or character-level) tokenizer with display labels that keep the user's text.

Word level: lower-cased words, each punctuation mark its own token. Any Unicode is accepted:
emoji, CJK, RTL, control characters. Unknown words map to <unk> but keep their original text as
their label, so charts show what the user typed.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
WORD_RE = re.compile(r"\w+(?:'\w+)?|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    labels: list[str]  # what the user typed for each token (original case/characters)


class Tokenizer:
    def __init__(self, vocab: Iterable[str], level: str = "word", add_bos: bool = False):
        vocab = list(vocab)
        if level not in ("word", "char"):
            raise ValueError(f"level must be 'word' or 'char', got {level!r}")
        if vocab[: len(SPECIALS)] != list(SPECIALS):
            raise ValueError(f"the vocabulary must start with the special tokens {list(SPECIALS)}")
        if len(set(vocab)) != len(vocab):
            raise ValueError("the vocabulary has duplicate entries")
        self.vocab = vocab
        self.level = level
        self.add_bos = bool(add_bos)
        self.index = {w: i for i, w in enumerate(vocab)}
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.vocab)

    @classmethod
    def build(cls, texts: Iterable[str], level: str = "word", add_bos: bool = False,
              min_freq: int = 1) -> "Tokenizer":
        """A vocabulary of every piece seen at least min_freq times, most frequent first."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(p.lower() if level == "word" else p for p in cls.split(t, level))
        words = sorted((w for w, c in counts.items() if c >= min_freq and w not in SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls(list(SPECIALS) + words, level=level, add_bos=add_bos)

    @staticmethod
    def split(text: str, level: str = "word") -> list[str]:
        if level == "char":
            return list(text)
        return WORD_RE.findall(text)

    def encode(self, text: str, add_bos: bool | None = None) -> Encoded:
        add_bos = self.add_bos if add_bos is None else add_bos
        ids, labels = ([self.bos_id], [BOS]) if add_bos else ([], [])
        for piece in self.split(str(text), self.level):
            key = piece.lower() if self.level == "word" else piece
            ids.append(self.index.get(key, self.unk_id))
            labels.append(piece)
        return Encoded(ids=ids, labels=labels)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.vocab)]
        if bad:  # a negative id would otherwise wrap around to the end of the vocabulary
            raise ValueError(f"token ids must be in [0, {len(self.vocab) - 1}]; got {bad[:5]}")
        pieces = [self.vocab[i] for i in ids if not (skip_special and self.vocab[i] in SPECIALS)]
        if self.level == "char":
            return "".join(pieces)
        out = ""
        for p in pieces:
            out += p if (not out or re.fullmatch(r"[^\w\s]", p) and p not in "(\"") else " " + p
        return out

    def to_dict(self) -> dict:
        return {"level": self.level, "add_bos": self.add_bos, "vocab": self.vocab}

    @classmethod
    def from_dict(cls, d: dict) -> "Tokenizer":
        if not isinstance(d, dict) or not isinstance(d.get("vocab"), list):
            raise ValueError("tokenizer entry must be an object with a 'vocab' list")
        if not all(isinstance(w, str) for w in d["vocab"]):
            raise ValueError("tokenizer vocabulary entries must be strings")
        return cls(d["vocab"], level=d.get("level", "word"), add_bos=bool(d.get("add_bos", False)))
