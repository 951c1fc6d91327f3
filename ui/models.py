"""The model registry: where each model of the Model list comes from (shipped checkpoints, the
pretrained packages, fresh weights, models trained or uploaded in this server) and the one cached,
shared, read-only copy of each (`get_model`). Pages never touch a cached model's weights directly:
topic modules (ui/<topic>.py) read what they show of them."""
from __future__ import annotations

import json
from dataclasses import dataclass

import streamlit as st

from classroom.architecture import Architecture, describe
from model import checkpoint
from model.checkpoint import from_bytes, load_checkpoint
from model.config import ModelConfig
from model.pretrained import PRETRAINED as ALL_PRETRAINED
from model.pretrained import load_pretrained
from model.tokenizer import Tokenizer
from model.transformer import Transformer

from . import disk_models, state
from .session_models import session_models

CHECKPOINTS = checkpoint.CHECKPOINT_DIR
# The pretrained models the app offers (MiniLM-L6, SmolLM2-135M): all of model.pretrained's registry.
PRETRAINED = dict(ALL_PRETRAINED)
DEFAULT_SOURCE = "causal-lm"


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "checkpoint" | "fresh" | "session" | "pretrained" | "disk"
    name: str  # checkpoint directory name, the digest of a session-trained model, a PRETRAINED key, or
    #            the resolved path of a model opened from disk (ui/disk_models.py)
    cfg_json: str = ""  # fresh weights: the ModelConfig as JSON
    seed: int = 0

    @property
    def real(self) -> bool:
        """A real pretrained model (a shipped package's, or one opened from disk), not a toy."""
        return self.kind in ("pretrained", "disk")


@st.cache_resource
def shipped_checkpoints() -> dict[str, dict]:
    """{name: config.json contents} for every decoder checkpoint in checkpoints/
    (model.checkpoint.shipped_checkpoints, read once per process)."""
    return checkpoint.shipped_checkpoints(CHECKPOINTS)


def fresh_tokenizer() -> Tokenizer:
    """Vocabulary for fresh weights: the default checkpoint's, so the same sentence tokenizes."""
    metas = shipped_checkpoints()
    if DEFAULT_SOURCE in metas:
        return Tokenizer.from_dict(metas[DEFAULT_SOURCE]["tokenizer"])
    return Tokenizer.build([state.DEFAULT_TEXT, "the cat sat on the mat . a dog ran to the park ."], add_bos=True)


LOADING = {  # what the spinner says while a pretrained model loads (once per server process)
    "minilm-l6": "Loading MiniLM-L6 (91 MB of weights from its installed package, checked and mapped to the engine)…",
    "smollm2-135m": "Loading SmolLM2-135M: dequantizing 134.5M parameters from its GGUF file to float32 (about 5 s, "
                    "once per server; every session then shares them)…",
    "gemma3-270m": "Loading Gemma 3 270M: checking the SHA-256 of its 253 MB GGUF (four chunks read as one file) and "
                   "dequantizing 268.1M parameters to float32 (about 10 s, once per server; every session then "
                   "shares them)…",
}


def pretrained_model(name: str) -> tuple[Transformer, Tokenizer]:
    """_pretrained_model with a spinner naming the model and what loading it does (cold loads only:
    a cached model returns before the spinner would show)."""
    if name in _loaded:  # warm: no spinner machinery on every rerun
        return _pretrained_model(name)
    with st.spinner(LOADING.get(name, f"Loading {name}…"), show_time=True):
        out = _pretrained_model(name)
    _loaded.add(name)
    return out


_loaded: set[str] = set()


@st.cache_resource(max_entries=4, show_spinner=False)
def _pretrained_model(name: str) -> tuple[Transformer, Tokenizer]:
    """A PRETRAINED model, loaded once per process (model.pretrained.load_pretrained). Raises
    ModuleNotFoundError (naming the install command) or ValueError (a damaged file, named): the
    sidebar shows the message and falls back to the default model. Failures are not cached."""
    return load_pretrained(name)


def pretrained_error(name: str) -> str | None:
    """None when the PRETRAINED model `name` loads; else the message saying why not."""
    try:
        pretrained_model(name)
    except (ModuleNotFoundError, ValueError, OSError) as e:
        return str(e)
    return None


def get_model(source: ModelSource) -> tuple[Transformer, Tokenizer]:
    """Shared by every session: never mutate the returned model (train a copy). A model opened
    from disk comes from the server's registry of them (ui/disk_models.py), which bounds how many
    are kept; the others from _cached_model."""
    if source.kind == "disk":
        return disk_models.model_of(disk_models.value_of(source.name))
    return _cached_model(source)


