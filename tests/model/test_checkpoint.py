"""Checkpoints: safetensors round trip, every container, and every way a file can be wrong."""
from __future__ import annotations

import io
import json
import pickle
import zipfile

import pytest
import torch
from safetensors.torch import save as st_save

from model import ModelConfig, Transformer
from model.checkpoint import from_bytes, load_checkpoint, save_checkpoint, to_bytes
from model.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.build(["the cat sat on the mat", "a dog ran"])


@pytest.fixture(scope="module")
def model(tok):
    cfg = ModelConfig(vocab_size=len(tok), d_model=16, n_heads=2, n_layers=2, max_len=12,
                      pos_encoding="learned", tie_weights=False, norm="post")
    m = Transformer(cfg, seed=11)
    with torch.no_grad():  # non-default biases / LN params so a load that ignores them shows
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.01)
    return m


IDS = torch.tensor([[2, 4, 5, 6, 7, 4, 8]])


def assert_same(m1, m2):
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert set(s1) == set(s2)
    for k in s1:
        assert s1[k].dtype == s2[k].dtype and torch.equal(s1[k], s2[k]), k
    t1, t2 = m1.trace(IDS), m2.trace(IDS)
    assert torch.equal(t1.logits, t2.logits)
    assert all(torch.equal(a.attn.weights, b.attn.weights) for a, b in zip(t1.layers, t2.layers))


def test_directory_round_trip_bit_identical(model, tok, tmp_path):
    path = save_checkpoint(model, tok, tmp_path / "ck")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    meta = json.loads((path / "config.json").read_text())
    assert meta["config"]["vocab_size"] == len(tok) and meta["tokenizer"]["vocab"] == tok.vocab
    m2, tok2 = load_checkpoint(path)
    assert m2.cfg == model.cfg and tok2.vocab == tok.vocab
    assert_same(model, m2)
    assert not m2.training


def test_zip_round_trip(model, tok, tmp_path):
    path = save_checkpoint(model, tok, tmp_path / "ck")
    zpath = tmp_path / "ck.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in path.iterdir():
            zf.write(f, f"ck/{f.name}")  # inside a folder, as zipping a directory does
    m2, tok2 = load_checkpoint(zpath)
    assert_same(model, m2)
    assert tok2.vocab == tok.vocab


def test_single_safetensors_round_trip(model, tok, tmp_path):
    data = to_bytes(model, tok)
    m2, tok2 = from_bytes(data)
    assert_same(model, m2)
    (tmp_path / "one.safetensors").write_bytes(data)
    m3, _ = load_checkpoint(tmp_path / "one.safetensors")
    assert_same(model, m3)


def test_torch_save_pickle_is_refused_and_never_unpickled(model, tok, monkeypatch):
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)  # a zip holding data.pkl
    legacy = io.BytesIO()
    torch.save(model.state_dict(), legacy, _use_new_zipfile_serialization=False)
    raw = pickle.dumps({"x": 1})

    def no_unpickle(*a, **k):
        raise AssertionError("the loader tried to unpickle")
    monkeypatch.setattr(pickle, "loads", no_unpickle)
    monkeypatch.setattr(pickle, "load", no_unpickle)
    monkeypatch.setattr(pickle, "Unpickler", no_unpickle)
    monkeypatch.setattr(torch, "load", no_unpickle)
    for data in (buf.getvalue(), legacy.getvalue(), raw):
        with pytest.raises(ValueError, match="pickle"):
            from_bytes(data)


