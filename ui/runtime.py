"""Process-wide runtime settings for a multi-user server. app.py imports this module first.

torch threads: one Streamlit process runs every session's script in its own Python thread, so
sessions are already parallel; torch's intra-op pool (default: one thread per core) on top of that
oversubscribes the cores. Measured with benchmarks/threads.py (2 cores, 2026-11-23; 8 concurrent
traces, medians of 3 interleaved rounds): at the default config (d_model 64, 4 heads, 2 layers,
T 64) 1 thread gives 333 traces/s vs 230 with 2 threads; at d_model 128, 8 heads, 4 layers, T 128
it gives 71 vs 47. Alone, 2 threads barely help (large: 21 ms vs 23 ms per trace; default: 1 thread
is faster). So: 1 intra-op thread, 1 inter-op thread. Override with ATTN_LAB_TORCH_THREADS=<n>
(e.g. for a single-user laptop) and re-run `python -m benchmarks.threads` on new hardware.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time

import plotly.io as pio
import torch
from plotly.io import _json as pj

from viz.common import MINIMAL_TEMPLATE

DEFAULT_THREADS = 1


def configure_torch() -> int:
    n = int(os.environ.get("ATTN_LAB_TORCH_THREADS", DEFAULT_THREADS))
    torch.set_num_threads(max(1, n))
    try:
        torch.set_num_interop_threads(1)  # allowed only once, before any inter-op work
    except RuntimeError:
        pass  # already set (module re-imported in another run of the same process)
    return torch.get_num_threads()


THREADS = configure_torch()


# Plotly's JSON writer escapes "<", ">" and "/" (plus U+2028/9) so a figure can sit inside an HTML
# <script> tag. Streamlit sends the figure in a protobuf string, never inside HTML, and "</script>"
# cannot occur anyway once "<" is escaped; but "/" is one of base64's 64 characters, so escaping it
# as "\u002f" (6 bytes) makes every typed array ~8% bigger (15% of the bytes of a rerun at T=128,
# measured by benchmarks/bench_pages.py). Drop only the "/" rule; "<", ">" stay escaped. Checked by
# tests/app/test_runtime.py (which fails if plotly renames these private tables).
def slim_plotly_json() -> bool:
    changed = False
    for name in ("_swap_json", "_swap_orjson"):
        table = getattr(pj, name)
        slim = tuple(pair for pair in table if pair[0] != "/")
        if slim != table:
            setattr(pj, name, slim)
            changed = True
    return changed


slim_plotly_json()


# Plotly's default template ("plotly", ~3.4 KB of JSON) travels with every chart on every rerun.
# Streamlit merges its own theme (light or dark) into layout.template.layout in the browser, so an
# almost empty template looks the same: every page was screenshot with both, and did not differ.
# viz.common.figure sets the same template on the attention figures (viz does not import ui).
def slim_plotly_template() -> str:
    pio.templates["attention_lab"] = MINIMAL_TEMPLATE
    pio.templates.default = "attention_lab"
    return pio.templates.default


slim_plotly_template()


# Sessions' traces of one model asked for at the same moment share one batched forward
# (model/batcher.py). ATTN_LAB_BATCH: "exact" (the default: sentences of the same length share a
# forward, unpadded: each trace is bit for bit what its own forward gives, whoever else typed at
# that moment), "pad" (sentences of different lengths padded into one forward: more sentences per
# forward, but the last bits of a trace then depend on its batch: up to ~8e-6 of a field's scale on
# SmolLM2, whose residual stream reaches 2e4), "off" (every trace alone). ATTN_LAB_BATCH_SLOTS:
# forwards of one model at once (default: one per core, each on the one intra-op thread above).
# Measured in docs/benchmarks.md ("A class on SmolLM2").
BATCH_MODES = ("exact", "pad", "off")


def batcher_settings() -> dict:
    mode = os.environ.get("ATTN_LAB_BATCH", "exact")
    if mode not in BATCH_MODES:
        raise ValueError(f"ATTN_LAB_BATCH must be one of {', '.join(BATCH_MODES)}; got {mode!r}")
    slots = int(os.environ.get("ATTN_LAB_BATCH_SLOTS", os.cpu_count() or 1))
    if mode == "off":
        return dict(slots=1, max_rows=1, pad=False)
    return dict(slots=max(1, slots), pad=mode == "pad")


# Streamlit hands every message of a script run from the run's thread to the server's event loop
# one at a time (AppSession._call_soon_on_event_loop: loop.call_soon_threadsafe, a byte written to
# the loop's self-pipe), and the loop then wakes itself once more per message to flush it
# (Runtime._enqueued_some_message). A page run sends ~57 messages; each hand-off also passes the
# interpreter lock to the loop thread and back. In a live class of 30 followers on the toy model
# (benchmarks/profile_live.py) the self-pipe write was the hottest leaf: a fifth of the samples of
# the follower runs. Here a session's hand-offs queue up behind one pending wake-up, which runs
# them in order (the loop handles them exactly as before, only several per wake-up), and the
# flush wake-up is skipped while one is pending or the loop's event is already set (the loop
# flushes every session's whole queue when it wakes). Streamlit internals, patched once per
# process; a release that moves them leaves Streamlit as it is (tests/app/test_runtime.py).
def batch_event_loop_handoffs() -> bool:
    """Patch Streamlit's AppSession and Runtime as described above. False when there is nothing
    to patch (a Streamlit release whose internals moved) or it is done already."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.app_session import AppSession
    except ImportError:  # pragma: no cover - other Streamlit layouts
        return False
    if getattr(AppSession, "_attn_lab_batched", False) or not hasattr(AppSession, "_call_soon_on_event_loop"):
        return False
    original = AppSession._call_soon_on_event_loop
    lock = threading.Lock()

    def call_soon(self, callback) -> None:  # on a script run's thread (or the loop's)
        queue = getattr(self, "_attn_lab_handoffs", None)
        if queue is None:
            with lock:
                queue = getattr(self, "_attn_lab_handoffs", None)
                if queue is None:
                    queue = self._attn_lab_handoffs = collections.deque()
        queue.append(callback)
        if getattr(self, "_attn_lab_pending", False):
            return  # the pending wake-up runs it
        self._attn_lab_pending = True
        try:
            original(self, lambda: _drain(self, queue))
        except Exception:
            self._attn_lab_pending = False
            raise

    def _drain(self, queue) -> None:  # on the event loop
        self._attn_lab_pending = False  # from here on, a new hand-off schedules another wake-up
        while queue:
            callback = queue.popleft()
            try:
                callback()
            except Exception:  # noqa: BLE001  as the loop does with a failing callback: log it, go on
                logging.getLogger(__name__).exception("Exception in a Streamlit event-loop callback")

    original_rerun = AppSession.request_rerun

    def request_rerun(self, client_state) -> None:
        # A rerun request (the browser's, or ui/live's) may replace the session's script runner, and
        # Streamlit then drops every event still to come from the old one. Its events waiting here
        # are handled first, in order: a run that has finished is never lost (nor its page).
        queue = getattr(self, "_attn_lab_handoffs", None)
        if queue and _on_loop(self):
            _drain(self, queue)
        return original_rerun(self, client_state)

    AppSession._call_soon_on_event_loop = call_soon
    AppSession.request_rerun = request_rerun
    AppSession._attn_lab_batched = True
    _coalesce_flush_wakeups(Runtime)
    return True


