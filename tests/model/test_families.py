"""Every family traced exactly (issue 32): tiny random models built offline with transformers' own
config and model classes (tests/tiny_families.py: seeded, saved with save_pretrained as
safetensors, a tiny tokenizer trained by `tokenizers`), opened with load_from_disk and compared with
transformers' eager forward: attention weights of every layer and head, every hidden state and the
logits within 1e-5 of their scale (float32: tests.helpers.assert_scaled_close), causal for decoders and bidirectional for encoders, one sentence and
a padded batch; token ids equal to transformers' tokenizer over the same tokenizer.json on 20
strings. A tiny GGUF written with gguf.GGUFWriter from the same weights (llama, qwen2, gemma2) gives
the same numbers, and its tokenizer the ids of transformers' tokenizer of that GGUF. Interventions
and generation with the KV cache on every decoder; the masked-LM heads fill blanks as
transformers does; the loader's refusals and the helpers the app uses.

transformers is test-only (requirements-dev.txt); the hub is never contacted (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed for parity")

from model.families import FAMILIES, family_for_config  # noqa: E402
from model.generate import generate, generate_step  # noqa: E402
from model.pretrained import (ModelRefused, allowed_roots, check_allowed, estimate_float32_bytes, inspect_model,  # noqa: E402
                              list_cached_models, load_from_disk)
from model.transformer import Transformer  # noqa: E402
from tests.helpers import assert_scaled_close  # noqa: E402
from tests.tiny_families import (CORPUS, DECODERS, FAMILY_NAMES, GGUF_FAMILIES, GGUF_OVERRIDES,  # noqa: E402
                                 SPECS, TOKENIZER_STRINGS, build, build_gguf, hf_model, hf_tokenizer,
                                 llama3_rope_freqs)

TEXT = "The capital of France is Paris, and 12 tokens of attention."
SHORT = "a dog ran"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{family: (folder, our model, our tokenizer, transformers' model)}, built on first use."""
    root = tmp_path_factory.mktemp("families")
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            folder = build(name, root / name)
            model, tok = load_from_disk(folder)
            cache[name] = (folder, model, tok, hf_model(folder))
        return cache[name]
    return get


def _ids(tok, text: str, n: int = 12) -> list[int]:
    ids = tok.encode(text).ids
    assert len(ids) >= 4
    return ids[:n]


def _batch(tok, pad: int):
    """Two sentences right-padded: ids (2, T), mask (2, T) True = real token."""
    a, b = _ids(tok, TEXT), _ids(tok, SHORT)
    T = max(len(a), len(b))
    ids = torch.full((2, T), pad, dtype=torch.long)
    mask = torch.zeros(2, T, dtype=torch.bool)
    for r, seq in enumerate((a, b)):
        ids[r, :len(seq)] = torch.tensor(seq)
        mask[r, :len(seq)] = True
    return ids, mask


