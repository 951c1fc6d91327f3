"""Open a model from disk (issue 32): a model the user already has (a Hugging Face folder or a
.gguf file, model.pretrained.load_from_disk) joins the Model list of every session of this server.

The sidebar's "Open a model from disk" has a path box and the models found in the local Hugging
Face cache (read only, with their sizes). Opening one:
  1. refuses with a clear message, nothing loaded: opening switched off on this server
     (ATTENTION_LAB_DISK_MODELS=0, what the production image sets unless the admin turns it on),
     a path outside the allowed folders (model.pretrained.check_allowed), anything
     model.pretrained.inspect_model refuses (pickle weights, remote code, an unsupported
     architecture, shapes that disagree with the config, a missing tokenizer), or a model whose
     float32 weights do not fit in the memory available (with a margin for its traces);
  2. loads it in a background thread owned by the server-wide registry (DiskModels, a
     st.cache_resource) while the sidebar shows a progress bar (a fragment polling every second);
  3. then every session and every page of this server can pick it: its value in the Model list,
     and so in the URL, is "disk:<resolved path>", and that link reproduces the view for anyone on
     the same server (a link to a model not loaded yet loads it, through the same checks).
The server keeps at most MAX_LOADED opened models (ATTENTION_LAB_DISK_MODELS_MAX, default 2): the
least recently opened one is dropped when another is opened (a dropped one still loading stops).
Models are shared and read-only.

When the server is on the network (What the server refuses, README):
  - only a browser on the server's own machine (a loopback client, ui/client.py) may open a path,
    unless ATTENTION_LAB_DISK_MODELS=all; every session still sees and picks a model opened;
  - the files, symlinks followed, must lie inside the allowed folders (the HF cache, ~/models and
    ATTENTION_LAB_MODEL_ROOTS); a refused path gets one sentence whether it exists or not;
  - a client that is not loopback never reads the home folder, the roots' absolute paths or a PID:
    paths are shown relative to their root (shown_path), messages have them replaced (shown);
  - opens run one at a time per server, in a queue ("waiting for another model to open"), and the
    memory check counts what the queue is loading.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from model.families import FAMILIES
from model.pretrained import (DiskModelInfo, ModelRefused, allowed_roots, available_memory_bytes, check_allowed,
                              hf_cache_dir, inspect_model, list_cached_models, load_from_disk)

from .client import is_loopback_client
from .echo import echo_literal

SWITCH = "ATTENTION_LAB_DISK_MODELS"  # "0"/"off": switched off; "all": any client may open a path; else loopback only
WAITING = "waiting for another model to open"  # a queued job's message
LOOPBACK_ONLY = ("Opening a model from disk is for a browser on the server's own machine; ask the lecturer (or the "
                 f"server's admin, who can allow every client with {SWITCH}=all) to open it.")
MAX_LOADED = max(1, int(os.environ.get("ATTENTION_LAB_DISK_MODELS_MAX", 2)))
MEMORY_MARGIN = 1.5  # the float32 weights times this must fit in the available memory (traces, copies)
PREFIX = "disk:"  # a Model-list value (and URL value) "disk:<resolved path>"
MAX_MESSAGE_CHARS = 600  # a refusal shown in the sidebar is cut here (echo_literal)


def enabled() -> bool:
    """Whether this server may open models from disk: yes unless ATTENTION_LAB_DISK_MODELS is
    0/off/false/no (the production image and deploy/replicas.py set it to 0; an admin sets 1)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def may_open() -> bool:
    """Whether this run's client may open a path: a loopback client, or anyone with ATTENTION_LAB_DISK_MODELS=all."""
    return os.environ.get(SWITCH, "1").strip().lower() == "all" or is_loopback_client()


