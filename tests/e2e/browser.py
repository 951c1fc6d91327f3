"""Helpers for the real-browser tier: a Streamlit server on localhost and Debian's Chromium via Playwright.
Every context is route-guarded: a request that leaves localhost fails the test."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]
SHOTS = ROOT / "screenshots"
LOCAL = {"localhost", "127.0.0.1", "[::1]", "::1"}
# Plotly's x tick labels of every subplot (class xtick, x2tick, x3tick, ...): a head grid shows key
# labels only under the lowest panel of each column
X_TICKS = 'g[class^="x"][class$="tick"] text'



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(extra: list[str] | None = None):
    """`with serving() as url:` a Streamlit server of the app for a fixture; stopped afterwards."""
    proc, url = start_server(extra=extra)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def start_server(app: str = "app.py", port: int | None = None, extra: list[str] | None = None,
                 data_dir: str | Path | None = None):
    """A Streamlit server of the app on localhost. data_dir: its data folder (the live class's room
    store); by default a fresh one, so the per-client limits (which hold for loopback too) and the
    rooms of one test's server never reach another's. The server's output is appended to
    <data_dir>/server.log."""
    port = port or free_port()
    data = str(data_dir) if data_dir else tempfile.mkdtemp(prefix="attention-lab-server-data-")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ATTN_LAB_DATA_DIR": data}
    # the server's console (a script's traceback goes there, not to the page) for a failing test's reader
    Path(data).mkdir(parents=True, exist_ok=True)
    log = open(Path(data) / "server.log", "a")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", app, "--server.headless", "true",
         "--server.address", "localhost", "--server.port", str(port), *(extra or [])],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()  # the server holds its own copy
    url = f"http://localhost:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            raise RuntimeError("streamlit server exited during start")
    proc.kill()
    raise RuntimeError("streamlit server did not become healthy in 90 s")


class Guard:
    def __init__(self):
        self.offsite: list[str] = []
        self.dialogs: list[str] = []

    def route(self, route):
        host = urlparse(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL:
            route.continue_()
        else:
            self.offsite.append(route.request.url)
            route.abort()


@contextmanager
def guarded_page(browser, width: int, height: int, **options):
    """A fresh page in its own context (viewport width x height, more new_context options) whose
    requests may only go to localhost; closed afterwards, then the offsite requests checked."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, **options)
    count_runs(ctx)
    guard = Guard()
    ctx.route("**/*", guard.route)
    try:
        yield ctx.new_page()
    finally:
        ctx.close()
    assert not guard.offsite, f"requests left localhost: {guard.offsite[:5]}"


# Counts the script runs that finished for a page: the server's "script finished" messages on the
# page's WebSocket (a ForwardMsg, read with Streamlit's own protobuf classes). A test that changes a
# widget waits for the NEXT finished run (`rerun`), never for a time: before the rerun's first
# message arrives the page still says "notRunning" with the old content, which is what a plain
# "wait until not running" saw on a busy machine (issue 33). Not stApp's data-test-script-state:
# a run fast enough that "started" and "finished" arrive together never shows "running" there.
IDLE_JS = """() => { const a = document.querySelector('[data-testid="stApp"]');
  return !!a && a.getAttribute('data-test-script-state') === 'notRunning'
         && !document.querySelector('[data-testid="stStatusWidget"]'); }"""
_DONE = None  # the ScriptFinishedStatus values of a run that ended (not one cut short by a rerun)


def _finished(payload) -> bool:
    """Is this WebSocket frame the server's "script run finished" message?"""
    global _DONE
    if not isinstance(payload, (bytes, bytearray)) or len(payload) > 256:  # that message is tiny
        return False
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    if _DONE is None:
        _DONE = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY,
                 ForwardMsg.FINISHED_WITH_COMPILE_ERROR}
    msg = ForwardMsg()
    try:
        msg.ParseFromString(bytes(payload))
    except Exception:  # noqa: BLE001  (not a ForwardMsg)
        return False
    return msg.WhichOneof("type") == "script_finished" and msg.script_finished in _DONE


