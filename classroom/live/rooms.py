"""Rooms of a live class: codes, lecturer tokens, the shared view, and the room store interface with
its in-process backend (the Redis backend is classroom/live/redis_store.py).

A room holds what a lecturer shares with the class:
- its status ("open" or "ended") and an `epoch` (new at every (re)creation, so a room restored after
  the store lost it is never mistaken for the old one);
- the lecturer's view: the page (its URL path) and the query parameters of the lecturer's own link,
  with a version that grows at every change;
- the current poll (classroom/live/poll.py) with its own version, and the answers to it (one per
  student session: a later answer replaces the earlier one);
- presence: when each session last checked in (students "connected now" = seen in the last 10 s).

Only the holder of the lecturer token drives a room: every write that changes the view, the poll or
the status takes the token's hash and the store checks it in the same atomic step as the write.
Students can only read, check in and answer the open poll. The store keeps sha256(token), never the
token. Nothing grows without bound: rooms expire after `ttl` seconds without a lecturer's write or
keep-alive, ended rooms after `ended_ttl`; at most `max_rooms` rooms, `max_answers` answers per poll,
`max_present` presence entries per room (older ones are pruned first), views of at most
MAX_VIEW_BYTES.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Mapping

from .poll import Answer, Poll

# Codes: 5 characters from an alphabet without look-alikes (no 0/O, 1/I/L); 31^5 = 28.6 million.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 5
CODE_LENGTHS = (4, 5, 6)  # what a typed code may have (the 4-6; new rooms get CODE_LENGTH)
PRESENCE_WINDOW = 10.0  # seconds: "connected now"
PRESENCE_KEEP = 60.0  # seconds: older check-ins are pruned
LECTURER_SEEN = "lecturer"  # the presence key of the lecturer's check-ins (student keys are hex ids)
DEFAULT_TTL = 4 * 3600.0  # an idle room (no lecturer activity) expires after 4 hours
ENDED_TTL = 3600.0  # an ended room is remembered for an hour (late joiners read "has ended")
MAX_ROOMS = 1000
MAX_ANSWERS = 2000
MAX_PRESENT = 5000
MAX_VIEW_BYTES = 16 * 1024


class StoreUnavailable(RuntimeError):
    """The room store does not answer (Redis down or restarting). The app goes on without the
    live class and says so."""


class NotLecturer(PermissionError):
    """A write that needs the lecturer token came without it (or the room has ended)."""


class RoomGone(LookupError):
    """The room does not exist (never did, expired, or the store lost it)."""


class StoreFull(RuntimeError):
    """max_rooms rooms are open: no new room until some expire."""


def new_code(rng: secrets.SystemRandom | None = None, length: int = CODE_LENGTH) -> str:
    r = rng or secrets.SystemRandom()
    return "".join(r.choice(CODE_ALPHABET) for _ in range(length))


def normalize_code(raw) -> str | None:
    """A typed or linked code as stored (upper case; spaces and dashes dropped), or None when it
    cannot be a code (wrong length or a character outside the alphabet)."""
    s = "".join(str(raw or "").split()).replace("-", "").upper()
    if len(s) not in CODE_LENGTHS or any(c not in CODE_ALPHABET for c in s):
        return None
    return s


def new_token() -> str:
    """The lecturer's secret (32 random bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(str(token).encode()).hexdigest()


def same_hash(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(str(a), str(b))


@dataclass(frozen=True)
class View:
    """What a follower's page shows: the page's URL path ("" is the app's default page) and the
    query parameters of the lecturer's link (sorted (key, value) pairs)."""
    page: str
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, page: str, params: Mapping[str, str]) -> "View":
        return cls(str(page), tuple(sorted((str(k), str(v)) for k, v in params.items())))

    def to_json(self) -> str:
        s = json.dumps({"page": self.page, "params": dict(self.params)}, sort_keys=True, separators=(",", ":"))
        if len(s.encode()) > MAX_VIEW_BYTES:
            raise ValueError(f"a view may take at most {MAX_VIEW_BYTES} bytes")
        return s

    @classmethod
    def from_json(cls, s: str | None) -> "View | None":
        if not s:
            return None
        d = json.loads(s)
        return cls.of(d["page"], d["params"])


@dataclass(frozen=True)
class RoomState:
    """What a follower checks every second: cheap to read."""
    code: str
    status: str  # "open" | "ended"
    epoch: str
    view_version: int
    poll_version: int
    # read by state() only (view() leaves the defaults); not part of equality
    locked: bool = field(default=False, compare=False)  # the lecturer refuses new students
    lecturer_at: float = field(default=0.0, compare=False)  # the lecturer's last check-in (0: never)

    @property
    def view_key(self) -> tuple[str, int]:
        return (self.epoch, self.view_version)

    @property
    def poll_key(self) -> tuple[str, int]:
        return (self.epoch, self.poll_version)


