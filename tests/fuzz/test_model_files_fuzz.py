"""Structured fuzzer of the model files load_from_disk reads: valid tiny files (a GPT-2 folder:
model.safetensors, config.json, tokenizer.json; a Qwen2 GGUF) mutated by truncation, byte flips,
safetensors-header and GGUF-header field mutations, and JSON field mutations (huge, negative,
zero, wrong-typed values, deep nesting).

Every case must end in a model.pretrained.ModelRefused, or in a model whose trace of a few tokens
is finite, or whose first non-finite value is named (model.trace.first_nonfinite: what a page
shows instead of a chart; a flipped exponent bit makes a weight of 1e38 that loads and
overflows). Nothing else may be raised. Each case takes at most 2 s of CPU, and the process's peak
memory stays within 100 MB of where the fuzzer started.

`make fuzz` (FUZZ_FULL=1) runs 1,000 cases; the normal run a fixed-seed 200 (FUZZ_SEED picks
another seed; FUZZ_MODEL_CASES another count)."""
from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the tiny family models are built with transformers (requirements-dev.txt)")

import torch  # noqa: E402

from model.pretrained import ModelRefused, load_from_disk  # noqa: E402
from model.trace import first_nonfinite  # noqa: E402
from tests.tiny_families import build, build_gguf  # noqa: E402

pytestmark = pytest.mark.fuzz

FULL = os.environ.get("FUZZ_FULL") == "1"
SEED = int(os.environ.get("FUZZ_SEED", "20261129"))
CASES = int(os.environ.get("FUZZ_MODEL_CASES", "1000" if FULL else "200"))
CPU_SECONDS = 2.0
PEAK_BYTES = 100_000_000

HUGE = [2**62, 2**40, 2**31, -1, -(2**40), 0, 10**12, 1e308, 1e12, -1e12, 0.5, "x", None, [], {}, True]


def nested(depth: int):
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


# ---- mutations -----------------------------------------------------------------------------------

def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(0, len(data))]


def flip_bytes(data: bytes, rng: random.Random, region: int | None = None) -> bytes:
    b = bytearray(data)
    end = min(len(b), region) if region else len(b)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(end)] ^= 1 << rng.randrange(8)
    return bytes(b)


def overwrite_number(data: bytes, rng: random.Random, region: int) -> bytes:
    """A huge, negative or zero 4- or 8-byte number written somewhere in the first `region` bytes
    (a GGUF header: counts, lengths, types, dims, offsets, alignment)."""
    b = bytearray(data)
    fmt = rng.choice(["<Q", "<I", "<q"])
    v = rng.choice([0, 1, 2**32 - 1, 2**40, 2**62, -1] if fmt == "<q" else [0, 1, 2**32 - 1, 20_000, 2**31])
    if fmt != "<q" and v < 0:
        v = 0
    if fmt == "<I":
        v &= 0xFFFFFFFF
    size = struct.calcsize(fmt)
    pos = rng.randrange(0, max(1, region - size))
    b[pos:pos + size] = struct.pack(fmt, v)
    return bytes(b)


def mutate_json_value(d, rng: random.Random):
    """One value somewhere in a JSON tree replaced by a hostile one (or a key dropped)."""
    paths = []

    def walk(node, path, depth):
        if depth > 6 or len(paths) > 5000:
            return
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + [k])
                walk(v, path + [k], depth + 1)
        elif isinstance(node, list) and node:
            for i in rng.sample(range(len(node)), min(3, len(node))):
                paths.append(path + [i])
                walk(node[i], path + [i], depth + 1)
    walk(d, [], 0)
    if not paths:
        return nested(rng.choice([10, 5000, 50_000]))
    path = rng.choice(paths)
    parent = d
    for k in path[:-1]:
        parent = parent[k]
    r = rng.random()
    if r < 0.1 and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif r < 0.2:
        parent[path[-1]] = nested(rng.choice([100, 5000, 50_000]))
    else:
        parent[path[-1]] = rng.choice(HUGE)
    return d


def mutate_json_file(data: bytes, rng: random.Random) -> bytes:
    d = json.loads(data)
    for _ in range(rng.randint(1, 3)):
        d = mutate_json_value(d, rng)
    try:
        return json.dumps(d).encode()
    except (RecursionError, ValueError):
        return b"[" * 50_000 + b"]" * 50_000


