"""GPT-2 (gpt2, distilgpt2 and the other GPT2LMHeadModel checkpoints).

Numeric details, as options of the one Transformer: learned positions, pre-norm LayerNorm with a
final LayerNorm, GELU's tanh approximation ("gelu_new", activation "gelu_tanh"), biases
everywhere, the output matrix tied to the token embedding.

Tensors: GPT-2 stores its linear layers as Conv1D, weight (in, out), the transpose of
nn.Linear's (out, in); and W_Q, W_K, W_V fused in one c_attn (D, 3D). convert transposes and
splits them here. Names come with or without the "transformer." prefix (GPT2LMHeadModel or
GPT2Model); the causal-mask buffers old checkpoints carry (attn.bias, attn.masked_bias) and the
tied lm_head.weight are not used.
"""
from __future__ import annotations

import re

from torch import Tensor

from ..config import ModelConfig
from .common import Family, Unknown, need_int, refuse_unless

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu": "gelu", "relu": "relu"}
_LAYER_RE = re.compile(r"^(?:transformer\.)?h\.(\d+)\.(.+)$")
_IGNORED = re.compile(r"^(?:transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")


def config(hf: dict, names: frozenset, what: str) -> ModelConfig:
    """ModelConfig of a GPT2LMHeadModel / GPT2Model config.json."""
    act = hf.get("activation_function", "gelu_new")
    refuse_unless(act in ACTIVATIONS, what, f"activation_function {act!r} is not supported "
                  f"({', '.join(ACTIVATIONS)})")
    refuse_unless(not hf.get("scale_attn_by_inverse_layer_idx", False), what,
                  "scale_attn_by_inverse_layer_idx (scores also divided by the layer number) is not supported")
    refuse_unless(not hf.get("add_cross_attention", False), what, "cross-attention layers are not supported")
    D = need_int(hf, "n_embd", what, "hidden_size")
    archs = hf.get("architectures") or [""]
    return ModelConfig(
        vocab_size=need_int(hf, "vocab_size", what), d_model=D, n_heads=need_int(hf, "n_head", what, "num_attention_heads"),
        n_layers=need_int(hf, "n_layer", what, "num_hidden_layers"), d_ff=int(hf.get("n_inner") or 4 * D),
        max_len=need_int(hf, "n_positions", what, "max_position_embeddings"), pos_encoding="learned",
        norm="pre", activation=ACTIVATIONS[act], scale_scores=bool(hf.get("scale_attn_weights", True)),
        tie_weights=True, bias=True, ln_eps=float(hf.get("layer_norm_epsilon", 1e-5)), final_norm=True,
        family="gpt2", architecture=str(archs[0]))


def convert(name: str, t: Tensor, cfg: ModelConfig) -> dict[str, Tensor]:
    """A GPT-2 tensor in our terms: Conv1D weights transposed, c_attn split into W_Q, W_K, W_V."""
    short = name[len("transformer."):] if name.startswith("transformer.") else name
    if short == "wte.weight":
        return {"tok_emb.weight": t}
    if short == "wpe.weight":
        return {"pos_emb.weight": t}
    if short in ("ln_f.weight", "ln_f.bias"):
        return {short: t}
    if name == "lm_head.weight" or _IGNORED.match(name):
        return {}  # tied to wte / the causal-mask buffers of old checkpoints
    m = _LAYER_RE.match(name)
    if not m:
        raise Unknown(name)
    i, rest = m.group(1), m.group(2)
    p = f"blocks.{i}."
    D = cfg.d_model
    if rest in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"):
        return {p + rest.replace("ln_", "ln"): t}
    if rest == "attn.c_attn.weight":  # Conv1D (D, 3D): columns q | k | v
        return {p + "attn.q_proj.weight": t[:, :D].T.contiguous(),
                p + "attn.k_proj.weight": t[:, D:2 * D].T.contiguous(),
                p + "attn.v_proj.weight": t[:, 2 * D:].T.contiguous()}
    if rest == "attn.c_attn.bias":
        return {p + "attn.q_proj.bias": t[:D].contiguous(), p + "attn.k_proj.bias": t[D:2 * D].contiguous(),
                p + "attn.v_proj.bias": t[2 * D:].contiguous()}
    linear = {"attn.c_proj": "attn.o_proj", "mlp.c_fc": "ffn.fc1", "mlp.c_proj": "ffn.fc2"}
    for theirs, ours in linear.items():
        if rest == theirs + ".weight":
            return {p + ours + ".weight": t.T.contiguous()}  # Conv1D (in, out) -> Linear (out, in)
        if rest == theirs + ".bias":
            return {p + ours + ".bias": t}
    raise Unknown(name)


FAMILY = Family(
    name="gpt2", title="GPT-2 (gpt2, distilgpt2)",
    model_types=("gpt2",), architectures=("GPT2LMHeadModel", "GPT2Model"),
    config=config, convert=convert,
    notes=("learned positions", "pre-norm LayerNorm", "GELU (tanh approximation)", "tied output matrix",
           "Conv1D weights (transposed) and a fused c_attn (split)"),
)
