"""Opening models from disk when the server is on the network: who may open a path (a loopback
client, ui/client.py), what a refusal shows (one sentence, never Streamlit's error box, no home
folder, roots or PID for a client that is not loopback), a link with a 5,000-character path, and
parallel opens (one at a time, in a queue; the memory check counts what is loading; a dropped entry
stops its loader). One test per attack."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import threading
import time

import pytest

pytest.importorskip("transformers", reason="the tiny family models are built with transformers (requirements-dev.txt)")

from tests.helpers import app_test, errors  # noqa: E402
from tests.tiny_families import build  # noqa: E402

REMOTE = "192.0.2.7"  # TEST-NET-1: never connected to, only named as a client's address


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """An allowed folder (ATTENTION_LAB_MODEL_ROOTS) with a tiny GPT-2 in it."""
    root = tmp_path_factory.mktemp("roots") / "models"
    build("gpt2", root / "gpt2")
    old = os.environ.get("ATTENTION_LAB_MODEL_ROOTS")
    os.environ["ATTENTION_LAB_MODEL_ROOTS"] = str(root)
    yield root.resolve()
    if old is None:
        os.environ.pop("ATTENTION_LAB_MODEL_ROOTS", None)
    else:
        os.environ["ATTENTION_LAB_MODEL_ROOTS"] = old


def as_client(monkeypatch, peer: str | None, forwarded: str | None = None) -> None:
    """Make every run look as if it came from `peer` (None: this machine), with an X-Forwarded-For."""
    from ui import client
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    monkeypatch.setattr(client, "_connection", lambda: (peer, headers))


def sidebar_errors(at) -> list[str]:
    return [re.sub(r"\\(.)", r"\1", str(e.value)) for e in at.sidebar.error]


def open_path(at, path: str) -> list[str]:
    at.sidebar.text_input(key="disk_path").set_value(path)
    at.sidebar.button(key="disk_open").click().run()
    assert not errors(at), errors(at)
    return sidebar_errors(at)


# ---- who is asking -----------------------------------------------------------------------------------

@pytest.mark.parametrize("peer, forwarded, loopback", [
    (None, None, True),  # Streamlit's None: a browser on this machine
    ("127.0.0.1", None, True), ("::1", None, True),
    (REMOTE, None, False),
    (None, f"{REMOTE}", False),  # through our nginx on this host: the address nginx saw
    (None, f"127.0.0.1, {REMOTE}", False),  # a client's own header first, nginx's entry last
    (None, "127.0.0.1", True),  # a browser on this machine through nginx
    (REMOTE, "127.0.0.1", False),  # a header from a client that is not our proxy is ignored
    (None, "not-an-address", False),
])
def test_the_client_is_the_proxys_last_entry_only_behind_a_loopback_peer(monkeypatch, peer, forwarded, loopback):
    from ui import client
    as_client(monkeypatch, peer, forwarded)
    assert client.is_loopback_client() is loopback


@pytest.mark.parametrize("sent, client_is", [("the-secret", REMOTE), ("guessed", None), (None, None)])
def test_with_a_proxy_secret_only_requests_carrying_it_name_another_address(monkeypatch, sent, client_is):
    """Behind deploy/replicas.py's nginx (ATTN_LAB_PROXY_SECRET set): X-Forwarded-For counts only on
    a request with the secret nginx sends; the live class's limits use the same rule."""
    from ui import client, live
    monkeypatch.setenv(client.PROXY_SECRET_ENV, "the-secret")
    headers = {"X-Forwarded-For": f"10.9.8.7, {REMOTE}", **({client.PROXY_HEADER: sent} if sent else {})}
    monkeypatch.setattr(client, "_connection", lambda: (None, headers))
    assert client.client_address() == client_is
    assert client.is_loopback_client() is (client_is is None)
    assert live.client_address() == (client_is or "127.0.0.1")


