"""The one training loop of training/: linear warm-up then cosine decay of the learning rate, one
optimizer step per batch with gradient-norm clipping, and the loss log.

Every trainer in training/ runs its steps here; each one builds its own model, optimizer and
batches and hands the loop a `batch_loss(step)` function:

    training.train.train                 the Transformer language models (CLI, Train page thread)
    training.translation.train           the encoder–decoder translator
    training.rnn_translation.train       the RNN translator with additive attention

    settings = LoopSettings(steps=600, lr=3e-3, warmup=100, final_lr_fraction=0.0, log_every=100)
    res = run_loop(model, opt, lambda step: loss_of_batch(step), settings, log=print)
    res.losses, res.steps_done, res.stopped

One step (the order matters for bit-identical runs: batches and masks come from the trainer's own
torch.Generator inside batch_loss):
    should_stop()? -> loss = batch_loss(step) -> lr = settings.lr_at(step) -> zero_grad ->
    backward -> clip the global gradient norm to settings.clip_norm -> optimizer.step ->
    on_step(step + 1, loss) -> a log line every settings.log_every steps -> max_seconds?
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


@dataclass(frozen=True)
class LoopSettings:
    """What the loop runs: how many steps, the learning-rate schedule, clipping and logging."""
    steps: int  # optimizer steps; the cosine reaches its end at this step
    lr: float  # peak learning rate, reached at the end of the warm-up
    warmup: int | None = None  # steps of linear warm-up, lr * (step + 1) / warmup while step <
    #   warmup (0: none); None: a twentieth of the steps, at least 1
    final_lr_fraction: float = 0.0  # the cosine decays from lr to lr * final_lr_fraction
    clip_norm: float | None = 1.0  # max global gradient norm (clip_grad_norm_); None = no clipping
    log_every: int = 0  # a log line at every step % log_every == 0 and at the last step; 0 = none
    max_seconds: float | None = None  # end early once a step finishes after this much wall time

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {self.steps!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if self.warmup is None:
            object.__setattr__(self, "warmup", max(1, self.steps // 20))
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            raise ValueError(f"final_lr_fraction must lie in [0, 1], got {self.final_lr_fraction!r}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive or None, got {self.clip_norm!r}")
        if self.log_every < 0:
            raise ValueError(f"log_every must be >= 0, got {self.log_every!r}")

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step `step` (0-based): linear warm-up to lr over `warmup`
        steps, then a half cosine from lr down to lr * final_lr_fraction at step `steps`."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        p = (step - self.warmup) / max(1, self.steps - self.warmup)  # 0 -> 1 over the decay
        f = self.final_lr_fraction
        return self.lr * (f + (1 - f) * 0.5 * (1 + math.cos(math.pi * p)))


@dataclass(frozen=True)
class LoopResult:
    losses: list[float]  # (steps_done,) training loss of each step, measured before its update
    steps_done: int  # optimizer steps taken (settings.steps unless stopped)
    stopped: bool  # should_stop() or max_seconds ended the loop before settings.steps
    seconds: float  # wall time of the loop
    cpu_seconds: float  # process CPU time of the loop (less sensitive to a busy machine)


def run_loop(model: nn.Module, optimizer: torch.optim.Optimizer, batch_loss: Callable[[int], torch.Tensor],
             settings: LoopSettings, *, on_step: Callable[[int, float], None] | None = None,
             should_stop: Callable[[], bool] | None = None,
             log: Callable[[str], None] | None = None) -> LoopResult:
    """Train `model` in place for settings.steps steps and hand it back in eval mode.

    batch_loss(step) draws step's batch (0-based) and returns its scalar loss with a graph to
    `model`'s parameters. optimizer holds those parameters; its learning rate is overwritten each
    step with settings.lr_at(step). on_step(steps_done, loss) after every update; should_stop()
    is polled before every step; log(line) gets "step     0  loss 4.6728    0.1s" lines."""
    losses: list[float] = []
    stopped = False
    t0, c0 = time.perf_counter(), time.process_time()
    model.train()
    for step in range(settings.steps):
        if should_stop is not None and should_stop():
            stopped = True
            break
        loss = batch_loss(step)
        lr = settings.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if settings.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
        optimizer.step()
        value = float(loss.detach())
        losses.append(value)
        if on_step is not None:
            on_step(step + 1, value)
        if log is not None and settings.log_every and (step % settings.log_every == 0
                                                       or step == settings.steps - 1):
            log(f"step {step:5d}  loss {value:.4f}  {time.perf_counter() - t0:5.1f}s")
        if (settings.max_seconds is not None and step + 1 < settings.steps
                and time.perf_counter() - t0 > settings.max_seconds):
            stopped = True
            break
    model.eval()
    return LoopResult(losses=losses, steps_done=len(losses), stopped=stopped,
                      seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)
