"""AppTest of the Train page (issue 5 §4): render, a tiny training run to the end in the
background registry, the model appearing in the sidebar, cancel, the busy limits, and every
checkpoint-upload case (the current model must stay selected; nothing may raise)."""
from __future__ import annotations

import gzip
import io
import json
import pickle
import threading
import time

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save

from model.checkpoint import to_bytes
from model.config import D_MODEL_CHOICES, HEAD_CHOICES, ModelConfig, valid_heads
from model.transformer import Transformer
from tests.helpers import app_test, decode, errors, figures
from ui import train as train_ui
from tests.helpers import all_text, open_page

torch.set_num_threads(1)

TINY = {"train_d": 16, "train_h": 2, "train_L": 1, "train_steps": 20}


def open_train(**widgets):
    at = app_test()
    at.run()
    at.switch_page("pages/train.py").run()
    assert not errors(at), errors(at)
    for key, value in widgets.items():
        el = at.selectbox(key=key) if key in ("train_d", "train_h") else at.slider(key=key)
        el.set_value(value)
        at.run()
    return at


def job_of(at) -> train_ui.Job | None:
    key = at.session_state["_train_session"] if "_train_session" in at.session_state else None
    return None if key is None else train_ui.registry().get(key)


def wait_until_finished(at, timeout: float = 240.0) -> train_ui.JobView:
    """Rerun the app (as the page's fragment would) until the registry says the job ended."""
    deadline = time.time() + timeout
    seen_running = False
    while time.time() < deadline:
        v = job_of(at).view()
        if not v.running:
            at.run()  # the run that adopts the model into the sidebar
            at.run()
            return v
        seen_running = True
        time.sleep(0.5)
        at.run()
        assert not errors(at), errors(at)
    raise AssertionError(f"training did not finish in {timeout:.0f} s (seen running: {seen_running})")