def test_a_client_on_the_network_may_not_open_a_path(root, monkeypatch, tmp_path):
    """Not loopback: no path box and no list of the server's files; a link to a path is refused
    with one sentence whether the path exists or not, naming no folder. The lecturer's browser on
    the server opens the model; the student then sees and picks it by the same link, and the
    sidebar shows its path relative to its root, not the server's absolute path."""
    from ui import disk_models
    as_client(monkeypatch, REMOTE)
    said = set()
    for path in [root / "gpt2", root / "nothing", tmp_path, "/proc/self/environ"]:
        at = app_test(default_timeout=120)
        at.query_params["src"] = disk_models.value_of(str(path))
        at.run()
        assert not errors(at), errors(at)
        assert not [w for w in at.sidebar.text_input if w.key == "disk_path"]
        msgs = sidebar_errors(at)
        assert len(msgs) == 1, msgs
        said.add(msgs[0])
        assert not str(at.session_state["src"]).startswith("disk:")
    assert said == {disk_models.LOOPBACK_ONLY}
    assert not any(secret in disk_models.LOOPBACK_ONLY for secret in (str(root), os.path.expanduser("~") + "/",
                                                                       str(os.getpid())))

    as_client(monkeypatch, None)  # the lecturer, on the server's machine
    lecturer = app_test(default_timeout=120)
    lecturer.run()
    assert open_path(lecturer, str(root / "gpt2")) == []
    disk_models.registry().job(str(root / "gpt2")).done.wait(120)

    as_client(monkeypatch, REMOTE)
    student = app_test(default_timeout=120)
    student.query_params["src"] = disk_models.value_of(str(root / "gpt2"))
    student.run()
    assert not errors(student) and not student.sidebar.error
    assert student.session_state["src"] == disk_models.value_of(str(root / "gpt2"))
    shown = " ".join(str(c.value) for c in student.sidebar.caption)
    assert "Opened from models folder" in shown.replace("\\", "") and str(root) not in shown


def test_with_disk_models_all_a_remote_client_may_open_but_never_reads_the_servers_folders(root, monkeypatch):
    from model.families.disk import PATH_REFUSED
    monkeypatch.setenv("ATTENTION_LAB_DISK_MODELS", "all")
    as_client(monkeypatch, REMOTE)
    at = app_test(default_timeout=120)
    at.run()
    bad = root / "broken"
    shutil.copytree(root / "gpt2", bad, dirs_exist_ok=True)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["n_layer"] = 20_000
    (bad / "config.json").write_text(json.dumps(cfg))
    msg = open_path(at, str(bad))[-1]
    assert "claims 20,000 layers" in msg
    assert str(root) not in msg and os.path.expanduser("~") not in msg and "models folder" in msg
    outside = [open_path(at, p)[-1] for p in ("/proc/self/environ", str(root / "nothing"), os.path.expanduser("~"))]
    assert set(outside) == {PATH_REFUSED}
    assert all(os.path.expanduser("~") + "/" not in m and str(os.getpid()) not in m for m in outside)


# ---- refusals on the page ----------------------------------------------------------------------------

