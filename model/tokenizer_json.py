"""Tokenizers of the pretrained families, built by the `tokenizers` library itself from a model
folder's tokenizer.json (or from a GGUF's own vocabulary): the file's normalizer, pre-tokenizer,
model, post-processor and added tokens, special tokens added as the file says.

    tok = load_tokenizer(folder, hf_config)       # WordPieceTokenizer (BERT-style WordPiece) or
                                                  # SubwordTokenizer (BPE, Unigram, other WordPiece)
    enc = tok.encode("The capital of France is")  # Encoded(ids, labels); specials as the file adds them

The same interface as model.tokenizer.Tokenizer where the app uses it (encode -> Encoded(ids,
labels), decode, vocab, index, display_vocab, pad_id, unk_id, bos_id, eos_id, len()). What a
reader should know:
  - ids are the file's own: `tokenizers.Tokenizer.from_file(tokenizer.json).encode(text)` with its
    post-processor (Llama 3 puts <|begin_of_text|> in front, BERT [CLS] ... [SEP], GPT-2 and Qwen
    nothing). Padding and truncation, which some files switch on, are switched off: nothing is cut.
  - labels are readable text per token: for byte-level BPE (GPT-2, Llama 3, Qwen, RoBERTa) and
    SentencePiece-style vocabularies with byte fallback (Llama 2, TinyLlama, Gemma, Mistral) from
    the bytes each token stands for (model.bpe.labels_from_bytes: spaces "·", newlines "↵", a
    character split over several tokens "😀[1/2]"); for WordPiece the slice of the user's text
    ("##" before a word continuation). Special tokens as spelled.
  - bos/eos/pad/unk come from tokenizer_config.json (bos_token, ...), else config.json's ids.
  - `pad_vocab(n)`: a model's vocabulary may have more rows than the tokenizer has tokens (Qwen2:
    151,936 rows, 151,665 tokens); the extra ids get placeholder names so every row has a label.
"""
from __future__ import annotations

import functools
import json
import operator
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from .bpe import CONTROL, USER_DEFINED, ByteLevelBPETokenizer, bytes_to_unicode, display_label, labels_from_bytes
from .tokenizer import Encoded
from .wordpiece import EncodedPair, WordPieceTokenizer

BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _components(spec: dict, key: str) -> list[dict]:
    """The parts of a tokenizer.json component (a Sequence's members, or itself)."""
    part = spec.get(key)
    if not part:
        return []
    if part.get("type") == "Sequence":
        return [p for sub in part.get(key + "s", part.get("pretokenizers", part.get("decoders", [])))
                for p in ([sub] if sub.get("type") != "Sequence" else sub.get("decoders", []))]
    return [part]


def spelling_of(spec: dict) -> str:
    """How the vocabulary spells bytes, from tokenizer.json: "byte_level" (GPT-2's byte alphabet),
    "metaspace" (SentencePiece: "▁" for a space, "<0xNN>" byte-fallback tokens), "wordpiece"
    ("##" continuations) or "plain"."""
    model = spec.get("model", {}).get("type")
    if model == "WordPiece":
        return "wordpiece"
    parts = _components(spec, "decoder") + _components(spec, "pre_tokenizer")
    types = {p.get("type") for p in parts}
    if "ByteLevel" in types:
        return "byte_level"
    if "Metaspace" in types or "ByteFallback" in types or any(
            p.get("type") == "Replace" and "▁" in json.dumps(p, ensure_ascii=False) for p in parts):
        return "metaspace"
    return "plain"


