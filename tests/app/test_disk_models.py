"""Open a model from disk in the app (issue 32): every page renders with every family (the tiny
models of tests/tiny_families.py, opened through the sidebar's registry by their URL value), the
model serves every session of the server and its link reproduces the view, a progress bar shows
while it loads, and refusals say why with nothing loaded (outside the allowed folders, pickle
weights, too big for the memory, switched off as on the production image)."""
from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the tiny family models are built with transformers (requirements-dev.txt)")

from tests.helpers import ROOT, app_pages, app_test, errors  # noqa: E402
from tests.tiny_families import FAMILY_NAMES, build  # noqa: E402

PAGES = app_pages()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{family: resolved folder} of every tiny model, in a folder the server may read."""
    root = tmp_path_factory.mktemp("disk-models")
    old = os.environ.get("ATTENTION_LAB_MODEL_ROOTS")
    os.environ["ATTENTION_LAB_MODEL_ROOTS"] = str(root)
    yield {name: build(name, root / name).resolve() for name in FAMILY_NAMES}
    if old is None:
        os.environ.pop("ATTENTION_LAB_MODEL_ROOTS", None)
    else:
        os.environ["ATTENTION_LAB_MODEL_ROOTS"] = old


def open_by_link(path: Path):
    """A session whose link names the model on disk: the first run starts loading it (default model
    meanwhile), the run after the load shows it."""
    from ui import disk_models

    at = app_test(default_timeout=120)
    at.query_params["src"] = disk_models.value_of(str(path))
    at.run()
    assert not errors(at), errors(at)
    job = disk_models.registry().job(str(path))
    assert job is not None, [e.value for e in at.error]
    assert job.done.wait(120)
    at.run()
    assert not errors(at), errors(at)
    assert at.session_state["src"] == disk_models.value_of(str(path)), [e.value for e in at.error]
    return at


@pytest.fixture(scope="module")
def sessions(folders):
    """One app session per family, on its model (opened once, reused page after page)."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = open_by_link(folders[name])
        return cache[name]
    return get


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_page_renders_with_every_family(sessions, family, page):
    at = sessions(family)
    at.switch_page(page).run()
    assert not errors(at), (family, page, errors(at))
    assert at.session_state["src"].startswith("disk:")


def test_the_model_serves_every_session_and_its_link_reproduces_the_view(folders):
    from ui import disk_models

    open_by_link(folders["qwen3"])
    other = app_test(default_timeout=120)  # another browser with the same link: no loading this time
    other.query_params["src"] = disk_models.value_of(str(folders["qwen3"]))
    other.query_params["mask"] = "bidirectional"
    other.run()
    assert other.session_state["src"] == disk_models.value_of(str(folders["qwen3"]))
    assert other.sidebar.radio(key="mask").value == "bidirectional"
    options = other.sidebar.selectbox(key="src").options
    assert any("qwen3 · Qwen3 · from disk" in o for o in options)
    third = app_test(default_timeout=120)  # a session without the link sees it in the Model list too
    third.run()
    assert any("from disk" in o for o in third.sidebar.selectbox(key="src").options)


def test_encoders_open_bidirectional_and_decoders_causal(sessions):
    assert sessions("bert").sidebar.radio(key="mask").value == "bidirectional"
    assert sessions("gemma2").sidebar.radio(key="mask").value == "causal"


def test_opening_through_the_path_box_shows_a_progress_bar(folders, monkeypatch):
    """While the model loads, the sidebar shows a progress bar fed by load_from_disk's progress;
    when it is done the session switches to it."""
    from ui import disk_models

    gate, reported = threading.Event(), threading.Event()
    real = disk_models.load_from_disk

    def slow(path, progress=None, **kwargs):
        progress(0.5, "reading model.safetensors: 3/6 tensors")
        reported.set()
        gate.wait(60)
        return real(path, progress=progress, **kwargs)

    monkeypatch.setattr(disk_models, "load_from_disk", slow)
    dst = folders["mistral"].parent / "mistral-copy"
    shutil.copytree(folders["mistral"], dst)
    at = app_test(default_timeout=120)
    at.run()
    at.sidebar.text_input(key="disk_path").set_value(str(dst))
    at.sidebar.button(key="disk_open").click().run()
    assert not errors(at) and not at.error, [e.value for e in at.error]
    assert reported.wait(60)  # the open's thread (queued, then started) has reported its progress
    at.run()
    bars = at.get("progress")
    assert bars and "3/6 tensors" in bars[0].proto.text and bars[0].proto.value == 50
    gate.set()
    disk_models.registry().job(str(dst.resolve())).done.wait(60)
    at.run()
    assert at.session_state["src"] == disk_models.value_of(str(dst.resolve()))


def refused(at, path: str) -> str:
    at.sidebar.text_input(key="disk_path").set_value(path)
    at.sidebar.button(key="disk_open").click().run()
    assert not errors(at)
    msgs = [str(e.value) for e in at.sidebar.error]
    assert msgs, "no message"
    assert not str(at.session_state["src"]).startswith("disk:")
    return re.sub(r"\\(.)", r"\1", msgs[-1])  # the message is Markdown-escaped


def test_refusals_say_why_and_load_nothing(folders, tmp_path, monkeypatch):
    from ui import disk_models

    at = app_test(default_timeout=120)
    at.run()
    before = len(disk_models.registry().jobs)
    outside = tmp_path / "elsewhere"
    shutil.copytree(folders["gpt2"], outside)
    assert "outside the folders this server may read" in refused(at, str(outside))
    pickled = folders["gpt2"].parent / "pickled"
    shutil.copytree(folders["gpt2"], pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    assert "pickle" in refused(at, str(pickled))
    monkeypatch.setattr(disk_models, "available_memory_bytes", lambda: 1000)
    msg = refused(at, str(folders["gpt2"]))
    assert "needs" in msg and "available" in msg and "Nothing was loaded" in msg
    assert len(disk_models.registry().jobs) == before


def test_switched_off_as_on_the_production_image(folders, monkeypatch):
    """ATTENTION_LAB_DISK_MODELS=0 (the Dockerfile's ENV, deploy/replicas.py's default): no panel,
    and a link to a model on disk is refused with the reason."""
    from ui import disk_models

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"ATTENTION_LAB_DISK_MODELS=0", dockerfile)
    assert "ATTENTION_LAB_DISK_MODELS" in (ROOT / "deploy" / "replicas.py").read_text()
    monkeypatch.setenv("ATTENTION_LAB_DISK_MODELS", "0")
    at = app_test(default_timeout=120)
    at.query_params["src"] = disk_models.value_of(str(folders["gpt2"].parent / "never-opened"))
    at.run()
    assert not errors(at)
    assert not any(e.label == "Open a model from disk" for e in at.sidebar.expander)
    assert any("switched off" in str(e.value) for e in at.sidebar.error)
    assert not str(at.session_state["src"]).startswith("disk:")
