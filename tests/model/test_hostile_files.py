"""Hostile model files: a tiny file that claims a huge model, malformed safetensors and GGUF
headers, a path of 5,000 characters, weights linked out of an allowed folder. Each is refused by
load_from_disk (and inspect_model) with a model.pretrained.ModelRefused whose sentence says what is
wrong, before any module is built; nothing else is raised. One test per attack."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the tiny family models are built with transformers (requirements-dev.txt)")

import model.families.disk as disk  # noqa: E402
from model.pretrained import ModelRefused, inspect_model, load_from_disk  # noqa: E402
from tests.helpers import ROOT  # noqa: E402
from tests.tiny_families import build, build_gguf  # noqa: E402


class Built(BaseException):
    """Raised if a module is built (a BaseException: no `except Exception` may turn it into a refusal)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    return {"gpt2": build("gpt2", root / "gpt2"), "qwen2": build("qwen2", root / "qwen2"), "root": root}


@pytest.fixture
def gpt2(tiny, tmp_path):
    dst = tmp_path / "gpt2"
    shutil.copytree(tiny["gpt2"], dst)
    return dst


@pytest.fixture
def no_modules(monkeypatch):
    """Fail the test if any Transformer is constructed (on the meta device or not)."""
    from model.transformer import Transformer

    def refuse(*a, **k):
        raise Built("a module was built")
    monkeypatch.setattr(Transformer, "__init__", refuse)


def refused(path, match: str) -> str:
    """Both entry points refuse `path` with a ModelRefused whose sentence matches."""
    for fn in (inspect_model, load_from_disk):
        with pytest.raises(ModelRefused, match=match) as e:
            fn(path)
    return str(e.value)


def edit_config(folder: Path, **changes) -> None:
    d = json.loads((folder / "config.json").read_text())
    d.update(changes)
    (folder / "config.json").write_text(json.dumps(d))


# ---- one exception type, one sentence ---------------------------------------------------------------

def test_every_refusal_is_a_model_refused(gpt2, tmp_path):
    """Refusals that used to be plain ValueErrors (or other exceptions) are ModelRefused."""
    assert issubclass(ModelRefused, ValueError)
    refused(tmp_path / "nothing-here", "no such file")
    (gpt2 / "config.json").write_text("{not json")
    refused(gpt2, "not readable JSON.*re-save")
    (gpt2 / "config.json").write_text("[1, 2]")
    refused(gpt2, "JSON object")


# ---- refuse by the claimed size before building anything ------------------------------------------

@pytest.mark.parametrize("layers", [20_000, 100_000])
def test_a_config_claiming_many_layers_is_refused_before_any_module(gpt2, no_modules, layers):
    assert sum(f.stat().st_size for f in gpt2.iterdir()) <= 1_000_000
    edit_config(gpt2, n_layer=layers)
    refused(gpt2, f"claims {layers:,} layers")


def test_a_config_claiming_more_parameters_than_the_files_hold_is_refused(gpt2, no_modules):
    edit_config(gpt2, vocab_size=50_000_000)  # 50M x 32 parameters against a 160 kB file
    msg = refused(gpt2, "claims .* parameters but the weight files hold only")
    assert "do not belong together" in msg


def test_a_model_bigger_than_the_free_memory_is_refused_before_any_module(gpt2, no_modules, monkeypatch):
    monkeypatch.setattr(disk, "available_memory_bytes", lambda: 1000)
    refused(gpt2, "needs .* GB of memory .* nothing was loaded")


def test_a_gguf_claiming_20000_blocks_is_refused_before_any_module(tiny, tmp_path, monkeypatch):
    path = build_gguf("qwen2", tiny["qwen2"], tmp_path / "q.gguf")
    data = path.read_bytes()
    key = b"qwen2.block_count"
    i = data.index(key) + len(key)
    (vtype,) = struct.unpack_from("<I", data, i)
    assert vtype == 4  # uint32
    bad = tmp_path / "many.gguf"
    bad.write_bytes(data[:i + 4] + struct.pack("<I", 20_000) + data[i + 8:])
    from model.transformer import Transformer
    monkeypatch.setattr(Transformer, "__init__", lambda *a, **k: (_ for _ in ()).throw(Built("built")))
    refused(bad, "claims 20,000 layers")