def _on_loop(session) -> bool:
    """Whether this thread runs the session's event loop."""
    try:
        return asyncio.get_running_loop() is getattr(session, "_event_loop", None)
    except RuntimeError:  # no loop running in this thread
        return False


def _server(Runtime) -> tuple:
    """(the running Streamlit Runtime, its session manager), or (None, None) without a server or
    when the internals used here moved."""
    if not Runtime.exists():
        return None, None
    rt = Runtime.instance()
    mgr = getattr(rt, "_session_mgr", None)
    if mgr is None or not hasattr(rt, "_get_async_objs"):
        return None, None
    return rt, mgr


def _coalesce_flush_wakeups(Runtime) -> bool:
    """Runtime._enqueued_some_message, once per pending flush. The session manager was given the
    bound method when the server started, so the manager's copy and every session's are replaced."""
    rt, mgr = _server(Runtime)
    if mgr is None or not hasattr(mgr, "_message_enqueued_callback"):
        return False
    pending = [False]

    def wake(event) -> None:  # on the event loop
        pending[0] = False
        event.set()

    def enqueued() -> None:  # on any thread
        objs = rt._get_async_objs()
        if pending[0] or objs.need_send_data.is_set():
            return
        pending[0] = True
        try:
            objs.eventloop.call_soon_threadsafe(wake, objs.need_send_data)
        except RuntimeError:  # the loop is closed (the server is stopping)
            pending[0] = False

    mgr._message_enqueued_callback = enqueued  # passed to every session created from now on
    for info in mgr.list_sessions():  # and the sessions that exist already (the first one)
        if hasattr(info.session, "_message_enqueued_callback"):
            info.session._message_enqueued_callback = enqueued
    return True


