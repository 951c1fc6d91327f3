"""Tiny random models of every family, built offline with transformers' own config and model
classes (seeded weights), saved with save_pretrained as safetensors, each with a tiny tokenizer
trained by `tokenizers` (tokenizer.json + tokenizer_config.json); and tiny GGUF files written
with the `gguf` package's GGUFWriter from the same weights. The fixtures of the family parity
tests (tests/model/test_families.py), the pages x families AppTest and
benchmarks/bench_families.py. transformers is test-only (requirements-dev.txt): import this
module only where it is installed.

    folder = build("gemma2", tmp_path / "gemma2")        # config.json, model.safetensors, tokenizer.json
    hf = hf_model(folder)                                 # transformers' eager model of it
    gguf = build_gguf("gemma2", folder, tmp_path / "g.gguf")

Each tiny model exercises its family's numeric details at sizes where they matter: Gemma 2's
soft-caps are small (3 and 4) so tanh is far from linear, its query_pre_attn_scalar is not its
head_dim, Qwen3's head_dim is not d_model / heads, Mistral's window (3) is shorter than the test
sentences, Llama uses llama3 rotary scaling whose original length (16) touches every frequency,
weights are drawn with unit-scale spreads (norm weights away from 1) so every term shows.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Attention lets every token look at the others; the weights sum to one.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
    "1234567890 and 3.14159 and 1,000,000 tokens in 2024.",
    "東京の寿司は美味しい。中文测试，标点符号。", "emoji 😀🤖 flags 🇫🇷 and hearts ❤️",
    "Crème brûlée in Zürich — naïve façade.", "the cat sat on the mat . a dog ran to the park .",
    "    indented   runs of   spaces\n\n\nand blank lines\ttabs",
] * 3

# The 20 strings the tokenizers are checked on (emoji, CJK, runs of spaces, newlines, digits)
TOKENIZER_STRINGS = [
    "The capital of France is", "Hello, world!", "  leading spaces", "trailing spaces   ",
    "a    run   of     spaces", "line1\nline2\n\n\nline5", "tabs\tand\r\nCRLF",
    "1234567890 and 3.14159 and 1,000,000", "naïve café résumé Zürich façade", "東京の寿司は美味しい",
    "中文测试，标点符号。", "emoji 😀🤖👩‍👩‍👧 flags 🇫🇷", "Привет, мир", "don't won't it's y'all",
    "def f(x):\n    return x**2  # code", " ", "\n", "ÀÉÎÕÜ ñ ß ø", "x" * 40, "a\u200bb\u00a0c 12 345 6789",
]


@dataclass(frozen=True)
class Spec:
    """One tiny model: transformers' config and model class, the config's values, its tokenizer."""

    config_class: str
    model_class: str
    config: dict
    tokenizer: str  # "bytelevel" | "bytelevel_bos" | "qwen" | "roberta" | "spm" | "gemma" | "wordpiece"
    causal: bool = True
    extra_vocab: int = 0  # embedding rows beyond the tokenizer's tokens (Qwen2 pads its vocabulary)
    shard: str | None = None  # max_shard_size: several safetensors files with an index
    old_rope_keys: bool = False  # rewrite config.json with rope_theta / rope_scaling (older spelling)
    extra: dict = field(default_factory=dict)


DEC = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=64)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
GEMMA3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
               "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 50.0}}
ENC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)

SPECS: dict[str, Spec] = {
    "gpt2": Spec("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64),
                 "bytelevel"),
    "llama": Spec("LlamaConfig", "LlamaForCausalLM", dict(DEC, rope_parameters=LLAMA3, tie_word_embeddings=False),
                  "bytelevel_bos", shard="20KB", old_rope_keys=True),
    "tinyllama": Spec("LlamaConfig", "LlamaForCausalLM", dict(DEC, tie_word_embeddings=False), "spm"),
    "qwen2": Spec("Qwen2Config", "Qwen2ForCausalLM", dict(DEC, use_sliding_window=True, sliding_window=4,
                                                          max_window_layers=1, tie_word_embeddings=True,
                                                          rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
                  "qwen", extra_vocab=5),
    "qwen3": Spec("Qwen3Config", "Qwen3ForCausalLM", dict(DEC, head_dim=16, tie_word_embeddings=False),
                  "qwen"),
    "mistral": Spec("MistralConfig", "MistralForCausalLM", dict(DEC, sliding_window=3, head_dim=None), "spm"),
    "gemma2": Spec("Gemma2Config", "Gemma2ForCausalLM",
                   dict(hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=16, max_position_embeddings=64, sliding_window=3,
                        query_pre_attn_scalar=12, attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
                        pad_token_id=0, eos_token_id=1, bos_token_id=2), "gemma"),
    # Gemma 3: one local layer (window 4) and one global, bases 10,000 and 50 (small, so that the two
    # differ at head_dim 16) and linear scaling 4 on the global layer; query scalar not head_dim
    "gemma3": Spec("Gemma3TextConfig", "Gemma3ForCausalLM",
                   dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=16, max_position_embeddings=64, sliding_window=4,
                        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=12,
                        rope_parameters=GEMMA3_ROPE, pad_token_id=0, eos_token_id=1, bos_token_id=2), "gemma"),
    "bert": Spec("BertConfig", "BertForMaskedLM", dict(ENC, max_position_embeddings=64, type_vocab_size=2),
                 "wordpiece", causal=False),
    "roberta": Spec("RobertaConfig", "RobertaForMaskedLM",
                    dict(ENC, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, layer_norm_eps=1e-5), "roberta", causal=False),
    "distilbert": Spec("DistilBertConfig", "DistilBertForMaskedLM",
                       dict(dim=32, n_heads=4, n_layers=2, hidden_dim=64, max_position_embeddings=64),
                       "wordpiece", causal=False),
}
FAMILY_NAMES = tuple(SPECS)
DECODERS = tuple(n for n, s in SPECS.items() if s.causal)
GGUF_FAMILIES = ("tinyllama", "qwen2", "gemma2", "gemma3")  # llama-arch (SentencePiece), qwen2 (byte-level), Gemma
# What a GGUF cannot say, set to what llama.cpp assumes, for the models a GGUF is written from:
# Qwen2's sliding window (llama.cpp has none for qwen2); Gemma 2's query scale (llama.cpp: 1/sqrt(head_dim))
# Gemma 3's: 6 layers with Gemma 3's own pattern (layer 5 global), the local base 10,000, the scalar head_dim
GGUF_OVERRIDES = {"qwen2": dict(use_sliding_window=False, sliding_window=None), "gemma2": dict(query_pre_attn_scalar=16),
                  "gemma3": dict(query_pre_attn_scalar=16, num_hidden_layers=6, layer_types=None)}


# ---- tokenizers -----------------------------------------------------------------------------------

def make_tokenizer(kind: str, vocab_size: int = 360) -> tuple[Tokenizer, dict]:
    """(tokenizer, tokenizer_config.json values) of a tiny tokenizer of `kind`, trained on CORPUS."""
    if kind in ("bytelevel", "bytelevel_bos", "qwen", "roberta"):
        specials = {"bytelevel": ["<|endoftext|>"], "bytelevel_bos": ["<|begin_of_text|>", "<|end_of_text|>"],
                    "qwen": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                    "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}[kind]
        tok = Tokenizer(models.BPE())
        if kind in ("bytelevel_bos", "qwen"):  # Llama 3's and Qwen2's own split regexes, then bytes
            from model.bpe import GGUF_PRE_TOKENIZER_SPLITS
            split = GGUF_PRE_TOKENIZER_SPLITS["llama-bpe" if kind == "bytelevel_bos" else "qwen2"]
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=kind == "roberta")
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(CORPUS, trainer)
        if kind == "bytelevel":
            tok.post_processor = processors.ByteLevel(trim_offsets=False)
            return tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
        if kind == "qwen":
            return tok, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        if kind == "bytelevel_bos":
            bos = tok.token_to_id("<|begin_of_text|>")
            tok.post_processor = processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)])
            return tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")))
        return tok, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                     "mask_token": "<mask>"}
    if kind in ("spm", "gemma"):
        specials = ["<unk>", "<s>", "</s>"] if kind == "spm" else ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
        bytes_ = [f"<0x{i:02X}>" for i in range(256)]
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if kind == "spm":  # Llama 2 / Mistral / TinyLlama: Metaspace, "▁" before the first word
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(content=" ", left=1)])
        else:  # Gemma: spaces replaced by "▁" in the normalizer, no prefix
            tok.normalizer = normalizers.Replace(" ", "▁")
            tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        trainer = trainers.BpeTrainer(vocab_size=vocab_size + 256, special_tokens=specials + bytes_,
                                      show_progress=False)
        tok.train_from_iterator(CORPUS, trainer)
        bos = specials[1] if kind == "spm" else "<bos>"
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
        if kind == "spm":
            return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        return tok, {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                     "mask_token": "<mask>"}
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials,
                                                                  show_progress=False))
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return tok, {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
                     "mask_token": "[MASK]"}
    raise ValueError(kind)


# ---- models ---------------------------------------------------------------------------------------

def randomize(model: torch.nn.Module, seed: int, *, offset_norms: bool = False) -> None:
    """Seeded weights with unit-scale spreads: 2-D weights N(0, 1/fan), embeddings N(0, 1), biases
    N(0, 0.1), norm weights 1 + N(0, 0.2) (Gemma's offsets: N(0, 0.2))."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                std = 1.0 if "emb" in name or "wte" in name or "wpe" in name else p.shape[-1] ** -0.5
                if p.shape[0] < p.shape[-1] and ("c_attn" in name or "c_fc" in name):
                    std = p.shape[0] ** -0.5  # GPT-2's Conv1D: (in, out)
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name.lower() or "ln_" in name:
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
                else:
                    base = 0.0 if offset_norms else 1.0
                    p.copy_(base + torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def build(name: str, folder: str | Path, seed: int = 0, overrides: dict | None = None) -> Path:
    """Save the tiny `name` model (SPECS) into folder: config.json, *.safetensors (sharded with an
    index for Llama), tokenizer.json, tokenizer_config.json. Returns the folder. overrides: config
    values changed (GGUF_OVERRIDES for a model a GGUF is written from)."""
    import transformers

    spec = SPECS[name]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok, tok_cfg = make_tokenizer(spec.tokenizer)
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    cfg_values = copy.deepcopy(dict(spec.config, vocab_size=n_tok + spec.extra_vocab, **(overrides or {})))
    if spec.tokenizer == "bytelevel_bos":
        cfg_values.update(bos_token_id=tok.token_to_id("<|begin_of_text|>"), eos_token_id=tok.token_to_id("<|end_of_text|>"))
    elif spec.tokenizer == "spm":
        cfg_values.update(bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
    elif spec.tokenizer == "bytelevel":
        eot = tok.token_to_id("<|endoftext|>")
        cfg_values.update(bos_token_id=eot, eos_token_id=eot)
    elif spec.tokenizer == "qwen":
        cfg_values.update(eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"))
    elif spec.tokenizer == "wordpiece":
        cfg_values.update(pad_token_id=tok.token_to_id("[PAD]"))
    cfg = getattr(transformers, spec.config_class)(**cfg_values)
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)._from_config(cfg, attn_implementation="eager").eval()
    randomize(model, seed, offset_norms=name in ("gemma2", "gemma3"))
    kwargs = {"max_shard_size": spec.shard} if spec.shard else {}
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    if spec.old_rope_keys:  # the older spelling: rope_theta beside rope_scaling
        d = json.loads((folder / "config.json").read_text())
        params = d.pop("rope_parameters")
        d["rope_theta"] = params.pop("rope_theta")
        d["rope_scaling"] = params
        (folder / "config.json").write_text(json.dumps(d, indent=2))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "model_max_length": 64}))
    return folder