def test_a_1mb_folder_claiming_100000_layers_costs_little_memory(gpt2, tmp_path):
    """In a fresh process: inspecting and loading folders that claim 20,000 and 100,000 layers
    raises the peak memory by at most 50 MB (the shell used to be built for every claimed layer:
    0.9 GB for 20,000)."""
    folders = []
    for n in (20_000, 100_000):
        f = tmp_path / f"claims-{n}"
        shutil.copytree(gpt2, f)
        edit_config(f, n_layer=n)
        folders.append(str(f))
    script = (
        "import resource, sys\n"
        "from model.pretrained import ModelRefused, inspect_model, load_from_disk\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for f in sys.argv[1:]:\n"
        "    for fn in (inspect_model, load_from_disk):\n"
        "        try:\n"
        "            fn(f)\n"
        "        except ModelRefused:\n"
        "            pass\n"
        "        else:\n"
        "            raise SystemExit('loaded')\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, *folders], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) <= 50_000_000


# ---- malformed safetensors headers ---------------------------------------------------------------

def write_safetensors(path: Path, header_json: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header_json)) + header_json + data)


@pytest.mark.parametrize("header, why", [
    (b"[1, 2, 3]", "not a JSON object"),
    (b"[" * 50_000 + b"]" * 50_000, "nests too deep"),
    (b'{"w": {"dtype": "F32", "shape": [1e12, 1e12], "data_offsets": [0, 16]}}', "shape"),
    (b'{"w": {"dtype": "F32", "shape": [1000000000000, 1000000000000], "data_offsets": [0, 16]}}', "claims"),
    (b'{"w": {"dtype": "F32", "shape": [-1, 32], "data_offsets": [0, 16]}}', "shape"),
    (b'{"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 99999]}}', "claims"),
    (b'{"w": {"dtype": "Q9", "shape": [2, 2], "data_offsets": [0, 16]}}', "unknown dtype"),
])
def test_malformed_safetensors_headers_are_refused(gpt2, header, why):
    write_safetensors(gpt2 / "model.safetensors", header, b"\0" * 16)
    msg = refused(gpt2, "not a valid safetensors file")
    assert why in msg and "re-save" in msg


# ---- malformed GGUF headers ------------------------------------------------------------------------

def gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"") -> bytes:
    """A GGUF v3 file: metadata entries and tensor infos already encoded."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs) + 1)
    head += gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
    body = head + b"".join(kvs) + b"".join(tensors)
    return body + b"\0" * (-len(body) % 32) + data


def test_gguf_alignment_zero_is_refused(tmp_path):
    p = tmp_path / "a.gguf"
    p.write_bytes(gguf_file([gguf_string("general.alignment") + struct.pack("<II", 4, 0)]))
    refused(p, "general.alignment is 0")


def test_gguf_arrays_nested_20000_deep_are_refused(tmp_path):
    nested = struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 20_000 + struct.pack("<IQ", 4, 0)
    p = tmp_path / "n.gguf"
    p.write_bytes(gguf_file([gguf_string("x.nested") + nested]))
    refused(p, "nests arrays more than")


def test_gguf_tensor_dims_of_2_40_are_refused(tmp_path):
    info = gguf_string("token_embd.weight") + struct.pack("<IQQIQ", 2, 2**40, 2**40, 0, 0)
    p = tmp_path / "d.gguf"
    p.write_bytes(gguf_file([], [info], b"\0" * 64))
    refused(p, "past the end of the file")


# ---- paths ------------------------------------------------------------------------------------------

def test_a_5000_character_path_is_refused_unread():
    refused("/" + "a" * 5000, "5,001 characters long")


def test_a_weight_file_linked_out_of_the_allowed_folder_is_refused(gpt2, tmp_path):
    """The folder is inside the root, its weights a symlink to a file outside: refused with the
    path sentence (files are resolved, symlinks included)."""
    root = tmp_path / "root"
    inside = root / "m"
    shutil.copytree(gpt2, inside)
    outside = tmp_path / "secret.safetensors"
    (inside / "model.safetensors").rename(outside)
    (inside / "model.safetensors").symlink_to(outside)
    assert load_from_disk(inside)[0] is not None  # without roots the link is followed
    for fn in (inspect_model, load_from_disk):
        with pytest.raises(ModelRefused) as e:
            fn(inside, roots=[root.resolve()])
        assert str(e.value) == disk.PATH_REFUSED