def test_truncated_file(model, tok):
    data = to_bytes(model, tok)
    for cut in (4, 100, len(data) // 2, len(data) - 1):
        with pytest.raises(ValueError, match="truncated|not a safetensors"):
            from_bytes(data[:cut])


def _with_tensors(model, tok, change):
    tensors = {k: v.clone() for k, v in model.state_dict().items()}
    change(tensors)
    meta = json.loads(json.loads(
        to_bytes(model, tok)[8:8 + int.from_bytes(to_bytes(model, tok)[:8], "little")])["__metadata__"]["attention_lab"])
    return st_save(tensors, metadata={"attention_lab": json.dumps(meta)})


def test_wrong_shape_names_tensor_and_shapes(model, tok):
    def change(t):
        t["blocks.0.attn.q_proj.weight"] = torch.zeros(16, 8)
    with pytest.raises(ValueError) as e:
        from_bytes(_with_tensors(model, tok, change))
    msg = str(e.value)
    assert "blocks.0.attn.q_proj.weight" in msg and "(16, 8)" in msg and "(16, 16)" in msg


def test_missing_and_unexpected_tensors(model, tok):
    def change(t):
        del t["blocks.1.ffn.fc2.bias"]
        t["extra.weight"] = torch.zeros(2)
    with pytest.raises(ValueError) as e:
        from_bytes(_with_tensors(model, tok, change))
    assert "missing tensors" in str(e.value) and "blocks.1.ffn.fc2.bias" in str(e.value)
    assert "unexpected tensors" in str(e.value) and "extra.weight" in str(e.value)


def test_wrong_dtype(model, tok):
    def change(t):
        t["ln_f.weight" if "ln_f.weight" in t else "tok_emb.weight"] = t["tok_emb.weight"].double()
    with pytest.raises(ValueError, match="dtype"):
        from_bytes(_with_tensors(model, tok, change))


def test_non_finite_values(model, tok):
    def change(t):
        t["blocks.0.ln1.weight"][3] = float("nan")
        t["tok_emb.weight"][0, 0] = float("inf")
    with pytest.raises(ValueError) as e:
        from_bytes(_with_tensors(model, tok, change))
    assert "blocks.0.ln1.weight" in str(e.value) and "tok_emb.weight" in str(e.value)


def test_vocab_config_mismatch(model, tok, tmp_path):
    path = save_checkpoint(model, tok, tmp_path / "ck")
    meta = json.loads((path / "config.json").read_text())
    meta["tokenizer"]["vocab"].append("zebra")
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="vocab_size"):
        load_checkpoint(path)


def test_config_mismatch_with_weights(model, tok, tmp_path):
    path = save_checkpoint(model, tok, tmp_path / "ck")
    meta = json.loads((path / "config.json").read_text())
    meta["config"]["n_layers"] = 3
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="missing tensors.*blocks.2"):
        load_checkpoint(path)


def test_huge_config_is_refused_before_allocating(model, tok, tmp_path):
    path = save_checkpoint(model, tok, tmp_path / "ck")
    meta = json.loads((path / "config.json").read_text())
    meta["config"].update(d_model=8192, n_heads=8, n_layers=96, d_ff=0)  # ~80 G parameters
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="parameters"):
        load_checkpoint(path)


def test_oversize(model, tok, tmp_path):
    data = to_bytes(model, tok)
    with pytest.raises(ValueError, match="limit"):
        from_bytes(data, max_bytes=len(data) - 1)
    path = tmp_path / "x.safetensors"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="limit"):
        load_checkpoint(path, max_bytes=1000)
    assert from_bytes(data, max_bytes=len(data))[0].cfg == model.cfg


def test_garbage_and_missing(tmp_path):
    with pytest.raises(ValueError):
        from_bytes(b"hello world, not a checkpoint at all")
    with pytest.raises(ValueError):
        from_bytes(b"PK\x03\x04garbage")
    with pytest.raises(ValueError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="model.safetensors"):
        load_checkpoint(tmp_path / "empty")


def test_safetensors_without_metadata_is_refused(model):
    data = st_save({k: v.contiguous() for k, v in model.state_dict().items()})
    with pytest.raises(ValueError, match="config"):
        from_bytes(data)


def test_safetensors_header_length_starting_with_0x80_is_not_taken_for_a_pickle():
    """Regression: a 7,552-byte header encodes as b"\\x80\\x1d..." (like pickle's magic)."""
    import pickle

    from model.checkpoint import _looks_like_pickle

    n = 0x1D80
    fake_safetensors = n.to_bytes(8, "little") + b"{" + b" " * (n - 1)
    assert fake_safetensors[:1] == b"\x80"
    assert not _looks_like_pickle(fake_safetensors)
    assert _looks_like_pickle(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    assert _looks_like_pickle(b"\x1f\x8b" + b"\x00" * 20)


def test_shipped_checkpoints_one_list():
    from model.checkpoint import CHECKPOINT_DIR, shipped_checkpoints
    dec = shipped_checkpoints()
    assert "causal-lm" in dec and "translator" not in dec
    assert all(meta.get("kind", "transformer") == "transformer" for meta in dec.values())
    every = shipped_checkpoints(kind=None)
    assert set(every) == set(dec) | set(shipped_checkpoints(kind="seq2seq")) | set(shipped_checkpoints(kind="rnn-seq2seq"))
    assert list(every) == sorted(every) and all((CHECKPOINT_DIR / n / "model.safetensors").is_file() for n in every)
    assert shipped_checkpoints(CHECKPOINT_DIR / "does-not-exist") == {}