def _watch(page) -> None:
    page._al_runs = 0
    page._al_ws = None
    page._al_log = []  # what ws_log() reports

    def on_ws(ws) -> None:
        if "_stcore/stream" not in ws.url:
            return
        page._al_ws = ws
        _note(page, f"websocket opened {ws.url}")

        def on_frame(payload) -> None:
            if _finished(payload):
                page._al_runs += 1
            _note_received(page, payload)
        ws.on("framereceived", on_frame)
        ws.on("framesent", lambda payload: _note_sent(page, payload))
        ws.on("close", lambda _ws: _note(page, "websocket closed"))
    page.on("websocket", on_ws)


# A record of the page's conversation with the server, for a failure message (ws_log): each rerun
# the browser asked for (its query string and the values it sent for the keys in LOGGED_KEYS), and
# the server's session id, URL changes and finished runs. A change that the browser sent and the
# server's next run did not apply, a change never sent, and a new server session (state read from
# the URL again) read differently here.
LOGGED_KEYS = ("text", "src", "d", "h", "T", "layer")
LOG_MAX = 200
RECORD_MAX_BYTES = 65_536  # WebSocket messages larger than this are not parsed (charts)


def _note(page, text: str) -> None:
    log = page._al_log
    log.append(f"{time.monotonic():.3f} {text}")
    del log[:-LOG_MAX]


def _parse(cls, payload):
    """The protobuf message `cls` in a binary WebSocket frame, or None (text, larger than
    RECORD_MAX_BYTES, or not parsable): the messages recorded are small (a new session's is ~3 kB),
    a chart's is often megabytes, and parsing every one in every browser test would cost time."""
    if not isinstance(payload, (bytes, bytearray)) or len(payload) > RECORD_MAX_BYTES:
        return None
    msg = cls()
    try:
        msg.ParseFromString(bytes(payload))
    except Exception:  # noqa: BLE001
        return None
    return msg


def _note_sent(page, payload) -> None:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    msg = _parse(BackMsg, payload)
    if msg is None or msg.WhichOneof("type") != "rerun_script":
        return
    rs = msg.rerun_script
    values = {}
    for w in rs.widget_states.widgets:
        key = w.id.rsplit("-", 1)[-1]  # a keyed widget's id ends with its key
        kind = w.WhichOneof("value")
        if key in LOGGED_KEYS and kind is not None:
            values[key] = str(getattr(w, kind))[:40]
    _note(page, f"sent rerun ?{rs.query_string[:160]} page={rs.page_script_hash[:8]!r} "
                f"fragment={rs.fragment_id!r} {values}")


def _note_received(page, payload) -> None:
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    msg = _parse(ForwardMsg, payload)
    if msg is None:
        return
    kind = msg.WhichOneof("type")
    if kind == "new_session":
        _note(page, f"run started, session {msg.new_session.initialize.session_id[:8]}")
    elif kind == "page_info_changed":
        _note(page, f"URL set ?{msg.page_info_changed.query_string[:160]}")
    elif kind == "script_finished":
        _note(page, f"run finished ({ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)})")


def ws_log(page) -> str:
    """The page's recent conversation with the server (see LOGGED_KEYS), one event a line."""
    return "\n".join(getattr(page, "_al_log", ["(this page's context does not record it: count_runs)"]))


def count_runs(context) -> None:
    """Count the finished script runs of every page opened in this browser context from now on."""
    context.on("page", _watch)


def finished_runs(page) -> int:
    """Script runs finished for this page so far; -1 when its context does not count them."""
    return getattr(page, "_al_runs", -1)


