"""A minimal Streamlit client that speaks the browser's own protocol, without rendering.

The Streamlit frontend opens a WebSocket at `/_stcore/stream` (subprotocol "streamlit"), sends a
`BackMsg` whose `rerun_script` is a `ClientState` (query string, page name or page-script hash,
widget states) and then receives `ForwardMsg`s (new_session, navigation, deltas, ...) until
`script_finished`. This module does exactly that with the `websockets` package and the protobuf
classes shipped in `streamlit.proto`, so the server does all of its real work (script run,
serialization, sending) while the client costs almost nothing. Used by benchmarks/ws_load.py,
benchmarks/soak.py, tests/load and tests/deploy.

    async with StClient("http://localhost:8501", page="overview") as c:   # "" = the default page
        r = await c.rerun()                       # first run of the page (as a browser would)
        r = await c.set_widget("Sentence", "a new sentence .")
        r.seconds, r.exceptions, r.alerts, r.bytes

Fragments: `@st.fragment(run_every=...)` makes the server send an `auto_rerun` message (fragment id,
interval); a browser then asks for a rerun of that fragment alone every interval, until a full-app
run that does not register it again (the frontend clears its timers at every full run's start) or a
`stop_auto_rerun`. The client keeps the same bookkeeping in `auto_reruns` ({fragment id: interval})
and `rerun(fragment_id=..., auto=True)` sends what the browser's timer sends; `send` and `receive`
apart let a caller send a second request while a run is in flight (e.g. turning autoplay off in the
middle of a step). `click(label)` presses a button (a one-off trigger, as the browser sends it).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.Slider_pb2 import Slider as SliderProto
from streamlit.proto.WidgetStates_pb2 import WidgetState

# Element fields (in streamlit.proto.Element) that are widgets, and how the frontend sends each value
# (the `value_type` each widget registers with in streamlit/elements/widgets/*.py).
STRING_WIDGETS = {"text_area", "text_input"}
OPTION_WIDGETS = {"selectbox", "radio"}  # string_value = the shown option


def widget_state_of(etype: str, w) -> WidgetState | None:
    """The state the frontend would send for a widget element it has just drawn: the value the
    server set (set_value) or else the widget's default. None for widgets we do not model."""
    ws = WidgetState(id=w.id)
    if etype in STRING_WIDGETS:
        ws.string_value = w.value if w.set_value else w.default
    elif etype in OPTION_WIDGETS:
        if w.set_value:
            ws.string_value = w.raw_value
        elif 0 <= w.default < len(w.options):
            ws.string_value = w.options[w.default]
        else:
            return None
    elif etype == "slider" and w.type == SliderProto.SELECT_SLIDER:
        # st.select_slider registers as value_type "string_array_value": the frontend sends the
        # shown option texts (raw_value when the server set it; `default` holds indices). Sending
        # numbers here makes the server fail with "TypeError: must be real number, not str".
        texts = list(w.raw_value) if w.set_value else [w.options[int(i)] for i in w.default]
        ws.string_array_value.data.extend(texts)
    elif etype == "slider":
        ws.double_array_value.data.extend(list(w.value) if w.set_value else list(w.default))
    elif etype == "number_input":
        ws.double_value = w.value if w.set_value else w.default
    elif etype == "checkbox":
        ws.bool_value = w.value if w.set_value else w.default
    else:
        return None
    return ws


@dataclass
class RunResult:
    seconds: float  # BackMsg sent -> script_finished received
    status: int  # ForwardMsg.ScriptFinishedStatus
    messages: int
    bytes: int  # ForwardMsg bytes received during the run
    exceptions: list[str] = field(default_factory=list)  # st.exception / uncaught errors shown
    alerts: list[str] = field(default_factory=list)  # st.warning / st.info / st.error bodies
    elements: dict[str, int] = field(default_factory=dict)  # element type -> count this run
    markdown: list[str] = field(default_factory=list)  # st.markdown bodies drawn this run
    charts: list[str] = field(default_factory=list)  # each st.plotly_chart's figure (its JSON spec)
    # the requested page did not exist ("Page not found" dialog in a browser; the main page ran).
    # Not part of `ok` (other benchmarks may ask for "heads", which is the default page at "/").
    not_found: str = ""

    @property
    def ok(self) -> bool:
        return not self.exceptions and self.status in (ForwardMsg.FINISHED_SUCCESSFULLY,
                                                       ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)

    @property
    def fragment(self) -> bool:
        """This run reran fragments only (not the whole page)."""
        return self.status == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY


class ProtocolError(RuntimeError):
    pass