def test_page_renders_with_divisor_heads_only():
    at = open_train()
    assert any("Start training" in i.value for i in at.info)
    assert at.button(key="train_start").label == "Start training"
    assert set(train_ui.D_MODELS) <= set(D_MODEL_CHOICES)  # a subset of the app's one list
    for d in train_ui.D_MODELS:
        at.selectbox(key="train_d").set_value(d).run()
        offered = [int(h) for h in at.selectbox(key="train_h").options]
        assert offered == valid_heads(d) == [h for h in HEAD_CHOICES if d % h == 0 and d // h >= 4], (d, offered)
        assert d % int(at.selectbox(key="train_h").value) == 0
    assert not errors(at)


def test_tiny_training_runs_to_the_end_and_joins_the_sidebar():
    at = open_train(**TINY)
    options_before = list(at.selectbox(key="src").options)
    src_before = at.selectbox(key="src").value
    from ui.models import ModelSource, get_model
    shared, _ = get_model(ModelSource("checkpoint", src_before))  # the cached, shared model
    shared_before = {k: v.clone() for k, v in shared.state_dict().items()}
    at.button(key="train_start").click().run()
    assert not errors(at), errors(at)
    assert job_of(at) is not None, "Start did not register a job"
    v = wait_until_finished(at)
    assert v.status == "done", (v.status, v.error)
    assert v.step == 20 and len(v.losses) == 20
    assert np.isfinite(v.losses).all()
    # a few steps reduce the loss (from about ln V for a near-uniform start)
    assert v.losses[-5:].mean() < v.losses[:3].mean() - 0.1, v.losses
    assert abs(v.losses[0] - train_ui.uniform_loss("causal")) < 1.0

    # the new model is in the sidebar's options for this session; the current one stays selected
    opts = list(at.selectbox(key="src").options)
    new = [o for o in opts if o not in options_before]
    assert len(new) == 1 and new[0].startswith("trained #1"), new
    assert new[0] == v.model_name or job_of(at).view().model_name == new[0]
    assert at.selectbox(key="src").value == src_before
    assert any("Trained in" in x.value for x in at.success)

    # the loss chart shows exactly the registry's losses
    figs = figures(at)
    loss_fig = next(f for f in figs if f["data"][0].get("name") == "loss per step")
    np.testing.assert_allclose(decode(loss_fig["data"][0]["y"]), v.losses, rtol=1e-6)
    # snapshot scrubber: step 0 .. 20; the heatmap of the last step is the snapshot's weights
    snap_steps = [int(x) for x in at.select_slider(key="train_snap").options]
    assert snap_steps[0] == 0 and snap_steps[-1] == 20 and snap_steps == sorted(snap_steps)
    assert [s.step for s in v.snapshots] == snap_steps
    grid = next(f for f in figs if f["data"][0].get("name") == "head 0")
    z = decode(grid["data"][0]["z"])
    w = v.snapshots[-1].weights[0, 0]
    T = len(v.probe_labels)
    assert z.shape == (T, T) == w.shape
    lower = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(z[lower], w[lower], rtol=1e-5)
    assert np.isnan(z[~lower]).all()  # causal: masked cells blank, not a colour
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    # scrub to step 0: a different (untrained) pattern is shown
    at.select_slider(key="train_snap").set_value(0).run()
    z0 = decode(next(f for f in figures(at) if f["data"][0].get("name") == "head 0")["data"][0]["z"])
    np.testing.assert_allclose(z0[lower], v.snapshots[0].weights[0, 0][lower], rtol=1e-5)
    assert not np.allclose(z0[lower], z[lower])
    # download: the checkpoint bytes load back into the same architecture
    from ui.session_models import session_models
    data = session_models()[at.session_state["_session_model_ids"][new[0]]]
    model, _ = train_ui.validate_upload("x.safetensors", data)
    assert (model.cfg.d_model, model.cfg.n_heads, model.cfg.n_layers) == (16, 2, 1)
    assert at.get("download_button"), "no download button"

    # the models cached for every session were not touched (training builds its own)
    for k, v in get_model(ModelSource("checkpoint", src_before))[0].state_dict().items():
        assert torch.equal(v, shared_before[k]), k

    # "Use it on every page" selects it in the sidebar; every page now runs on the trained model
    at.button(key="train_use").click().run()
    assert at.selectbox(key="src").value == new[0]
    assert not errors(at)
    at.switch_page("pages/heads.py").run()
    assert not errors(at), errors(at)
    assert any("d_model 16 · 2 heads · 1 layers" in c.value for c in at.sidebar.caption)


def test_cancel_discards_the_model(monkeypatch):
    """Event-based, no wall clock: the training thread is held right after its first (step 0)
    snapshot until the test has looked at the live page and clicked Cancel; then it must stop."""
    first_snapshot, resume = threading.Event(), threading.Event()
    record = train_ui.Job._on_snapshot

    def held(self, snap):
        record(self, snap)
        first_snapshot.set()
        resume.wait(120)  # the test releases it after Cancel (a bound only so a bug cannot hang)

    monkeypatch.setattr(train_ui.Job, "_on_snapshot", held)
    at = open_train(**{**TINY, "train_steps": train_ui.MAX_STEPS})  # tiny model; a step count it never reaches
    options_before = list(at.selectbox(key="src").options)
    at.button(key="train_start").click().run()
    assert job_of(at).view().running
    assert at.button(key="train_start").disabled  # one training per session
    assert first_snapshot.wait(120), "the training never recorded its step-0 snapshot"
    # live: while it runs, the latest attention snapshot is drawn (step 0 arrives first)
    at.run()
    v = job_of(at).view()
    assert v.running and [s.step for s in v.snapshots] == [0], v.snapshots
    live = [f for f in figures(at) if f["data"][0].get("name") == "head 0"]
    assert live, "the running page draws no attention snapshot"
    shown = decode(live[0]["data"][0]["z"])
    T_ = len(v.probe_labels)
    lower = np.tril(np.ones((T_, T_), dtype=bool))
    np.testing.assert_allclose(shown[lower], v.snapshots[0].weights[0, 0][lower], rtol=1e-5)
    assert "Step 0" in live[0]["layout"]["title"]["text"]
    at.button(key="train_cancel").click().run()
    assert job_of(at).cancel.is_set()
    resume.set()
    v = wait_until_finished(at, timeout=120)
    assert v.status == "cancelled" and v.step <= 2, (v.status, v.step)  # stopped at the next check
    assert any("Cancelled at step" in i.value for i in at.info)
    assert list(at.selectbox(key="src").options) == options_before
    assert not errors(at)


def test_a_diverged_training_is_an_error_not_a_sidebar_model(monkeypatch):
    """NaN losses/weights must never reach the sidebar (every page would fail to load it)."""
    from training import train as training

    def diverge(cfg, tok, data, steps, *a, callback=None, **kw):
        model = Transformer(cfg, seed=0)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        for i in range(steps):
            callback(i + 1, float("nan"))
        return training.TrainResult(model=model, losses=[float("nan")] * steps, steps_done=steps)

    monkeypatch.setattr(train_ui.training, "train", diverge)
    job = train_ui.Job(spec=train_ui.TrainSpec(d_model=16, n_heads=2, n_layers=1, steps=20), session="nan-test")
    job.run()
    v = job.view()
    assert v.status == "error" and "diverged" in v.error
    assert job.result_bytes is None and v.final_loss is None


class _Blocking:
    """A stand-in worker that 'trains' until released (no torch work)."""

    def __init__(self):
        self.release = threading.Event()

    def __call__(self, job: train_ui.Job) -> None:
        with job.lock:
            job.status = "running"
        self.release.wait(30)
        with job.lock:
            job.status, job.finished = "done", time.time()


def test_training_pool_is_encoded_once_per_objective_with_its_tokenizer():
    from training import corpus
    from training import train as training
    causal, mlm = train_ui.training_pool("causal"), train_ui.training_pool("mlm")
    assert train_ui.training_pool("causal") is causal  # encoded once per process, shared by every job
    texts = corpus.generate().train[:train_ui.TRAIN_POOL]
    assert torch.equal(causal, training.encode_texts(training.tokenizer_for("causal"), texts, train_ui.MAX_LEN)[0])
    assert torch.equal(mlm, training.encode_texts(training.tokenizer_for("mlm"), texts, train_ui.MAX_LEN)[0])
    assert causal.shape[0] == train_ui.TRAIN_POOL and not torch.equal(causal, mlm)  # "<mask>" shifts the ids


def test_registry_limits_one_per_session_and_server_wide():
    reg = train_ui.TrainingRegistry(limit=2)
    worker = _Blocking()
    spec = train_ui.TrainSpec(d_model=16, n_heads=2, n_layers=1, steps=20)
    try:
        reg.start("a", spec, target=worker)
        with pytest.raises(train_ui.Busy, match="one training per session"):
            reg.start("a", spec, target=worker)
        reg.start("b", spec, target=worker)
        with pytest.raises(train_ui.Busy, match="server is busy.*limit is 2"):
            reg.start("c", spec, target=worker)
        assert reg.running() == 2
    finally:
        worker.release.set()
    for k in ("a", "b"):
        reg.get(k).thread.join(10)
    reg.start("c", spec, target=worker)  # free again
    reg.get("c").thread.join(10)
    with pytest.raises(ValueError, match="must divide"):
        reg.start("d", train_ui.TrainSpec(d_model=16, n_heads=3, n_layers=1, steps=20), target=worker)
    with pytest.raises(ValueError, match="d_k >= 4"):
        reg.start("d", train_ui.TrainSpec(d_model=16, n_heads=8, n_layers=1, steps=20), target=worker)
    with pytest.raises(ValueError, match="steps"):
        reg.start("d", train_ui.TrainSpec(steps=10_000), target=worker)


def test_page_says_busy_when_the_server_limit_is_reached():
    at = open_train(**TINY)
    reg = train_ui.registry()
    fakes = [f"fake-{i}" for i in range(reg.limit)]
    with reg.lock:
        for k in fakes:
            reg.jobs[k] = train_ui.Job(spec=train_ui.TrainSpec(), session=k, status="running")
    try:
        at.button(key="train_start").click().run()
        assert not errors(at)
        assert any("server is busy" in w.value for w in at.warning), [w.value for w in at.warning]
        assert job_of(at) is None
    finally:
        with reg.lock:
            for k in fakes:
                reg.jobs.pop(k, None)


# --- uploads ------------------------------------------------------------------------------------
def _valid_bytes() -> tuple[bytes, ModelConfig]:
    from model.tokenizer import Tokenizer
    tok = Tokenizer.build(["the cat sat on the mat ."], add_bos=True)
    cfg = ModelConfig(vocab_size=len(tok), d_model=16, n_heads=2, n_layers=1, max_len=32)
    return to_bytes(Transformer(cfg, seed=3), tok), cfg


def _wrong_shapes(valid: bytes) -> bytes:
    from safetensors.torch import load
    n = int.from_bytes(valid[:8], "little")
    meta = json.loads(valid[8:8 + n])["__metadata__"]
    tensors = load(valid)
    name = next(k for k in tensors if k.endswith("weight") and tensors[k].ndim == 2)
    tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])
    return st_save(tensors, metadata=meta)


