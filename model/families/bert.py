"""The BERT family: BERT (MiniLM among them), RoBERTa, DistilBERT. Encoders, traced
bidirectionally by default (cfg.encoder).

Numeric details, as options of the one Transformer: post-norm LayerNorm blocks, an embedding
LayerNorm over token + position (+ token type), learned positions, exact GELU, no final norm.
  - BERT: token types (type_vocab_size); LayerNorm eps 1e-12 by default.
  - RoBERTa: learned position rows start at padding_idx + 1 (pos_offset): position p reads row
    p + 2, and the table's 514 rows leave 512 positions. (transformers numbers the positions of
    tokens equal to the padding id differently; a trace with padding uses key_padding_mask and
    those rows are not read.) One token type.
  - DistilBERT: no token types, its own tensor names (q_lin, sa_layer_norm, ffn.lin1, ...).

The masked-LM head, where the checkpoint has it (BertForMaskedLM's cls.predictions.*,
RobertaForMaskedLM's lm_head.*, DistilBertForMaskedLM's vocab_*), is loaded as cfg.mlm_head: a
dense layer, GELU and a LayerNorm, then the output matrix tied to the word embeddings, plus a bias.
tr.logits are then its scores at every position (fill in the blank: model.trace(ids,
causal=False).probs[0, position]); tr.head records the transform. Without it (BertModel, MiniLM)
the model has no output layer. Other heads (pooler, next-sentence, classifiers) are not used and
never fail the load.
"""
from __future__ import annotations

import re

from torch import Tensor

from ..config import ModelConfig
from .common import Family, Unknown, need, need_int, refuse_unless

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}

# ---- BERT and RoBERTa (the same layout; RoBERTa under "roberta.", its head under "lm_head.") ----

BERT_UNUSED = re.compile(r"^(embeddings\.position_ids|embeddings\.token_type_ids|pooler\.dense\.(weight|bias))$")
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
# heads the traced encoder does not use: next-sentence prediction, classifiers, question answering
_OTHER_HEADS = re.compile(r"^(cls\.seq_relationship\.|classifier\.|qa_outputs\.|pre_classifier\.)")
_MLM = {  # the masked-LM head, BERT's and RoBERTa's names
    "cls.predictions.transform.dense.weight": "mlm_dense.weight",
    "cls.predictions.transform.dense.bias": "mlm_dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "mlm_ln.weight",
    "cls.predictions.transform.LayerNorm.bias": "mlm_ln.bias",
    "cls.predictions.bias": "mlm_bias",
    "lm_head.dense.weight": "mlm_dense.weight", "lm_head.dense.bias": "mlm_dense.bias",
    "lm_head.layer_norm.weight": "mlm_ln.weight", "lm_head.layer_norm.bias": "mlm_ln.bias",
    "lm_head.bias": "mlm_bias",
}
_MLM_DECODER = ("cls.predictions.decoder.weight", "lm_head.decoder.weight")  # tied to the word embeddings
_MLM_DECODER_BIAS = ("cls.predictions.decoder.bias", "lm_head.decoder.bias")  # the same tensor as the bias


def _legacy(name: str) -> str:
    """Old TF-converted checkpoints call LayerNorm's weight and bias gamma and beta."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def encoder_name(name: str) -> str | None:
    """Our parameter name for a BertModel tensor name (no prefix); None for tensors the encoder
    does not use (position ids, the pooler); ValueError for any other name, the MLM head's
    included (MiniLM's strict map: model.pretrained.hf_to_ours)."""
    if BERT_UNUSED.match(name):
        return None
    if name in _BERT_EMB:
        return _BERT_EMB[name]
    m = _LAYER_RE.match(name)
    if m and m.group(2) in _BERT_LAYER:
        return f"blocks.{m.group(1)}.{_BERT_LAYER[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"unexpected tensor {name!r} in the weights file: not part of a BERT encoder")


def _has_mlm(names: frozenset) -> bool:
    return bool({"cls.predictions.transform.dense.weight", "lm_head.dense.weight", "vocab_transform.weight"} & names)


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix):] if name.startswith(prefix) else name