def assert_same(tr, out, mask=None, what=""):
    """Every layer's attention weights (every head), every hidden state and the logits of our trace
    against transformers' output, on the real rows (and real keys) only."""
    L = len(tr.layers)
    assert len(out.attentions) == L and len(out.hidden_states) == L + 1
    real = slice(None) if mask is None else mask  # (B, T) rows to compare
    for l, (theirs, lt) in enumerate(zip(out.attentions, tr.layers)):
        ours = lt.attn.weights  # (B, H, T, T)
        assert ours.shape == theirs.shape, (what, l)
        if mask is None:
            assert_scaled_close(ours, theirs, msg=f"{what} layer {l} attention weights")
        else:
            keys = mask[:, None, None, :]
            rows = mask[:, None, :, None]
            assert_scaled_close(ours * keys * rows, theirs * keys * rows, msg=f"{what} layer {l} attention weights")
    hs = out.hidden_states
    mine = [tr.layers[0].input] + [tr.layers[i].resid_out for i in range(L - 1)] + [tr.final]
    for i, (h, m) in enumerate(zip(hs, mine)):
        assert_scaled_close(m[real], h[real], msg=f"{what} hidden state {i}")
    if tr.logits is not None:
        assert_scaled_close(tr.logits[real], out.logits[real], msg=f"{what} logits")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_trace_equals_transformers(made, name):
    """Attention weights of every layer and head, hidden states and logits within 1e-5 of
    transformers' eager forward: causal for decoders, bidirectional for encoders."""
    folder, model, tok, hf = made(name)
    causal = SPECS[name].causal
    assert model.cfg.encoder == (not causal) and model.cfg.family == family_for_config(
        json.loads((folder / "config.json").read_text())).name
    ids = torch.tensor([_ids(tok, TEXT)])
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    tr = model.trace(ids, causal=causal)
    assert_same(tr, out, what=name)
    assert tr.logits is not None  # every tiny model has an output layer (the encoders their MLM head)
    # the same weights the other way: decoders bidirectionally, encoders causally, are our own
    # options (no transformers counterpart) and must still run
    other = model.trace(ids, causal=not causal)
    assert other.layers[0].attn.weights.shape == tr.layers[0].attn.weights.shape


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_padded_batch_equals_transformers(made, name):
    folder, model, tok, hf = made(name)
    pad = tok.pad_id if tok.pad_id is not None else 0
    ids, mask = _batch(tok, pad)
    with torch.no_grad():
        out = hf(ids, attention_mask=mask.long(), output_attentions=True, output_hidden_states=True)
    tr = model.trace(ids, causal=SPECS[name].causal, key_padding_mask=mask)
    assert_same(tr, out, mask, what=f"{name} padded")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_tokenizer_ids_equal_transformers(made, name):
    """Token ids equal to transformers' tokenizer over the same tokenizer.json (special tokens as
    the file adds them), on 20 strings: emoji, CJK, runs of spaces, newlines, digits."""
    folder, model, tok, _ = made(name)
    theirs = hf_tokenizer(folder)
    assert len(TOKENIZER_STRINGS) == 20
    for s in TOKENIZER_STRINGS:
        enc = tok.encode(s)
        assert enc.ids == theirs.encode(s), (name, s)
        assert len(enc.labels) == len(enc.ids) and all(isinstance(x, str) and x for x in enc.labels)
    # a decoder's BOS (when the file adds one) comes first; encoders are wrapped by their specials
    first = tok.encode("hello").ids[0]
    if SPECS[name].tokenizer in ("bytelevel_bos", "spm", "gemma"):
        assert first == tok.bos_id and tok.add_bos
    assert len(tok) == model.cfg.vocab_size  # extra embedding rows get placeholder labels (Qwen2)


def test_family_details_reach_the_config(made):
    """The numeric details each tiny model was built to exercise are options of its ModelConfig."""
    g = made("gemma2")[1].cfg
    assert (g.attn_softcap, g.final_softcap, g.window, g.window_layers) == (3.0, 4.0, 3, (0, 2))
    assert g.d_head == 16 and g.attn_scale == 12 ** -0.5 and g.emb_scale == 24 ** 0.5
    assert g.norm_unit_offset and g.sandwich_norm and g.activation == "geglu" and g.tie_weights
    q3 = made("qwen3")[1].cfg
    assert q3.qk_norm and q3.d_head == 16 and q3.d_k == 16 and q3.d_model == 32
    q2 = made("qwen2")[1].cfg
    assert q2.bias_qkv and not q2.bias_out and not q2.bias_ffn and q2.window_layers == (1,) and q2.window == 4
    llama_folder, llama, _, _ = made("llama")
    assert llama.cfg.rope_llama3 == (8.0, 1.0, 4.0, 16) and llama.cfg.rope_theta == 500000.0
    assert "rope_scaling" in json.loads((llama_folder / "config.json").read_text())  # the older keys
    assert len(list(llama_folder.glob("*.safetensors"))) > 1  # sharded, with an index
    assert (llama_folder / "model.safetensors.index.json").is_file()
    assert made("mistral")[1].cfg.window == 3 and made("mistral")[1].cfg.window_layers is None
    gpt = made("gpt2")[1].cfg
    assert gpt.activation == "gelu_tanh" and gpt.pos_encoding == "learned" and gpt.tie_weights
    rob = made("roberta")[1].cfg
    assert rob.pos_offset == 2 and rob.max_len == 64 and rob.mlm_head
    assert made("distilbert")[1].cfg.type_vocab_size == 0