def _root_labels() -> list[tuple[str, str]]:
    """[(absolute root, what a client that is not loopback reads instead)], longest first."""
    home = str(Path.home())
    labels = []
    for i, r in enumerate(allowed_roots()):
        if r == hf_cache_dir().resolve():
            name = "the Hugging Face cache"
        elif r == (Path.home() / "models").resolve():
            name = "~/models"
        else:
            name = f"models folder {i - 1}"
        labels.append((str(r), name))
    labels.append((home, "~"))
    return sorted(labels, key=lambda x: -len(x[0]))


def shown(text: str) -> str:
    """A message as this client may read it: unchanged for a loopback client; for any other, every
    root's absolute path and the home folder replaced by their names. Not escaped (echo_literal)."""
    if is_loopback_client():
        return text
    for absolute, name in _root_labels():
        text = text.replace(absolute, name)
    return text


def shown_path(path: str) -> str:
    """A model's path as this client may read it (shown)."""
    return shown(path)


def is_disk(value: str | None) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def value_of(path: str) -> str:
    return PREFIX + path


def path_of(value: str) -> str:
    return value[len(PREFIX):]


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


@dataclass
class Job:
    """One model being opened or opened (shared by every session; fields written by its thread)."""

    path: str  # resolved
    info: DiskModelInfo
    fraction: float = 0.0
    message: str = "starting"
    error: str | None = None
    model: object = field(default=None, repr=False)
    tok: object = field(default=None, repr=False)
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    stop: threading.Event = field(default_factory=threading.Event, repr=False)  # set when dropped: the loader stops

    @property
    def ok(self) -> bool:
        return self.done.is_set() and self.error is None and self.model is not None

    @property
    def title(self) -> str:
        """What the Model list shows: the folder (or file) name, the family, "from disk"."""
        p = Path(self.path)
        name = p.name
        if p.parent.name == "snapshots":  # an HF cache snapshot: the repo's name, not the revision
            name = p.parent.parent.name.removeprefix("models--").replace("--", "/")
        fam = FAMILIES.get(self.info.family)
        return f"{name} · {fam.title if fam else self.info.family} · from disk"


class LoadStopped(Exception):
    """Raised inside a loader whose job was dropped from the registry (its progress callback)."""


