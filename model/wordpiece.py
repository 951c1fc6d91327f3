"""WordPiece tokenizer for pretrained BERT-family models (MiniLM), through the `tokenizers` library.

The same interface as model.tokenizer.Tokenizer where the app uses it: `encode(text) ->
Encoded(ids, labels)`, `decode`, `vocab`, `index`, `pad_id`, `unk_id`, `bos_id`, `eos_id`,
`len()`. Differences a reader should know:
  - encode adds [CLS] at the start and [SEP] at the end (what the model was trained on);
    `bos_id`/`eos_id` are [CLS]/[SEP].
  - labels keep the user's own text: the model lower-cases and strips accents, but a label is the
    slice of the original text the piece came from (via the tokenizer's offsets), with "##" in
    front of a word continuation ("Walking" -> "Walk", "##ing"). Special tokens are labelled as
    themselves; [UNK] (characters WordPiece does not know) is labelled with what the user typed.
  - nothing is cut or padded: tokenizer.json fixes both at 128, they are switched off here
    (no_padding, no_truncation). Cutting to the model's max_len is the caller's job.
  - encode_pair(a, b) gives [CLS] a [SEP] b [SEP] with token_type_ids 0 for a, 1 for b.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer as HFTokenizer  # the runtime dependency, pinned

from .tokenizer import Encoded


@dataclass(frozen=True)
class EncodedPair(Encoded):
    token_type_ids: list[int]  # 0 for [CLS] text_a [SEP], 1 for text_b [SEP]


class WordPieceTokenizer:
    """WordPiece from a tokenizer.json (BERT's normalizer, pre-tokenizer and [CLS]/[SEP])."""

    level = "wordpiece"
    add_bos = True  # [CLS] always starts the sequence

    def __init__(self, tokenizer_json: str | Path):
        path = Path(tokenizer_json)
        try:
            tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001  the Rust library raises its own exception type
            raise ValueError(f"could not read the tokenizer file {path}: {e}") from None
        tok.no_padding()
        tok.no_truncation()
        self._tok = tok
        index = tok.get_vocab(with_added_tokens=True)
        vocab = [""] * len(index)
        for piece, i in index.items():
            vocab[i] = piece
        if "" in vocab:
            raise ValueError(f"{path}: the vocabulary ids are not 0..{len(index) - 1}")
        self.vocab: list[str] = vocab
        self.index: dict[str, int] = index
        missing = [s for s in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if s not in index]
        if missing:
            raise ValueError(f"{path}: the vocabulary lacks the special tokens {missing}")
        self.pad_id, self.unk_id = index["[PAD]"], index["[UNK]"]
        self.cls_id, self.sep_id, self.mask_id = index["[CLS]"], index["[SEP]"], index["[MASK]"]
        self.bos_id, self.eos_id = self.cls_id, self.sep_id
        self.specials = frozenset(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])

    def __len__(self) -> int:
        return len(self.vocab)

    def _labels(self, enc, texts: tuple[str, ...]) -> list[str]:
        """What the user typed for each token: the original slice (offsets), "##" before a word
        continuation, special tokens as themselves."""
        labels = []
        for tid, tok, (a, b), seq, special in zip(enc.ids, enc.tokens, enc.offsets, enc.sequence_ids,
                                                  enc.special_tokens_mask):
            if special or seq is None:
                labels.append(tok)
                continue
            text = texts[seq][a:b] or tok  # an empty slice cannot happen for a real piece
            labels.append("##" + text if tok.startswith("##") and tid != self.unk_id else text)
        return labels

    def encode(self, text: str) -> Encoded:
        """[CLS] pieces [SEP] of `text`: ids and labels (the user's own text), nothing cut."""
        text = str(text)
        enc = self._tok.encode(text)
        return Encoded(ids=list(enc.ids), labels=self._labels(enc, (text,)))

    def encode_pair(self, text_a: str, text_b: str) -> EncodedPair:
        """[CLS] a [SEP] b [SEP]: ids, labels, and token_type_ids (0 for a, 1 for b)."""
        text_a, text_b = str(text_a), str(text_b)
        enc = self._tok.encode(text_a, text_b)
        return EncodedPair(ids=list(enc.ids), labels=self._labels(enc, (text_a, text_b)),
                           token_type_ids=list(enc.type_ids))

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.vocab)]
        if bad:
            raise ValueError(f"token ids must be in [0, {len(self.vocab) - 1}]; got {bad[:5]}")
        return self._tok.decode(ids, skip_special_tokens=skip_special)