# A live class's followers see the lecturer's change sooner when the server reruns their pages itself,
# as Streamlit's own "run on save" does (AppSession.request_rerun with the session's last client
# state: the same query string and page, the widgets as they are). Measured (docs/benchmarks.md, Live
# class, sixth session): the followers' 1-second checks arrive in waves, so without this a change
# waited up to a second for the next wave before any follower's run began. The reruns start
# RERUNS_AT_ONCE at a time, in the order asked: started together, 100 page runs share one
# interpreter lock, each finishes near the end, and the event loop that sends their pages waits
# its turn among them. Only sessions that have finished a run of their own are rerun; a session
# in a run has its turn when that run ends (unless it no longer wants it: its own check applied the
# view), for up to RERUN_SLOT_S; a session not found is left alone.
# Streamlit internals, like the patches above.
RERUNS_AT_ONCE = 4
RERUN_SLOT_S = 10.0  # a rerun still going after this long gives its slot; a busy session waits this long


class _Reruns:
    """The event loop's queue of sessions to rerun (touched on the loop only)."""

    def __init__(self) -> None:
        self.todo: collections.OrderedDict = collections.OrderedDict()  # session id -> (wanted(), when asked)
        self.running: dict = {}  # session id -> (its script runner, when it started)
        self.pumping = False


_reruns = _Reruns()


def rerun_idle_sessions(sessions) -> int:
    """Ask Streamlit to rerun each session's whole page soon, on the server's event loop, in the
    order given, RERUNS_AT_ONCE at a time. sessions: {Streamlit session id: a function that says,
    when its turn comes, whether the rerun is still wanted} (a follower whose own check has applied
    the view meanwhile is not rerun again: a second run right after the first would clear the
    first's messages not yet sent). Returns how many were handed to the loop (0 without a running
    Streamlit server)."""
    ids = dict(sessions)
    if not ids:
        return 0
    try:
        from streamlit.runtime import Runtime
    except ImportError:  # pragma: no cover - other Streamlit layouts
        return 0
    rt, mgr = _server(Runtime)
    if mgr is None:
        return 0
    try:
        loop = rt._get_async_objs().eventloop
        loop.call_soon_threadsafe(_queue_reruns, mgr, loop, ids)
    except (RuntimeError, AttributeError):  # the loop is closed (the server is stopping) or moved
        return 0
    return len(ids)


def _queue_reruns(mgr, loop, ids: dict) -> None:  # on the event loop
    now = time.monotonic()
    for sid, wanted in ids.items():
        _reruns.todo[sid] = (wanted, now)  # asked again: the newer question, its place kept
    _pump(mgr, loop)


def _pump(mgr, loop, scheduled: bool = False) -> None:  # on the event loop
    """Free the slots of finished reruns, start the next ones, and look again in 5 ms while any
    is waiting or running (one such wake-up pending at a time)."""
    q = _reruns
    if scheduled:
        q.pumping = False
    now = time.monotonic()
    for sid, (runner, t0) in list(q.running.items()):
        session = _session_of(mgr, sid)
        if session is None or getattr(session, "_scriptrunner", None) is not runner or now - t0 > RERUN_SLOT_S:
            del q.running[sid]  # done (or gone, or too long)
    for sid in list(q.todo):
        if len(q.running) >= RERUNS_AT_ONCE:
            break
        wanted, asked = q.todo[sid]
        runner = _rerun_now(mgr, sid, wanted)
        if runner is _BUSY and now - asked < RERUN_SLOT_S:
            continue  # in a run of its own: its turn again when that ends (unless it applies the view)
        del q.todo[sid]
        if runner is not None and runner is not _BUSY:
            q.running[sid] = (runner, now)
    if (q.todo or q.running) and not q.pumping:
        q.pumping = True
        loop.call_later(0.005, _pump, mgr, loop, True)


def _session_of(mgr, sid):
    info = mgr.get_active_session_info(sid)
    return getattr(info, "session", None)


_BUSY = object()


def _rerun_now(mgr, sid, wanted):
    """Start the session's rerun (on the event loop, where Streamlit handles a browser's); its new
    script runner, _BUSY while it is in a run, or None when not wanted, gone, never run, or on
    failure."""
    from streamlit.proto.ClientState_pb2 import ClientState

    try:
        if not wanted():
            return None
        session = _session_of(mgr, sid)
        last = getattr(session, "_client_state", None)
        if session is None or last is None or not last.page_script_hash:
            return None  # gone, or no run of its own finished yet (its URL is not known)
        if not hasattr(session, "_scriptrunner"):
            return None  # the internals moved
        if session._scriptrunner is not None:
            return _BUSY
        cs = ClientState()
        cs.query_string = last.query_string
        cs.page_script_hash = last.page_script_hash
        if last.HasField("context_info"):
            cs.context_info.CopyFrom(last.context_info)
        session.request_rerun(cs)
        return session._scriptrunner
    except Exception:  # noqa: BLE001  one session's failure must not stop the others
        logging.getLogger(__name__).exception("Could not rerun session %s", sid)
        return None


batch_event_loop_handoffs()
