"""Byte-level BPE tokenizer for GGUF language models (SmolLM2), built with the `tokenizers` library
from the file's own vocabulary and merges (tokenizer.ggml.tokens / merges / token_type).

The same interface as model.tokenizer.Tokenizer and model.wordpiece.WordPieceTokenizer where the
app uses it: `encode(text) -> Encoded(ids, labels)`, `decode`, `vocab`, `index`, `pad_id`,
`unk_id`, `bos_id`, `eos_id`, `len()`. What a reader should know:
  - The pipeline is the one transformers builds for this file (GGUF tokenizer model "gpt2"):
    GPT-2's ByteLevel pre-tokenizer (its regex, no prefix space), BPE over the merges, the
    ByteLevel decoder; the tokens the file marks CONTROL (type 3: <|endoftext|>, <|im_start|>,
    <|im_end|>, ...) are special added tokens, matched whole in the text; USER_DEFINED (type 4)
    ones are added tokens too. Tests check the ids against transformers' tokenizer on the same file.
    (SmolLM2's own tokenizer.json and llama.cpp's "smollm" pre-tokenizer also split digits one by
    one; the vocabulary holds no multi-digit tokens, so the ids agree.)
  - BOS as the file says (tokenizer.ggml.add_bos_token): SmolLM2's says False and transformers'
    tokenizer adds nothing ("The capital of France is" -> 5 ids); a Llama 3 file's True puts its
    bos_id first. bos_id/eos_id are the file's (SmolLM2: <|im_start|>, <|im_end|>), used by the
    chat template and to stop generation.
  - Words are cut by the regex the file's pre-tokenizer names (tokenizer.ggml.pre: llama-bpe,
    qwen2, ...: GGUF_PRE_TOKENIZER_SPLITS, transformers' table), else by GPT-2's.
  - unk_id is None: a byte-level BPE spells any text with its 256 byte tokens, so no id ever means
    "unknown" (the file names <|endoftext|> as its unknown token; it is never produced).
  - Labels are readable: a leading or inner space is shown as "·", a newline as "↵", a tab as "⇥",
    other control characters as their Unicode control pictures (U+2400 block), invisible ones
    (zero-width space, direction marks) as "<U+200B>", never the byte
    alphabet's "Ġ"/"Ċ". A token holding part of a character's UTF-8 bytes (emoji and CJK are often
    split in two or three) is labelled with that character and its part, e.g. "😀[1/2]".
  - decode(encode(text).ids) == text for every string (byte-level: nothing is normalised or lost).
"""
from __future__ import annotations

import functools
import unicodedata
from functools import lru_cache
from typing import Iterable, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # runtime dependency, pinned

from .tokenizer import Encoded

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types (tokenizer.ggml.token_type)

