"""The RNN encoder–decoder with additive attention (model.rnn) trained on the same toy English ->
Kalo data as the Transformer translator (training.translation: same sentences, same tokenizer,
same held-out split).

    python -m training.rnn_translation --train     trains (~1 min on one core) and writes
                                                   checkpoints/rnn-translator/ with its evaluation
    python -m training.rnn_translation --translate "the big dog sees a cat ."
    load_rnn_translator()                          (model, tokenizer, info) from the checkpoint
    rnn_translate(model, tok, words)               greedy translation + alignment, for the page
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model.checkpoint import CHECKPOINT_DIR as SHIPPED_DIR
from model.rnn import RNNConfig, RNNSeq2Seq, load_rnn, param_count, save_rnn
from model.tokenizer import BOS, Tokenizer
from model.trace import RNNSeq2SeqTrace
from training.loop import LoopSettings, run_loop
from training.translation import MAX_SENTENCE, Example, build_tokenizer, encode_batch, make_splits, one_thread

CHECKPOINT_DIR = SHIPPED_DIR / "rnn-translator"
NO_ATTENTION_DIR = SHIPPED_DIR / "rnn-translator-noattn"  # the same recipe without attention: one fixed context


@dataclass(frozen=True)
class RNNPreset:
    cfg: RNNConfig
    steps: int = 700
    batch: int = 64
    lr: float = 1e-2
    warmup: int = 50
    n_train: int = 20000  # the Transformer translator's splits (training.translation.make_splits)
    n_heldout: int = 1000
    seed: int = 0


def default_preset(attention: bool = True) -> RNNPreset:
    """The shipped recipe; attention=False: the same model and training without attention (one
    fixed context vector, the encoder's final states), for the bottleneck measurement."""
    return RNNPreset(cfg=RNNConfig(vocab_size=len(build_tokenizer()), attention=attention))


def train(preset: RNNPreset | None = None, log=print, max_seconds: float | None = None):
    """Deterministic (fixed seeds and batch order, one thread), in training/loop.py's loop (warm-up,
    cosine to 5% of lr, clipping at norm 1). Returns (model, tok, history)."""
    preset = preset or default_preset()
    with one_thread():
        torch.manual_seed(preset.seed)
        tok = build_tokenizer()
        train_set, _ = make_splits(preset.seed, preset.n_train, preset.n_heldout)
        model = RNNSeq2Seq(preset.cfg, seed=preset.seed)
        opt = torch.optim.Adam(model.parameters(), lr=preset.lr)
        g = torch.Generator().manual_seed(preset.seed + 1)

        def step_loss(step: int) -> torch.Tensor:  # a random batch of sentence pairs -> cross-entropy
            idx = torch.randint(len(train_set), (preset.batch,), generator=g).tolist()
            src, src_mask, tin, tout, _ = encode_batch(tok, [train_set[i] for i in idx])
            logits = model(src, tin, src_mask)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tout.reshape(-1), ignore_index=-100)

        settings = LoopSettings(steps=preset.steps, lr=preset.lr, warmup=preset.warmup, final_lr_fraction=0.05,
                                log_every=100, max_seconds=max_seconds)  # cosine down to 5% of lr
        res = run_loop(model, opt, step_loss, settings, log=log or None)
    return model, tok, {"losses": res.losses, "seconds": res.seconds, "cpu_seconds": res.cpu_seconds,
                        "steps_run": res.steps_done}


def token_accuracy(model: RNNSeq2Seq, tok: Tokenizer, examples: list[Example], batch: int = 250) -> tuple[float, float]:
    """(token accuracy, exact match) of greedy translations against the references: a target
    position counts when the greedy word there equals the reference word (<eos> included)."""
    hits = total = exact = 0
    with one_thread():
        for i in range(0, len(examples), batch):
            chunk = examples[i: i + batch]
            src, src_mask, *_ = encode_batch(tok, chunk)
            outs = model.greedy(src, src_mask, MAX_SENTENCE + 2, tok.bos_id, tok.eos_id)
            for o, e in zip(outs, chunk):
                ref = [tok.index[w] for w in e.tgt] + [tok.eos_id]
                hits += sum(a == b for a, b in zip(o, ref))
                total += len(ref)
                exact += o == ref
    return hits / total, exact / len(examples)


def alignment_accuracy(model: RNNSeq2Seq, tok: Tokenizer, examples: list[Example], batch: int = 250) -> float:
    """Teacher-forced on the reference: does argmax_j α_ij of the step that produces y_i point to
    y_i's source word? (The same measure as the Transformer translator's evaluate.)"""
    hits = n = 0
    with one_thread():
        for i in range(0, len(examples), batch):
            chunk = examples[i: i + batch]
            src, src_mask, tin, _, _ = encode_batch(tok, chunk)
            am = model.trace(src, tin, src_mask).attn.weights.argmax(-1).numpy()  # (B, T_out)
            for b, e in enumerate(chunk):
                gold = np.asarray(e.align)
                hits += int((am[b, : len(gold)] == gold).sum())
                n += len(gold)
    return hits / n


