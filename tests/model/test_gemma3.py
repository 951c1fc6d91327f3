"""The Gemma 3 family on a tiny random Gemma 3 (transformers' Gemma3TextConfig: 2 layers, layer 0
local with a window of 4, layer 1 global; rotary bases 10,000 (local) and 50 (global, linear
scaling 4); query_pre_attn_scalar 12, not head_dim 16; QK-norm and four norms with (1 + w)),
against transformers' Gemma3ForCausalLM (eager attention, output_attentions=True): every trace
field, the window's exact zeros, generation with the KV cache against transformers' greedy output,
and the GGUF path's choices (Gemma 3's global layers, local base and query scalar, norms stored as
1 + w) against transformers reading the same GGUF.

The parametrised family tests (tests/model/test_families.py) run the same tiny model through the
trace, padded batch, tokenizer, GGUF, ablation and KV-cache checks every family has.
"""
from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed for parity")

from model.families import family_for_config, family_for_gguf  # noqa: E402
from model.families.gemma3 import global_layers, layer_types, rope_options  # noqa: E402
from model.generate import generate, generate_step  # noqa: E402
from model.pretrained import load_from_disk  # noqa: E402
from model.transformer import Transformer  # noqa: E402
from tests.tiny_families import CORPUS, GGUF_OVERRIDES, build, build_gguf, hf_model  # noqa: E402