@pytest.mark.parametrize("name", GGUF_FAMILIES)
def test_gguf_gives_the_same_numbers(tmp_path, name):
    """A GGUF written with gguf.GGUFWriter from the tiny model's weights (as llama.cpp's converter
    writes them: llama's W_Q / W_K rows permuted, Gemma's norms as 1 + w) traces like
    transformers' model of the safetensors; its tokenizer gives transformers' ids for that GGUF."""
    folder = build(name, tmp_path / name, overrides=GGUF_OVERRIDES.get(name))
    path = build_gguf(name, folder, tmp_path / f"{name}.gguf")
    model, tok = load_from_disk(path)
    hf = hf_model(folder)
    ids = torch.tensor([_ids(tok, TEXT)])
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    assert_same(model.trace(ids, causal=True), out, what=f"{name}.gguf")
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    ours_json = load_from_disk(folder)[1]
    for s in TOKENIZER_STRINGS:
        assert tok.encode(s).ids == theirs.encode(s), (name, s)
        assert tok.encode(s).ids == ours_json.encode(s).ids, (name, s)  # the folder's tokenizer.json agrees
    info = inspect_model(path)
    assert info.kind == "gguf" and info.float32_bytes == 4 * model.num_parameters()


# Llama 3.1+ scaling at a tiny head size (d_k = 8: 4 rotary pairs, wavelengths 6.3, 19.9, 62.8, 199):
# one pair kept (< 64 / 4), two smoothed, one divided by 8 (> 64 / 1)
LLAMA31 = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
LONG = 160  # positions traced: well past the original 64, where the divided pairs turn 8x slower


@pytest.fixture(scope="module")
def llama31(tmp_path_factory):
    """(folder, gguf path): a tiny Llama with llama3 scaling saved as safetensors, and the GGUF
    written from it with rope_freqs.weight as llama.cpp's converter computes it."""
    root = tmp_path_factory.mktemp("llama31")
    folder = build("llama", root / "llama31", overrides=dict(rope_parameters=LLAMA31, max_position_embeddings=512))
    return folder, build_gguf("llama", folder, root / "llama31.gguf")


def _long_ids(tok) -> torch.Tensor:
    ids = tok.encode(" ".join(CORPUS)).ids[:LONG]
    assert len(ids) == LONG
    return torch.tensor([ids])


