"""Train a model: pick an architecture, train it on the built-in corpus in a background thread
(ui.train.py), watch the loss and the heads, then use or download the model. Or load one."""
import streamlit as st

from labels import md_escape
from model.config import valid_heads
from training import corpus
from ui import train as train_ui
from ui.show import show_fig
from viz.attention import head_grid
from viz.train import loss_curve, score_curves

POLL_S = 1.0

st.title("Train a model")
st.caption("Train a small transformer right here, on thousands of short generated English sentences "
           "(“the keys to the cabinet are on the table .”). The model learns to guess each next word (or, for "
           "the masked objective, a hidden word); as it does, its attention heads pick up patterns — one head "
           "looks at the first token, another at the word itself, another at the word before. Training runs "
           "in the background on the server, so the other pages stay usable. The defaults take about 5–15 s.")

s = st.session_state
job = train_ui.my_job()
view = job.view() if job is not None else None
running = view is not None and view.running

# --- the architecture ----------------------------------------------------------------------------
for key, default in (("train_d", train_ui.DEFAULT_D_MODEL), ("train_L", train_ui.DEFAULT_LAYERS), ("train_steps", train_ui.DEFAULT_STEPS), ("train_pe", "sinusoidal"),
                     ("train_norm", "pre"), ("train_obj", "causal"), ("train_seed", 0),
                     ("train_probe", corpus.DEFAULT_SENTENCE)):
    s.setdefault(key, default)
heads = valid_heads(s["train_d"])
if s.get("train_h") not in heads:
    s["train_h"] = train_ui.DEFAULT_HEADS if train_ui.DEFAULT_HEADS in heads else heads[0]

with st.container(border=True):
    c = st.columns(4)
    c[0].selectbox("d_model", train_ui.D_MODELS, key="train_d", disabled=running, help="Width of every token vector.")
    c[1].selectbox("Heads", heads, key="train_h", disabled=running,
                   help="Only head counts that divide d_model and leave each head at least 4 dimensions "
                        "are offered (d_k = d_model / heads ≥ 4).")
    c[2].slider("Layers", 1, train_ui.MAX_LAYERS, key="train_L", disabled=running)
    c[3].slider("Steps", train_ui.MIN_STEPS, train_ui.MAX_STEPS, step=10, key="train_steps", disabled=running,
                help=f"Each step shows the model {train_ui.BATCH_SIZE} sentences and nudges every weight. The default "
                     f"{train_ui.DEFAULT_STEPS} steps of d_model {train_ui.DEFAULT_D_MODEL} take about 5 s on an idle "
                     "server, longer when it is busy.")
    c = st.columns(4)
    c[0].radio("Positional encoding", ["sinusoidal", "learned"], key="train_pe", disabled=running)
    c[1].radio("Norm placement", ["pre", "post"], key="train_norm", disabled=running,
               help="pre-LN (GPT-2): x + Attn(LN(x)). post-LN (2017 paper): LN(x + Attn(x)).")
    c[2].radio("Objective", ["causal", "mlm"], key="train_obj", disabled=running,
               format_func=lambda o: {"causal": "next token (causal)", "mlm": "masked token (bidirectional)"}[o])
    c[3].number_input("Seed", 0, 9999, key="train_seed", disabled=running)
    st.text_input("Probe sentence", key="train_probe", disabled=running, max_chars=300,
                  help=f"Its attention is recorded during training (first {train_ui.PROBE_MAX_TOKENS} tokens); "
                       "words outside the corpus vocabulary become <unk>.")


def _spec() -> train_ui.TrainSpec:
    return train_ui.TrainSpec(d_model=s["train_d"], n_heads=s["train_h"], n_layers=s["train_L"],
                        pos_encoding=s["train_pe"], norm=s["train_norm"], objective=s["train_obj"],
                        steps=int(s["train_steps"]), seed=int(s["train_seed"]),
                        probe=s["train_probe"].strip() or corpus.DEFAULT_SENTENCE)


def _start() -> None:
    try:
        train_ui.start(_spec())
        s["_train_msg"] = None
    except (train_ui.Busy, ValueError) as e:
        s["_train_msg"] = str(e)


b1, b2 = st.columns([1, 3], vertical_alignment="center")
b1.button("Start training", key="train_start", type="primary", on_click=_start, disabled=running,
          icon=":material/play_arrow:")
if running:
    b2.caption("One training per session: cancel this one or wait for it to finish to start another.")
if s.get("_train_msg"):
    st.warning(md_escape(s["_train_msg"]), icon=":material/hourglass_top:")


# --- live progress -------------------------------------------------------------------------------
def snapshot_grid(v, snap, layer: int, key: str) -> None:
    w = snap.weights[layer]  # (H, T, T)
    loss_txt = "before training" if snap.step == 0 else f"loss {snap.loss:.3f}"
    mode = "causal" if v.causal else "bidirectional"
    show_fig(head_grid(w, list(v.probe_labels), allowed=train_ui.probe_allowed(v), subtitles=train_ui.head_subtitles(w),
                       title=f"Step {snap.step} ({loss_txt}): layer {layer}, {mode} attention"),
             key, filename=f"train_step{snap.step}_layer{layer}",
             alt="Attention weights of the probe sentence at this step; rows are queries, columns keys, "
                 "grey cells masked. Each title names the pattern the head shows (looks at the previous word, "
                 "at itself, at the first token, spreads evenly) and how strongly.")