TOL = dict(atol=1e-5, rtol=0)
WINDOW = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(folder, our model, our tokenizer, transformers' model) of the tiny Gemma 3."""
    folder = build("gemma3", tmp_path_factory.mktemp("gemma3") / "gemma3")
    model, tok = load_from_disk(folder)
    return folder, model, tok, hf_model(folder)


def _ids(tok, n: int = 20) -> torch.Tensor:
    ids = tok.encode(" ".join(CORPUS)).ids[:n]
    assert len(ids) == n
    return torch.tensor([ids])


def _hf_intermediates(hf, ids: torch.Tensor) -> tuple[dict, object]:
    """transformers' own intermediates of one forward, by forward hooks on its modules."""
    got: dict = {}
    hooks = []

    def keep(name, inputs=False):
        def hook(mod, args, out):
            got[name] = (args[0] if inputs else (out[0] if isinstance(out, tuple) else out)).detach().clone()
        return hook

    for i, layer in enumerate(hf.model.layers):
        a = layer.self_attn
        for mod, name, inputs in ((layer.input_layernorm, "ln1", False), (a.q_proj, "q_proj", False),
                                  (a.k_proj, "k_proj", False), (a.v_proj, "v_proj", False),
                                  (a.q_norm, "q_norm", False), (a.k_norm, "k_norm", False),
                                  (a.o_proj, "concat", True), (a.o_proj, "o_proj", False),
                                  (layer.post_attention_layernorm, "ln1_post", False),
                                  (layer.pre_feedforward_layernorm, "ln2", False), (layer.mlp, "mlp", False),
                                  (layer.mlp.gate_proj, "gate", False), (layer.mlp.up_proj, "up", False),
                                  (layer.post_feedforward_layernorm, "ln2_post", False)):
            hooks.append(mod.register_forward_hook(keep(f"{i}.{name}", inputs)))
    hooks.append(hf.model.norm.register_forward_hook(keep("final")))
    try:
        with torch.no_grad():
            out = hf(ids, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return got, out


def test_config_holds_gemma3s_details(tiny):
    folder, model, tok, hf = tiny
    cfg = model.cfg
    assert cfg.family == "gemma3" and cfg.architecture == "Gemma3ForCausalLM"
    assert (cfg.window, cfg.window_layers) == (WINDOW, (0,))
    assert cfg.layer_window(0) == WINDOW and cfg.layer_window(1) is None
    assert cfg.rope_local_theta == 10000.0 and cfg.rope_theta == 50.0 and cfg.rope_linear == 4.0
    assert cfg.layer_rope(0) == (10000.0, None, None, None) and cfg.layer_rope(1) == (50.0, None, None, 4.0)
    assert cfg.attn_scale == 12 ** -0.5 and cfg.d_head == 16 and cfg.kv_heads == 1
    assert cfg.qk_norm and cfg.norm_unit_offset and cfg.sandwich_norm and cfg.emb_scale == 24 ** 0.5
    assert cfg.tie_weights and cfg.activation == "geglu" and cfg.attn_softcap is None and cfg.final_softcap is None
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())  # tied: one matrix


def test_every_trace_field_equals_transformers(tiny):
    """Embeddings, each norm's output, q/k/v before and after the QK-norm and the rotation, the
    weights, head outputs, concat, W_O, the FFN's gate/up/output, every residual, the final norm and
    the logits: within 1e-5 of transformers' own intermediates, on 20 tokens (past the window)."""
    folder, model, tok, hf = tiny
    ids = _ids(tok)
    got, out = _hf_intermediates(hf, ids)
    tr = model.trace(ids)
    B, T = ids.shape
    H, dk = model.cfg.n_heads, model.cfg.d_k

    def heads(x, n):
        return x.view(B, T, n, dk).transpose(1, 2)

    torch.testing.assert_close(tr.embeddings.sum, out.hidden_states[0], **TOL)
    for i, lt in enumerate(tr.layers):
        at = lt.attn
        cos, sin = hf.model.rotary_emb(out.hidden_states[0], torch.arange(T)[None], hf.model.config.layer_types[i])
        q_rot, k_rot = transformers.models.gemma3.modeling_gemma3.apply_rotary_pos_emb(
            got[f"{i}.q_norm"], got[f"{i}.k_norm"], cos, sin)
        pairs = {
            "ln1.output": (lt.ln1.output, got[f"{i}.ln1"]),
            "q_pre_norm": (at.q_pre_norm, heads(got[f"{i}.q_proj"], H)),
            "k_pre_norm": (at.k_pre_norm, heads(got[f"{i}.k_proj"], 1)),
            "q_pre_rope": (at.q_pre_rope, got[f"{i}.q_norm"]),
            "k_pre_rope": (at.k_pre_rope, got[f"{i}.k_norm"]),
            "q": (at.q, q_rot), "k": (at.k, k_rot), "v": (at.v, heads(got[f"{i}.v_proj"], 1)),
            "scaled": (at.scaled, (q_rot @ k_rot.transpose(-1, -2)) * 12 ** -0.5),
            "weights": (at.weights, out.attentions[i]),
            "concat": (at.concat, got[f"{i}.concat"]), "output": (at.output, got[f"{i}.o_proj"]),
            "ln1_post": (lt.ln1_post.output, got[f"{i}.ln1_post"]),
            "resid_mid": (lt.resid_mid, out.hidden_states[i] + got[f"{i}.ln1_post"]),
            "ln2": (lt.ln2.output, got[f"{i}.ln2"]), "gate": (lt.ffn.gate, got[f"{i}.gate"]),
            "up": (lt.ffn.up, got[f"{i}.up"]), "ffn": (lt.ffn.output, got[f"{i}.mlp"]),
            "ln2_post": (lt.ln2_post.output, got[f"{i}.ln2_post"]),
            "resid_out": (lt.resid_out, out.hidden_states[i + 1] if i + 1 < len(tr.layers) else
                          lt.resid_mid + got[f"{i}.ln2_post"]),
        }
        for name, (ours, theirs) in pairs.items():
            torch.testing.assert_close(ours, theirs, **TOL, msg=f"layer {i} {name}")
    torch.testing.assert_close(tr.final, got["final"], **TOL)
    torch.testing.assert_close(tr.final, out.hidden_states[-1], **TOL)
    torch.testing.assert_close(tr.logits, out.logits, **TOL)
    torch.testing.assert_close(tr.probs, torch.softmax(out.logits, -1), **TOL)


def test_keys_beyond_the_window_get_exactly_zero_in_the_local_layer_only(tiny):
    folder, model, tok, hf = tiny
    ids = _ids(tok)
    T = ids.shape[1]
    _, out = _hf_intermediates(hf, ids)
    tr = model.trace(ids)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    beyond = (i - j) >= WINDOW  # keys more than window - 1 positions back
    local, glob = tr.layers[0].attn.weights[0], tr.layers[1].attn.weights[0]  # (H, T, T)
    assert beyond.any()
    assert (local[:, beyond] == 0).all() and (out.attentions[0][0][:, beyond] == 0).all()
    assert (local[:, (i - j < WINDOW) & (j <= i)] > 0).all()  # inside the band: every key has weight
    assert (glob[:, beyond] > 0).all() and (out.attentions[1][0][:, beyond] > 0).all()
    assert tr.layers[0].attn.band is not None and getattr(tr.layers[1].attn, "band", None) is None


def test_each_detail_matters(tiny):
    """The tiny model is built so that each Gemma 3 detail changes the numbers: without it, the
    logits move far from transformers'."""
    folder, model, tok, hf = tiny
    ids = _ids(tok)
    with torch.no_grad():
        ref = hf(ids).logits
    for change in (dict(rope_local_theta=None), dict(rope_linear=None), dict(window=None),
                   dict(attn_scale=None), dict(norm_unit_offset=False), dict(rope_theta=1e6)):
        other = Transformer(model.cfg.replace(**change), init=False)
        other.load_state_dict(model.state_dict())
        assert (other.eval().trace(ids).logits - ref).abs().max() > 1e-3, change


def test_generation_with_the_kv_cache_equals_transformers_greedy(tiny):
    """32 new tokens from a prompt, the window passed many times: cached steps give the full
    pass's logits; our greedy tokens, with and without the cache, are transformers' greedy tokens."""
    folder, model, tok, hf = tiny
    prompt = _ids(tok, 6)[0].tolist()
    g = generate(model, prompt, 32, use_cache=True)
    assert g.ids == generate(model, prompt, 32, use_cache=False).ids and len(g.ids) == 32
    unused = next(i for i in range(model.cfg.vocab_size) if i not in prompt + g.ids)
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False, eos_token_id=None,
                             pad_token_id=unused)[0, len(prompt):].tolist()
    assert theirs == g.ids
    full = model.trace(torch.tensor([prompt + g.ids]))
    step = generate_step(model, torch.tensor([prompt]))
    for t, tid in enumerate(g.ids[:-1]):
        step = generate_step(model, torch.tensor([[tid]]), step.cache)
        torch.testing.assert_close(step.logits[0, 0], full.logits[0, len(prompt) + t], **TOL)