class DiskModels:
    """The server-wide registry of models opened from disk (st.cache_resource: one per process).
    Loads run one at a time, in the order they were asked for (`line`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turn = threading.Condition(self.lock)  # a loader waits here for its turn in `line`
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        self.line: list[Job] = []  # jobs waiting or loading, first = the one loading

    def job(self, path: str) -> Job | None:
        with self.lock:
            return self.jobs.get(path)

    def loaded(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.ok]

    def loading_bytes(self) -> int:
        """float32 bytes of the models queued or loading: what the memory check counts beside the free figure."""
        with self.lock:
            return sum(j.info.float32_bytes for j in self.line)

    def start(self, path: str, info: DiskModelInfo) -> Job:
        """The job for `path` (checked by prepare()): the running or finished one, or a new one
        whose thread loads the model when its turn comes. A failed job is replaced (try again)."""
        with self.lock:
            old = self.jobs.get(path)
            if old is not None and old.error is None:
                self.jobs.move_to_end(path)
                return old
            job = Job(path=path, info=info, message=WAITING if self.line else "starting")
            self.jobs[path] = job
            self.line.append(job)
            while len(self.jobs) > MAX_LOADED:  # drop the least recently opened (its memory goes
                _, dropped = self.jobs.popitem(last=False)  # when no session's run holds it any more)
                dropped.stop.set()  # a loader still waiting or reading stops
            self.turn.notify_all()
        threading.Thread(target=self._load, args=(job,), name=f"open-{Path(path).name}", daemon=True).start()
        return job

    def _load(self, job: Job) -> None:
        def progress(fraction: float, message: str) -> None:
            if job.stop.is_set():
                raise LoadStopped
            job.fraction, job.message = float(fraction), message
        try:
            with self.turn:
                while self.line[0] is not job and not job.stop.is_set():
                    job.message = WAITING
                    self.turn.wait(0.5)
            if job.stop.is_set():
                raise LoadStopped
            job.message = "starting"
            job.model, job.tok = load_from_disk(job.path, progress=progress, roots=allowed_roots())
            if job.stop.is_set():  # dropped while its last tensors were assigned: let it go
                job.model = job.tok = None
                raise LoadStopped
        except LoadStopped:
            job.error = "closed: another model took its place on this server before it finished opening"
        except Exception as e:  # noqa: BLE001  shown in the sidebar, never a traceback
            job.error = str(e) if isinstance(e, ModelRefused) else str(ModelRefused(f"the model could not be opened: {e}"))
        finally:
            with self.turn:
                if job in self.line:
                    self.line.remove(job)
                self.turn.notify_all()
            job.done.set()


@st.cache_resource
def registry() -> DiskModels:
    return DiskModels()


def prepare(path: str) -> DiskModelInfo:
    """Everything checked before loading (module docstring, step 1): ModelRefused with the reason."""
    if not enabled():
        raise ModelRefused("Opening models from disk is switched off on this server (its admin turns it on "
                           f"with {SWITCH}=1).")
    if not str(path).strip():
        raise ModelRefused("Type the path of a model folder or a .gguf file, or pick one found in the cache.")
    if not may_open():
        raise ModelRefused(LOOPBACK_ONLY)
    roots = allowed_roots()
    resolved = check_allowed(path, roots)
    reg = registry()
    loading = reg.loading_bytes()
    info = inspect_model(resolved, roots=roots, reserved_bytes=loading)
    avail = available_memory_bytes()
    need = info.float32_bytes
    if avail is not None and need * MEMORY_MARGIN + loading > avail:
        busy = f", {_gb(loading)} of it taken by models being opened" if loading else ""
        raise ModelRefused(f"This model needs {_gb(need)} of memory in float32 (the engine computes in float32; "
                           f"{MEMORY_MARGIN:g}× that with its traces); the server has {_gb(avail)} available{busy}. "
                           "Nothing was loaded.")
    return info


def open_path(path: str) -> Job:
    """Check `path` (prepare) and queue its loading; ModelRefused with the reason when refused."""
    info = prepare(path)
    return registry().start(info.path, info)


def model_of(value: str):
    """(model, tokenizer) of an opened model's Model-list value; ValueError when it is not loaded."""
    job = registry().job(path_of(value))
    if job is None or not job.ok:
        raise ValueError(f"the model {shown_path(path_of(value))[:200]} is not loaded")
    return job.model, job.tok


def options() -> list[str]:
    """Model-list values of the models opened on this server (every session sees them)."""
    return [value_of(j.path) for j in registry().loaded()]


def title(value: str) -> str:
    job = registry().job(path_of(value))
    return job.title if job is not None else f"{Path(path_of(value)[:200]).name[:80]} · from disk"


def encoder(value: str) -> bool | None:
    """Whether an opened model was trained bidirectionally (its config says encoder); None if unknown."""
    job = registry().job(path_of(value))
    return None if job is None else bool(job.info.config.encoder)


@st.cache_data(ttl=60, max_entries=1, show_spinner=False)
def cached_models() -> list[tuple[str, str]]:
    """[(path, label)] of the models in the local HF cache (model.pretrained.list_cached_models:
    read only), with their size; re-read at most once a minute."""
    out = []
    for m in list_cached_models():
        kind = "GGUF" if m.kind == "gguf" else m.architecture
        out.append((m.path, f"{m.repo} · {kind} · {_gb(m.file_bytes)}"))
    return out


# ---- the sidebar --------------------------------------------------------------------------------

def _pick_cached() -> None:
    picked = st.session_state.get("disk_pick")
    if picked:
        st.session_state["disk_path"] = picked