@st.cache_resource(max_entries=16, show_spinner=False)
def _cached_model(source: ModelSource) -> tuple[Transformer, Tokenizer]:
    if source.kind == "pretrained":
        return pretrained_model(source.name)  # already eval, requires_grad False
    if source.kind == "checkpoint":
        model, tok = load_checkpoint(CHECKPOINTS / source.name)
    elif source.kind == "session":
        model, tok = from_bytes(session_models()[source.name])
    elif source.kind == "fresh":
        tok = fresh_tokenizer()
        model, tok = Transformer(ModelConfig.from_dict(json.loads(source.cfg_json)), seed=source.seed), tok
    else:
        raise ValueError(f"unknown model source {source.kind!r}")
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), tok


def trained_causal(src: str) -> bool | None:
    """Whether the model named in the Model list was trained with the causal mask: True (causal LMs,
    SmolLM2), False (MiniLM, the masked LM: bidirectional objectives), None (fresh weights, or a
    model whose objective is not recorded)."""
    if src in PRETRAINED:
        return bool(PRETRAINED[src].causal)
    if disk_models.is_disk(src):  # a model opened from disk: its config says whether it is an encoder
        enc = disk_models.encoder(src)
        return None if enc is None else not enc
    meta = shipped_checkpoints().get(src)
    if meta is not None:
        objective = (meta.get("extra") or {}).get("objective")
        return {"mlm": False, "causal": True, "clm": True}.get(objective, True)
    return None


def current_source() -> ModelSource:
    s = st.session_state
    src = s.get("src", DEFAULT_SOURCE)
    if src == state.FRESH:
        cfg = state.fresh_config(len(fresh_tokenizer()))
        return ModelSource("fresh", "fresh", json.dumps(cfg.to_dict(), sort_keys=True), int(s["seed"]))
    if src in shipped_checkpoints():
        return ModelSource("checkpoint", src)
    if src in PRETRAINED:
        return ModelSource("pretrained", src)
    if disk_models.is_disk(src) and src in disk_models.options():
        return ModelSource("disk", disk_models.path_of(src))
    sid = s.get("_session_model_ids", {}).get(src)
    if sid and sid in session_models():
        return ModelSource("session", sid)
    return ModelSource("checkpoint", DEFAULT_SOURCE) if DEFAULT_SOURCE in shipped_checkpoints() else \
        ModelSource("fresh", "fresh", json.dumps(state.fresh_config(len(fresh_tokenizer())).to_dict(), sort_keys=True), 0)


# Where a loaded model's ε was read (classroom.architecture.eps_note): by the format of its files.
EPS_FIELDS = {"bert": "{title}'s config.json (layer_norm_eps)",
              "llama-gguf": "{title}'s GGUF metadata (llama.attention.layer_norm_rms_epsilon)"}


# A model opened from disk: the config.json field its family's importer reads ε from (model.families)
DISK_EPS_FIELDS = {"gpt2": "layer_norm_epsilon", "bert": "layer_norm_eps", "roberta": "layer_norm_eps",
                   "llama": "rms_norm_eps", "qwen2": "rms_norm_eps", "qwen3": "rms_norm_eps",
                   "mistral": "rms_norm_eps", "gemma2": "rms_norm_eps"}


def eps_source(source: ModelSource | None, cfg: ModelConfig | None = None) -> str:
    """Where the model's ε comes from: the pretrained model's own file and field, or "" for the
    models built in this app (checkpoints trained here, fresh weights: the config's default)."""
    if source is not None and source.kind == "disk" and cfg is not None:
        name = source.name.rsplit("/", 1)[-1]
        if source.name.endswith(".gguf"):
            return f"{name}'s GGUF metadata (attention.layer_norm_rms_epsilon)"
        if cfg.family == "distilbert":  # DistilBERT's config.json has no ε: the importer uses its fixed 1e-12
            return "DistilBERT's fixed value (its config.json has no ε)"
        field = DISK_EPS_FIELDS.get(cfg.family)
        return f"{name}'s config.json ({field})" if field else f"{name}'s own files"
    if source is None or source.kind != "pretrained" or source.name not in PRETRAINED:
        return ""
    entry = PRETRAINED[source.name]
    return EPS_FIELDS.get(entry.family, "{title}'s own files").format(title=entry.title.split(" · ")[0])


def architecture(source: ModelSource | None, cfg: ModelConfig) -> Architecture:
    """The current model in words (classroom.architecture.describe), with ε's provenance."""
    return describe(cfg, eps_source=eps_source(source, cfg))
