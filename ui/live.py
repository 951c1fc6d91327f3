"""A live class, the Streamlit side. The rooms, polls and the store are classroom/live/.

Lecturer: "Start a live class" (sidebar) creates a room; the page shows its code, join link and QR
code. At the end of every run (and of every fragment run that syncs the URL) the lecturer's view is
published to the room: the page's URL path and the query parameters of the lecturer's own link,
which ui/state.py keeps equal to every bound control (sentence, model, mask, max length, layer,
head, lesson step, ...). The lecturer's session holds the room's secret token; the store checks it
(as a hash) on every write, so nothing a student sends can change the room.

Student: opens the join link (?room=CODE) or types the code. Following means: the lecturer's link is
applied as if the student had opened it, through the same path a shared URL takes (ui/state.py
reloads every bound value from the URL; the page switches with st.switch_page). So the student's
address bar shows the page and values it follows, and a reload keeps them. A fragment that reruns
every POLL_EVERY seconds reads the room's versions (one dictionary read, or one Redis call) and
calls st.rerun() only when the lecturer's view changed. When the lecturer's session is in the same
server process, that process reruns its followers' pages itself at each change, poll change and the
class's end (_rerun_followers, ui.runtime.rerun_idle_sessions: at once, a few at a time), and their
own checks run every SLOW_POLL_EVERY seconds as a fallback; 100 students cost one trace per change
(the trace cache is shared, ui/runs.py) and one figure of the heads grid (ui.show.shared_fig), and
then each student's own page run (measured in docs/benchmarks.md, "Live class"). A student who changes a control (or presses "Explore on
my own") explores alone: the lecturer's changes no longer touch the student's controls or URL
(the URL then holds alone=true, so a reload keeps exploring); "Back to the lecturer" applies the
lecturer's current view.

The store is classroom.live.open_store(ROOM_STORE): a SQLite file under the data folder by default
(ATTN_LAB_DATA_DIR; several processes of one machine share it, and it survives a restart), Redis with
ROOM_STORE=redis://host:port/db (several machines). If it does not answer, the page says the live
class is unavailable and goes on as usual; a lecturer's session restores its room (same code and
token, its view and poll) when the store comes back empty (a Redis restart without persistence).
After a restart of the server itself, the browsers' cookies bring the sessions back: the lecturer's
tab takes its seat again (LECTURER_COOKIE), a student's keeps its answer id (STUDENT_COOKIE).

Limits per client (client_address(): its network address, through the project's own nginx the
address nginx saw): ROOMS_PER_CLIENT rooms started in ROOMS_WINDOW seconds, WRONG_CODES_PER_CLIENT
wrong codes per minute, ANSWERS_PER_CLIENT answers per poll; each refusal says when to try again.
"""
from __future__ import annotations

import functools
import html
import math
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import segno
import streamlit as st

from classroom import live as L
from classroom.lesson import build_lesson
from classroom.live.watch import RoomWatcher
from deploy import network
from labels import md_escape, token_label

from . import client, runtime, state
from .runs import current_run, layer_allowed

POLL_EVERY = 1.0  # seconds between a follower's checks of the room (follow within 2 s)
SLOW_POLL_EVERY = 3.0  # seconds between the checks of a student exploring alone
LECTURER_AWAY = 60.0  # seconds without the lecturer's check-in: followers read AWAY_NOTICE
AWAY_NOTICE = "The lecturer's screen is away; your view stays as it is."
KEEPALIVE_EVERY = 60.0  # seconds between the lecturer's keep-alives (the room's idle timer)
LOCAL_KEYS = ("present", "room", "lecturer", "alone")  # URL keys that are the session's own, never shared
SS = "_live"  # session_state: this session's LiveSession
NOTICES = "_live_notices"

# Limits per client (its network address, client_address()): each refusal says what happened and
# when to try again. They hold for every client, a loopback one included, and for every process
# sharing the store (the counts live in the store).
ROOMS_PER_CLIENT, ROOMS_WINDOW = 5, 600.0  # rooms started per client in 10 minutes
WRONG_CODES_PER_CLIENT, WRONG_CODES_WINDOW = 20, 60.0  # wrong class codes per client per minute
ANSWERS_PER_CLIENT = 300  # answers per client per poll (a class behind one NAT still fits)

# The project's own nginx (deploy/nginx.conf.template) sends this header with the secret that
# deploy/replicas.py gives both it and the replicas (ATTN_LAB_PROXY_SECRET); only then is the last
# X-Forwarded-For entry (the one nginx appended: the address nginx saw) the client's address.
PROXY_SECRET_ENV, PROXY_HEADER = client.PROXY_SECRET_ENV, client.PROXY_HEADER  # (deploy/replicas.py names them here)
# Browser cookies that bring a session back after a server restart (the server's sessions are in
# its memory; the room is in the store): the lecturer's seat (code and token) and a student's
# anonymous id (so an answer given before the restart is the same answer, never a second one).
LECTURER_COOKIE = "attn_lab_lecturer"
STUDENT_COOKIE = "attn_lab_sid"
COOKIE_AGE = 4 * 3600  # seconds (a room's idle lifetime)

_stores: dict[str, L.RoomStore] = {}
_stores_lock = threading.Lock()


def store() -> L.RoomStore:
    """The process's room store, named by the ROOM_STORE environment variable (one per URL). A
    ROOM_STORE that names no usable store raises StoreMisconfigured (a StoreUnavailable, so every
    caller goes on without the live class) whose words say what is wrong."""
    url = os.environ.get("ROOM_STORE", "")
    with _stores_lock:
        s = _stores.get(url)
        if s is None:
            ttl = float(os.environ.get("ATTN_LAB_ROOM_TTL_HOURS", L.rooms.DEFAULT_TTL / 3600)) * 3600
            s = _stores[url] = L.open_store(url, ttl=ttl)
        return s


def client_address() -> str:
    """The client's network address, by the one rule of ui/client.py (behind the project's nginx,
    the address nginx saw; never a header a client sent itself); this machine is "127.0.0.1"."""
    return client.client_address() or "127.0.0.1"


def _wait_words(seconds: float) -> str:
    s = max(1, math.ceil(seconds))
    if s < 90:
        return f"{s} second{'s' if s != 1 else ''}"
    m = math.ceil(s / 60)
    return f"{m} minute{'s' if m != 1 else ''}"


