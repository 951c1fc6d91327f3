"""Families benchmark (issue 32): opening models from disk, and the trace of every family against
transformers.

    .venv/bin/python benchmarks/bench_families.py [--quick]   # prints a table like docs/benchmarks.md's
    from benchmarks.bench_families import run; rows = run()   # for benchmarks/run_all.py

Rows (benchmark, metric, app, bare, ratio, target, ok):
  - load time per GB of weights: model.pretrained.load_from_disk of (a) a Llama-style model of
    134M parameters written by transformers' save_pretrained in float32 (537 MB) and (b) the same
    in bfloat16 (read as float32), against transformers' from_pretrained of the same folder
    (float32, eager; the same process, files in the page cache: both read warm), followed by a sum
    over every weight (transformers maps the file and reads a weight when it is first used;
    load_from_disk reads every value, its finiteness check); (c) SmolLM2's Q4_1
    GGUF (dequantized to float32) and (d) MiniLM's folder, ours only. Seconds per GB of the files
    read (median of 3; the float32 bytes the model then holds are in the metric).
  - `model.trace(ids, causal=...)` (every intermediate recorded) vs transformers' forward with
    output_attentions and output_hidden_states (eager attention, torch.no_grad) on each tiny family
    of tests/tiny_families.py (T=32, causal for decoders, bidirectional for encoders) and on MiniLM
    and SmolLM2 (T=128), 1 torch thread. Paired (bench_pretrained.paired_ms: one call of each back to
    back, the order alternating, so load from other processes hits both alike); medians compared.
    Target <= 1.0x. The load average is in each row's metric.
Each measurement runs in its own subprocess; the models are written to a temporary folder that is
removed afterwards. Needs transformers (requirements-dev.txt), like the other comparisons.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pretrained import load_average, paired_ms  # noqa: E402

RATIO_TARGET = 1.0
BIG = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
           num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, tie_word_embeddings=False)


def _gb(n: int) -> float:
    return n / 1e9


def worker_load(tmp: str, repeats: int) -> list[dict]:
    """Seconds per GB of load_from_disk (and transformers' from_pretrained) on the big Llama-style
    folder in float32 and bfloat16, SmolLM2's GGUF and MiniLM's folder."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers

    from model.pretrained import PRETRAINED, load_from_disk
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    out = []
    hf = transformers.LlamaForCausalLM._from_config(transformers.LlamaConfig(**BIG)).eval()
    from tests.tiny_families import make_tokenizer
    tok, tc = make_tokenizer("bytelevel_bos")
    for dtype in ("float32", "bfloat16"):
        folder = Path(tmp) / f"big-{dtype}"
        hf.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
        tok.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(tc))
        size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        ours, theirs = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            m, _ = load_from_disk(folder)
            ours.append(time.perf_counter() - t)
            n = m.num_parameters()
            del m
            t = time.perf_counter()
            h = transformers.LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                              attn_implementation="eager", local_files_only=True)
            with torch.no_grad():  # read every weight once (it maps the file lazily; ours checks each value)
                sum(float(p.sum()) for p in h.parameters())
            theirs.append(time.perf_counter() - t)
            del h
        out.append({"what": f"Llama-style {n / 1e6:.0f}M safetensors {dtype} ({size / 1e6:.0f} MB)",
                    "ours": statistics.median(ours) / _gb(size), "theirs": statistics.median(theirs) / _gb(size),
                    "f32_mb": 4 * n / 1e6, "load": load_average()})
        shutil.rmtree(folder)
    for name in ("smollm2-135m", "minilm-l6"):
        entry = PRETRAINED[name]
        if not entry.installed():
            continue
        folder = entry.package_dir()
        target = folder / entry.weights_file if entry.family == "llama-gguf" else folder
        size = (target.stat().st_size if target.is_file()
                else sum(f.stat().st_size for f in target.glob("*.safetensors")))
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            m, _ = load_from_disk(target)
            times.append(time.perf_counter() - t)
        kind = "Q4_1 GGUF" if target.is_file() else "safetensors folder"
        out.append({"what": f"{entry.title.split(' ·')[0]} {kind} ({size / 1e6:.0f} MB)",
                    "ours": statistics.median(times) / _gb(size), "theirs": None,
                    "f32_mb": 4 * m.num_parameters() / 1e6, "load": load_average()})
    return out