def _wait_runs(page, after: int, timeout: float) -> None:
    """Until more than `after` runs have finished: each WebSocket frame wakes the check (frames
    are dispatched to the counter before any waiter returns)."""
    import time
    deadline = time.monotonic() + timeout / 1000
    while page._al_runs <= after:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no script run finished after run {after} within {timeout / 1000:.0f} s")
        if page._al_ws is None or page._al_ws.is_closed():
            page.wait_for_event("websocket", timeout=left * 1000)
        else:
            try:
                page._al_ws.wait_for_event("framereceived", timeout=min(left, 5) * 1000)
            except Exception:  # noqa: BLE001  (no frame in 5 s: look again, until the deadline)
                pass


def wait_idle(page, timeout: float = 60_000, after: int | None = None) -> None:
    """Wait until the page is idle: no script running, no status widget. after: a count from
    finished_runs() taken before an action; then also wait until a run after it finished."""
    if after is not None and after >= 0:
        _wait_runs(page, after, timeout)
    page.wait_for_function(IDLE_JS, timeout=timeout)


def rerun(page, action, timeout: float = 90_000) -> None:
    """Do `action` (a click, a key press: something that reruns the script) and wait until that
    rerun has finished and the page is idle."""
    n = finished_runs(page)
    action()
    wait_idle(page, timeout, after=n)


def apply_sentence(page, text: str) -> None:
    """Type `text` into the sidebar's sentence box, press Enter, and wait until that run has
    finished and its sentence is in the address bar (before the next change)."""
    box = page.get_by_role("textbox", name="Sentence", exact=True)
    box.fill(text)
    rerun(page, lambda: box.press("Enter"))
    page.wait_for_function("(text) => decodeURIComponent(location.search.replaceAll('+', ' ')).includes(text)",
                           arg=text)  # (a "+" in the query is a space: `text` itself holds none)


def pick_sidebar_option(page, box: str, option: str) -> None:
    """Open the sidebar's selectbox labelled `box`, pick `option`, and wait for that rerun."""
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(has_text=box).click()
    rerun(page, lambda: page.get_by_role("option", name=option, exact=True).click())


def charts_drawn(page, n: int = 1, timeout: float = 90_000) -> None:
    """Wait until at least n Plotly charts are drawn: each chart element holds a plot whose
    layout Plotly has computed (_fullLayout) and whose SVG is in the page, then two animation
    frames (the browser has laid the SVG text out)."""
    page.wait_for_function(f"""() => {{
        const els = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
        const plots = els.map(e => e.querySelector('.js-plotly-plot'));
        return els.length >= {n} && plots.every(p => p && p._fullLayout && !p._transitioning && p.querySelector('.main-svg'));
    }}""", timeout=timeout)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")


def page_url(url: str, path: str = "", query: str = "") -> str:
    """base URL + optional page path + optional query. A full URL (a copied link, with its own
    query) passes through unchanged: appending "/" to it would change its last query value."""
    if path:
        url = f"{url.rstrip('/')}/{path}"
    if query:
        url = f"{url}{'&' if '?' in url else '?'}{query}"
    return url


# A page is drawn when the sidebar's sentence box and the page's title are there and no run is
# going on. Not just "a run finished": a session's first run is sometimes cut short by a second
# one a few ms after it started (the browser asks twice; seen on main too), and between the two the
# page says "not running" with nothing drawn yet.
DRAWN_JS = """() => !!document.querySelector('[data-testid="stSidebar"] input[aria-label="Sentence"]')
    && !!document.querySelector('[data-testid="stMain"] h1')"""


def open_page(page, url: str, path: str = "", query: str = "", timeout: float = 90_000) -> None:
    """Open a page and wait until it is drawn (DRAWN_JS: a run has finished, with the run counter)
    and idle."""
    page.goto(page_url(url, path, query), timeout=timeout)
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout)
    if finished_runs(page) >= 0:
        _wait_runs(page, 0, timeout)
    page.wait_for_function(f"() => ({DRAWN_JS})() && ({IDLE_JS})()", timeout=timeout)


def screenshot(page, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def exceptions(page) -> int:
    return page.locator('[data-testid="stException"]').count()