class SubwordTokenizer:
    """A `tokenizers.Tokenizer` (from a tokenizer.json or built from a GGUF) with the app's
    interface (module docstring)."""

    def __init__(self, tok: Tokenizer, *, spelling: str, level: str, bos: str | None = None,
                 eos: str | None = None, pad: str | None = None, unk: str | None = None,
                 mask: str | None = None, add_bos: bool | None = None, what: str = "the tokenizer",
                 index: dict[str, int] | None = None):
        """add_bos None: the post-processor decides (a tokenizer.json); True/False: a BOS id is put
        in front of every encoding or not (a GGUF's tokenizer.ggml.add_bos_token). index: the
        tokenizer's whole vocabulary {token: id} when the caller has it (a GGUF's, whose added tokens
        are its own tokens): spares asking the library for 262,144 entries again."""
        tok.no_padding()
        tok.no_truncation()
        self._tok = tok
        self.spelling, self.level, self.what = spelling, level, what
        index = tok.get_vocab(with_added_tokens=True) if index is None else index
        n = max(index.values()) + 1 if index else 0
        vocab = [""] * n
        for piece, i in index.items():
            vocab[i] = piece
        self._n_real = n
        self.vocab: list[str] = [v or f"<unused {i}>" for i, v in enumerate(vocab)]  # by id
        self.index: dict[str, int] = dict(index)
        specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        self.specials = frozenset(specials)
        self._special_ids = frozenset(index[t] for t in specials if t in index)
        self._byte_of = {c: b for b, c in bytes_to_unicode().items()}

        def tid(token: str | None) -> int | None:
            return None if token is None else index.get(token)

        self.bos_id, self.eos_id, self.unk_id = tid(bos), tid(eos), tid(unk)
        self.pad_id = tid(pad) if tid(pad) is not None else self.eos_id
        self.mask_id = tid(mask)
        if add_bos and self.bos_id is None:
            raise ValueError(f"{what}: BOS is to be added but the tokenizer has no BOS token")
        self._force_bos = add_bos
        probe = tok.encode("a", add_special_tokens=True).ids
        plain = tok.encode("a", add_special_tokens=False).ids
        self.add_bos = bool(add_bos) if add_bos is not None else (
            len(probe) > len(plain) and probe[0] in self._special_ids)

    def __len__(self) -> int:
        return len(self.vocab)

    def pad_vocab(self, n: int) -> None:
        """Give ids len(self) .. n-1 (model rows without a token) placeholder names."""
        if n > len(self.vocab):
            self.vocab = self.vocab + [f"<unused {i}>" for i in range(len(self.vocab), n)]
            self.__dict__.pop("display_vocab", None)

    def token_bytes(self, tid: int) -> bytes:
        """The bytes a token stands for (special and added tokens, placeholders: their own text)."""
        piece = self.vocab[tid]
        if tid in self._special_ids or tid >= self._n_real:
            return piece.encode("utf-8")
        if self.spelling == "byte_level":
            try:
                return bytes(self._byte_of[c] for c in piece)
            except KeyError:  # an added token written as text
                return piece.encode("utf-8")
        if self.spelling == "metaspace":
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                try:
                    return bytes([int(piece[3:5], 16)])  # byte fallback
                except ValueError:
                    pass
            return piece.replace("▁", " ").encode("utf-8")
        if self.spelling == "wordpiece" and piece.startswith("##"):
            return piece[2:].encode("utf-8")
        return piece.encode("utf-8")

    @functools.cached_property
    def display_vocab(self) -> list[str]:
        """One readable label per token id, for ids shown out of context ("ĠParis" -> "·Paris",
        "▁Paris" -> "·Paris", "<0xE2>" as its byte); special tokens as spelled."""
        return [display_label(self.token_bytes(i)) for i in range(len(self.vocab))]

    def _wordpiece_labels(self, enc, texts: tuple[str, ...]) -> list[str]:
        labels = []
        for tid, piece, (a, b), seq, special in zip(enc.ids, enc.tokens, enc.offsets, enc.sequence_ids,
                                                    enc.special_tokens_mask):
            if special or seq is None:
                labels.append(piece)
                continue
            text = texts[seq][a:b] or piece
            labels.append("##" + text if piece.startswith("##") and tid != self.unk_id else text)
        return labels

    def labels(self, ids: Sequence[int]) -> list[str]:
        return labels_from_bytes(ids, self.token_bytes)

    def _ids(self, enc) -> list[int]:
        ids = list(enc.ids)
        if self._force_bos:  # always, as transformers' and llama.cpp's tokenizers of a GGUF do (a text
            ids = [self.bos_id] + ids  # that starts with "<bos>" then has two, as there)
        return ids

    def encode(self, text: str) -> Encoded:
        """The file's ids of `text` (its special tokens added as it says; nothing cut) and a
        readable label per token."""
        text = str(text)
        enc = self._tok.encode(text, add_special_tokens=self._force_bos is None)
        ids = self._ids(enc)
        if self.spelling == "wordpiece" and len(ids) == len(enc.ids):
            return Encoded(ids=ids, labels=self._wordpiece_labels(enc, (text,)))
        return Encoded(ids=ids, labels=self.labels(ids))

    def encode_pair(self, text_a: str, text_b: str) -> EncodedPair:
        """Two texts as the file's post-processor joins them (BERT: [CLS] a [SEP] b [SEP]), with
        its token_type_ids."""
        text_a, text_b = str(text_a), str(text_b)
        enc = self._tok.encode(text_a, text_b)
        ids = list(enc.ids)
        labels = (self._wordpiece_labels(enc, (text_a, text_b)) if self.spelling == "wordpiece"
                  else self.labels(ids))
        return EncodedPair(ids=ids, labels=labels, token_type_ids=list(enc.type_ids))

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.vocab)]
        if bad:
            raise ValueError(f"token ids must be in [0, {len(self.vocab) - 1}]; got {bad[:5]}")
        return self._tok.decode([i for i in ids if i < self._n_real], skip_special_tokens=skip_special)