def _encoder_config(hf: dict, names: frozenset, what: str, *, family: str, pos_offset: int,
                    type_vocab_size: int, ln_eps: float, act: str, **dims) -> ModelConfig:
    refuse_unless(act in ACTIVATIONS, what, f"activation {act!r} is not supported ({', '.join(ACTIVATIONS)})")
    mlm = _has_mlm(names)
    tied = bool(hf.get("tie_word_embeddings", True))
    if mlm and not tied and not ({*_MLM_DECODER, "vocab_projector.weight"} & names):
        raise ValueError(f"{what}: tie_word_embeddings is false but the weights hold no decoder matrix")
    archs = hf.get("architectures") or [""]
    return ModelConfig(
        **dims, max_len=need_int(hf, "max_position_embeddings", what) - pos_offset, pos_encoding="learned",
        norm="post", activation=ACTIVATIONS[act], scale_scores=True, tie_weights=tied if mlm else False,
        bias=True, ln_eps=ln_eps, final_norm=False, emb_norm=True, type_vocab_size=type_vocab_size,
        output_head=mlm, mlm_head=mlm, pos_offset=pos_offset, family=family, architecture=str(archs[0]),
        encoder=not hf.get("is_decoder", False))


def bert_config(hf: dict, names: frozenset = frozenset(), what: str = "config.json") -> ModelConfig:
    """ModelConfig of a BertModel / BertForMaskedLM config.json: BERT as options of the one
    Transformer (MiniLM: 6 layers, 12 heads, no MLM head, so no output layer)."""
    refuse_unless(hf.get("position_embedding_type", "absolute") == "absolute", what,
                  f"position_embedding_type {hf.get('position_embedding_type')!r}; only 'absolute' is supported")
    return _encoder_config(
        hf, names, what, family="bert", pos_offset=0, type_vocab_size=int(hf.get("type_vocab_size", 2)),
        ln_eps=float(hf.get("layer_norm_eps", 1e-12)), act=hf.get("hidden_act", "gelu"),
        vocab_size=need_int(hf, "vocab_size", what), d_model=need_int(hf, "hidden_size", what),
        n_heads=need_int(hf, "num_attention_heads", what), n_layers=need_int(hf, "num_hidden_layers", what),
        d_ff=need_int(hf, "intermediate_size", what))