def worker_compare(tmp: str, repeats: int) -> list[dict]:
    """trace vs transformers' forward on every tiny family (T=32) and on MiniLM / SmolLM2 (T=128)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers

    from model.pretrained import PRETRAINED, load_from_disk, load_pretrained
    from tests.tiny_families import FAMILY_NAMES, SPECS, build, hf_model
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    out = []

    def compare(label, model, hf, ids, causal):
        def ours():
            model.trace(ids, causal=causal)

        def theirs():
            with torch.no_grad():
                hf(input_ids=ids, output_attentions=True, output_hidden_states=True)
        out.append({"what": label, "T": ids.shape[1], **paired_ms(ours, theirs, repeats), "load": load_average()})

    for name in FAMILY_NAMES:
        folder = build(name, Path(tmp) / name)
        model, tok = load_from_disk(folder)
        hf = hf_model(folder)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, len(tok), (1, 32), generator=g)
        compare(f"tiny {name} ({type(hf).__name__})", model, hf, ids, SPECS[name].causal)
    if PRETRAINED["minilm-l6"].installed():
        model, _ = load_pretrained("minilm-l6")
        hf = transformers.BertModel.from_pretrained(str(PRETRAINED["minilm-l6"].package_dir()),
                                                    attn_implementation="eager", local_files_only=True).eval()
        ids = torch.randint(1000, 30000, (1, 128), generator=torch.Generator().manual_seed(0))
        compare("MiniLM-L6 (BertModel)", model, hf, ids, False)
    entry = PRETRAINED["smollm2-135m"]
    if entry.installed():
        model, _ = load_pretrained("smollm2-135m")
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(entry.package_dir()), gguf_file=entry.weights_file, attn_implementation="eager",
            dtype=torch.float32, local_files_only=True).eval()
        ids = torch.randint(0, 49152, (1, 128), generator=torch.Generator().manual_seed(0))
        compare("SmolLM2-135M (LlamaForCausalLM)", model, hf, ids, True)
    return out


def _sub(args: list[str]) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", *args],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"worker {args[:1]} failed: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-families-") as tmp:
        for r in _sub(["load", tmp, "1" if quick else "3"]):
            ratio = None if r["theirs"] is None else r["ours"] / r["theirs"]
            rows.append(dict(
                benchmark=f"load_from_disk: {r['what']}",
                metric=(f"s per GB of files (float32 in memory {r['f32_mb']:.0f} MB; "
                        f"{'transformers from_pretrained = baseline; ' if ratio else ''}load {r['load']})"),
                app=round(r["ours"], 3), bare=None if r["theirs"] is None else round(r["theirs"], 3),
                ratio=ratio, target="informational", ok=None))
        for r in _sub(["compare", tmp, "6" if quick else "30"]):
            ratio = r["ours_ms"] / r["hf_ms"]
            rows.append(dict(
                benchmark=f"trace vs transformers forward: {r['what']} (T={r['T']}, 1 thread)",
                metric=(f"median ms (transformers = baseline; ratio of min {r['ratio_of_min']:.2f}, median pair "
                        f"ratio {r['pair_ratio']:.2f}; load {r['load']})"),
                app=round(r["ours_ms"], 3), bare=round(r["hf_ms"], 3), ratio=ratio,
                target=f"≤ {RATIO_TARGET:g}×", ok=ratio <= RATIO_TARGET))
    return rows


def _main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:
        kind, tmp, n = argv[1], argv[2], int(argv[3])
        print(json.dumps(worker_load(tmp, n) if kind == "load" else worker_compare(tmp, n)))
        return
    from benchmarks.report import table
    print(table(run(quick="--quick" in argv)))


if __name__ == "__main__":
    _main(sys.argv[1:])