class RoomStore(ABC):
    """The one interface of the room store. Every method may raise StoreUnavailable."""

    def __init__(self, *, ttl: float = DEFAULT_TTL, ended_ttl: float = ENDED_TTL, max_rooms: int = MAX_ROOMS,
                 max_answers: int = MAX_ANSWERS, max_present: int = MAX_PRESENT,
                 clock: Callable[[], float] = time.time):
        self.ttl, self.ended_ttl = float(ttl), float(ended_ttl)
        self.max_rooms, self.max_answers, self.max_present = int(max_rooms), int(max_answers), int(max_present)
        self.clock = clock

    # -- lecturer ----------------------------------------------------------------------------
    @abstractmethod
    def create(self, code: str, token_hash: str, *, epoch: str | None = None, view: View | None = None,
               poll: Poll | None = None, answers: Mapping[str, Answer] | None = None) -> RoomState | None:
        """A new open room (or one restored with its view, poll and answers after the store lost
        it). None when the code is taken; StoreFull when max_rooms rooms are open."""

    @abstractmethod
    def publish(self, code: str, token_hash: str, view: View) -> int:
        """Set the lecturer's view; returns the new view version. NotLecturer / RoomGone."""

    @abstractmethod
    def set_poll(self, code: str, token_hash: str, poll: Poll | None) -> int:
        """Open a new poll (a new id clears the answers), change its state, or remove it (None);
        returns the new poll version. NotLecturer / RoomGone."""

    @abstractmethod
    def end(self, code: str, token_hash: str) -> None:
        """End the class: the room is read-only and expires after ended_ttl."""

    @abstractmethod
    def keepalive(self, code: str, token_hash: str) -> None:
        """The lecturer is still there: the room's idle timer starts again."""

    @abstractmethod
    def is_lecturer(self, code: str, token_hash: str) -> bool: ...

    @abstractmethod
    def set_locked(self, code: str, token_hash: str, locked: bool) -> None:
        """Lock the room (no new students; those in stay) or open it again. NotLecturer / RoomGone."""

    @abstractmethod
    def seen_by(self, code: str, window: float = PRESENCE_WINDOW) -> dict[str, float]:
        """{presence key: last check-in time} of the check-ins within the last `window` seconds."""

    # -- everyone ----------------------------------------------------------------------------
    @abstractmethod
    def state(self, code: str, *, seen: str | None = None) -> RoomState | None:
        """The room's status and versions (None: no such room). `seen`: a session id checking in."""

    @abstractmethod
    def view(self, code: str) -> tuple[RoomState, View | None] | None: ...

    @abstractmethod
    def poll(self, code: str) -> Poll | None: ...

    def answer(self, code: str, poll_id: str, session: str, answer: Answer, *, client: str = "",
               max_per_client: int | None = None) -> bool:
        """Record a session's answer to the open poll `poll_id` (replacing its earlier one). False
        when that poll is not open (closed, replaced, the room ended) or max_answers sessions
        have answered already (answer_status says which)."""
        return self.answer_status(code, poll_id, session, answer, client=client,
                                  max_per_client=max_per_client) == "ok"

    @abstractmethod
    def answer_status(self, code: str, poll_id: str, session: str, answer: Answer, *, client: str = "",
                      max_per_client: int | None = None) -> str:
        """answer(), saying what happened: "ok" (recorded), "closed" (that poll is not open: closed,
        replaced, the room ended), "full" (max_answers sessions have answered) or "client" (a new
        session of `client`, which has max_per_client answers in this poll already). A session
        that has answered may always change its answer while the poll is open."""

    @abstractmethod
    def hit(self, key: str, limit: int, window: float, *, record: bool = True) -> float:
        """A sliding-window limit shared by every process of the store: 0.0 when fewer than `limit`
        hits of `key` fall within the last `window` seconds (and, with record, this one is counted),
        else the seconds until the oldest of them leaves the window (nothing recorded)."""

    @abstractmethod
    def answers(self, code: str, poll_id: str) -> dict[str, Answer]:
        """{session: answer} to poll `poll_id`."""

    @abstractmethod
    def present(self, code: str, window: float = PRESENCE_WINDOW) -> int:
        """Sessions that checked in within the last `window` seconds."""

    def rooms(self) -> int:
        """Rooms the store holds now (for tests and the memory bound)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class _Room:
    token_hash: str
    epoch: str
    status: str = "open"
    view: View | None = None
    view_version: int = 0
    poll: Poll | None = None
    poll_version: int = 0
    answers: dict[str, Answer] = field(default_factory=dict)
    locked: bool = False
    clients: dict[str, str] = field(default_factory=dict)  # session -> client address of its answer
    seen: dict[str, float] = field(default_factory=dict)
    expires: float = 0.0


class MemoryStore(RoomStore):
    """A test double (ROOM_STORE=memory): rooms in this process's memory, lost at a restart. The
    default is SQLiteStore (a file on disk); several machines use Redis (ROOM_STORE=redis://...)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._rooms: dict[str, _Room] = {}
        self._hits: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _get(self, code: str, now: float) -> _Room | None:
        r = self._rooms.get(code)
        if r is not None and r.expires <= now:
            del self._rooms[code]
            return None
        return r

    def _sweep(self, now: float) -> None:
        for code in [c for c, r in self._rooms.items() if r.expires <= now]:
            del self._rooms[code]

    def _lecturer(self, code: str, token_hash: str, now: float) -> _Room:
        r = self._get(code, now)
        if r is None:
            raise RoomGone(code)
        if not same_hash(r.token_hash, token_hash) or r.status != "open":
            raise NotLecturer(code)
        r.expires = now + self.ttl
        return r

    def create(self, code, token_hash, *, epoch=None, view=None, poll=None, answers=None):
        now = self.clock()
        if view is not None:
            view.to_json()  # size check
        with self._lock:
            if self._get(code, now) is not None:
                return None
            if len(self._rooms) >= self.max_rooms:
                self._sweep(now)
                if len(self._rooms) >= self.max_rooms:
                    raise StoreFull(f"{self.max_rooms} rooms are open")
            r = _Room(token_hash=token_hash, epoch=epoch or secrets.token_hex(4), view=view,
                      view_version=1 if view is not None else 0, poll=poll, poll_version=1 if poll else 0,
                      expires=now + self.ttl)
            if poll is not None and answers:
                r.answers = {s: a for s, a in list(answers.items())[: self.max_answers] if a.poll_id == poll.id}
            self._rooms[code] = r
            return RoomState(code, r.status, r.epoch, r.view_version, r.poll_version)

    def publish(self, code, token_hash, view):
        view.to_json()
        with self._lock:
            r = self._lecturer(code, token_hash, self.clock())
            r.view = view
            r.view_version += 1
            return r.view_version

    def set_poll(self, code, token_hash, poll):
        with self._lock:
            r = self._lecturer(code, token_hash, self.clock())
            if poll is None or r.poll is None or poll.id != r.poll.id:
                r.answers, r.clients = {}, {}
            r.poll = poll
            r.poll_version += 1
            return r.poll_version

    def end(self, code, token_hash):
        with self._lock:
            now = self.clock()
            r = self._lecturer(code, token_hash, now)
            r.status = "ended"
            r.poll_version += 1
            r.expires = now + self.ended_ttl

    def keepalive(self, code, token_hash):
        with self._lock:
            self._lecturer(code, token_hash, self.clock())

    def set_locked(self, code, token_hash, locked):
        with self._lock:
            self._lecturer(code, token_hash, self.clock()).locked = bool(locked)

    def seen_by(self, code, window=PRESENCE_WINDOW):
        with self._lock:
            now = self.clock()
            r = self._get(code, now)
            return {} if r is None else {s: t for s, t in r.seen.items() if t >= now - window}

    def is_lecturer(self, code, token_hash):
        with self._lock:
            r = self._get(code, self.clock())
            return r is not None and r.status == "open" and same_hash(r.token_hash, token_hash)

    def state(self, code, *, seen=None):
        with self._lock:
            now = self.clock()
            r = self._get(code, now)
            if r is None:
                return None
            if seen:
                r.seen.pop(seen, None)  # re-insert: the dict stays ordered oldest check-in first
                r.seen[seen] = now
                if len(r.seen) > self.max_present or next(iter(r.seen.values())) < now - PRESENCE_KEEP:
                    keep = [(s, t) for s, t in r.seen.items() if t >= now - PRESENCE_KEEP]
                    r.seen = dict(keep[-self.max_present:])
            return RoomState(code, r.status, r.epoch, r.view_version, r.poll_version, r.locked,
                             r.seen.get(LECTURER_SEEN, 0.0))

    def view(self, code):
        with self._lock:
            r = self._get(code, self.clock())
            if r is None:
                return None
            return RoomState(code, r.status, r.epoch, r.view_version, r.poll_version), r.view

    def poll(self, code):
        with self._lock:
            r = self._get(code, self.clock())
            return None if r is None else r.poll

    def answer_status(self, code, poll_id, session, answer, *, client="", max_per_client=None):
        with self._lock:
            r = self._get(code, self.clock())
            if r is None or r.status != "open" or r.poll is None or r.poll.id != poll_id or r.poll.state != "open":
                return "closed"
            if answer.poll_id != poll_id:
                return "closed"
            if session not in r.answers:
                if len(r.answers) >= self.max_answers:
                    return "full"
                if max_per_client is not None and \
                        sum(1 for c in r.clients.values() if c == client) >= max_per_client:
                    return "client"
                r.clients[session] = client
            r.answers[session] = answer
            return "ok"

    def hit(self, key, limit, window, *, record=True):
        with self._lock:
            now = self.clock()
            q = self._hits.setdefault(key, [])
            q[:] = [t for t in q if t > now - window]
            if len(q) >= limit:
                return max(0.001, q[0] + window - now)
            if record:
                q.append(now)
            if len(self._hits) > 10_000:  # bounded: forget keys with no recent hit
                self._hits = {k: v for k, v in self._hits.items() if v and v[-1] > now - 3600}
            return 0.0

    def answers(self, code, poll_id):
        with self._lock:
            r = self._get(code, self.clock())
            if r is None:
                return {}
            return {s: a for s, a in r.answers.items() if a.poll_id == poll_id}

    def present(self, code, window=PRESENCE_WINDOW):
        with self._lock:
            now = self.clock()
            r = self._get(code, now)
            return 0 if r is None else sum(1 for t in r.seen.values() if t >= now - window)

    def rooms(self):
        with self._lock:
            self._sweep(self.clock())
            return len(self._rooms)


class StoreMisconfigured(StoreUnavailable, ValueError):
    """ROOM_STORE names no store this app can use: the message says what is wrong and what to write."""


ROOM_STORE_FORMS = ("empty (the SQLite file under the data folder, ATTN_LAB_DATA_DIR)", "sqlite:///path/to/rooms.sqlite3",
                    "redis://host:port/db", "memory (a test double: lost at a restart)")


def open_store(url: str | None, **kw) -> RoomStore:
    """The store named by ROOM_STORE: empty/None -> SQLiteStore (rooms.sqlite3 under the data
    folder); sqlite:///path -> SQLiteStore at that path; redis://host:port/db (or rediss://,
    unix://) -> RedisStore; "memory" -> MemoryStore (a test double). StoreMisconfigured (a
    ValueError) says what is wrong with any other value."""
    url = (url or "").strip()
    forms = "; ".join(ROOM_STORE_FORMS)
    if url in ("memory", "memory://"):
        return MemoryStore(**kw)
    if url == "" or url.startswith("sqlite://"):
        from .sqlite_store import SQLiteStore
        path = url[len("sqlite://"):] if url else None
        if url and not path:
            raise StoreMisconfigured(f"ROOM_STORE={url!r} names no file: write sqlite:///path/to/rooms.sqlite3")
        return SQLiteStore(path, **kw)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from urllib.parse import urlsplit
        try:
            parts = urlsplit(url)
            port = parts.port  # ValueError for a port that is not a number (or out of range)
        except ValueError as exc:
            raise StoreMisconfigured(
                f"ROOM_STORE={url!r} is not a usable Redis address: the port must be a number from 1 to 65535 "
                f"(like redis://127.0.0.1:6379/0); Python's parser said: {exc}") from exc
        if not url.startswith("unix://"):
            if not parts.hostname:
                raise StoreMisconfigured(f"ROOM_STORE={url!r} names no Redis host: write redis://host:port/db, "
                                         "like redis://127.0.0.1:6379/0")
            db = parts.path.strip("/")
            if db and not db.isdigit():
                raise StoreMisconfigured(f"ROOM_STORE={url!r}: the Redis database after the port must be a number "
                                         f"(like redis://{parts.hostname}:{port or 6379}/0), not {db!r}")
        from .redis_store import RedisStore
        try:
            return RedisStore(url, **kw)
        except ValueError as exc:
            raise StoreMisconfigured(f"ROOM_STORE={url!r} is not a usable Redis address: {exc}") from exc
    raise StoreMisconfigured(f"ROOM_STORE={url!r} names no store this app knows. It may be {forms}.")