def test_rope_options_in_every_spelling():
    new = {"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                               "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}
    old = {"rope_theta": 1e6, "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert rope_options(new, "c") == rope_options(old, "c") == (1e6, 10000.0, 8.0)
    assert rope_options({}, "c") == (1e6, 10000.0, None)  # Gemma3TextConfig's defaults
    with pytest.raises(ValueError, match="rotary scaling 'yarn' on the full_attention layers is not supported"):
        rope_options({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "c")


def test_layer_pattern_matches_transformers():
    """Without layer_types, Gemma 3's rule (every 6th layer global) as transformers' config computes it."""
    for n in (2, 6, 18, 26):
        theirs = transformers.Gemma3TextConfig(num_hidden_layers=n).layer_types
        assert layer_types(n) == theirs
        assert global_layers(n) == tuple(i for i, t in enumerate(theirs) if t == "full_attention")
    assert global_layers(18) == (5, 11, 17)
    cfg = transformers.Gemma3TextConfig()
    assert cfg.query_pre_attn_scalar == 256 == cfg.head_dim
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0


def test_gguf_takes_what_its_metadata_lacks_from_gemma3(tmp_path):
    """A Gemma 3 GGUF (6 layers; norms stored as 1 + w, the q/k norms too; no local base, layer
    pattern or query scalar in the metadata) traces like transformers' model of the safetensors it
    was written from, and transformers reading the GGUF picks the same global layers and bases."""
    folder = build("gemma3", tmp_path / "g3", overrides=GGUF_OVERRIDES["gemma3"])
    path = build_gguf("gemma3", folder, tmp_path / "g3.gguf")
    model, tok = load_from_disk(path)
    cfg = model.cfg
    assert cfg.n_layers == 6 and cfg.window_layers == (0, 1, 2, 3, 4) and cfg.rope_local_theta == 10000.0
    assert cfg.rope_theta == 50.0 and cfg.rope_linear == 4.0 and cfg.attn_scale == 16 ** -0.5
    hf = hf_model(folder)
    ids = _ids(tok)
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    tr = model.trace(ids)
    for lt, a in zip(tr.layers, out.attentions):
        torch.testing.assert_close(lt.attn.weights, a, **TOL)
    torch.testing.assert_close(tr.logits, out.logits, **TOL)
    params = dict(model.named_parameters())
    for name in ("attn.q_norm", "attn.k_norm", "ln1", "ln1_post", "ln2", "ln2_post"):
        hf_name = {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm", "ln1": "input_layernorm",
                   "ln1_post": "post_attention_layernorm", "ln2": "pre_feedforward_layernorm",
                   "ln2_post": "post_feedforward_layernorm"}[name]
        torch.testing.assert_close(params[f"blocks.0.{name}.weight"],
                                   hf.get_parameter(f"model.layers.0.{hf_name}.weight"), atol=1e-6, rtol=0)
    theirs = transformers.AutoConfig.from_pretrained(str(tmp_path), gguf_file=path.name)
    assert theirs.layer_types == layer_types(6) and global_layers(6) == (5,)
    assert theirs.rope_parameters["sliding_attention"]["rope_theta"] == cfg.rope_local_theta
    assert theirs.rope_parameters["full_attention"]["rope_theta"] == cfg.rope_theta
    assert family_for_gguf("gemma3").name == "gemma3"
    assert family_for_config(json.loads((folder / "config.json").read_text())).name == "gemma3"


def test_merges_from_scores_equal_transformers():
    """generate_merges (a GGUF without merges: Gemma's) gives transformers' list, in its order,
    with distinct scores (the fast path: tokens by score, each token's splits longest left piece
    first) and with tied ones (the general sort)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import generate_merges as theirs

    from model.tokenizer_json import generate_merges
    from tests.tiny_families import make_tokenizer

    tok, _ = make_tokenizer("gemma", 600)
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    distinct = {t: -i for i, t in enumerate(tokens)}  # Gemma: the file order
    shuffled = {t: float((i * 7919) % len(tokens)) for i, t in enumerate(tokens)}  # distinct, not in order
    tied = {t: float(-(i // 5)) for i, t in enumerate(tokens)}  # five tokens per score
    for scores in (distinct, shuffled, tied):
        ours = generate_merges(vocab, scores)
        assert ours == [tuple(m) for m in theirs(vocab, scores)]
        assert len(ours) > 300