def _torch_save() -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, buf)
    return buf.getvalue()


def upload_cases() -> list[tuple[str, str, bytes, str]]:
    valid, _ = _valid_bytes()
    return [
        ("wrong shapes", "model.safetensors", _wrong_shapes(valid), "shape"),
        ("truncated", "model.safetensors", valid[: len(valid) // 2], "truncated"),
        ("truncated header", "model.safetensors", valid[:5], "shorter than"),
        ("pickle", "model.safetensors", pickle.dumps({"w": [1.0, 2.0]}, protocol=4), "pickle"),
        ("torch.save", "model.safetensors", _torch_save(), "pickle"),
        ("gzip", "model.safetensors", gzip.compress(valid), "pickle"),
        ("oversized", "big.safetensors", b"\0" * (train_ui.UPLOAD_MAX_BYTES + 1), "limit"),
        ("not safetensors (.pt)", "model.pt", valid, "only .safetensors"),
        ("not safetensors (text)", "notes.safetensors", b"hello, this is text" * 10, "not a safetensors"),
        ("empty", "empty.safetensors", b"", "empty"),
    ]


def test_every_bad_upload_gets_a_message_and_the_model_stays():
    at = open_train()
    src = at.selectbox(key="src").value
    options = list(at.selectbox(key="src").options)
    for what, name, data, needle in upload_cases():
        at.file_uploader(key="train_upload").set_value((name, data, "application/octet-stream"))
        at.run()
        assert not errors(at), (what, errors(at))
        msgs = [e.value for e in at.error]
        assert len(msgs) == 1 and "not loaded" in msgs[0], (what, msgs)
        assert needle in msgs[0].replace("\\", ""), (what, msgs[0])
        assert at.selectbox(key="src").value == src, what
        assert list(at.selectbox(key="src").options) == options, what
        assert not at.success, what


def test_valid_upload_registers_a_session_model():
    valid, cfg = _valid_bytes()
    at = open_train()
    src = at.selectbox(key="src").value
    at.file_uploader(key="train_upload").set_value(("my model.safetensors", valid, "application/octet-stream"))
    at.run()
    assert not errors(at) and not at.error, (errors(at), [e.value for e in at.error])
    assert any("Loaded" in s.value for s in at.success)
    opts = list(at.selectbox(key="src").options)
    assert "uploaded: my model.safetensors" in opts
    assert at.selectbox(key="src").value == src  # the current model stays
    at.selectbox(key="src").set_value("uploaded: my model.safetensors").run()
    at.switch_page("pages/heads.py").run()
    assert not errors(at)
    assert any(f"d_model {cfg.d_model} · {cfg.n_heads} heads · {cfg.n_layers} layers" in c.value
               for c in at.sidebar.caption)
    # the same file again: no duplicate entry
    at.switch_page("pages/train.py").run()
    assert list(at.selectbox(key="src").options).count("uploaded: my model.safetensors") == 1


def test_server_keeps_a_bounded_number_of_session_models(monkeypatch):
    """The server-wide store of trained/uploaded models drops the oldest beyond its limit; a
    session whose model was dropped is told so, and its pages fall back to the shipped model."""
    from ui import session_models
    valid, _ = _valid_bytes()
    at = open_train()
    at.file_uploader(key="train_upload").set_value(("mine.safetensors", valid, "application/octet-stream"))
    at.run()
    at.selectbox(key="src").set_value("uploaded: mine.safetensors").run()
    assert not errors(at)
    monkeypatch.setattr(session_models, "MAX_SESSION_MODELS", 2)
    from model.tokenizer import Tokenizer
    tok = Tokenizer.build(["a b c"], add_bos=True)
    cfg = ModelConfig(vocab_size=len(tok), d_model=8, n_heads=2, n_layers=1, max_len=16)
    others = [to_bytes(Transformer(cfg, seed=s), tok) for s in (11, 12)]
    digests = [session_models.register_model_bytes(b) for b in others]  # two other sessions' models
    store = session_models.session_models()
    assert len(store) == 2 and list(store) == digests  # the oldest (this session's) was dropped
    at.run()
    assert not errors(at)
    assert any("mine.safetensors" in w.value.replace("\\", "") and "removed" in w.value for w in at.sidebar.warning)
    assert "uploaded: mine.safetensors" not in list(at.selectbox(key="src").options)
    at.switch_page("pages/heads.py").run()
    assert not errors(at)


# ---------------------------------------------------------------- point 9: train defaults
def test_train_page_defaults_and_plain_words():
    """'d32, 2 heads, 100 steps ends at loss 4.1 with flat previous-token scores … The page speaks of
    model/patterns.py and model.train.train: developer words'."""
    at = open_page("pages/train.py")
    assert at.selectbox(key="train_d").value == 64
    assert at.selectbox(key="train_h").value == 4
    assert at.slider(key="train_L").value == 2
    assert at.slider(key="train_steps").value == 300
    text = all_text(at) + " ".join(str(w.help or "") for w in (*at.selectbox, *at.slider))
    for dev in ("patterns.py", "training.train", "corpus.py", "model.checkpoint"):
        assert dev not in text, dev


def test_pattern_trajectories_follow_each_heads_final_pattern():
    from ui.train import JobView, SnapshotView, TrainSpec, pattern_trajectories
    T = 6
    eye = np.eye(T)
    sink = np.zeros((T, T)); sink[:, 0] = 1
    unif = np.tril(np.ones((T, T))); unif /= unif.sum(1, keepdims=True)
    snaps = []
    for step, a in ((0, 0.0), (10, 0.5), (20, 1.0)):  # head 0 grows a self pattern, head 1 a sink
        w = np.stack([a * eye + (1 - a) * unif, a * sink + (1 - a) * unif])[None]  # (L=1, H=2, T, T)
        snaps.append(SnapshotView(step, 1.0, w.astype(np.float32)))
    v = JobView("j", TrainSpec(), "done", 20, 20, np.zeros(20), tuple(snaps), tuple("abcdef"), True, 1.0, "", "")
    tr = pattern_trajectories(v)
    steps, scores, names = tr.steps, tr.scores, tr.names
    assert names == ["L0 H0 self/diagonal", "L0 H1 first-token sink"]
    # reference: mean over rows i >= 1 of w[i, i] (self) and w[i, 0] (sink), written here
    ref = [[float(np.mean([s.weights[0, h][i, i if h == 0 else 0] for i in range(1, T)])) for h in range(2)]
           for s in snaps]
    np.testing.assert_allclose(scores, ref, atol=1e-6)
    assert list(steps) == [0, 10, 20] and scores[-1, 0] > scores[0, 0]