def roberta_config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a RobertaModel / RobertaForMaskedLM config.json (positions from padding_idx + 1)."""
    refuse_unless(hf.get("position_embedding_type", "absolute") == "absolute", what,
                  f"position_embedding_type {hf.get('position_embedding_type')!r}; only 'absolute' is supported")
    pad = int(need(hf, "pad_token_id", what))
    return _encoder_config(
        hf, names, what, family="roberta", pos_offset=pad + 1, type_vocab_size=int(hf.get("type_vocab_size", 1)),
        ln_eps=float(hf.get("layer_norm_eps", 1e-12)), act=hf.get("hidden_act", "gelu"),
        vocab_size=need_int(hf, "vocab_size", what), d_model=need_int(hf, "hidden_size", what),
        n_heads=need_int(hf, "num_attention_heads", what), n_layers=need_int(hf, "num_hidden_layers", what),
        d_ff=need_int(hf, "intermediate_size", what))


def _bert_like_convert(prefix: str):
    def convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
        name = _legacy(name)
        if name in _MLM:
            return {_MLM[name]: t} if cfg.mlm_head else {}
        if name in _MLM_DECODER:
            return {} if (cfg.tie_weights or not cfg.mlm_head) else {"lm_head.weight": t}
        if name in _MLM_DECODER_BIAS or _OTHER_HEADS.match(name):
            return {}  # the decoder's bias is the head's bias again; other heads are not used
        short = _strip(name, prefix)
        try:
            ours = encoder_name(short)
        except ValueError:
            raise Unknown(name) from None
        return {} if ours is None else {ours: t}
    return convert


# ---- DistilBERT ---------------------------------------------------------------------------------

_DISTIL_EMB = {"embeddings.word_embeddings.weight": "tok_emb.weight",
               "embeddings.position_embeddings.weight": "pos_emb.weight",
               "embeddings.LayerNorm.weight": "emb_ln.weight", "embeddings.LayerNorm.bias": "emb_ln.bias"}
_DISTIL_LAYER = {"attention.q_lin": "attn.q_proj", "attention.k_lin": "attn.k_proj",
                 "attention.v_lin": "attn.v_proj", "attention.out_lin": "attn.o_proj",
                 "sa_layer_norm": "ln1", "ffn.lin1": "ffn.fc1", "ffn.lin2": "ffn.fc2",
                 "output_layer_norm": "ln2"}
_DISTIL_RE = re.compile(r"^transformer\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_DISTIL_MLM = {"vocab_transform.weight": "mlm_dense.weight", "vocab_transform.bias": "mlm_dense.bias",
               "vocab_layer_norm.weight": "mlm_ln.weight", "vocab_layer_norm.bias": "mlm_ln.bias",
               "vocab_projector.bias": "mlm_bias"}


def distilbert_config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a DistilBertModel / DistilBertForMaskedLM config.json (LayerNorm eps 1e-12,
    fixed in DistilBERT's code)."""
    return _encoder_config(
        hf, names, what, family="distilbert", pos_offset=0, type_vocab_size=0, ln_eps=1e-12,
        act=hf.get("activation", "gelu"), vocab_size=need_int(hf, "vocab_size", what),
        d_model=need_int(hf, "dim", what), n_heads=need_int(hf, "n_heads", what),
        n_layers=need_int(hf, "n_layers", what), d_ff=need_int(hf, "hidden_dim", what))


def distilbert_convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    if name in _DISTIL_MLM:
        return {_DISTIL_MLM[name]: t} if cfg.mlm_head else {}
    if name == "vocab_projector.weight":
        return {} if (cfg.tie_weights or not cfg.mlm_head) else {"lm_head.weight": t}
    if _OTHER_HEADS.match(name):
        return {}
    short = _strip(name, "distilbert.")
    if short in _DISTIL_EMB:
        return {_DISTIL_EMB[short]: t}
    if short == "embeddings.position_ids":
        return {}
    m = _DISTIL_RE.match(short)
    if m and m.group(2) in _DISTIL_LAYER:
        return {f"blocks.{m.group(1)}.{_DISTIL_LAYER[m.group(2)]}.{m.group(3)}": t}
    raise Unknown(name)


BERT = Family(
    name="bert", title="BERT (MiniLM and other BertModel / BertForMaskedLM checkpoints)",
    model_types=("bert",), architectures=("BertModel", "BertForMaskedLM", "BertForPreTraining"),
    config=bert_config, convert=_bert_like_convert("bert."),
    notes=("post-norm LayerNorm", "embedding LayerNorm", "token types", "learned positions", "GELU",
           "masked-LM head when present"),
)
ROBERTA = Family(
    name="roberta", title="RoBERTa",
    model_types=("roberta",), architectures=("RobertaModel", "RobertaForMaskedLM"),
    config=roberta_config, convert=_bert_like_convert("roberta."),
    notes=("as BERT", "positions from padding_idx + 1", "byte-level BPE tokenizer", "masked-LM head when present"),
)
DISTILBERT = Family(
    name="distilbert", title="DistilBERT",
    model_types=("distilbert",), architectures=("DistilBertModel", "DistilBertForMaskedLM"),
    config=distilbert_config, convert=distilbert_convert,
    notes=("as BERT without token types", "masked-LM head when present"),
)
