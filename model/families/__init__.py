"""The family importers and the registry that picks one.

One module per family (gpt2, llama, qwen2, qwen3, mistral, gemma2, gemma3, bert: BERT, RoBERTa,
DistilBERT) turns a checkpoint into the options of the one ModelConfig and the tensor names of
the one Transformer (model.families.common describes the interface). The registry keys each by
the names a checkpoint gives itself: config.json's `architectures` and `model_type`, and a GGUF's
`general.architecture`.

    from model.families import family_for_config, family_for_gguf, FAMILIES
    fam = family_for_config(json.load(open("config.json")))   # ValueError listing the supported ones
    cfg = fam.config(hf_config, tensor_names, "path/config.json")

Loading a folder or a .gguf end to end is model.families.disk.load_from_disk (re-exported by
model.pretrained).
"""
from __future__ import annotations

from .bert import BERT, DISTILBERT, ROBERTA
from .common import Family
from .gemma2 import FAMILY as GEMMA2
from .gemma3 import FAMILY as GEMMA3
from .gpt2 import FAMILY as GPT2
from .llama import FAMILY as LLAMA
from .mistral import FAMILY as MISTRAL
from .qwen2 import FAMILY as QWEN2
from .qwen3 import FAMILY as QWEN3

FAMILIES: dict[str, Family] = {f.name: f for f in (GPT2, LLAMA, QWEN2, QWEN3, MISTRAL, GEMMA2, GEMMA3, BERT,
                                                    ROBERTA, DISTILBERT)}
BY_ARCHITECTURE: dict[str, Family] = {a: f for f in FAMILIES.values() for a in f.architectures}
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES.values() for t in f.model_types}
BY_GGUF: dict[str, Family] = {a: f for f in FAMILIES.values() for a in f.gguf_architectures}


def supported() -> str:
    """The families, for messages: "GPT-2 (gpt2, distilgpt2) [GPT2LMHeadModel, ...]; ..."."""
    return "; ".join(f"{f.title} [{', '.join(f.architectures)}]" for f in FAMILIES.values())


def family_for_config(hf: dict, what: str = "config.json") -> Family:
    """The family of an HF config.json: by its `architectures` name, else its `model_type`.
    ValueError naming the architecture and listing the supported ones."""
    archs = hf.get("architectures") or []
    for a in archs:
        if a in BY_ARCHITECTURE:
            return BY_ARCHITECTURE[a]
    mt = hf.get("model_type")
    if mt in BY_MODEL_TYPE:
        return BY_MODEL_TYPE[mt]
    name = ", ".join(archs) or repr(mt)
    raise ValueError(f"{what}: architecture {name} (model_type {mt!r}) is not supported. Supported: {supported()}")


def family_for_gguf(arch: str | None, what: str = "the GGUF file") -> Family:
    """The family of a GGUF's general.architecture; ValueError listing the supported ones."""
    if arch in BY_GGUF:
        return BY_GGUF[arch]
    raise ValueError(f"{what}: GGUF architecture {arch!r} is not supported. Supported GGUF architectures: "
                     f"{', '.join(sorted(BY_GGUF))}")


__all__ = ["FAMILIES", "Family", "family_for_config", "family_for_gguf", "supported"]