def hf_model(folder: str | Path):
    """transformers' own model of a tiny folder: eager attention, float32, eval mode."""
    import transformers

    d = json.loads((Path(folder) / "config.json").read_text())
    cls = getattr(transformers, d["architectures"][0])
    return cls.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32,
                               local_files_only=True).eval()


def hf_tokenizer(folder: str | Path):
    """transformers' tokenizer over the same tokenizer.json (PreTrainedTokenizerFast)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))


# ---- GGUF -----------------------------------------------------------------------------------------

def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of W_Q / W_K rows (HF rotate_half -> interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_freqs(params: dict, head_dim: int) -> torch.Tensor:
    """(head_dim/2,) float32: the rope_freqs.weight llama.cpp's converter writes for llama3
    rotary scaling (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors), with its arithmetic:
    each float32 frequency taken as a 0-d tensor; 1 where the wavelength is shorter than
    original / high_freq_factor, `factor` where longer than original / low_freq_factor, else
    1 / ((1 - smooth) / factor + smooth) (float32 ops); the list made a float32 tensor."""
    import math

    base = float(params["rope_theta"])
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old = params["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs:  # 0-d float32 tensors, as the converter iterates them
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32)


def build_gguf(name: str, folder: str | Path, path: str | Path) -> Path:
    """A GGUF written with gguf.GGUFWriter from the tiny folder's own weights (float32) and
    tokenizer, as llama.cpp's converter would: llama's W_Q / W_K rows permuted, Gemma 2's norm
    weights stored as 1 + w, the tokenizer as metadata (byte-level "gpt2" with the llama-bpe / qwen2
    pre-tokenizer; Gemma's SentencePiece "llama" with scores and no merges); llama3 rotary
    scaling as the rope_freqs.weight factors (llama3_rope_freqs)."""
    import gguf
    from safetensors.torch import load_file

    folder, path = Path(folder), Path(path)
    hf = json.loads((folder / "config.json").read_text())
    arch = {"llama": "llama", "tinyllama": "llama", "qwen2": "qwen2", "gemma2": "gemma2", "gemma3": "gemma3"}[name]
    llama_arch = arch == "llama"
    spm = SPECS[name].tokenizer in ("spm", "gemma")
    st: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        st.update(load_file(str(f)))
    w = gguf.GGUFWriter(str(path), arch)
    H, kv = hf["num_attention_heads"], hf["num_key_value_heads"]
    D = hf["hidden_size"]
    head_dim = hf.get("head_dim") or D // H
    w.add_block_count(hf["num_hidden_layers"])
    w.add_context_length(hf["max_position_embeddings"])
    w.add_embedding_length(D)
    w.add_feed_forward_length(hf["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(hf["rms_norm_eps"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    params = hf.get("rope_parameters") or {"rope_theta": hf.get("rope_theta", 10000.0), **(hf.get("rope_scaling") or {})}
    if name == "gemma3":  # the global layers' (the local base is not in the metadata: Gemma 3's 10,000)
        params = params["full_attention"]
        if params.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(params["factor"])
    w.add_rope_freq_base(float(params["rope_theta"]))
    w.add_rope_dimension_count(head_dim)
    if name == "gemma2":
        w.add_attn_logit_softcapping(hf["attn_logit_softcapping"])
        w.add_final_logit_softcapping(hf["final_logit_softcapping"])
    if name in ("gemma2", "gemma3"):
        w.add_sliding_window(hf["sliding_window"])
    # tokenizer metadata
    spec = json.loads((folder / "tokenizer.json").read_text())
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    added = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    types = [3 if t in added and added[t].special else (6 if t.startswith("<0x") and len(t) == 6 else 1)
             for t in tokens]
    n_rows = hf["vocab_size"]
    for i in range(len(tokens), n_rows):  # llama.cpp pads the list to the embedding's rows
        tokens.append(f"[PAD{i}]")
        types.append(5)  # UNUSED
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    if spm:  # SentencePiece "llama" vocabulary: scores (Gemma's files: no merges, the file order)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([float(-i) for i in range(len(tokens))])
        w.add_token_types(types)
        if name not in ("gemma2", "gemma3"):
            w.add_token_merges(merges)
        w.add_add_bos_token(True)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe" if llama_arch else "qwen2")
        w.add_token_list(tokens)
        w.add_token_merges(merges)
        w.add_token_types(types)
        w.add_add_bos_token(llama_arch)
    for key, setter in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                        ("pad_token", w.add_pad_token_id), ("unk_token", w.add_unk_token_id)):
        if tc.get(key) in vocab:
            setter(vocab[tc[key]])
    # tensors
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm"}
    if name in ("gemma2", "gemma3"):
        layer.update({"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm", "self_attn.q_norm": "attn_q_norm",
                      "self_attn.k_norm": "attn_k_norm"})
    else:
        layer["post_attention_layernorm"] = "ffn_norm"
    for hf_name in sorted(st):
        t = st[hf_name].to(torch.float32).numpy()
        if hf_name in names:
            gname = names[hf_name]
        else:
            parts = hf_name.split(".")  # model.layers.{i}.{a}.{b}.{weight|bias} or model.layers.{i}.{a}.{weight}
            i, rest, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
            gname = f"blk.{i}.{layer[rest]}.{kind}"
        if llama_arch and (".attn_q." in gname or ".attn_k." in gname):
            t = _permute(t, H if ".attn_q." in gname else kv)
        if name in ("gemma2", "gemma3") and gname.endswith("norm.weight"):
            t = t + 1.0  # llama.cpp stores Gemma's norms (Gemma 3: the q/k norms too) as 1 + w
        w.add_tensor(gname, np.ascontiguousarray(t, dtype=np.float32))
    if params.get("rope_type", params.get("type")) == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_freqs(params, head_dim).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