def evaluate(model: RNNSeq2Seq, tok: Tokenizer, seed: int = 0, n_train: int = 20000, n_heldout: int = 1000) -> dict:
    train_set, held = make_splits(seed, n_train, n_heldout)
    tr_acc, tr_exact = token_accuracy(model, tok, train_set[:1000])
    ho_acc, ho_exact = token_accuracy(model, tok, held)
    out = {"token_acc_train_first_1000": round(tr_acc, 4), "exact_match_train_first_1000": round(tr_exact, 4),
           "token_acc_heldout": round(ho_acc, 4), "exact_match_heldout": round(ho_exact, 4)}
    if model.cfg.attention:  # without attention there is no alignment to score
        out["alignment_acc_heldout"] = round(alignment_accuracy(model, tok, held), 4)
    return {**out, "n_heldout": len(held)}


def load_rnn_translator(path: str | Path = CHECKPOINT_DIR) -> tuple[RNNSeq2Seq, Tokenizer, dict]:
    """(model, tokenizer, info) of checkpoints/rnn-translator; info = its training record."""
    return load_rnn(path)


@dataclass(frozen=True)
class RNNTranslation:
    src_tokens: list[str]  # what the encoder saw (vocabulary words, <unk> for others)
    tgt_tokens: list[str]  # the greedy translation, without <eos>
    finished: bool  # <eos> was produced within the length limit
    dec_labels: list[str]  # decoder inputs: <bos> y_1 .. (row i of the alignment produced produced[i])
    produced: list[str]  # the produced tokens, <eos> included when produced
    trace: RNNSeq2SeqTrace  # numpy (B = 1): .attn.weights (1, T_out, T_in) = the alignment


def rnn_translate(model: RNNSeq2Seq, tok: Tokenizer, src_tokens: list[str]) -> RNNTranslation:
    """Greedy translation of already-tokenised source words (the Transformer translator's
    src_tokens: <unk> for unknown words) with the trace of the produced sequence."""
    if not src_tokens:
        raise ValueError("the source has no words")
    ids = [tok.index.get(w, tok.unk_id) for w in src_tokens]
    src = torch.tensor([ids], dtype=torch.long)
    with one_thread():
        out = model.greedy(src, None, len(ids) + 4, tok.bos_id, tok.eos_id)[0]
        dec_in = [tok.bos_id] + out[:-1]
        tr = model.trace(src, torch.tensor([dec_in], dtype=torch.long)).numpy()
    finished = bool(out) and out[-1] == tok.eos_id
    tgt = [tok.vocab[i] for i in out if i != tok.eos_id]
    return RNNTranslation(src_tokens=[tok.vocab[i] for i in ids], tgt_tokens=tgt, finished=finished,
                          dec_labels=[BOS] + [tok.vocab[i] for i in out[:-1]],
                          produced=[tok.vocab[i] for i in out], trace=tr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="store_true", help="train the preset and save the checkpoint")
    ap.add_argument("--eval", action="store_true", help="evaluate the checkpoint at --out")
    ap.add_argument("--no-attention", action="store_true",
                    help="train without attention (one fixed context vector); default --out is "
                         f"{NO_ATTENTION_DIR.name}")
    ap.add_argument("--out", default=None)
    ap.add_argument("--translate", default=None, help="translate one sentence with --out")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(NO_ATTENTION_DIR if args.no_attention else CHECKPOINT_DIR)
    if args.train:
        preset = default_preset(attention=not args.no_attention)
        model, tok, hist = train(preset)
        info = {"task": "toy English -> Kalo translation (training/translation.py data), RNN + "
                        + ("additive attention" if preset.cfg.attention else "no attention (one fixed context vector)"),
                "parameters": param_count(model), "steps": hist["steps_run"],
                "train_seconds": round(hist["seconds"], 1), "train_cpu_seconds": round(hist["cpu_seconds"], 1),
                "machine_load_1min": round(os.getloadavg()[0], 1), "final_loss": round(hist["losses"][-1], 4),
                **evaluate(model, tok, preset.seed, preset.n_train, preset.n_heldout)}
        save_rnn(model, tok, args.out, extra=info)
        print(json.dumps(info, indent=1))
    elif args.eval:
        model, tok, _ = load_rnn_translator(args.out)
        print(json.dumps(evaluate(model, tok), indent=1))
    if args.translate is not None:
        model, tok, _ = load_rnn_translator(args.out)
        r = rnn_translate(model, tok, [w.lower() for w in Tokenizer.split(args.translate)])
        print(" ".join(r.tgt_tokens) + ("" if r.finished else "  (no <eos>)"))
    if not (args.train or args.eval or args.translate is not None):
        ap.print_help()


if __name__ == "__main__":
    main()
