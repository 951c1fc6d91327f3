"""Gradients you can see (issue 22, point 3): measurements behind three claims of the notes.

(a) "Scaling keeps gradients alive": the Jacobian of the softmax, d p / d z = diag(p) - p p^T,
    measured with autograd on random queries and keys, with and without the 1/sqrt(d_k) scale,
    as d_k grows. Unscaled scores have variance d_k: the softmax saturates (one weight near 1)
    and almost every entry of its Jacobian is near zero, so almost no gradient reaches q and k.
(b) "Residuals let gradients flow through depth" and "layer norm stabilises training": a short
    training run of a tiny 6-layer model with and without skip connections and layer norm
    (ModelConfig.residual / use_norm), recording the loss and the gradient norm of every layer.

Pure Python over model/ and training/ (torch, numpy; no streamlit). Fixed seeds: the same numbers
on every run (for a given torch thread count).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import numpy as np
import torch

from model.attention import masked_softmax
from model.config import ModelConfig
from model.init import scale_init
from model.transformer import Transformer
from training import corpus
from training.batching import encode_texts

DK_GRID = (4, 16, 64, 256, 1024)
NEAR_ZERO = 1e-3  # |d p_i / d z_j| below this counts as a "near-zero gradient"
DEAD_BELOW = 1e-2  # a query whose ‖∂p/∂q‖ is below this gets almost no gradient


def softmax_jacobian(z: np.ndarray) -> np.ndarray:
    """(N, n) softmax inputs -> (N, n, n) Jacobians J[s, i, j] = d p_i / d z_j, by autograd
    through model.attention.masked_softmax (the softmax attention uses): one backward pass per
    output i (rows are independent samples, so summing over them keeps each sample's row)."""
    zt = torch.tensor(np.asarray(z, dtype=np.float64), requires_grad=True)  # (N, n)
    _, p, _ = masked_softmax(zt)  # (N, n)
    rows = [torch.autograd.grad(p[:, i].sum(), zt, retain_graph=True)[0] for i in range(p.shape[1])]
    return torch.stack(rows, dim=1).detach().numpy()  # (N, n, n): [s, i, j]


@dataclass(frozen=True)
class JacobianStats:
    """The softmax Jacobians of N rows of scores z (N, n), summarised."""
    near_zero: float  # share of Jacobian entries |d p_i / d z_j| below the threshold
    norm: float  # mean Frobenius norm of J over the rows
    max_weight: float  # mean largest softmax weight over the rows
    score_std: float  # standard deviation of the scores z


@dataclass(frozen=True)
class JacobianCurves:
    """JacobianStats at each of G key widths d_k."""
    near_zero: np.ndarray  # (G,) share of Jacobian entries below the threshold
    norm: np.ndarray  # (G,) mean Frobenius norm of J
    max_weight: np.ndarray  # (G,) mean largest softmax weight
    score_std: np.ndarray  # (G,) standard deviation of the softmax inputs
    q_grad: np.ndarray  # (G,) mean over queries of ‖∂p/∂q‖ (Frobenius; ∂p/∂q = J K · scale): the gradient
    #                     that reaches the query (seed 004 says a large d_k makes it "explode": measured here)
    q_grad_median: np.ndarray  # (G,) median over queries of ‖∂p/∂q‖: the typical query
    q_grad_dead: np.ndarray  # (G,) share of queries with ‖∂p/∂q‖ < DEAD_BELOW (almost no gradient)


@dataclass(frozen=True)
class SoftmaxGradients:
    """The scaling experiment: softmax Jacobians of random q·k scores with and without 1/sqrt(d_k)."""
    d_k: np.ndarray  # (G,) the key widths tried
    n_keys: int  # keys per query
    n_samples: int  # queries per d_k
    near_zero_below: float  # the threshold of "near zero" for |d p_i / d z_j|
    scaled: JacobianCurves  # scores q·k / sqrt(d_k): variance 1
    unscaled: JacobianCurves  # scores q·k: variance d_k


def softmax_gradient_experiment(d_ks: Sequence[int] = DK_GRID, n_keys: int = 16, n_samples: int = 200,
                                seed: int = 0, near_zero: float = NEAR_ZERO) -> SoftmaxGradients:
    """For each d_k: random q (n_samples, d_k) and keys (n_samples, n_keys, d_k), entries N(0, 1);
    scores z = q·k (unscaled) or q·k / sqrt(d_k) (scaled); the softmax Jacobian of every row,
    summarised per d_k (jacobian_stats)."""
    g = torch.Generator().manual_seed(int(seed))
    curves = {kind: {f.name: np.zeros(len(d_ks)) for f in fields(JacobianCurves)} for kind in ("scaled", "unscaled")}
    for gi, dk in enumerate(d_ks):
        q = torch.randn(n_samples, 1, dk, generator=g, dtype=torch.float64)
        k = torch.randn(n_samples, n_keys, dk, generator=g, dtype=torch.float64)
        raw = (q @ k.transpose(-2, -1))[:, 0].numpy()  # (N, n) dot products, variance d_k
        for kind, scale in (("scaled", 1 / math.sqrt(dk)), ("unscaled", 1.0)):
            z = raw * scale if kind == "unscaled" else raw / math.sqrt(dk)
            stats = jacobian_stats(z, near_zero)
            for f in fields(JacobianStats):
                curves[kind][f.name][gi] = getattr(stats, f.name)
            qn = query_gradient_norms(z, k.numpy(), scale)  # (N,)
            curves[kind]["q_grad"][gi] = float(qn.mean())
            curves[kind]["q_grad_median"][gi] = float(np.median(qn))
            curves[kind]["q_grad_dead"][gi] = float((qn < DEAD_BELOW).mean())
    return SoftmaxGradients(d_k=np.asarray(d_ks), n_keys=n_keys, n_samples=n_samples, near_zero_below=near_zero,
                            scaled=JacobianCurves(**curves["scaled"]), unscaled=JacobianCurves(**curves["unscaled"]))


def query_gradient_norms(z: np.ndarray, keys: np.ndarray, scale: float) -> np.ndarray:
    """(N,) ‖∂p/∂q‖ (Frobenius) of each row: p = softmax(z), z = scale · K q, so by the chain
    rule ∂p/∂q = J · K · scale with J the softmax Jacobian (autograd, softmax_jacobian).
    z (N, n), keys (N, n, d_k)."""
    J = softmax_jacobian(z)  # (N, n, n)
    G = J @ np.asarray(keys, dtype=np.float64) * scale  # (N, n, d_k)
    return np.sqrt((G ** 2).sum(axis=(1, 2)))


def jacobian_stats(z: np.ndarray, near_zero: float = NEAR_ZERO) -> JacobianStats:
    """Of softmax rows z (N, n): share of Jacobian entries |J| < near_zero, mean Frobenius norm of
    J, mean largest weight, standard deviation of z."""
    J = softmax_jacobian(z)  # (N, n, n)
    _, p, _ = masked_softmax(torch.tensor(np.asarray(z, dtype=np.float64)))
    return JacobianStats(near_zero=float((np.abs(J) < near_zero).mean()),
                         norm=float(np.sqrt((J ** 2).sum(axis=(1, 2))).mean()),
                         max_weight=float(p.max(dim=1).values.mean()), score_std=float(np.std(z)))


# ----------------------------------------------------------------------------- (b) training runs
VARIANTS: dict[str, dict] = {
    "residual + layer norm": {},
    "no residual": {"residual": False},
    "no layer norm": {"use_norm": False},
    "neither": {"residual": False, "use_norm": False},
}


@dataclass(frozen=True)
class RunResult:
    name: str
    losses: np.ndarray  # (steps,) training loss per step
    grad_norms: np.ndarray  # (steps, L) gradient norm of each block's parameters, per step
    vocab_size: int = 0  # |V|: a uniform guess has loss ln |V|

    @property
    def steps(self) -> np.ndarray:
        """(steps,) 1, 2, …: the step number of each loss."""
        return np.arange(1, len(self.losses) + 1)

    @property
    def mean_grad_norms(self) -> np.ndarray:
        """(L,) each block's gradient norm, mean over the steps."""
        return self.grad_norms.mean(axis=0)

    @property
    def uniform_loss(self) -> float:
        """ln |V|: the loss of a uniform guess over the vocabulary."""
        return np.log(self.vocab_size)


def corpus_ids(n_sentences: int = 1500, max_len: int = 24, seed: int = 7) -> tuple[torch.Tensor, int, int]:
    """(N, T) ids of built-in corpus sentences (training/corpus.py), the vocabulary size and the
    padding id."""
    tok = corpus.build_tokenizer()
    ids, _ = encode_texts(tok, corpus.generate(2 * n_sentences, seed=seed).train[:n_sentences], max_len)
    return ids, len(tok), tok.pad_id


def layer_grad_norms(model: Transformer) -> torch.Tensor:
    """(L,) sqrt(sum of squared gradients) over each block's parameters (after backward)."""
    return torch.stack([torch.nn.utils.get_total_norm([p.grad for p in blk.parameters() if p.grad is not None])
                        for blk in model.blocks])


def train_variant(cfg: ModelConfig, ids: torch.Tensor, pad_id: int, steps: int, *, lr: float = 3e-3,
                  batch_size: int = 8, seed: int = 0, emb_scale: float = 0.1,
                  on_step: Callable[[], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A plain training loop (Adam, constant lr, no gradient clipping, so an unstable variant
    shows its instability): next-token cross-entropy through Transformer.forward. Returns losses
    (steps,) and per-block gradient norms (steps, L) measured before each update."""
    model = Transformer(cfg, seed=seed)
    scale_init(model, emb_scale)  # as training/train.py: start near the uniform distribution
    gen = torch.Generator().manual_seed(int(seed))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses, norms = [], []
    for _ in range(steps):
        b = ids[torch.randint(0, ids.shape[0], (batch_size,), generator=gen)]
        b = b[:, :max(2, int((b != pad_id).sum(dim=1).max()))]
        logits = model(b, causal=True)  # (B, T, V)
        targets = b[:, 1:].masked_fill(b[:, 1:] == pad_id, -100)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(layer_grad_norms(model))
        opt.step()
        losses.append(loss.detach())
        if on_step is not None:
            on_step()
    return torch.stack(losses).numpy().astype(float), torch.stack(norms).numpy()


def residual_norm_comparison(steps: int = 150, n_layers: int = 6, d_model: int = 32, n_heads: int = 4,
                             seed: int = 0, variants: dict[str, dict] | None = None,
                             progress: Callable[[float], None] | None = None) -> list[RunResult]:
    """Train one tiny pre-LN model per variant (same seed, same batches) and record its loss and
    per-layer gradient norms. progress(fraction done) after every step of every run."""
    variants = VARIANTS if variants is None else variants
    ids, vocab, pad = corpus_ids()
    total, done = steps * len(variants), [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0] / total)

    out = []
    for name, opts in variants.items():
        cfg = ModelConfig(vocab_size=vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_len=ids.shape[1],
                          norm="pre", **opts)
        losses, norms = train_variant(cfg, ids, pad, steps, seed=seed, on_step=tick)
        out.append(RunResult(name, losses, norms, vocab))
    return out


@dataclass(frozen=True)
class RunSummary:
    """One training run in numbers (the page's table, one row per run)."""
    run: str  # the variant's name
    first_loss: float  # loss at step 1 (the untrained model)
    largest_loss: float  # largest loss over the steps
    last: int  # how many final steps mean_loss_last averages
    mean_loss_last: float  # mean loss of the last `last` steps
    grad_norm_first: float  # block 0's gradient norm, mean over all steps
    grad_norm_last: float  # the last block's gradient norm, mean over all steps
    first_over_last: float  # grad_norm_first / grad_norm_last (nan when the last is 0)


def summarize(runs: Sequence[RunResult], last: int = 20) -> list[RunSummary]:
    """One row per run: first and largest loss, mean loss of the last `last` steps, and the
    gradient norm of the first and the last block (mean over all steps) and their ratio."""
    rows = []
    for r in runs:
        g = r.mean_grad_norms  # (L,)
        rows.append(RunSummary(run=r.name, first_loss=float(r.losses[0]), largest_loss=float(r.losses.max()),
                               last=last, mean_loss_last=float(r.losses[-last:].mean()),
                               grad_norm_first=float(g[0]), grad_norm_last=float(g[-1]),
                               first_over_last=float(g[0] / g[-1]) if g[-1] > 0 else float("nan")))
    return rows