def _token_name(v) -> str | None:
    """A special token in tokenizer_config.json: a string, or {"content": ...} (AddedToken)."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def load_tokenizer(folder: str | Path, hf_config: dict | None = None, *, what: str | None = None):
    """The tokenizer of a model folder: tokenizer.json through the `tokenizers` library (ValueError
    when it is missing or unreadable). A BERT-style WordPiece file (with [CLS], [SEP], [PAD], [UNK],
    [MASK]) gives a WordPieceTokenizer (MiniLM's); any other a SubwordTokenizer."""
    folder = Path(folder)
    path = folder / "tokenizer.json"
    what = what or str(path)
    if not path.is_file():
        raise ValueError(f"{folder}: no tokenizer.json; the tokenizer is missing (a model folder needs "
                         "config.json, *.safetensors and tokenizer.json)")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        tok = Tokenizer.from_str(json.dumps(spec))
    except Exception as e:  # noqa: BLE001  the Rust library raises its own exception type
        raise ValueError(f"could not read the tokenizer file {path}: {e}") from None
    spelling = spelling_of(spec)
    if spelling == "wordpiece" and all(t in tok.get_vocab(with_added_tokens=True) for t in BERT_SPECIALS):
        return WordPieceTokenizer(path)
    tc: dict = {}
    tc_path = folder / "tokenizer_config.json"
    if tc_path.is_file():
        try:
            tc = json.loads(tc_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{tc_path} is not valid JSON: {e}") from None
    hf_config = hf_config or {}
    vocab = tok.get_vocab(with_added_tokens=True)
    by_id = {i: t for t, i in vocab.items()}

    def pick(name: str) -> str | None:
        t = _token_name(tc.get(f"{name}_token"))
        if t is not None:
            return t
        i = hf_config.get(f"{name}_token_id")
        if isinstance(i, list):
            i = i[0] if i else None
        return by_id.get(i) if isinstance(i, int) else None

    unk = pick("unk") or spec.get("model", {}).get("unk_token")
    level = {"BPE": "bpe", "WordPiece": "wordpiece", "Unigram": "unigram", "WordLevel": "word"}.get(
        spec.get("model", {}).get("type"), "bpe")
    return SubwordTokenizer(tok, spelling=spelling, level=level, bos=pick("bos"), eos=pick("eos"),
                            pad=pick("pad"), unk=unk, mask=pick("mask"), what=what)


# ---- a GGUF's own SentencePiece vocabulary (tokenizer.ggml.model "llama") -------------------------

def generate_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """BPE merges implied by a vocabulary and each token's score (a GGUF without merges): every
    split of a token into two vocabulary pieces, best score first (transformers' generate_merges,
    the same order). When every token's score differs (Gemma: minus its position in the file), that
    order is simply the tokens by score, best first, and each token's splits by the left piece's
    length, longest first (the lengths of a token's splits all differ): no sort of the ~500,000
    merges and no key functions, ~2x faster on Gemma 3's 262,144 tokens (the same list: tested)."""
    values = list(scores.values())
    if len(set(values)) == len(values):
        ordered = [t for t, _ in sorted(scores.items(), key=operator.itemgetter(1), reverse=True)]
        return _merges_in_order(vocab, ordered)
    merges = []
    for merge, score in scores.items():
        local = [(merge[:i], merge[i:], score) for i in range(1, len(merge))
                 if merge[:i] in vocab and merge[i:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda v: (v[2], len(v[0]), len(v[1])), reverse=True)
    return [(a, b) for a, b, _ in merges]


def _merges_in_order(vocab: dict[str, int], ordered: list[str]) -> list[tuple[str, str]]:
    """Every split (left, right) of each token of `ordered` into two vocabulary pieces: the tokens
    in the given order, each token's splits by the left piece's length, longest first. (A plain
    loop: measured faster in CPU time than map/compress over split lengths.)"""
    merges: list[tuple[str, str]] = []
    append = merges.append
    for merge in ordered:
        for i in range(len(merge) - 1, 0, -1):
            left = merge[:i]
            if left in vocab:
                right = merge[i:]
                if right in vocab:
                    append((left, right))
    return merges


def sentencepiece_from_gguf(meta: dict, arch: str, what: str = "the GGUF file") -> SubwordTokenizer:
    """The tokenizer a GGUF with tokenizer.ggml.model "llama" describes (Llama 2, TinyLlama,
    Mistral, Gemma): BPE over "▁"-spelled pieces with byte fallback, as transformers builds it
    for the same file (LlamaTokenizer; GemmaTokenizer for gemma architectures): merges from the
    file, else from the scores (Gemma: the file order); control tokens special, user-defined ones
    added; BOS in front unless tokenizer.ggml.add_bos_token says otherwise."""
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ValueError(f"{what}: the metadata lacks tokenizer.ggml.tokens")
    gemma = arch.startswith("gemma")
    stored = tokens
    if gemma:  # tokens of spaces are stored as spaces; the vocabulary looks them up as "▁▁"
        tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {t: i for i, t in enumerate(tokens)}
    if "tokenizer.ggml.merges" in meta:
        merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    else:
        if gemma:
            scores = {t: -i for i, t in enumerate(tokens)}
        else:
            raw = meta.get("tokenizer.ggml.scores")
            if raw is None:
                raise ValueError(f"{what}: the metadata has neither merges nor scores for the vocabulary")
            scores = dict(zip(tokens, (float(s) for s in raw)))
        merges = generate_merges(vocab, scores)
    types = [int(x) for x in (meta.get("tokenizer.ggml.token_type") if meta.get("tokenizer.ggml.token_type")
                              is not None else [1] * len(tokens))]
    get = meta.get
    names = {k: (tokens[int(get(f"tokenizer.ggml.{key}"))] if get(f"tokenizer.ggml.{key}") is not None else None)
             for k, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                            ("pad", "padding_token_id"))}
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True, dropout=None,
                     unk_token=names["unk"] if gemma else None)
    tok = Tokenizer(bpe)
    if gemma:
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1)])
    specials = [t for t, ty in zip(tokens, types) if ty == CONTROL]
    specials += [t for t in names.values() if t is not None and t not in specials]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    # user-defined tokens (Gemma 3: 165, runs of newlines and of spaces, tabs, ...) are matched whole
    # in the text, as transformers adds them: as the file spells them, those that are in the
    # vocabulary (Gemma's runs of spaces, respelled "▁▁", are found by the normalizer and the merges)
    user = [t for t, ty in zip(stored, types) if ty == USER_DEFINED and t in vocab]
    if user:
        tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
    add_bos = bool(get("tokenizer.ggml.add_bos_token", True))
    whole = vocab if len(vocab) == len(tokens) else None  # every added token is one of the file's tokens
    return SubwordTokenizer(tok, spelling="metaspace", level="bpe", add_bos=add_bos, what=what, index=whole, **names)


def tokenizer_from_gguf(meta: dict, what: str = "the GGUF file"):
    """The tokenizer a GGUF's metadata describes: byte-level BPE ("gpt2": model.bpe, with the
    file's pre-tokenizer and add-BOS) or SentencePiece-style BPE ("llama"). Others: ValueError."""

    kind = meta.get("tokenizer.ggml.model")
    if kind == "gpt2":
        return ByteLevelBPETokenizer.from_gguf_metadata(meta, what=what)
    if kind == "llama":
        return sentencepiece_from_gguf(meta, str(meta.get("general.architecture", "")), what)
    raise ValueError(f"{what}: tokenizer model {kind!r} is not supported (gpt2: byte-level BPE; "
                     "llama: SentencePiece BPE)")