def test_llama31_gguf_rope_factors_equal_transformers(llama31):
    """A Llama 3.1+ GGUF (llama3 scaling stored as rope_freqs.weight, one divisor per rotary pair,
    as llama.cpp's converter writes it) traces like transformers' eager forward of the safetensors
    it was written from: attention weights, hidden states and logits within 1e-5 over 160
    positions; the factors reach the config as the file holds them, every branch present."""
    folder, path = llama31
    model, tok = load_from_disk(path)
    cfg = model.cfg
    assert cfg.rope_llama3 is None and cfg.rope_theta == 100.0 and cfg.d_k == 8
    factors = cfg.rope_freq_factors
    assert factors == tuple(llama3_rope_freqs(LLAMA31, 8).tolist())
    assert factors[0] == 1.0 and factors[-1] == 8.0 and all(1 < f < 8 for f in factors[1:3])  # kept, smoothed, divided
    ids = _long_ids(tok)
    hf = hf_model(folder)
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
    tr = model.trace(ids, causal=True)
    assert_same(tr, out, what="llama 3.1 gguf")
    # the folder (rope_llama3 from config.json) and the GGUF (the file's factors) agree too
    folder_model, _ = load_from_disk(folder)
    assert folder_model.cfg.rope_llama3 == (8.0, 1.0, 4.0, 64) and folder_model.cfg.rope_freq_factors is None
    assert_scaled_close(folder_model.trace(ids).logits, tr.logits)
    # the factors matter here: the same weights with plain rotary positions are far off
    plain = Transformer(cfg.replace(rope_freq_factors=None))
    plain.load_state_dict(model.state_dict())
    assert (plain.eval().trace(ids).logits - out.logits).abs().max() > 1e-2
    # cached generation steps rotate with the same factors
    step = generate_step(model, ids[:, :100])
    for t in range(100, 104):
        step = generate_step(model, ids[:, t:t + 1], step.cache)
        assert_scaled_close(step.logits[0, 0], tr.logits[0, t])
    info = inspect_model(path)
    assert info.config == cfg and "rope_freqs.weight" not in info.ignored


def test_rope_freqs_in_a_qwen2_gguf_is_refused(tmp_path):
    """llama.cpp applies rope_freqs only to the llama architecture: a qwen2 file carrying one is
    refused, naming it."""
    folder = build("qwen2", tmp_path / "q", overrides=dict(GGUF_OVERRIDES["qwen2"], rope_parameters=LLAMA31))
    path = build_gguf("qwen2", folder, tmp_path / "q.gguf")
    with pytest.raises(ValueError, match=r"rope_freqs\.weight.*'qwen2' GGUF.*only to the 'llama' architecture"):
        load_from_disk(path)