def _open_clicked() -> None:
    s = st.session_state
    s.pop("_disk_error", None)
    try:
        job = open_path(s.get("disk_path", ""))
    except ValueError as e:  # ModelRefused
        s["_disk_error"] = shown(str(e))
        return
    s["_disk_pending"] = value_of(job.path)


def follow_link(default_src: str) -> None:
    """Before the Model list is drawn: a value "disk:<path>" (a link, or a model that was dropped)
    that is not loaded starts loading it (through the same checks) and the default model is used
    meanwhile; once it is loaded it becomes the choice again."""
    s = st.session_state
    pending = s.get("_disk_pending")
    if pending:
        job = registry().job(path_of(pending))
        if job is not None and job.ok:
            s["src"] = pending
            s.pop("_disk_pending", None)
            s.pop("_disk_error", None)
        elif job is not None and job.done.is_set():
            s["_disk_error"] = shown(job.error or "the model could not be loaded")
            s.pop("_disk_pending", None)
    src = s.get("src")
    if not is_disk(src):
        return
    job = registry().job(path_of(src))
    if job is not None and job.ok:
        return
    if job is not None and job.done.is_set():  # it failed: say why (Open tries again), no retry loop
        s["_disk_error"] = shown(job.error or "the model could not be loaded")
        s["src"] = default_src
        return
    if job is None:
        try:
            job = open_path(path_of(src))
        except ValueError as e:  # ModelRefused
            s["_disk_error"] = shown(str(e))
            s["src"] = default_src
            return
    s["_disk_pending"] = value_of(job.path)
    s["src"] = default_src


@st.fragment(run_every="1s")
def _progress() -> None:
    """The loading progress of this session's pending model; a full rerun when it is done."""
    pending = st.session_state.get("_disk_pending")
    job = registry().job(path_of(pending)) if pending else None
    if job is None:
        return
    if job.done.is_set():
        st.rerun()
    st.progress(min(1.0, job.fraction), text=f"Opening {echo_literal(Path(job.path).name)}: {echo_literal(job.message)}")


def panel() -> None:
    """The sidebar's "Open a model from disk" (nothing when switched off on this server). A refusal
    stays on screen until the next Open or a model opens (a session's first run can be cut short
    and run again: a message shown once would be lost)."""
    s = st.session_state
    if not enabled():  # a link to a model on disk was refused: say why
        err = s.get("_disk_error")
        if err:
            st.error(echo_literal(err, MAX_MESSAGE_CHARS), icon=":material/block:")
        return
    with st.expander("Open a model from disk", expanded=bool(s.get("_disk_pending") or s.get("_disk_error"))):
        if not may_open():  # a browser on another machine: no path box, no list of the server's files
            st.caption(echo_literal(LOOPBACK_ONLY, MAX_MESSAGE_CHARS))
            err = s.get("_disk_error")
            if err:
                st.error(echo_literal(err, MAX_MESSAGE_CHARS), icon=":material/block:")
            return
        found = cached_models()
        if found:
            labels = dict(found)
            st.selectbox("Found in your Hugging Face cache", [""] + [p for p, _ in found], key="disk_pick",
                         format_func=lambda p: labels.get(p, "(choose one)"), on_change=_pick_cached,
                         help="Models already downloaded to this computer (nothing is downloaded here).")
        else:
            st.caption("No models found in the local Hugging Face cache.")
        st.text_input("Path of a model folder or a .gguf file", key="disk_path",
                      help="A folder with config.json, *.safetensors and tokenizer.json (GPT-2, Llama, Qwen2, "
                           "Qwen3, Mistral, Gemma 2, BERT, RoBERTa, DistilBERT), or a .gguf file (llama, "
                           "qwen2, qwen3, gemma2).")
        st.button("Open", key="disk_open", on_click=_open_clicked, icon=":material/folder_open:")
        err = s.get("_disk_error")
        if err:
            st.error(echo_literal(err, MAX_MESSAGE_CHARS), icon=":material/block:")
        if s.get("_disk_pending"):
            _progress()