# How a GGUF's byte-level vocabulary cuts text into words before BPE, by its tokenizer.ggml.pre
# (llama.cpp's pre-tokenizer names): the regexes transformers uses for the same files
# (integrations/gguf/gguf_tokenizer_mapping.py). Names not here ("gpt2", "smollm", "default")
# keep GPT-2's own ByteLevel regex, as transformers does.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GGUF_PRE_TOKENIZER_SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx", "pixtral"), _LLAMA3_SPLIT),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2_SPLIT),
}


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: each byte 0-255 as a printable character (spaces become "Ġ"...)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def readable(text: str) -> str:
    """A token's text for a label: spaces "·", newline "↵", tab "⇥", other C0 controls and DEL as
    their control pictures (U+2400 + code, U+2421), other invisible characters (no-break and
    zero-width spaces, direction marks, C1 controls) as "<U+200B>"; everything else as typed."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch == " ":
            out.append("·")
        elif ch == "\n":
            out.append("↵")
        elif ch == "\t":
            out.append("⇥")
        elif o < 0x20:
            out.append(chr(0x2400 + o))
        elif o == 0x7F:
            out.append("\u2421")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp"):  # invisible: name it
            out.append(f"<U+{o:04X}>")
        else:
            out.append(ch)
    return "".join(out)


def labels_from_bytes(ids: Sequence[int], token_bytes) -> list[str]:
    """Readable labels of token ids from the bytes each stands for (token_bytes(id) -> bytes):
    readable() text per token; a run of tokens that only together make whole UTF-8 characters is
    labelled with those characters and each token's part: "😀[1/2]", "😀[2/2]". The one labelling
    rule of every byte-level or byte-fallback tokenizer (model.bpe, model.tokenizer_json)."""
    out: list[str] = []
    i = 0
    ids = list(ids)
    while i < len(ids):
        b = token_bytes(ids[i])
        try:
            out.append(readable(b.decode("utf-8")) or "∅")
            i += 1
            continue
        except UnicodeDecodeError:
            pass
        j, buf = i, b""  # shortest run from i that decodes
        while j < len(ids):
            buf += token_bytes(ids[j])
            j += 1
            try:
                whole = buf.decode("utf-8")
                break
            except UnicodeDecodeError:
                whole = None
        if whole is None:  # a cut-off character at the end (decode of a partial id list)
            whole = buf.decode("utf-8", errors="replace")
        n = j - i
        for part in range(n):
            out.append(f"{readable(whole)}[{part + 1}/{n}]")
        i = j
    return out


def display_label(b: bytes) -> str:
    """One token's label out of context (display_vocab): readable text, or its bytes as
    "<0xE2><0x80>" when they are only part of a UTF-8 character; "∅" for no bytes."""
    try:
        return readable(b.decode("utf-8")) or "∅"
    except UnicodeDecodeError:
        return "".join(f"<0x{x:02X}>" for x in b)


class ByteLevelBPETokenizer:
    """Byte-level BPE from a GGUF's tokens, merges and token types (see the module docstring)."""

    level = "bpe"

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int] | None = None,
                 *, bos_id: int | None = None, eos_id: int | None = None, pad_id: int | None = None,
                 what: str = "the GGUF file", split: str | None = None, add_bos: bool = False):
        """split: the regex that cuts text into words before BPE (GGUF_PRE_TOKENIZER_SPLITS), in
        place of GPT-2's; add_bos: put bos_id in front of every encoding (the file's
        tokenizer.ggml.add_bos_token; SmolLM2: False, what transformers' tokenizer does)."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError(f"{what}: the tokenizer has no tokens (tokenizer.ggml.tokens)")
        spelling = bytes_to_unicode()
        alphabet = set(spelling.values())
        # tokens are stored in the byte alphabet; respell any that is not (as transformers does)
        spelled = [t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")) for t in tokens]
        vocab = {t: i for i, t in enumerate(spelled)}
        if len(vocab) != len(spelled):
            raise ValueError(f"{what}: the vocabulary has duplicate tokens")
        pairs = []
        for m in merges:
            a, sep, b = m.partition(" ")
            if not sep:
                raise ValueError(f"{what}: merge {m!r} is not two tokens separated by a space")
            pairs.append((a, b))
        bpe = models.BPE(vocab=vocab, merges=pairs, dropout=None, continuing_subword_prefix="",
                         end_of_word_suffix="", fuse_unk=False)
        tok = Tokenizer(bpe)
        if split is None:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:  # the regex the vocabulary's merges were learned with, then bytes (transformers' way)
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        types = list(token_types) if token_types is not None else [1] * len(tokens)
        specials = [t for t, ty in zip(spelled, types) if ty == CONTROL and set(t) <= alphabet]
        tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
        user = [t for t, ty in zip(spelled, types) if ty == USER_DEFINED]
        if user:
            tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
        if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
            raise ValueError(f"{what}: the tokenizer grew to {tok.get_vocab_size(with_added_tokens=True)} "
                             f"tokens; the file lists {len(tokens)}")
        self._tok = tok
        self.vocab: list[str] = tokens  # as the file spells them (byte alphabet: "ĠParis")
        self.index: dict[str, int] = vocab
        self.specials = frozenset(specials)
        self._special_ids = frozenset(vocab[t] for t in specials)
        self._byte_of = {c: b for b, c in spelling.items()}
        n = len(tokens)
        for name, v in (("bos", bos_id), ("eos", eos_id), ("pad", pad_id)):
            if v is not None and not 0 <= v < n:
                raise ValueError(f"{what}: {name} token id {v} is outside the vocabulary of {n}")
        self.bos_id, self.eos_id = bos_id, eos_id
        self.pad_id = pad_id if pad_id is not None else eos_id
        self.unk_id = None  # byte-level: every text is spelled by known tokens
        if add_bos and bos_id is None:
            raise ValueError(f"{what}: the file asks for a BOS token but names none (tokenizer.ggml.bos_token_id)")
        self.add_bos = bool(add_bos)

    @classmethod
    def from_gguf_metadata(cls, meta: dict, what: str = "the GGUF file") -> "ByteLevelBPETokenizer":
        """From a GGUF header (model.gguf_loader.read_header): a "gpt2" (byte-level BPE) tokenizer."""
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"{what}: tokenizer model {kind!r}; this reads byte-level BPE ('gpt2')")
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in meta:
                raise ValueError(f"{what}: the metadata lacks {key}")
        get = meta.get
        tt = get("tokenizer.ggml.token_type")
        return cls(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"],
                   None if tt is None else [int(x) for x in tt],
                   bos_id=get("tokenizer.ggml.bos_token_id"), eos_id=get("tokenizer.ggml.eos_token_id"),
                   pad_id=get("tokenizer.ggml.padding_token_id"), what=what,
                   split=GGUF_PRE_TOKENIZER_SPLITS.get(get("tokenizer.ggml.pre")),
                   add_bos=bool(get("tokenizer.ggml.add_bos_token", False)))

    def __len__(self) -> int:
        return len(self.vocab)

    def token_bytes(self, tid: int) -> bytes:
        """The bytes a token stands for (special tokens: their own text)."""
        piece = self.vocab[tid]
        if tid in self._special_ids:
            return piece.encode("utf-8")
        return bytes(self._byte_of[c] for c in piece)

    @functools.cached_property
    def display_vocab(self) -> list[str]:
        """One readable label per token id, for token ids shown out of context (top-k predictions,
        embedding rows): "ĠParis" -> "·Paris", "Ċ" -> "↵" (module docstring); a token that is
        only part of a UTF-8 character shows its bytes ("<0xE2><0x80>"); special tokens as
        spelled. `vocab` keeps the file's spelling (what the ids mean to the tokenizer)."""
        return [display_label(self.token_bytes(tid)) for tid in range(len(self.vocab))]

    def labels(self, ids: Sequence[int], text: str | None = None,
               offsets: Sequence[tuple[int, int]] | None = None) -> list[str]:
        """Readable labels (module docstring). A run of tokens that only together make whole UTF-8
        characters is labelled with those characters and each token's part: "😀[1/2]", "😀[2/2]"."""
        return labels_from_bytes(ids, self.token_bytes)

    def encode(self, text: str) -> Encoded:
        """Ids of `text` (BOS in front when the file asks for it; SmolLM2: none; nothing cut)
        and a readable label per token."""
        text = str(text)
        ids = list(self._tok.encode(text, add_special_tokens=False).ids)
        if self.add_bos:
            ids = [self.bos_id] + ids
        return Encoded(ids=ids, labels=self.labels(ids))

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text back from ids: exact (decode(encode(t).ids) == t). skip_special drops control tokens
        such as <|im_end|>."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.vocab)]
        if bad:
            raise ValueError(f"token ids must be in [0, {len(self.vocab) - 1}]; got {bad[:5]}")
        return self._tok.decode(ids, skip_special_tokens=skip_special)