@st.fragment(run_every=POLL_S if running else None)
def live() -> None:
    j = train_ui.my_job()
    v = j.view() if j is not None else None
    if v is None:
        st.info("Pick an architecture and press **Start training**. You will see the loss fall live; "
                "attention snapshots of the probe sentence are taken during training.", icon=":material/school:")
        return
    if running and not v.running:
        st.rerun()  # finished: a full run lists the model in the sidebar and shows the results
    vocab, uniform = train_ui.vocab_size(v.spec.objective), train_ui.uniform_loss(v.spec.objective)
    if v.running:
        what = f"step {v.step} of {v.total}" if v.step else "preparing the corpus and the model …"
        st.progress(v.fraction, text=f"Training {md_escape(v.spec.short())} — {what} · {v.seconds:.0f} s")
        st.button("Cancel training", key="train_cancel", on_click=train_ui.cancel, icon=":material/stop:")
    show_fig(loss_curve(v.losses, total_steps=v.total, baseline=uniform,
                        title="Training loss" + (" (live)" if v.running else "")),
             "train_loss", filename="training_loss",
             alt=f"Cross-entropy per step (thin) and its moving average (bold); the dotted line is a uniform "
                 f"guess over the {vocab} words, ln {vocab} = {uniform:.2f}.")
    if v.running and v.snapshots:
        st.subheader("Attention right now")
        snap = v.snapshots[-1]
        n_layers = snap.weights.shape[0]
        if s.get("train_live_layer", 0) >= n_layers:
            s["train_live_layer"] = 0
        layer = st.selectbox("Layer", list(range(n_layers)), key="train_live_layer")
        snapshot_grid(v, snap, layer, "train_live_snapshot")
        st.caption(f"The latest of {len(v.snapshots)} snapshots, refreshed as the training runs; a step "
                   "scrubber over all of them appears when it ends.")


live()

# --- results ---------------------------------------------------------------------------------------
if view is not None and not running:
    if view.status == "done":
        name = view.model_name
        final = "–" if view.final_loss is None else f"{view.final_loss:.3f}"
        st.success(f"Trained in {view.seconds:.0f} s; final loss {final} (mean of the last 10 steps). "
                   f"It is in the sidebar's **Model** list for this session as “{md_escape(name)}”.",
                   icon=":material/check_circle:")
        c = st.columns([1, 1, 2])
        c[0].button("Use it on every page", key="train_use", icon=":material/swap_horiz:",
                    on_click=lambda: s.update(src=name), disabled=s.get("src") == name or not name)
        data = train_ui.checkpoint_bytes(name) if name else None
        if data is not None:
            c[1].download_button("Download checkpoint", data, file_name="attention_lab_trained.safetensors",
                                 mime="application/octet-stream", key="train_download", on_click="ignore",
                                 icon=":material/download:",
                                 help="One .safetensors file with the config and vocabulary in its metadata; "
                                      "load it below to use it again.")
    elif view.status == "cancelled":
        st.info(f"Cancelled at step {view.step} of {view.total}; that partial model was discarded.",
                icon=":material/stop_circle:")
    elif view.status == "error":
        st.error(f"The training failed: {md_escape(view.error)}", icon=":material/error:")

    if view.snapshots:
        st.subheader("Attention during training")
        steps = [sn.step for sn in view.snapshots]
        if s.get("train_snap") not in steps:
            s["train_snap"] = steps[-1]
        n_layers = view.snapshots[0].weights.shape[0]
        if s.get("train_snap_layer", 0) >= n_layers:
            s["train_snap_layer"] = 0
        c = st.columns([3, 1])
        step = c[0].select_slider("Snapshot at step", steps, key="train_snap",
                                  help="Drag to watch the heads change from random (step 0) to trained.")
        layer = c[1].selectbox("Layer", list(range(n_layers)), key="train_snap_layer")
        snapshot_grid(view, view.snapshots[steps.index(step)], layer, "train_snapshot")
        traj = train_ui.pattern_trajectories(view)
        show_fig(score_curves(traj.steps, traj.scores, traj.names, score_name="pattern score", highlight=step,
                              title="How each head's pattern grew during training"),
                 "train_scores", filename="train_pattern_scores",
                 alt="One line per head: the strength (0 to 1) of the pattern the head ends with, at every "
                     "snapshot — e.g. the mean weight a 'self' head puts on the token itself. A line that "
                     "rises from the random start is a head learning its job.")

# --- upload ----------------------------------------------------------------------------------------
st.divider()
st.subheader("Load a checkpoint")
st.caption(f"A single .safetensors file saved by Attention Lab (config and vocabulary in its metadata), up "
           f"to {train_ui.UPLOAD_MAX_MB} MB. Pickles (torch.save files) are never opened. A valid file joins the "
           "sidebar's Model list for this session; the current model stays selected.")
up = st.file_uploader("Load a checkpoint", key="train_upload", max_upload_size=train_ui.UPLOAD_MAX_MB,
                      help="Only .safetensors checkpoints; anything else is refused with a message.")
if up is not None:
    upload = train_ui.handle_upload(up)
    if upload.ok:
        if upload.new:
            st.rerun()  # the sidebar was drawn before this upload: draw it again with the new model
        st.success(f"Loaded “{md_escape(upload.text)}” ({md_escape(upload.summary)}). Pick it in the sidebar's Model list.",
                   icon=":material/upload_file:")
    else:
        st.error(f"This file was not loaded: {md_escape(upload.text)}", icon=":material/block:")