# The followers this server process holds, by room: {room code: {Streamlit session id: (their
# LiveSession, when they last checked)}}. When the lecturer's view changes, the lecturer's process
# reruns its own followers' pages at once (ui.runtime.rerun_idle_sessions) instead of leaving each to
# its next check; a follower on another process (several replicas) follows at its check. An entry
# not refreshed by a check for FOLLOWER_TTL seconds (a closed tab) is dropped.
FOLLOWER_TTL = 10.0
_followers: dict[str, dict[str, tuple["LiveSession", float]]] = {}
_followers_lock = threading.Lock()


def _session_id() -> str | None:
    ctx = _run_ctx()
    return getattr(ctx, "session_id", None)


_followers_pruned = [0.0]
_lecturers_here: dict[str, float] = {}  # room code -> when its lecturer's session here last ran


def _lecturer_is_here(code: str) -> None:
    with _followers_lock:
        _lecturers_here[code] = time.monotonic()


def lecturer_here(code: str) -> bool:
    """Whether room `code`'s lecturer has a session in this server process (seen within
    FOLLOWER_TTL seconds): its changes then reach this process's followers at once (a server rerun),
    so their own checks are only a fallback (SLOW_POLL_EVERY)."""
    with _followers_lock:
        t = _lecturers_here.get(code)
        return t is not None and time.monotonic() - t <= FOLLOWER_TTL


def _watched_rooms() -> list[str]:
    """The rooms the process's watcher reads: those this process has followers of and whose lecturer
    is not here (the lecturer's own changes rerun its followers here at once: _rerun_followers)."""
    with _followers_lock:
        codes = list(_followers)
    return [c for c in codes if not lecturer_here(c)]


# Changes made on another process (another replica; another machine with Redis) reach this
# process's followers within WATCH_EVERY (classroom/live/watch.py): their own checks are then only a
# fallback (SLOW_POLL_EVERY), as for followers of a lecturer here.
_watcher = RoomWatcher(lambda: store(), _watched_rooms, lambda code, what: _rerun_followers(code, what))


def _register_follower(ls: "LiveSession") -> None:
    sid = _session_id()
    if sid is None:
        return
    _watcher.ensure_running()
    now = time.monotonic()
    with _followers_lock:
        _followers.setdefault(ls.code, {})[sid] = (ls, now)
        if now - _followers_pruned[0] > FOLLOWER_TTL:  # every room's stale entries (ended classes too)
            _followers_pruned[0] = now
            for code in list(_followers):
                _prune(code, now)
            for code in [c for c, t in _lecturers_here.items() if now - t > FOLLOWER_TTL]:
                del _lecturers_here[code]


def _prune(code: str, now: float) -> dict:
    """(lock held) Drop room `code`'s entries not refreshed within FOLLOWER_TTL or whose class ended."""
    room = _followers.get(code, {})
    for sid in [k for k, (ls, t) in room.items() if now - t > FOLLOWER_TTL or ls.ended]:
        del room[sid]
    if not room:
        _followers.pop(code, None)
    return room


def followers_here(code: str) -> dict[str, "LiveSession"]:
    """{Streamlit session id: LiveSession} of this process's sessions following room `code` now
    (checked in within FOLLOWER_TTL seconds, following, class not ended); stale entries are dropped."""
    with _followers_lock:
        room = _prune(code, time.monotonic())
        return {sid: ls for sid, (ls, _t) in room.items() if ls.following and ls.code == code}


@dataclass
class LiveSession:
    code: str
    role: str  # "lecturer" | "student"
    token: str = field(default="", repr=False)  # the lecturer's secret (lecturer sessions only)
    epoch: str = ""
    following: bool = True  # students: follow the lecturer (False: exploring alone)
    ended: bool = False
    applied: tuple | None = None  # students: (epoch, version) of the view applied
    pending_page: str | None = None  # students: the page to switch to in this run
    settling: bool = False  # students: the next completed run records the baseline
    baseline: tuple | None = None  # students: (page, params) at the end of the run after the last apply
    poll_key: tuple | None = None
    poll: L.Poll | None = None  # the current poll (a student's copy, or the lecturer's own)
    published: L.View | None = None  # lecturer: the view the room holds
    seen_answers: dict = field(default_factory=dict)  # lecturer: the last answers read (to restore a room)
    last_keepalive: float = 0.0
    unavailable: str = ""  # why the store did not answer (shown; cleared when it answers)

    @property
    def hash(self) -> str:
        return L.token_hash(self.token)


def _ls() -> LiveSession | None:
    return st.session_state.get(SS)


def is_following() -> bool:
    """This session is a student following the lecturer (its page and controls are the lecturer's:
    a page's guidance then never asks it to type or pick, which would leave the class's view)."""
    ls = _ls()
    return ls is not None and ls.role == "student" and ls.following and not ls.ended


_SID_RE = re.compile(r"[0-9a-f]{16}")


def _cookie(name: str) -> str:
    try:
        v = st.context.cookies.get(name)
    except Exception:  # noqa: BLE001  no client
        return ""
    return v if isinstance(v, str) else ""  # AppTest's stand-in client has no cookies


def _sid() -> str:
    """This session's anonymous id (presence, one answer per session): the browser's own id
    (STUDENT_COOKIE) when it has one, so a tab that reconnects after a server restart keeps its
    answer instead of adding a second one."""
    s = st.session_state
    if "_live_sid" not in s:
        c = _cookie(STUDENT_COOKIE)
        s["_live_sid_restored"] = bool(_SID_RE.fullmatch(c))
        s["_live_sid"] = c if s["_live_sid_restored"] else secrets.token_hex(8)
    return s["_live_sid"]


def _set_cookies(ls: "LiveSession") -> None:
    """The browser keeps what brings this tab back after a server restart (LECTURER_COOKIE: the
    room's code and the lecturer's token; STUDENT_COOKIE: the anonymous id). The values are made
    here (code alphabet, URL-safe base64, hex), never typed by anyone."""
    if ls.role == "lecturer" and not ls.ended:
        cookie = f"{LECTURER_COOKIE}={ls.code}.{ls.token}"
    elif ls.role == "student":
        cookie = f"{STUDENT_COOKIE}={_sid()}"
    else:
        return
    if not re.fullmatch(r"[A-Za-z0-9_-]+=[A-Za-z0-9_.-]+", cookie):  # never user text inside the script (made here)
        return
    st.html(f"<script>document.cookie = '{cookie}; path=/; max-age={COOKIE_AGE}; SameSite=Strict';</script>",
            unsafe_allow_javascript=True)


def _forget_lecturer_cookie() -> None:
    st.html(f"<script>document.cookie = '{LECTURER_COOKIE}=; path=/; max-age=0; SameSite=Strict';</script>",
            unsafe_allow_javascript=True)


