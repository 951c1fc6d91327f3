"""training.loop, the one loop of the three trainers: the warm-up/cosine schedule against the
formula written here (and against each trainer's old inline schedule, exactly), the learning
rate the optimizer really gets, gradient clipping, stopping, logging, a short run's loss going
down, and each trainer handing its steps to run_loop."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model.config import ModelConfig
from model.rnn import RNNConfig
from training import corpus, loop, rnn_translation, translation
from training import train as lm
from training.loop import LoopSettings, run_loop


def schedule(step: int, lr: float, warmup: int, steps: int, floor: float) -> float:
    """Linear warm-up to lr over `warmup` steps, then cosine from lr to floor * lr at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return lr * (floor + (1 - floor) * (1 + math.cos(math.pi * p)) / 2)


def test_schedule_values_at_known_steps() -> None:
    s = LoopSettings(steps=110, lr=2.0, warmup=10, final_lr_fraction=0.1)
    assert s.lr_at(0) == pytest.approx(0.2)  # first warm-up step: lr / warmup
    assert s.lr_at(4) == pytest.approx(1.0)  # half way up
    assert s.lr_at(9) == pytest.approx(2.0)  # end of warm-up: the peak
    assert s.lr_at(10) == pytest.approx(2.0)  # cosine starts at the peak
    assert s.lr_at(60) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))  # half way down: cos(pi/2) = 0
    assert s.lr_at(110) == pytest.approx(0.2)  # the floor, 10 % of lr
    for step in range(115):
        assert s.lr_at(step) == pytest.approx(schedule(step, 2.0, 10, 110, 0.1), rel=1e-12)
    assert LoopSettings(steps=100, lr=1.0, warmup=0).lr_at(0) == 1.0  # no warm-up: cosine from step 0
    assert LoopSettings(steps=100, lr=1.0, warmup=0).lr_at(100) == pytest.approx(0.0, abs=1e-15)
    assert LoopSettings(steps=400, lr=1.0).warmup == 20  # default: a twentieth of the steps
    assert LoopSettings(steps=10, lr=1.0).warmup == 1


@pytest.mark.parametrize("lr,warmup,steps,floor,old", [
    # the inline schedules the three trainers had before they shared the loop, copied verbatim:
    # the shipped checkpoints were trained with them, so the loop must give the very same floats
    (3e-3, 85, 1700, 0.1,  # training/train.py (causal-lm preset)
     lambda s, lr, w, n: lr * (s + 1) / w if s < w else
     lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * ((s - w) / max(1, n - w)))))),
    (3e-3, 100, 600, 0.0,  # training/translation.py
     lambda s, lr, w, n: lr * (s + 1) / w if s < w else
     lr * 0.5 * (1 + math.cos(math.pi * ((s - w) / max(1, n - w))))),
    (1e-2, 50, 700, 0.05,  # training/rnn_translation.py
     lambda s, lr, w, n: lr * (s + 1) / w if s < w else
     lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * ((s - w) / max(1, n - w)))))),
])
def test_schedule_is_bit_identical_to_the_trainers_old_schedules(lr, warmup, steps, floor, old) -> None:
    s = LoopSettings(steps=steps, lr=lr, warmup=warmup, final_lr_fraction=floor)
    assert [s.lr_at(i) for i in range(steps)] == [old(i, lr, warmup, steps) for i in range(steps)]


def test_bad_settings_raise() -> None:
    for kw, word in [(dict(steps=-1), "steps"), (dict(steps=2.0), "steps"), (dict(steps=True), "steps"),
                     (dict(lr=0.0), "lr"), (dict(lr=float("nan")), "lr"), (dict(warmup=-1), "warmup"),
                     (dict(final_lr_fraction=1.5), "final_lr_fraction"), (dict(clip_norm=0.0), "clip_norm")]:
        with pytest.raises(ValueError, match=word):
            LoopSettings(**{"steps": 10, "lr": 1e-3, **kw})