def mutate_safetensors_header(data: bytes, rng: random.Random) -> bytes:
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entry = header[name]
    what = rng.choice(["shape", "data_offsets", "dtype", "entry", "header"])
    if what == "shape":
        entry["shape"] = rng.choice([[10**12, 10**12], [-1, 32], [1e12], [2**62], [], [0], nested(50), "x",
                                     [3] * 40, [entry["shape"][0] + 1] + entry["shape"][1:] if entry["shape"] else [1]])
    elif what == "data_offsets":
        entry["data_offsets"] = rng.choice([[0, 2**62], [-8, 8], [5, 1], [0], None, [0.5, 8],
                                            [entry["data_offsets"][0], entry["data_offsets"][1] + 4]])
    elif what == "dtype":
        entry["dtype"] = rng.choice(["I64", "U8", "F8_E4M3", "BOOL", "Q4", None, 7, "F64"])
    elif what == "entry":
        header[name] = rng.choice([None, [], "x", 3, nested(5000)])
    else:
        header = rng.choice([[], nested(50_000), "x", None, {}])
    try:
        raw = json.dumps(header).encode()
    except (RecursionError, ValueError):
        raw = b"[" * 50_000 + b"]" * 50_000
    if rng.random() < 0.2:  # keep the old header length: the JSON and the data disagree too
        return struct.pack("<Q", n) + raw + data[8 + n:]
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


# ---- the files -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-bases")
    gpt2 = build("gpt2", root / "gpt2")
    qwen2 = build("qwen2", root / "qwen2")
    gguf = build_gguf("qwen2", qwen2, root / "qwen2.gguf")
    from model.gguf_loader import read_header
    _, _, data_start = read_header(gguf.read_bytes())
    return {"gpt2": gpt2, "gguf": gguf, "gguf_header": data_start}


def make_case(bases, rng: random.Random, where: Path) -> tuple[Path, str]:
    """(the path to open, what was mutated) for one random case."""
    target = rng.choice(["safetensors", "config", "tokenizer", "gguf", "gguf"])
    if target == "gguf":
        data = bases["gguf"].read_bytes()
        op = rng.choice(["truncate", "flip-header", "number-header", "flip-any"])
        data = {"truncate": lambda: truncate(data, rng),
                "flip-header": lambda: flip_bytes(data, rng, bases["gguf_header"]),
                "number-header": lambda: overwrite_number(data, rng, bases["gguf_header"]),
                "flip-any": lambda: flip_bytes(data, rng)}[op]()
        path = where / "m.gguf"
        path.write_bytes(data)
        return path, f"gguf {op}"
    folder = where / "m"
    shutil.copytree(bases["gpt2"], folder)
    file = {"safetensors": "model.safetensors", "config": "config.json", "tokenizer": "tokenizer.json"}[target]
    data = (folder / file).read_bytes()
    if target == "safetensors":
        op = rng.choice(["truncate", "flip", "header", "header"])
        data = {"truncate": lambda: truncate(data, rng), "flip": lambda: flip_bytes(data, rng),
                "header": lambda: mutate_safetensors_header(data, rng)}[op]()
    else:
        op = rng.choice(["truncate", "flip", "json", "json", "json"])
        data = {"truncate": lambda: truncate(data, rng), "flip": lambda: flip_bytes(data, rng),
                "json": lambda: mutate_json_file(data, rng)}[op]()
    (folder / file).write_bytes(data)
    return folder, f"{file} {op}"


def outcome(path: Path) -> str:
    """"refused", "finite" or "named" (a trace whose first non-finite value first_nonfinite names)."""
    try:
        model, tok = load_from_disk(path)
    except ModelRefused as e:
        assert str(e).strip(), "a refusal without a sentence"
        return "refused"
    ids = tok.encode("the cat sat on the mat").ids[:8] or [0]
    tr = model.trace(torch.tensor([ids]), causal=True)
    where = first_nonfinite(tr)
    if where is None:
        return "finite"
    assert where.startswith(("the ", "layer ")), where
    return "named"


def test_mutated_model_files_are_refused_or_load_finite(bases, tmp_path):
    rng = random.Random(SEED)
    start_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seen: dict[str, int] = {}
    for i in range(CASES):
        where = tmp_path / f"case{i}"
        where.mkdir()
        path, what = make_case(bases, rng, where)
        t0 = time.process_time()
        try:
            got = outcome(path)
        except Exception as e:  # noqa: BLE001  anything but a refusal is a finding
            pytest.fail(f"case {i} ({what}, seed {SEED}): {type(e).__name__}: {str(e)[:300]}")
        cpu = time.process_time() - t0
        assert cpu <= CPU_SECONDS, f"case {i} ({what}): {cpu:.2f} s of CPU"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        assert peak - start_peak <= PEAK_BYTES, f"case {i} ({what}): peak memory +{(peak - start_peak) / 1e6:.0f} MB"
        seen[got] = seen.get(got, 0) + 1
        shutil.rmtree(where)
    print(f"model-file fuzz: {CASES} cases, seed {SEED}: {seen}")
    assert seen.get("refused", 0) > CASES // 4, seen  # the mutations do reach the checks