def _lecturer_cookie() -> tuple[str, str] | None:
    code, _, token = _cookie(LECTURER_COOKIE).partition(".")
    code = L.normalize_code(code) if code else None
    return (code, token) if code and re.fullmatch(r"[A-Za-z0-9_-]{20,100}", token) else None


def _notice(text: str, kind: str = "info") -> None:
    st.session_state.setdefault(NOTICES, []).append((kind, text))


def _unavailable(exc: Exception | str) -> str:
    text = str(exc)
    if isinstance(exc, L.StoreMisconfigured) or text.startswith("ROOM_STORE="):
        return (f"The live class is off on this server: {md_escape(text[:400])}. Everything else works as usual; "
                "whoever runs the server can fix ROOM_STORE and restart it.")
    return ("The live class is unavailable right now: the room store does not answer. Everything else works "
            "as usual; the page reconnects by itself.")


def _run_ctx():
    """The script run's context (Streamlit internals), None outside a run or without them."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
        return get_script_run_ctx()
    except Exception:  # noqa: BLE001  a Streamlit without this internal
        return None


def _fragment_rerun() -> bool:
    ctx = _run_ctx()
    return bool(ctx and getattr(ctx, "fragment_ids_this_run", None))  # without it: a full run


def _drop_params(*keys: str) -> None:
    for k in keys:
        if k in st.query_params:
            del st.query_params[k]


# ----------------------------------------------------------------------------------- run hooks

def begin_run() -> None:
    """app.py, before the controls are drawn: a ?room= link joins (or, with the lecturer's private
    link, resumes the lecturer's seat); a following student takes the lecturer's current view."""
    qp = st.query_params
    token = qp.get("lecturer")
    if token is not None:
        _drop_params("lecturer")  # never left in the address bar
    raw = qp.get("room")
    ls = _ls()
    if ls is None and raw is None and token is None and not st.session_state.get("_live_cookie_tried"):
        st.session_state["_live_cookie_tried"] = True
        _resume_from_cookie()
        ls = _ls()
    if raw is not None and (ls is None or ls.code != L.normalize_code(raw) or (token and ls.role != "lecturer")):
        _join(raw, token=token, alone=qp.get("alone", "").lower() in ("1", "true"))
        ls = _ls()
    if ls is not None and ls.role == "student" and ls.following and not ls.ended:
        _follow(ls)


def _resume_from_cookie() -> None:
    """A fresh session in the lecturer's browser (its tab reconnecting after a server restart, or a
    reload) takes the lecturer's seat back when the browser holds the room's code and token and the
    store still says they drive an open room."""
    got = _lecturer_cookie()
    if got is None:
        return
    code, token = got
    try:
        rs = store().state(code)
        if rs is None or rs.status != "open" or not store().is_lecturer(code, L.token_hash(token)):
            return
    except L.StoreUnavailable:
        return
    try:
        poll = store().poll(code)  # the room's poll goes on (its answers are in the store)
    except L.StoreUnavailable:
        poll = None
    st.session_state[SS] = LiveSession(code, "lecturer", token=token, epoch=rs.epoch, poll=poll)
    st.session_state["live_show_card"] = False
    st.session_state["live_locked"] = rs.locked
    _notice(f"You are the lecturer of room {code} again: the class went on while this page reconnected.", "success")


def _wrong_code(client: str) -> None:
    try:
        store().hit(f"code:{client}", WRONG_CODES_PER_CLIENT, WRONG_CODES_WINDOW)
    except L.StoreUnavailable:
        pass


def _codes_refused(client: str) -> str | None:
    """The refusal when this client has typed WRONG_CODES_PER_CLIENT wrong codes in the last minute."""
    try:
        wait = store().hit(f"code:{client}", WRONG_CODES_PER_CLIENT, WRONG_CODES_WINDOW, record=False)
    except L.StoreUnavailable:
        return None
    if wait <= 0:
        return None
    return (f"Too many wrong class codes from your network address: {WRONG_CODES_PER_CLIENT} in the last minute, "
            f"the most one address may try. Try again in {_wait_words(wait)}. The app works as usual.")


def _already_in(code: str) -> bool:
    """Whether this browser's student id (its cookie: a reload, or a reconnect after a restart) has
    checked in to room `code` within the last PRESENCE_KEEP seconds."""
    sid = _sid()
    if not st.session_state.get("_live_sid_restored"):
        return False
    try:
        seen = store().seen_by(code, L.rooms.PRESENCE_KEEP)
    except L.StoreUnavailable:
        return False
    return any(k.rpartition(".")[0] == sid for k in seen)


def _join(raw: str, token: str | None = None, alone: bool = False) -> bool:
    """Join room `raw` as a student (or as its lecturer with the right token). Says why not."""
    code = L.normalize_code(raw)
    client = client_address()
    refused = _codes_refused(client)
    if refused:
        _notice(refused, "warning")
        _drop_params("room", "alone")
        return False
    if code is None:
        _wrong_code(client)
        _notice(f"{md_escape(str(raw)[:12])!s} is not a class code (codes have {L.CODE_LENGTH} letters and digits, "
                "e.g. K7MWQ). The app works as usual.", "warning")
        _drop_params("room", "alone")
        return False
    try:
        rs = store().state(code)
        if rs is not None and token and store().is_lecturer(code, L.token_hash(token)):
            st.session_state[SS] = LiveSession(code, "lecturer", token=token, epoch=rs.epoch, poll=store().poll(code))
            st.session_state["live_show_card"] = False
            st.session_state["live_locked"] = rs.locked
            _drop_params("room", "alone")
            _notice(f"You are the lecturer of room {code} again.", "success")
            return True
    except L.StoreUnavailable as exc:
        # keep the room in the URL: the session follows as soon as the store answers again
        st.session_state[SS] = LiveSession(code, "student", following=not alone, unavailable=str(exc))
        return True
    if rs is None:
        _wrong_code(client)
        _notice(f"No live class has the code {code}: it may be mistyped, or the class has expired. "
                "The app works as usual.", "warning")
        _drop_params("room", "alone")
        return False
    if rs.status == "ended":
        _notice(f"The class {code} has ended.", "info")
        _drop_params("room", "alone")
        return False
    if rs.locked and not _already_in(code):
        _notice(f"Room {code} is locked by the lecturer: no new students may join now. The app works as usual.",
                "warning")
        _drop_params("room", "alone")
        return False
    if token:
        _notice("That lecturer link is not valid for this room: you follow the class as a student.", "warning")
    st.session_state[SS] = LiveSession(code, "student", following=not alone)
    if "room" not in st.query_params:
        st.query_params["room"] = code
    return True


def _follow(ls: LiveSession) -> None:
    try:
        got = store().view(ls.code)
    except L.StoreUnavailable as exc:
        ls.unavailable = str(exc)
        return
    if got is None:
        return  # gone: the watch fragment says so (and follows again if the lecturer restores it)
    rs, view = got
    ls.unavailable = ""
    if rs.status == "ended":
        _class_ended(ls)
        return
    if rs.view_key == ls.applied:
        return
    ls.applied = rs.view_key
    if view is not None:
        _apply(ls, view)


def _apply(ls: LiveSession, view: L.View) -> None:
    """Take the lecturer's link as this session's URL and reload every bound control from it,
    as a fresh session opening that link would (ui/state.py); the page follows in page_chosen."""
    params = {k: v for k, v in view.params if k not in LOCAL_KEYS}
    params.update({k: v for k, v in st.query_params.items() if k == "present"})  # the student's own display
    params["room"] = ls.code
    state.reload_from_url(keep=("present",))
    st.session_state.pop("_mask_default", None)  # ui/sidebar.apply_mask_default: as on a first run
    st.query_params.from_dict(params)
    ls.pending_page = view.page
    ls.settling = True


def page_chosen(pg, nav: dict) -> None:
    """app.py, after st.navigation: remember the page (the lecturer publishes it); a follower who
    just applied a view on another page switches to it (keeping the URL just applied)."""
    st.session_state["_live_page"] = pg.url_path
    ls = _ls()
    if ls is None or ls.role != "student" or ls.pending_page is None:
        return
    want, ls.pending_page = ls.pending_page, None
    if want == pg.url_path:
        return
    for pages in nav.values():
        for p in pages:
            if p.url_path == want and getattr(p, "visibility", "visible") != "hidden":
                st.switch_page(p, query_params=st.query_params.to_dict())
    # the lecturer's page does not exist here: stay


def end_run() -> None:
    """app.py, after the run's URL sync: the lecturer publishes; a follower who changed something
    explores alone."""
    ls = _ls()
    if ls is None or ls.ended:
        return
    if ls.role == "lecturer":
        _publish(ls)
    else:
        _check_diverged(ls)
        if not ls.following and st.query_params.get("alone") != "true":
            # whichever run wrote the address bar last (a watch-fragment run racing "Explore on my
            # own" under load), it says the student explores alone, so a reload keeps exploring
            st.query_params["alone"] = "true"


def after_sync() -> None:
    """ui/state.sync_url's hook: the same as end_run, for fragment reruns (the heads page's head
    detail changes the head without a full run). Full runs are handled by end_run."""
    if _fragment_rerun():
        end_run()


def _current_view() -> L.View:
    page = st.session_state.get("_live_page", "")
    return L.View.of(page, {k: v for k, v in st.query_params.items() if k not in LOCAL_KEYS})


def _publish(ls: LiveSession, force: bool = False) -> None:
    view = _current_view()
    if view == ls.published and not force:
        return
    try:
        store().publish(ls.code, ls.hash, view)
        ls.published, ls.unavailable = view, ""
        _lecturer_is_here(ls.code)
        _rerun_followers(ls.code)
    except L.RoomGone:
        _restore(ls, view)
    except L.NotLecturer:
        ls.ended = True
        _notice(f"Room {ls.code} no longer accepts your changes (it has ended).", "warning")
    except L.StoreUnavailable as exc:
        ls.unavailable = str(exc)
    except ValueError as exc:  # a view too large for the room (an enormous link)
        _notice(f"The class cannot follow this view: {exc}.", "warning")


def _rerun_followers(code: str, what: str = "view") -> None:
    """After the lecturer changed the room's view (what="view"), poll ("poll") or ended it ("end"):
    this process's followers of the room rerun their pages now (a run applies the view in begin_run
    and draws the poll or the end in the watch fragment), except those whose own check has seen the
    change meanwhile."""
    mine, theirs = {"view": ("applied", "view_key"), "poll": ("poll_key", "poll_key"), "end": (None, None)}[what]
    key = None
    if mine is not None:
        try:
            rs = store().state(code)
        except L.StoreUnavailable:
            return
        if rs is None:
            return
        key = getattr(rs, theirs)

    def wanted(f: LiveSession) -> bool:  # asked on the event loop when the follower's turn comes
        return f.following and not f.ended and (mine is None or getattr(f, mine) != key)

    runtime.rerun_idle_sessions({sid: functools.partial(wanted, f) for sid, f in followers_here(code).items()})


def _restore(ls: LiveSession, view: L.View | None = None) -> bool:
    """The store lost the room (Redis restarted empty): create it again, same code and token,
    with the view, the poll and the answers this session last saw."""
    view = view or ls.published or _current_view()
    try:
        rs = store().create(ls.code, ls.hash, view=view, poll=ls.poll, answers=ls.seen_answers)
    except (L.StoreUnavailable, L.StoreFull) as exc:
        ls.unavailable = str(exc)
        return False
    if rs is not None:
        ls.epoch, ls.published, ls.unavailable = rs.epoch, view, ""
        return True
    return False


def _check_diverged(ls: LiveSession) -> None:
    """The first completed run after applying a view records it as the baseline; a later run
    (or fragment run) that ends with another view means the student changed something."""
    if not ls.following:
        return
    mine = _current_view()
    if ls.settling:
        ls.baseline, ls.settling = mine, False
        return
    if ls.baseline is not None and mine != ls.baseline:
        ls.following = False
        st.query_params["alone"] = "true"
        _notice("You changed the view, so you are exploring on your own now. "
                "“Back to the lecturer” follows the class again.", "info")


def _class_ended(ls: LiveSession) -> None:
    ls.ended, ls.following = True, False
    _drop_params("room", "alone")


# -------------------------------------------------------------------------------- callbacks

def _start() -> None:
    token = L.new_token()
    client = client_address()
    try:
        wait = store().hit(f"start:{client}", ROOMS_PER_CLIENT, ROOMS_WINDOW)
        if wait > 0:
            _notice(f"Your network address has started {ROOMS_PER_CLIENT} live classes in the last "
                    f"{int(ROOMS_WINDOW // 60)} minutes, the most one address may. Try again in {_wait_words(wait)}, "
                    "or go on with a class you started.", "error")
            return
        for _ in range(8):
            code = L.new_code()
            rs = store().create(code, L.token_hash(token))
            if rs is not None:
                break
        else:
            raise L.StoreFull("no free code")
    except L.StoreUnavailable as exc:
        _notice(_unavailable(exc), "error")
        return
    except L.StoreFull:
        _notice("The server holds as many live classes as it may; try again later.", "error")
        return
    st.session_state[SS] = LiveSession(code, "lecturer", token=token, epoch=rs.epoch)
    st.session_state["live_show_card"] = True
    st.session_state["live_locked"] = False
    _drop_params("room", "alone")


def _lock() -> None:
    ls = _ls()
    if ls is None or ls.role != "lecturer":
        return
    try:
        store().set_locked(ls.code, ls.hash, bool(st.session_state.get("live_locked")))
    except (L.StoreUnavailable, L.RoomGone, L.NotLecturer) as exc:
        st.session_state["live_locked"] = not st.session_state.get("live_locked")
        _notice(_unavailable(exc), "error")


def _join_typed() -> None:
    raw = st.session_state.get("live_join_code", "")
    st.session_state["live_join_code"] = ""
    if _join(raw):
        _drop_params("alone")


def _leave() -> None:
    ls = st.session_state.pop(SS, None)
    if ls is not None:
        ls.following = False  # no longer rerun with the room (followers_here)
    _drop_params("room", "alone")


def _explore() -> None:
    ls = _ls()
    if ls is not None:
        ls.following = False
        st.query_params["alone"] = "true"


def _back() -> None:
    ls = _ls()
    if ls is not None:
        ls.following, ls.applied, ls.baseline = True, None, None
        _drop_params("alone")


def _end() -> None:
    ls = _ls()
    if ls is None:
        return
    ended = False
    try:
        store().end(ls.code, ls.hash)
        ended = True
    except (L.RoomGone, L.NotLecturer):
        pass
    except L.StoreUnavailable as exc:
        _notice(_unavailable(exc), "error")
        return
    st.session_state.pop(SS, None)
    st.session_state["_live_forget_cookie"] = True
    if ended:  # only the lecturer's end reaches the followers at once (their checks see it anyway)
        _rerun_followers(ls.code, "end")
    _notice(f"The class {ls.code} has ended. Students keep their last view.", "success")


def _set_poll(poll: L.Poll | None) -> None:
    ls = _ls()
    if ls is None or ls.role != "lecturer":
        return
    try:
        store().set_poll(ls.code, ls.hash, poll)
    except L.RoomGone:
        ls.poll = poll
        _restore(ls)
        return
    except L.NotLecturer:
        return
    except L.StoreUnavailable as exc:
        _notice(_unavailable(exc), "error")
        return
    if poll is None or ls.poll is None or poll.id != ls.poll.id:
        ls.seen_answers = {}
    ls.poll = poll
    _rerun_followers(ls.code, "poll")


def _open_poll(question: L.PollQuestion) -> None:
    _set_poll(L.Poll(secrets.token_hex(4), question))
    st.session_state["live_poll_box"] = False
    st.session_state["live_show_card"] = False  # the poll takes the card's place on the projector


def _poll_state(new_state: str) -> None:
    ls = _ls()
    if ls is not None and ls.poll is not None:
        _set_poll(L.Poll(ls.poll.id, ls.poll.question, new_state))


def _send_answer(poll: L.Poll, key: str) -> None:
    ls = _ls()
    value = st.session_state.get(key)
    if ls is None or value is None:
        return
    try:
        v = poll.question.parse(value)
    except ValueError as exc:
        st.session_state[f"{key}__err"] = f"That answer cannot be counted: {md_escape(str(exc))}."
        return
    try:
        nick = L.clean_nickname(st.session_state.get("live_nick", ""))
        got = store().answer_status(ls.code, poll.id, _sid(), L.Answer(poll.id, v, nick, time.time()),
                                    client=client_address(), max_per_client=ANSWERS_PER_CLIENT)
    except L.StoreUnavailable:
        st.session_state[f"{key}__err"] = "The live class is unavailable right now: your answer was not sent."
        return
    st.session_state[f"{key}__err"] = ANSWER_REFUSED.get(got, "").format(n=store().max_answers, cap=ANSWERS_PER_CLIENT)
    if got == "ok":
        st.session_state[f"{key}__sent"] = v


ANSWER_REFUSED = {
    "closed": "The poll is closed: your answer was not counted.",
    "full": ("This poll is full: it has {n:,} answers, the most a poll takes, so yours was not counted. "
             "The lecturer's next poll starts empty."),
    "client": ("Your network address has sent {cap} answers to this poll, the most one address may, so yours was "
               "not counted. Try again at the lecturer's next poll."),
}


# ----------------------------------------------------------------------------------- drawing

POLL_CSS = """
<style>
.poll-bars {display: flex; flex-direction: column; gap: 0.2rem; font-size: 0.85rem; line-height: 1.25;}
.poll-row {display: grid; grid-template-columns: minmax(6rem, 38%) 1fr 5.2rem; align-items: center; gap: 0.5rem;}
.poll-label {overflow-wrap: anywhere;}
.poll-track {height: 0.9rem; background: rgba(128, 128, 128, 0.18); border-radius: 0.2rem; overflow: hidden;}
.poll-fill {display: block; height: 100%; background: #1f77b4;}
.poll-right .poll-fill {background: #2e7d32;}
.poll-right .poll-track {background: rgba(46, 125, 50, 0.28);}
.poll-right .poll-label b {color: #2e7d32;}
.poll-num {text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap;}
</style>
"""

CARD_CSS = """
<style>
.st-key-live_code p {font-size: 4.2rem !important; font-weight: 700; letter-spacing: 0.35rem;
  line-height: 1.1 !important; margin: 0 !important;}
.st-key-live_card [data-testid="stCode"] code {font-size: 1.35rem !important;}
.st-key-live_card [data-testid="stImage"] img {max-width: 420px !important; margin: auto;}
.st-key-live_panel [data-testid="stProgress"] p {font-size: 1.15rem !important;}
.st-key-live_panel [data-testid="stProgressBarTrack"], .st-key-live_panel [data-testid="stProgressBarTrack"] div
  {height: 1.1rem !important; border-radius: 0.3rem;}
</style>
"""


def base_url() -> str:
    """This server's address as the lecturer's browser sees it (st.context.url without the page)."""
    url = (st.context.url or "").split("?")[0].rstrip("/")
    page = st.session_state.get("_live_page", "")
    if page and url.endswith("/" + page):
        url = url[: -len(page) - 1]
    return url or "http://localhost:8501"


def join_base() -> tuple[str, str]:
    """The join link's base and where it came from ("public", "browser", "network", "loopback"):
    deploy.network.join_base over ATTN_LAB_PUBLIC_URL, the lecturer's browser address, and this
    machine's network address when the server listens beyond loopback. An ATTN_LAB_PUBLIC_URL that
    is not a URL is skipped (the card says why)."""
    try:
        public = network.public_url(os.environ.get(network.PUBLIC_URL_ENV))
    except ValueError:
        public = None
    address = _server_address()
    lan = network.network_address() if network.listens_beyond_loopback(address) else None
    return network.join_base(public=public, browser_url=base_url(), server_address=address,
                             port=int(st.get_option("server.port") or 8501), lan=lan)


def _server_address() -> str:
    """Where this server listens (Streamlit's server.address; empty: every interface)."""
    return str(st.get_option("server.address") or "")


def join_link(code: str) -> str:
    return f"{join_base()[0]}/?room={code}"


@functools.lru_cache(maxsize=64)
def qr_svg(text: str) -> str:
    """An offline QR code of `text` (segno, pure Python) as SVG: black on white (scannable in the
    dark theme too), error correction M. Made once per link (the lecturer's every run drew it again:
    ~7 % of a run)."""
    return segno.make(text, error="m", micro=False).svg_inline(scale=10, border=4, dark="#000000",
                                                                 light="#ffffff")


def render() -> None:
    """ui/sidebar.render's hook: the sidebar's "Live class" section, and at the top of the page the
    lecturer's join card and panel, or the student's banner and poll."""
    ls = _ls()
    with st.sidebar:
        _sidebar(ls)
    for kind, text in st.session_state.pop(NOTICES, []):
        getattr(st, kind)(text, icon=":material/groups:")
    if st.session_state.pop("_live_forget_cookie", False):
        _forget_lecturer_cookie()
    if ls is None:
        return
    _set_cookies(ls)
    if ls.role == "lecturer":
        st.html(CARD_CSS)  # static CSS only
        if st.session_state.get("live_show_card", True):
            _join_card(ls)
        _lecturer_panel()
    else:
        _banner(ls)
        if not ls.ended:
            # a follower whose lecturer is on this server, or whose room this server's watcher reads,
            # gets each change from the server at once (_rerun_followers): its own check is a
            # fallback, as for a student exploring alone
            fast = ls.following and not (lecturer_here(ls.code) or _watcher.running)
            (_student_watch if fast else _student_watch_slow)()


def _sidebar(ls: LiveSession | None) -> None:
    st.markdown("### :material/groups: Live class")
    if ls is None or (ls.role == "student" and ls.ended):
        st.button("Start a live class", key="live_start", on_click=_start, icon=":material/podium:",
                  help="Students follow your screen on their own devices: they join with the code, the link or "
                       "the QR code shown on the page.")
        with st.form("live_join_form", border=False, enter_to_submit=True):
            st.text_input("Join a class", key="live_join_code", placeholder="code, e.g. K7MWQ", max_chars=12)
            st.form_submit_button("Join", on_click=_join_typed, icon=":material/login:")
        return
    if ls.role == "lecturer":
        st.markdown(f"Room **{ls.code}** · you are the lecturer")
        st.session_state.setdefault("live_show_card", True)
        st.toggle("Show how to join", key="live_show_card")
        st.toggle("Lock the room", key="live_locked", on_change=_lock,
                  help="No new student may join; students already in stay, also after a reload.")
        _poll_builder(ls)
        st.button("End the class", key="live_end", on_click=_end, icon=":material/stop_circle:",
                  help="Students keep their last view and read that the class has ended.")
        box = st.expander("Lecturer link (private)", key="live_private", on_change="rerun", icon=":material/key:")
        with box:
            if box.open:
                st.caption("Opens your lecturer seat on another device or after a reload. Anyone with it drives the "
                           "class: never show it on the projector.")
                st.code(f"{base_url()}/?room={ls.code}&lecturer={ls.token}", language=None, wrap_lines=True)
        return
    st.markdown(f"Room **{ls.code}** · {'following the lecturer' if ls.following else 'exploring on your own'}")
    st.button("Leave the class", key="live_leave", on_click=_leave, icon=":material/logout:")


def _join_card(ls: LiveSession) -> None:
    base, source = join_base()
    link = f"{base}/?room={ls.code}"
    with st.container(border=True, key="live_card"):
        c1, c2 = st.columns([2, 3], gap="large", vertical_alignment="center")
        if source == "loopback":
            c1.warning("**This link works only on this computer**: the server listens on this computer's own "
                       "(loopback) address, so no phone can open it, and there is no QR code to scan. Stop the "
                       "server and start it with `make class`: phones on the same network can then join.",
                       icon=":material/wifi_off:")
        else:
            c1.image(qr_svg(link), width="stretch", caption="Scan to join")
        with c2:
            st.markdown("Join the class with the code")
            with st.container(key="live_code"):
                st.markdown(ls.code)  # a code from CODE_ALPHABET: projector-sized (CARD_CSS)
            st.markdown("or open")
            st.code(link, language=None, wrap_lines=True)
            st.caption("Any page of this server with ?room=" + ls.code + " joins too. Hide this card with "
                       "“Show how to join” in the sidebar.")
            try:
                network.public_url(os.environ.get(network.PUBLIC_URL_ENV))
            except ValueError as exc:
                st.caption(f"{md_escape(str(exc))}: it is not used.")


def _banner(ls: LiveSession) -> None:
    with st.container(key="live_banner", horizontal=True, vertical_alignment="center"):
        if ls.ended:
            st.info(f"The class has ended (room {ls.code}). You keep this view; the controls are yours.",
                    icon=":material/event_available:", width="stretch")
            st.button("Close", key="live_close_ended", on_click=_leave)
        elif ls.following:
            st.info(f"Following room {ls.code}: the page and its controls follow the lecturer.",
                    icon=":material/cast_for_education:", width="stretch")
            st.button("Explore on my own", key="live_explore", on_click=_explore, icon=":material/explore:")
        else:
            st.info(f"Exploring on your own (room {ls.code}): the lecturer's changes do not touch your view.",
                    icon=":material/explore:", width="stretch")
            st.button("Back to the lecturer", key="live_back", on_click=_back, icon=":material/cast_for_education:")
    if ls.unavailable:
        st.warning(_unavailable(ls.unavailable), icon=":material/cloud_off:")


@st.fragment(run_every=POLL_EVERY)
def _student_watch() -> None:
    """Every POLL_EVERY s: one read of the room's versions (and a check-in). A full rerun only when
    the lecturer's view changed (following) or the class ended; the poll is drawn here."""
    _watch()


@st.fragment(run_every=SLOW_POLL_EVERY)
def _student_watch_slow() -> None:
    """The same, less often: for a student exploring alone (only polls, presence and the class's
    end concern it), and for a follower whose lecturer is on this server (the server reruns its page
    at each change: _rerun_followers). Each check costs the server ~2 ms of Streamlit's own work,
    whatever it reads."""
    _watch()


def _watch() -> None:
    ls = _ls()
    if ls is None or ls.role != "student" or ls.ended:
        return
    try:
        rs = store().state(ls.code, seen=f"{_sid()}.{'f' if ls.following else 'e'}")
    except L.StoreUnavailable as exc:
        ls.unavailable = str(exc)
        st.warning(_unavailable(exc), icon=":material/cloud_off:")
        return
    if rs is None:
        st.warning(f"Room {ls.code} is not available right now (its server may have restarted): waiting for the "
                   "lecturer to reconnect. Everything else works as usual.", icon=":material/cloud_off:")
        return
    if ls.unavailable:
        ls.unavailable = ""
        if _fragment_rerun():
            st.rerun()  # the banner's warning goes
    if rs.status == "ended":
        _class_ended(ls)
        st.rerun()
    if ls.following:
        _register_follower(ls)
        if store().clock() - rs.lecturer_at > LECTURER_AWAY:
            st.info(AWAY_NOTICE, icon=":material/desktop_access_disabled:")
    if ls.following and rs.view_key != ls.applied and _fragment_rerun():
        st.rerun()  # a full run applies the lecturer's view (begin_run)
    if rs.poll_key != ls.poll_key:
        try:
            ls.poll, ls.poll_key = store().poll(ls.code), rs.poll_key
            if ls.poll is not None and st.session_state.get("_live_sid_restored"):
                # this browser answered before the page reconnected (a server restart): its answer
                # is in the store, under the same id; show it as sent
                mine = store().answers(ls.code, ls.poll.id).get(_sid())
                if mine is not None:
                    st.session_state.setdefault(f"live_answer_{ls.poll.id}__sent", mine.value)
        except L.StoreUnavailable:
            return
    if ls.poll is not None:
        _student_poll(ls.poll)


def _student_poll(poll: L.Poll) -> None:
    q = poll.question
    key = f"live_answer_{poll.id}"
    with st.container(border=True, key="live_student_poll"):
        st.markdown(f":material/how_to_vote: **Class poll** · {q.prompt}")
        sent = st.session_state.get(f"{key}__sent")
        if poll.state == "open":
            if q.kind == "choice":
                st.radio("Your answer", list(q.options), index=None, key=key,
                         format_func=lambda o: md_escape(L.option_words(o)),
                         on_change=_send_answer, args=(poll, key))
            else:
                st.number_input("Your answer", min_value=float(q.lo), max_value=float(q.hi), value=None,
                                step=float(q.step), key=key, format="%.2f" if q.step < 1 else "%.0f",
                                on_change=_send_answer, args=(poll, key), placeholder="type a number")
            st.text_input("Nickname (optional)", key="live_nick", max_chars=L.poll.MAX_NICKNAME,
                          placeholder="leave empty to stay anonymous")
            err = st.session_state.get(f"{key}__err")
            if err:
                st.warning(err)
            elif sent is not None:
                st.caption(f"Your answer is in: {md_escape(L.option_words(q.shown(sent)))}. You can change it until "
                           "the poll closes.")
        elif poll.state == "closed":
            mine = f"; your answer: {md_escape(L.option_words(q.shown(sent)))}." if sent is not None else None
            st.caption("The poll is closed" + (mine or ". The lecturer reveals the answer next."))
        else:
            right = md_escape(L.option_words(q.shown(q.answer)))
            if sent is None:
                st.info(f"The answer: **{right}**. {q.explanation}", icon=":material/lightbulb:")
            elif q.check(sent):
                st.success(f"Right: **{right}**. {q.explanation}", icon=":material/check_circle:")
            else:
                st.error(f"You said {md_escape(L.option_words(q.shown(sent)))}; the answer is **{right}**. "
                         f"{q.explanation}",
                         icon=":material/cancel:")


@st.fragment(run_every=POLL_EVERY)
def _lecturer_panel() -> None:
    """The lecturer's live numbers: students connected now, the poll's count and histogram."""
    ls = _ls()
    if ls is None or ls.role != "lecturer":
        return
    s = store()
    try:
        rs = s.state(ls.code, seen=L.rooms.LECTURER_SEEN)
        if rs is None:
            _restore(ls)
            rs = s.state(ls.code, seen=L.rooms.LECTURER_SEEN)
        elif rs.status == "ended":
            st.session_state.pop(SS, None)
            st.rerun()
        _lecturer_is_here(ls.code)
        now = time.time()
        if now - ls.last_keepalive > KEEPALIVE_EVERY:
            s.keepalive(ls.code, ls.hash)
            ls.last_keepalive = now
        if ls.published is None or (rs is not None and rs.epoch != ls.epoch):
            _publish(ls, force=True)
        following, exploring = roster(s.seen_by(ls.code))
        answers = s.answers(ls.code, ls.poll.id) if ls.poll is not None else {}
        ls.unavailable = ""
    except (L.StoreUnavailable, L.RoomGone, L.NotLecturer) as exc:
        ls.unavailable = str(exc)
        st.warning(_unavailable(exc), icon=":material/cloud_off:")
        return
    if ls.poll is not None and answers:
        ls.seen_answers = answers
    with st.container(border=True, key="live_panel"):
        st.markdown(f":material/groups: **Room {ls.code}**{' (locked)' if rs is not None and rs.locked else ''} · "
                    f"**{following}** following · **{exploring}** exploring")
        if ls.poll is not None:
            _poll_results(ls, ls.poll, list(answers.values()))


def roster(seen: dict[str, float]) -> tuple[int, int]:
    """(following, exploring) from the room's check-ins of the last PRESENCE_WINDOW seconds: each
    student's key is "<id>.f" (following) or "<id>.e" (exploring); a student who switched counts
    once, by its latest check-in; the lecturer's own check-ins are not counted."""
    latest: dict[str, tuple[float, str]] = {}
    for key, t in seen.items():
        sid, _, how = key.rpartition(".")
        if sid and how in ("f", "e") and t >= latest.get(sid, (-1.0, ""))[0]:
            latest[sid] = (t, how)
    hows = [how for _, how in latest.values()]
    return hows.count("f"), hows.count("e")


def poll_bars_html(question: L.PollQuestion, tally: L.Tally, revealed: bool) -> str:
    """The poll's results as compact HTML rows (fit a 1280x720 projector with 12 options): the
    option in words, a horizontal bar, its count and percentage of all answers. After Reveal the
    right option's bar is green and marked "right" in words; the others stay blue. Every label is
    HTML-escaped (token text is user text)."""
    rows = []
    for label, count in tally.bars:
        right = revealed and question.check(label if question.kind == "choice" else _num(label))
        pct = 100.0 * count / tally.n if tally.n else 0.0
        words = html.escape(L.option_words(label) if question.kind == "choice" else label)
        rows.append(f'<div class="poll-row{" poll-right" if right else ""}"><span class="poll-label">{words}'
                    f'{" <b>✓ right</b>" if right else ""}</span><span class="poll-track"><span class="poll-fill" '
                    f'style="width: {pct:.1f}%"></span></span><span class="poll-num">{count} · {pct:.0f}%</span></div>')
    return POLL_CSS + '<div class="poll-bars">' + "".join(rows) + "</div>"


def _poll_results(ls: LiveSession, poll: L.Poll, answers: list) -> None:
    q = poll.question
    t = L.tally(q, answers)
    revealed = poll.state == "revealed"
    left, right = st.columns([2, 3], gap="medium")
    with right:
        st.html(poll_bars_html(q, t, revealed))
    with left:
        st.markdown(f":material/how_to_vote: **Class poll** · {q.prompt}")
        st.caption(f"{t.n} answer{'s' if t.n != 1 else ''} · {poll.state} · from {md_escape(q.source)}")
        if revealed:
            st.success(f"The answer: **{md_escape(L.option_words(q.shown(q.answer)))}** ({t.right} of {t.n} right). "
                       f"{q.explanation}", icon=":material/lightbulb:")
        _poll_buttons(ls, poll, answers)


def _poll_buttons(ls: LiveSession, poll: L.Poll, answers: list) -> None:
    with st.container(horizontal=True):
        if poll.state == "open":
            st.button("Close the poll", key="live_poll_close", on_click=_poll_state, args=("closed",),
                      icon=":material/lock:")
        if poll.state != "revealed":
            st.button("Reveal", key="live_poll_reveal", on_click=_poll_state, args=("revealed",),
                      icon=":material/visibility:", type="primary")
        st.button("Remove the poll", key="live_poll_remove", on_click=_set_poll, args=(None,),
                  icon=":material/delete:")
        st.download_button("Results (CSV)", data=lambda: L.poll_csv(poll, answers), mime="text/csv",
                           file_name=f"poll-{ls.code}-{poll.id}.csv", key="live_poll_csv", on_click="ignore",
                           icon=":material/download:")


def _num(label: str):
    try:
        return float(label)
    except ValueError:
        return None


def _poll_builder(ls: LiveSession) -> None:
    """The lecturer picks a question: one built from the current view, or a lesson question, both
    answered with the engine's numbers for the current sentence. Computed only while open."""
    box = st.expander("New class poll", key="live_poll_box", on_change="rerun", icon=":material/how_to_vote:")
    with box:
        if not box.open:
            return
        s = st.session_state
        if not str(s.get("text", "")).strip():
            st.caption("Type a sentence first: the questions are about it.")
            return
        run = current_run(notices=False)
        H, T, n_layers = run.cfg.n_heads, run.T, run.cfg.n_layers
        layer = min(max(int(s.get("layer", 0)), 0), n_layers - 1)
        head = min(max(int(s.get("head", 0)), 0), H - 1)
        focused = str(s.get("focus") or "")  # the focused head (ui/focus.py), when the lecturer points at one
        if focused.count(".") == 1 and all(p.isdigit() for p in focused.split(".")):
            fl, fh = (int(p) for p in focused.split("."))
            if fl < n_layers and fh < H:
                layer, head = fl, fh
        questions: list[tuple[str, L.PollQuestion | None]] = [(f"Which token does … attend to most? (layer {layer}, "
                                                               f"head {head}: the current view)", None)]
        lh = min(max(int(s.get("lesson_head", 0)), 0), H - 1)
        lq = s.get("lesson_query")
        lq = T - 1 if lq is None or not 0 <= int(lq) < T else int(lq)
        for n, step in enumerate(build_lesson(run.trace, run.labels, n_heads=H, causal=run.causal, norm=run.cfg.norm,
                                              head=lh, query=lq), 1):
            for q in step.questions:
                short = L.poll._plain(q.prompt)
                short = short if len(short) <= 90 else short[:89] + "…"
                questions.append((f"Lesson step {n}: {short}", L.from_lesson(q, f"step {n}, {step.title}")))
        share = _head_share_poll()
        if share is not None:
            questions.append((f"Why this token? {L.poll._plain(share.prompt)}", share))
        i = st.selectbox("Question", range(len(questions)), key="live_q_pick",
                         format_func=lambda i: questions[i][0])
        pq = questions[i][1]
        if pq is None:
            query = st.selectbox("Query token", list(range(T)), index=T - 1, key="live_q_query",
                                 format_func=lambda j: token_label(j, run.labels[j], sep=": "))
            try:
                pq = L.attention_question(run.trace.layers[layer].attn.weights[0, head], run.labels, layer=layer,
                                          head=head, query=int(query),
                                          allowed=_allowed_2d(layer_allowed(run, layer), head))
            except ValueError as exc:
                st.caption(str(exc))
                return
        st.markdown(pq.prompt)
        st.button("Open the poll", key="live_poll_open", on_click=_open_poll, args=(pq,), type="primary",
                  icon=":material/campaign:")


def _head_share_poll() -> L.PollQuestion | None:
    """"Which head writes most of *X*?" for the current sentence, X the model's prediction (its
    top next token): the Why this token? page's direct logit attribution. None for a model
    without shares (no output layer, a BERT masked-LM head: the page says why)."""
    from classroom.lesson import head_share_question

    from . import attribution as A
    from .models import current_source, get_model

    source = current_source()
    if A.why_not(source) is not None:
        return None
    text = str(st.session_state.get("text", ""))
    try:
        cand, _ = A.top_candidates(A.prompt_run(source, text), 1)
        _, tok = get_model(source)
        word = tok.decode([cand[0]]).strip() or str(cand[0])
        q = head_share_question(A.shares(source, text, cand[0]).heads, word)
    except ValueError:
        return None
    return L.from_lesson(q, "Why this token?")


def _allowed_2d(allowed, head: int):
    a = np.asarray(allowed, dtype=bool)
    return a[head] if a.ndim == 3 else a


# state.sync_url calls this after every sync (registered once, also if this module is reloaded)
state.AFTER_SYNC[:] = [h for h in state.AFTER_SYNC if getattr(h, "__module__", "") != __name__] + [after_sync]