def quadratic_problem(seed: int = 0):
    """A linear model fitted to a fixed target: loss = mean squared error (starts well above 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.5
    model = torch.nn.Linear(8, 1)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    return model, lambda step: ((model(x) - y) ** 2).mean()


def test_the_optimizer_gets_the_schedule_and_the_loss_goes_down() -> None:
    model, loss = quadratic_problem()
    opt = torch.optim.Adam(model.parameters(), lr=123.0)  # overwritten by the loop every step
    settings = LoopSettings(steps=60, lr=0.05, warmup=5, final_lr_fraction=0.1)
    seen = []
    res = run_loop(model, opt, loss, settings, on_step=lambda done, l: seen.append((done, opt.param_groups[0]["lr"], l)))
    assert [d for d, _, _ in seen] == list(range(1, 61))
    assert [lr for _, lr, _ in seen] == [settings.lr_at(i) for i in range(60)]
    assert [l for _, _, l in seen] == res.losses
    assert res.steps_done == 60 and not res.stopped and len(res.losses) == 60
    assert res.losses[-1] < 0.2 * res.losses[0], (res.losses[0], res.losses[-1])
    assert not model.training  # handed back in eval mode


def test_gradient_clipping_is_applied() -> None:
    """One SGD step at lr 1 moves the parameters by the gradient; with clip_norm 1 the global norm
    of that move is 1, without clipping it is the full gradient norm (40 * sqrt(5) here)."""
    def move(clip):
        w = torch.nn.Linear(4, 1)
        before = torch.cat([p.detach().flatten().clone() for p in w.parameters()])
        opt = torch.optim.SGD(w.parameters(), lr=1.0)
        run_loop(w, opt, lambda step: 40.0 * sum(p.sum() for p in w.parameters()),
                 LoopSettings(steps=1, lr=1.0, warmup=1, clip_norm=clip))
        return float(torch.linalg.vector_norm(torch.cat([p.detach().flatten() for p in w.parameters()]) - before))

    assert move(1.0) == pytest.approx(1.0, rel=1e-5)
    assert move(0.25) == pytest.approx(0.25, rel=1e-5)
    assert move(None) == pytest.approx(40.0 * math.sqrt(5), rel=1e-5)


def test_should_stop_before_a_step_and_max_seconds_after_one(monkeypatch) -> None:
    model, loss = quadratic_problem()
    calls = []
    res = run_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loss, LoopSettings(steps=20, lr=0.01),
                   should_stop=lambda: calls.append(1) or len(calls) > 4)
    assert res.stopped and res.steps_done == 4 and len(calls) == 5 and not model.training
    clock = iter(float(i) for i in range(1000))  # every perf_counter() call: one more second
    monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
    model, loss = quadratic_problem()
    res = run_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loss,
                   LoopSettings(steps=20, lr=0.01, max_seconds=2.5))
    assert res.stopped and res.steps_done == 3  # t0 = 0, after step k: k s; 3 s > 2.5
    res = run_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loss,
                   LoopSettings(steps=3, lr=0.01, max_seconds=2.5))
    assert res.steps_done == 3 and not res.stopped  # past the limit only after the last step


def test_log_lines_every_n_steps_and_at_the_last() -> None:
    model, loss = quadratic_problem()
    lines = []
    res = run_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loss,
                   LoopSettings(steps=25, lr=0.01, log_every=10), log=lines.append)
    assert [ln.split()[1] for ln in lines] == ["0", "10", "20", "24"]
    assert lines[0].startswith(f"step     0  loss {res.losses[0]:.4f}  ") and lines[0].endswith("s")
    silent = []
    run_loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loss, LoopSettings(steps=5, lr=0.01),
             log=silent.append)
    assert silent == []  # log_every 0: no lines


def test_every_trainer_runs_its_steps_in_the_one_loop(monkeypatch) -> None:
    """train.train, translation.train and rnn_translation.train hand their steps to run_loop with
    their own schedule (cosine floor 10 %, 0 and 5 %)."""
    used = []
    real = loop.run_loop

    def spy(model, opt, batch_loss, settings, **kw):
        used.append(settings)
        return real(model, opt, batch_loss, settings, **kw)

    for mod in (lm, translation, rnn_translation):
        monkeypatch.setattr(mod, "run_loop", spy)
    tok = lm.tokenizer_for("causal")
    cfg = ModelConfig(vocab_size=len(tok), d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=24)
    res = lm.train(cfg, tok, corpus.generate().train[:50], steps=40, lr=1e-2, batch_size=4)
    assert len(res.losses) == 40
    ttok = translation.build_tokenizer()
    tcfg = translation.translator_config(len(ttok)).replace(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    translation.train(translation.TrainPreset(cfg=tcfg, steps=3, batch=4, lr=1e-2, warmup=1, n_train=20,
                                              n_heldout=2), log=None)
    rnn_translation.train(rnn_translation.RNNPreset(cfg=RNNConfig(vocab_size=len(ttok), d_emb=4, d_enc=4, d_dec=4,
                                                                  d_attn=4), steps=3, batch=4, warmup=1, n_train=20,
                                                    n_heldout=2), log=None)
    assert [(s.steps, s.warmup, s.final_lr_fraction, s.clip_norm) for s in used] == [
        (40, 2, 0.1, 1.0), (3, 1, 0.0, 1.0), (3, 1, 0.05, 1.0)]
    assert np.isfinite(res.losses).all()