def test_a_refused_file_shows_its_sentence_never_an_error_box(root):
    """A malformed safetensors header (a JSON list): the sidebar shows the ModelRefused sentence."""
    bad = root / "list-header"
    shutil.copytree(root / "gpt2", bad, dirs_exist_ok=True)
    header = b"[1, 2]"
    (bad / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    at = app_test(default_timeout=120)
    at.run()
    msgs = open_path(at, str(bad))
    assert "not a valid safetensors file" in msgs[-1] and "re-save" in msgs[-1]


def test_a_link_with_a_5000_character_path_is_refused_on_the_page(root):
    from ui import disk_models
    at = app_test(default_timeout=120)
    at.query_params["src"] = disk_models.value_of(str(root / ("a" * 5000)))  # inside a root: the OS refuses the name
    at.run()
    assert not errors(at), errors(at)
    msgs = sidebar_errors(at)
    assert msgs and "outside the folders" in msgs[-1] and len(msgs[-1]) < 700
    assert not str(at.session_state["src"]).startswith("disk:")


# ---- parallel opens ----------------------------------------------------------------------------------

def test_opens_run_one_at_a_time_and_a_dropped_entry_stops_its_loader(root, monkeypatch):
    """Three opens at once on a server that keeps two: the second and third wait ("waiting for
    another model to open") while the first loads; opening the third drops the first, whose loader
    stops at its next progress step; then the others load one after the other."""
    from ui import disk_models
    from model.pretrained import inspect_model

    running, most = [0], [0]
    gates = {}
    lock = threading.Lock()

    def fake_load(path, progress=None, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            while not gates[path].wait(0.05):
                progress(0.5, "reading")
            return object(), object()
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(disk_models, "load_from_disk", fake_load)
    monkeypatch.setattr(disk_models, "MAX_LOADED", 2)
    reg = disk_models.DiskModels()
    info = inspect_model(root / "gpt2")
    paths = [f"/m/{i}" for i in range(3)]
    for p in paths:
        gates[p] = threading.Event()
    a = reg.start(paths[0], info)
    b = reg.start(paths[1], info)
    deadline = time.monotonic() + 30
    while a.message != "reading" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert a.message == "reading" and b.message == disk_models.WAITING
    assert reg.loading_bytes() == 2 * info.float32_bytes
    c = reg.start(paths[2], info)  # drops a (the least recently opened)
    assert a.done.wait(30) and a.error and "closed" in a.error and a.model is None
    gates[paths[1]].set()
    assert b.done.wait(30) and b.ok
    gates[paths[2]].set()
    assert c.done.wait(30) and c.ok
    assert most[0] == 1
    assert reg.loading_bytes() == 0


def test_the_memory_check_counts_what_is_being_loaded(root, monkeypatch):
    """Room for one model's float32 weights (with the margin) but not two: while the first is
    loading, the second open is refused, naming what the loading one takes."""
    from ui import disk_models
    from model.pretrained import inspect_model

    need = inspect_model(root / "gpt2").float32_bytes
    gate = threading.Event()
    monkeypatch.setattr(disk_models, "available_memory_bytes", lambda: int(need * 2.2))
    monkeypatch.setattr(disk_models, "load_from_disk", lambda path, progress=None, **k: (gate.wait(30), object()))
    reg = disk_models.DiskModels()
    monkeypatch.setattr(disk_models, "registry", lambda: reg)
    copy = root / "gpt2-second"
    shutil.copytree(root / "gpt2", copy, dirs_exist_ok=True)
    first = disk_models.open_path(str(root / "gpt2"))
    with pytest.raises(ValueError, match="taken by models being opened"):
        disk_models.open_path(str(copy))
    gate.set()
    assert first.done.wait(30)


# ---- weights that overflow ---------------------------------------------------------------------------

def test_weights_of_3e38_show_where_the_numbers_stop_being_finite(root):
    """A model whose layer 1 attention weights are 3e38 (finite, so it loads): the heads page
    says the numbers stop being finite in layer 1's attention and draws no chart of NaN."""
    import torch
    from safetensors.torch import load_file, save_file

    from model.pretrained import load_from_disk
    from model.trace import first_nonfinite
    from ui import disk_models

    big = root / "huge-weights"
    shutil.copytree(root / "gpt2", big, dirs_exist_ok=True)
    st = load_file(str(big / "model.safetensors"))
    name = next(n for n in st if n.endswith("h.1.attn.c_attn.weight"))
    st[name] = torch.full_like(st[name], 3e38)
    save_file(st, str(big / "model.safetensors"), metadata={"format": "pt"})
    model, tok = load_from_disk(big)
    tr = model.trace(torch.tensor([tok.encode("the cat sat").ids]))
    assert first_nonfinite(tr) == "layer 1's attention"
    assert first_nonfinite(model.trace(torch.tensor([tok.encode("the cat sat").ids]), stop_after=0)) is None

    at = app_test(default_timeout=120)
    at.query_params["src"] = disk_models.value_of(str(big))
    at.query_params["layer"] = "1"  # the heads page traces up to the layer it shows
    at.run()
    disk_models.registry().job(str(big)).done.wait(120)
    at.switch_page("pages/heads.py").run()
    assert not errors(at), errors(at)
    assert at.session_state["src"] == disk_models.value_of(str(big))
    said = " ".join(str(e.value) for e in at.main.error).replace("\\", "")
    assert "stop being finite in layer 1's attention" in said, said
    assert not at.get("plotly_chart")
    # the pages that trace with get_run themselves (not current_run) say it too: no chart of NaN
    for page in ("pages/attribution.py", "pages/circuits.py"):
        at.switch_page(page).run()
        assert not errors(at), (page, errors(at))
        said = " ".join(str(e.value) for e in at.main.error).replace("\\", "")
        assert "stop being finite in layer 1's attention" in said, (page, said)
        assert not at.get("plotly_chart"), page