def test_rope_freq_factors_config_checks(llama31):
    """One factor per rotary pair, positive, never beside rope_llama3; the llama importer refuses
    a rope_freqs.weight of the wrong length."""
    from model.config import ModelConfig
    from model.families import llama as llama_family
    from model.gguf_loader import read_header

    base = dict(vocab_size=16, d_model=16, n_heads=2, pos_encoding="rope")  # d_k 8: 4 pairs
    assert ModelConfig(**base, rope_freq_factors=[1, 2, 3, 4]).rope_freq_factors == (1.0, 2.0, 3.0, 4.0)
    with pytest.raises(ValueError, match="3 values but a head of d_k=8 has 4 rotary pairs"):
        ModelConfig(**base, rope_freq_factors=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="positive numbers"):
        ModelConfig(**base, rope_freq_factors=(1.0, 0.0, 3.0, 4.0))
    with pytest.raises(ValueError, match="two spellings of one rescaling"):
        ModelConfig(**base, rope_freq_factors=(1.0,) * 4, rope_llama3=(8.0, 1.0, 4.0, 64))
    cfg = ModelConfig(**base, rope_freq_factors=(1.0, 2.0, 3.0, 4.0))
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # a checkpoint round trip
    data = (llama31[1]).read_bytes()
    meta, infos, _ = read_header(data, what="llama31.gguf")
    shapes = {i.name: i.shape for i in infos}
    with pytest.raises(ValueError, match="holds 3 factors, but the rotary dimension 8 has 4 pairs"):
        llama_family.gguf_config(meta, shapes, "llama31.gguf", values={"rope_freqs.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="not a positive number"):
        llama_family.gguf_config(meta, shapes, "llama31.gguf", values={"rope_freqs.weight": -torch.ones(4)})


@pytest.mark.parametrize("name", DECODERS)
def test_ablating_a_head_removes_its_columns_of_w_o(made, name):
    """ablate_heads=[(layer, head)] gives the numbers of a copy of the model whose W_O columns of
    that head are zero: the head's output no longer reaches the residual stream."""
    import copy

    folder, model, tok, _ = made(name)
    ids = torch.tensor([_ids(tok, TEXT)])
    layer, head = 1, 1
    tr = model.trace(ids, ablate_heads=[(layer, head)])
    assert not tr.layers[layer].attn.heads[:, head].any()
    other = copy.deepcopy(model)
    dv = other.cfg.d_value
    with torch.no_grad():
        other.blocks[layer].attn.o_proj.weight[:, head * dv:(head + 1) * dv] = 0
    ref = other.trace(ids)
    torch.testing.assert_close(tr.logits, ref.logits, atol=1e-5, rtol=0)
    assert not torch.equal(tr.logits, model.trace(ids).logits)  # the ablation changed something


@pytest.mark.parametrize("name", DECODERS)
def test_kv_cache_generation(made, name):
    """Cached steps give the full pass's logits (1e-5); greedy generation with and without the
    cache, and transformers' own greedy generation, pick the same tokens."""
    folder, model, tok, hf = made(name)
    ids = _ids(tok, TEXT)
    full = model.trace(torch.tensor([ids]))
    step = generate_step(model, torch.tensor([ids[:4]]))
    assert_scaled_close(step.logits[0], full.logits[0, :4])
    for t in range(4, len(ids)):
        step = generate_step(model, torch.tensor([[ids[t]]]), step.cache)
        assert_scaled_close(step.logits[0, 0], full.logits[0, t], msg=f"{name} step {t}")
    g1 = generate(model, ids[:5], 6, use_cache=True)
    g2 = generate(model, ids[:5], 6, use_cache=False)
    unused = next(i for i in range(model.cfg.vocab_size) if i not in ids[:5])  # a pad id absent from the
    with torch.no_grad():                                    # prompt (else transformers masks those tokens)
        theirs = hf.generate(torch.tensor([ids[:5]]), max_new_tokens=6, do_sample=False,
                             pad_token_id=unused)[0, 5:].tolist()  # may stop early, at its eos
    assert g1.ids == g2.ids and len(g1.ids) == 6 and theirs and g1.ids[:len(theirs)] == theirs


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert"])
def test_masked_lm_head_fills_the_blank_as_transformers(made, name):
    from classroom.ffn_output import fill_in

    folder, model, tok, hf = made(name)
    assert model.cfg.mlm_head and tok.mask_id is not None
    ids = _ids(tok, TEXT)
    pos = 3
    res = fill_in(model, ids, pos, tok.mask_id, k=5)
    masked = torch.tensor([res.masked_ids])
    with torch.no_grad():
        p = torch.softmax(hf(masked).logits[0, pos], -1)
    top = torch.sort(p, descending=True, stable=True).indices[:5]
    assert list(res.top_ids) == top.tolist()
    torch.testing.assert_close(torch.tensor(res.top_p, dtype=torch.float32), p[top], atol=1e-6, rtol=0)
    tr = model.trace(masked, causal=False)
    assert tr.head is not None and tr.head.ln is not None and tr.head.output.shape == tr.final.shape


def test_extra_heads_never_fail_and_base_models_have_no_output(tmp_path):
    """A BERT saved with a classifier (BertForSequenceClassification) loads: the classifier and
    the pooler are listed as ignored. Without an MLM head there is no output layer."""
    torch.manual_seed(0)
    src = build("bert", tmp_path / "mlm")
    cfg = transformers.BertConfig.from_pretrained(str(src))
    clf = transformers.BertForSequenceClassification(cfg).eval()
    clf.save_pretrained(tmp_path / "clf", safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / f, tmp_path / "clf" / f)
    model, tok = load_from_disk(tmp_path / "clf")
    info = inspect_model(tmp_path / "clf")
    assert not model.cfg.output_head and model.trace(torch.tensor([tok.encode("hi").ids]), causal=False).logits is None
    assert any(n.startswith("classifier.") for n in info.ignored) and any("pooler" in n for n in info.ignored)
    with torch.no_grad():
        hs = clf.bert(torch.tensor([tok.encode(TEXT).ids])).last_hidden_state
    tr = model.trace(torch.tensor([tok.encode(TEXT).ids]), causal=False)
    assert_scaled_close(tr.final, hs)


def test_gpt2_tensors_with_or_without_the_transformer_prefix(made, tmp_path):
    from safetensors.torch import load_file, save_file

    folder, model, tok, _ = made("gpt2")
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    st = load_file(str(bare / "model.safetensors"))
    assert any(k.startswith("transformer.") for k in st)
    st = {k.removeprefix("transformer."): v for k, v in st.items() if k != "lm_head.weight"}
    st["h.0.attn.bias"] = torch.ones(1, 1, 4, 4)  # an old checkpoint's causal-mask buffer: not used
    save_file(st, str(bare / "model.safetensors"))
    m2, _ = load_from_disk(bare)
    ids = torch.tensor([_ids(tok, TEXT)])
    torch.testing.assert_close(m2.trace(ids).logits, model.trace(ids).logits, atol=0, rtol=0)


# ---- refusals ---------------------------------------------------------------------------------------

@pytest.fixture
def gpt2_copy(made, tmp_path):
    folder = made("gpt2")[0]
    dst = tmp_path / "copy"
    shutil.copytree(folder, dst)
    return dst


def _edit_config(folder, **changes):
    d = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    (folder / "config.json").write_text(json.dumps(d))


def test_pickle_weights_are_refused(gpt2_copy):
    (gpt2_copy / "model.safetensors").rename(gpt2_copy / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickle.*pytorch_model.bin|pytorch_model.bin.*pickle"):
        load_from_disk(gpt2_copy)
    with pytest.raises(ValueError, match="pickle"):
        load_from_disk(gpt2_copy / "pytorch_model.bin")


def test_remote_code_is_refused(gpt2_copy):
    _edit_config(gpt2_copy, auto_map={"AutoModel": "modeling_x.XModel"})
    with pytest.raises(ValueError, match="its own Python code"):
        load_from_disk(gpt2_copy)


def test_unsupported_architecture_lists_the_supported(gpt2_copy):
    _edit_config(gpt2_copy, architectures=["FalconForCausalLM"], model_type="falcon")
    with pytest.raises(ValueError) as e:
        load_from_disk(gpt2_copy)
    msg = str(e.value)
    assert "FalconForCausalLM" in msg and "not supported" in msg
    for fam in FAMILIES.values():
        assert fam.architectures[0] in msg


def test_shapes_that_disagree_with_the_config_name_the_tensor(gpt2_copy):
    _edit_config(gpt2_copy, n_inner=40)
    with pytest.raises(ValueError, match=r"disagree with the config.*blocks\.0\.ffn\.fc1\.weight: shape \(128, 32\) "
                                         r"but the config needs \(40, 32\)"):
        load_from_disk(gpt2_copy)


def test_missing_tokenizer_and_missing_weights(gpt2_copy):
    (gpt2_copy / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="tokenizer is missing"):
        load_from_disk(gpt2_copy)
    with pytest.raises(ValueError, match="tokenizer is missing"):
        inspect_model(gpt2_copy)
    (gpt2_copy / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="no weights"):
        load_from_disk(gpt2_copy)
    with pytest.raises(ValueError, match="no such file"):
        load_from_disk(gpt2_copy / "nothing-here")


def test_unknown_tensor_is_refused_naming_it(gpt2_copy):
    from safetensors.torch import load_file, save_file

    st = load_file(str(gpt2_copy / "model.safetensors"))
    st["transformer.h.0.attn.rotary.weight"] = torch.zeros(3)
    save_file(st, str(gpt2_copy / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected tensor 'transformer\.h\.0\.attn\.rotary\.weight'"):
        load_from_disk(gpt2_copy)


def test_rope_scaling_types_other_than_llama3_are_refused(made, tmp_path):
    dst = tmp_path / "yarn"
    shutil.copytree(made("llama")[0], dst)
    _edit_config(dst, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="rotary scaling 'yarn' is not supported; supported: default, llama3"):
        load_from_disk(dst)


# ---- the helpers the app uses -------------------------------------------------------------------------

def test_allowed_roots_and_check(monkeypatch, tmp_path):
    """Default roots: the HF cache and ~/models (not the whole home folder), plus the admin's list.
    A refused path gets one sentence whether it exists, is a file, a folder or nothing, naming no
    absolute folder; symlinks are followed before the check."""
    monkeypatch.delenv("ATTENTION_LAB_MODEL_ROOTS", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    roots = allowed_roots()
    home = os.path.realpath(os.path.expanduser("~"))
    assert roots[:2] == [(tmp_path / "hf" / "hub").resolve(), Path(home, "models").resolve()]
    assert home not in map(str, roots)
    inside, outside = tmp_path / "models" / "m", tmp_path / "elsewhere"
    inside.mkdir(parents=True)
    outside.mkdir()
    (outside / "f.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("ATTENTION_LAB_MODEL_ROOTS", str(tmp_path / "models"))
    assert tmp_path.joinpath("hf", "hub").resolve() in allowed_roots()  # the admin's list adds to the defaults
    assert check_allowed(inside) == inside.resolve()
    (tmp_path / "models" / "link").symlink_to(outside)  # a symlink out of the root is followed
    said = set()
    for p in [outside, outside / "f.gguf", outside / "nothing", tmp_path / "models" / "nothing",
              tmp_path / "models" / "link", tmp_path / "models" / ".." / "elsewhere", "/proc/self/environ",
              "~", "/" + "a" * 5000, "x\x00y"]:
        with pytest.raises(ModelRefused) as e:
            check_allowed(p)
        said.add(str(e.value))
    assert len(said) == 1, said
    msg = said.pop()
    assert "outside the folders" in msg and "ATTENTION_LAB_MODEL_ROOTS" in msg
    assert home not in msg and str(tmp_path) not in msg and str(os.getpid()) not in msg


def test_list_cached_models_and_the_float32_estimate(made, tmp_path):
    """A fake HF cache (models--org--name/snapshots/<rev>/ with the blobs the snapshot links to):
    listed with sizes, read only; the estimate is the loaded model's float32 bytes."""
    folder, model, _, _ = made("qwen3")
    snap = tmp_path / "hub" / "models--org--tiny-qwen3" / "snapshots" / "abc123"
    blobs = tmp_path / "hub" / "models--org--tiny-qwen3" / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in folder.iterdir():
        shutil.copy(f, blobs / f.name)
        (snap / f.name).symlink_to(blobs / f.name)
    gdir = tmp_path / "hub" / "models--org--g" / "snapshots" / "r1"
    gdir.mkdir(parents=True)
    (gdir / "m.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    before = sorted(p.name for p in (tmp_path / "hub").rglob("*"))
    found = list_cached_models(tmp_path / "hub")
    assert [(c.repo, c.kind) for c in found] == [("org/g", "gguf"), ("org/tiny-qwen3", "folder")]
    assert found[1].file_bytes == (folder / "model.safetensors").stat().st_size and found[0].file_bytes == 64
    assert found[1].architecture == "Qwen3ForCausalLM"
    assert sorted(p.name for p in (tmp_path / "hub").rglob("*")) == before  # nothing written
    assert estimate_float32_bytes(snap) == 4 * model.num_parameters()
    loaded, _ = load_from_disk(snap)  # through the cache's symlinks
    assert loaded.num_parameters() == model.num_parameters()
    assert list_cached_models(tmp_path / "nothing") == []


def test_progress_is_reported(made):
    seen = []
    load_from_disk(made("llama")[0], progress=lambda f, msg: seen.append((f, msg)))
    assert seen[-1] == (1.0, "loaded") and all(0 <= f <= 1 for f, _ in seen)
    assert [f for f, _ in seen] == sorted(f for f, _ in seen) and len(seen) >= 3