class StClient:
    """One browser-less session. Not thread-safe; one asyncio task per client."""

    def __init__(self, base_url: str, page: str = "", query: str = "", timeout: float = 120.0,
                 headers: dict[str, str] | None = None, source: str | None = None):
        """source: the local address to connect from (e.g. "127.0.0.2": another client on loopback)."""
        u = urlparse(base_url)
        scheme = "wss" if u.scheme == "https" else "ws"
        self.ws_url = f"{scheme}://{u.netloc}{u.path.rstrip('/')}/_stcore/stream"
        self.page_name = page
        self.page_hash = ""
        self.query = query
        self.timeout = timeout
        self.headers = headers or {}
        self.source = source
        self.ws = None
        self.session_id = ""
        self.pages: dict[str, str] = {}  # url_pathname -> page_script_hash
        self.widgets: dict[str, tuple[str, str]] = {}  # label -> (widget id, element type)
        self.widget_values: dict[str, WidgetState] = {}
        self.select_sliders: dict[str, bool] = {}  # slider widget id -> is an st.select_slider
        self.auto_reruns: dict[str, float] = {}  # fragment id -> seconds (st.fragment(run_every=...))
        self.runs = 0
        # the browser's message cache: ForwardMsgs the server marked cacheable, by hash. Each rerun
        # request lists these hashes, and the server then sends a reference instead of the message.
        self.msg_cache: dict[str, bytes] = {}

    async def __aenter__(self) -> "StClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> None:
        self.ws = await websockets.connect(
            self.ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=self.timeout,
            additional_headers=self.headers or None, ping_interval=None, compression=None,
            **({"local_addr": (self.source, 0)} if self.source else {}))

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    # -- protocol -----------------------------------------------------------------------------
    def _back_msg(self, fragment_id: str = "", auto: bool = False,
                  triggers: list[WidgetState] | None = None) -> bytes:
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        if self.page_hash:
            cs.page_script_hash = self.page_hash
        else:
            cs.page_name = self.page_name
        cs.widget_states.widgets.extend(self.widget_values.values())
        cs.cached_message_hashes.extend(self.msg_cache)
        cs.widget_states.widgets.extend(triggers or [])
        if fragment_id:
            cs.fragment_id = fragment_id
            cs.is_auto_rerun = auto
        return msg.SerializeToString()

    async def rerun(self, fragment_id: str = "", auto: bool = False) -> RunResult:
        """Send one rerun request (of the page, or of one fragment: what a run_every timer sends
        with auto=True) and read ForwardMsgs until the script finishes."""
        return await self.receive(await self.send(fragment_id, auto))

    async def send(self, fragment_id: str = "", auto: bool = False,
                   triggers: list[WidgetState] | None = None) -> float:
        """Send a rerun request without waiting for it; returns the time sent (for receive)."""
        if self.ws is None:
            raise ProtocolError("not connected")
        t0 = time.perf_counter()
        await self.ws.send(self._back_msg(fragment_id, auto, triggers))
        return t0

    async def receive(self, t0: float | None = None, until_full: bool = False) -> RunResult:
        """Read ForwardMsgs until a script run finishes (a page or fragment run; until_full: skip
        fragment runs until a whole-page run finishes). seconds counts from t0 (default: now)."""
        if self.ws is None:
            raise ProtocolError("not connected")
        t0 = time.perf_counter() if t0 is None else t0
        n = nbytes = 0
        markdown: list[str] = []
        charts: list[str] = []
        exceptions: list[str] = []
        alerts: list[str] = []
        elements: dict[str, int] = {}
        not_found = ""
        labelled: set[str] = set()  # labels already claimed by a widget in this script run
        deadline = t0 + self.timeout
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise ProtocolError(f"no script_finished within {self.timeout:.0f} s")
            raw = await asyncio.wait_for(self.ws.recv(), remaining)
            if isinstance(raw, str):
                raise ProtocolError("text frame from server")
            n += 1
            nbytes += len(raw)
            fm = ForwardMsg()
            fm.ParseFromString(raw)
            if fm.WhichOneof("type") == "ref_hash":  # a message we hold: read it from the cache
                fm.ParseFromString(self.msg_cache[fm.ref_hash])
            elif fm.metadata.cacheable and fm.hash:
                self.msg_cache[fm.hash] = raw
            kind = fm.WhichOneof("type")
            if kind == "new_session":
                self.session_id = fm.new_session.initialize.session_id or self.session_id
                self._learn_pages(fm.new_session.app_pages)
                if not fm.metadata.run.fragment_ids:
                    # a whole-page run: the browser clears every fragment timer; the run
                    # registers again those that still have run_every
                    self.auto_reruns.clear()
            elif kind == "auto_rerun":
                self.auto_reruns[fm.auto_rerun.fragment_id] = fm.auto_rerun.interval
            elif kind == "stop_auto_rerun":
                for fid in fm.stop_auto_rerun.fragment_ids:
                    self.auto_reruns.pop(fid, None)
            elif kind == "navigation":
                self._learn_pages(fm.navigation.app_pages)
                if fm.navigation.page_script_hash:
                    self.page_hash = fm.navigation.page_script_hash
            elif kind == "page_not_found":
                # the browser shows a "Page not found" dialog and runs the main page instead
                not_found = fm.page_not_found.page_name or "?"
            elif kind == "page_info_changed":
                self.query = fm.page_info_changed.query_string
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                el = fm.delta.new_element
                etype = el.WhichOneof("type") or "?"
                elements[etype] = elements.get(etype, 0) + 1
                if etype == "exception":
                    exceptions.append(f"{el.exception.type}: {el.exception.message}")
                elif etype == "alert":
                    alerts.append(el.alert.body)
                elif etype == "markdown":
                    markdown.append(el.markdown.body)
                elif etype == "plotly_chart":
                    charts.append(el.plotly_chart.spec)
                else:
                    w = getattr(el, etype, None)
                    label, wid = getattr(w, "label", None), getattr(w, "id", None)
                    if isinstance(label, str) and isinstance(wid, str) and wid:
                        # Two widgets of one run may share a label (the sidebar's "Sentence" box
                        # and the mask lab's "Sentence" selectbox): the first drawn keeps it, so
                        # set_widget("Sentence", ...) keeps typing into the sidebar (drawn first).
                        if label not in labelled:
                            labelled.add(label)
                            self.widgets[label] = (wid, etype)
                        if etype == "slider":
                            self.select_sliders[wid] = w.type == SliderProto.SELECT_SLIDER
                        if wid not in self.widget_values or getattr(w, "set_value", False):  # buttons have none
                            state = widget_state_of(etype, w)
                            if state is not None:
                                self.widget_values[wid] = state
            elif kind == "script_finished":
                status = fm.script_finished
                if status == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    labelled.clear()
                    continue  # a rerun we (or the app) requested follows
                if until_full and status == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:
                    continue  # a fragment run that finished before the page run we wait for
                self.runs += 1
                return RunResult(time.perf_counter() - t0, status, n, nbytes, exceptions, alerts, elements,
                                 not_found=not_found, markdown=markdown, charts=charts)

    def _learn_pages(self, app_pages) -> None:
        for p in app_pages:
            self.pages[p.url_pathname] = p.page_script_hash

    async def goto(self, url_path: str) -> RunResult:
        """Switch page like a click in the navigation (by page-script hash once known)."""
        if url_path in self.pages:
            self.page_hash, self.page_name = self.pages[url_path], url_path
        else:
            self.page_hash, self.page_name = "", url_path
        return await self.rerun()

    async def set_widget(self, label: str, value) -> RunResult:
        """Change a widget seen in an earlier run (by its label; the first drawn if several share
        it) and rerun: text for text widgets, the option's text for selectbox/radio/select_slider,
        a number for sliders/number inputs, a bool for checkboxes/toggles."""
        self.set_value(label, value)
        return await self.rerun()

    async def click(self, label: str, fragment_id: str = "") -> RunResult:
        """Press a button seen in an earlier run (a trigger sent once, as the browser does)."""
        if label not in self.widgets or self.widgets[label][1] != "button":
            raise ProtocolError(f"no button labelled {label!r}; seen: {sorted(self.widgets)}")
        ws = WidgetState(id=self.widgets[label][0], trigger_value=True)
        return await self.receive(await self.send(fragment_id, triggers=[ws]))

    def set_value(self, label: str, value) -> None:
        """Change a widget's value for the next request, without sending it (see set_widget)."""
        if label not in self.widgets:
            raise ProtocolError(f"no widget labelled {label!r}; seen: {sorted(self.widgets)}")
        wid, etype = self.widgets[label]
        ws = WidgetState(id=wid)
        if etype in STRING_WIDGETS or etype in OPTION_WIDGETS:
            ws.string_value = str(value)
        elif etype == "slider" and self.select_sliders.get(wid):
            ws.string_array_value.data.extend([str(value)])  # the option's text, as shown
        elif etype == "slider":
            ws.double_array_value.data.extend([float(value)])
        elif etype == "number_input":
            ws.double_value = float(value)
        elif etype == "checkbox":
            ws.bool_value = bool(value)
        else:
            raise ProtocolError(f"widget type {etype} is not modelled")
        self.widget_values[wid] = ws


def server_pid_rss_kb(pid: int) -> int:
    """Resident set size of a process in kB, from /proc (psutil is not installed here)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def server_pid_cpu_s(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used, in seconds, from /proc."""
    import os
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
