"""The default backend of the room store: SQLite (standard library), one file on disk.

The file lives under the data folder (ATTN_LAB_DATA_DIR, default ~/.local/share/attention-lab) as
rooms.sqlite3, or wherever ROOM_STORE=sqlite:///path/to/file names. WAL mode, so several server
processes on one machine read while one writes, and a busy_timeout, so a writer waits for another
instead of failing. Every write of a room (and every answer) is one `BEGIN IMMEDIATE` transaction:
the lecturer-token check and the write are one atomic step, whichever process sends them. A room,
its poll and every answer are on disk when the call returns, so they survive a server restart
(even `kill -9`: WAL with synchronous=NORMAL loses nothing a process crash can reach; only a power
cut may lose the last transactions).

Connections are pooled: a call takes an idle connection (or opens one), runs its transaction and
gives it back (at most POOL_IDLE kept idle). One connection serves one call at a time, whichever
thread makes it. Streamlit runs each script run (each follower's check too) in a thread of its own:
with one connection per thread every check opened a new one (connect, WAL and busy pragmas: ~0.6 ms
of the server's CPU against ~0.04 ms for the check itself). The schema carries a version (table schema_version): a file
written by a newer schema is refused with a message, never read wrongly.

Tables:
  rooms(code, token, status, epoch, view, view_v, poll, poll_id, poll_state, poll_v, expires)
  answers(code, session, poll_id, client, answer)      one row per session and room
  seen(code, session, at)                              presence check-ins
  hits(key, at)                                        the per-client limits (rooms started, wrong codes)
"""
from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
from pathlib import Path

from .poll import Answer, Poll
from .rooms import (LECTURER_SEEN, PRESENCE_KEEP, PRESENCE_WINDOW, NotLecturer, RoomGone, RoomState, RoomStore, StoreFull,
                    StoreUnavailable, View, same_hash)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5000
POOL_IDLE = 8  # idle connections kept for the next calls (more calls at once open more, closed on return)
FILE_NAME = "rooms.sqlite3"
HITS_KEEP = 3600.0  # seconds: no limit looks further back

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rooms (
    code TEXT PRIMARY KEY, token TEXT NOT NULL, status TEXT NOT NULL, epoch TEXT NOT NULL,
    view TEXT, view_v INTEGER NOT NULL DEFAULT 0, poll TEXT, poll_id TEXT, poll_state TEXT,
    poll_v INTEGER NOT NULL DEFAULT 0, locked INTEGER NOT NULL DEFAULT 0, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS rooms_expires ON rooms (expires);
CREATE TABLE IF NOT EXISTS answers (
    code TEXT NOT NULL, session TEXT NOT NULL, poll_id TEXT NOT NULL, client TEXT NOT NULL DEFAULT '',
    answer TEXT NOT NULL, PRIMARY KEY (code, session));
CREATE INDEX IF NOT EXISTS answers_client ON answers (code, poll_id, client);
CREATE TABLE IF NOT EXISTS seen (code TEXT NOT NULL, session TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (code, session));
CREATE INDEX IF NOT EXISTS seen_at ON seen (code, at);
CREATE TABLE IF NOT EXISTS hits (key TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS hits_key ON hits (key, at);
"""


def default_data_dir() -> Path:
    """ATTN_LAB_DATA_DIR, else $XDG_DATA_HOME/attention-lab, else ~/.local/share/attention-lab."""
    d = os.environ.get("ATTN_LAB_DATA_DIR", "").strip()
    if d:
        return Path(d).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "attention-lab"


def default_path() -> Path:
    return default_data_dir() / FILE_NAME


class SQLiteStore(RoomStore):
    def __init__(self, path: str | os.PathLike | None = None, **kw):
        super().__init__(**kw)
        self.path = Path(path) if path else default_path()
        self._idle: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._migrated = False
        self._migrate_lock = threading.Lock()
        self._release(self._open())  # create the file and schema now: a folder that cannot be written says so at once

    # -- connections ---------------------------------------------------------------------------
    def _acquire(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        return self._open()

    def _release(self, con: sqlite3.Connection) -> None:
        with self._pool_lock:
            if len(self._idle) < POOL_IDLE:
                self._idle.append(con)
                return
        con.close()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                  check_same_thread=False)  # one call at a time, from any thread
            con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"the file system does not allow WAL mode (got {mode})")
            con.execute("PRAGMA synchronous = NORMAL")
            with self._migrate_lock:  # once per store (Streamlit runs each script run in a new thread)
                if not self._migrated:
                    self._migrate(con)
                    self._migrated = True
        except (sqlite3.Error, OSError) as exc:
            self._debug(exc)
            raise StoreUnavailable(f"the room store ({self._where()}) cannot be opened: {exc}") from exc
        return con

    def _migrate(self, con: sqlite3.Connection) -> None:
        con.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    con.execute(stmt)
            row = con.execute("SELECT max(version) FROM schema_version").fetchone()
            have = row[0]
            if have is None:
                con.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif have > SCHEMA_VERSION:
                raise sqlite3.OperationalError(
                    f"{self.path} was written by a newer Attention Lab (schema {have}, this one reads "
                    f"{SCHEMA_VERSION}): update the app, or point ATTN_LAB_DATA_DIR at another folder")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def _where(self) -> str:
        return f"sqlite file {self.path}"

    def _tx(self, fn, *, write: bool):
        """Run fn(con) in one transaction (BEGIN IMMEDIATE for writes: the write lock is taken at
        once, so a check and its write are one step). sqlite3 errors become StoreUnavailable."""
        con = self._acquire()
        try:
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                out = fn(con)
                con.execute("COMMIT")
            except BaseException:
                con = self._rollback(con)
                raise
            return out
        except sqlite3.Error as exc:
            self._debug(exc)
            raise StoreUnavailable(f"the room store ({self._where()}) answered with an error: {exc}") from exc
        finally:
            if con is not None:
                self._release(con)

    def _rollback(self, con: sqlite3.Connection) -> sqlite3.Connection | None:
        """End a failed transaction (a COMMIT that found the file busy leaves it open: the next BEGIN
        on this connection would fail for ever): the connection, or None when it cannot (closed and
        dropped, not given back to the pool)."""
        try:
            if con.in_transaction:
                con.execute("ROLLBACK")
            return con
        except sqlite3.Error:
            try:
                con.close()
            except sqlite3.Error:
                pass
            return None

    @staticmethod
    def _debug(exc) -> None:
        p = os.environ.get("ATTN_LAB_SQLITE_DEBUG")
        if p:
            import traceback
            with open(p, "a") as f:
                f.write(f"{os.getpid()} {threading.current_thread().name}: {exc!r}\n{traceback.format_exc()}\n")

    def _room(self, con, code: str, now: float):
        return con.execute("SELECT token, status, epoch, view, view_v, poll, poll_id, poll_state, poll_v, locked "
                           "FROM rooms WHERE code = ? AND expires > ?", (code, now)).fetchone()

    def _drop(self, con, code: str) -> None:
        for t in ("rooms", "answers", "seen"):
            con.execute(f"DELETE FROM {t} WHERE code = ?", (code,))

    def _sweep(self, con, now: float) -> None:
        for (code,) in con.execute("SELECT code FROM rooms WHERE expires <= ?", (now,)).fetchall():
            self._drop(con, code)

    # -- lecturer ----------------------------------------------------------------------------
    def create(self, code, token_hash, *, epoch=None, view=None, poll=None, answers=None):
        now = self.clock()
        vj = view.to_json() if view is not None else None
        epoch = epoch or secrets.token_hex(4)

        def go(con):
            if self._room(con, code, now) is not None:
                return None
            self._drop(con, code)  # an expired room of the same code
            n = con.execute("SELECT count(*) FROM rooms WHERE expires > ?", (now,)).fetchone()[0]
            if n >= self.max_rooms:
                self._sweep(con, now)
                raise StoreFull(f"{self.max_rooms} rooms are open")
            con.execute("INSERT INTO rooms (code, token, status, epoch, view, view_v, poll, poll_id, poll_state, "
                        "poll_v, expires) VALUES (?, ?, 'open', ?, ?, ?, ?, ?, ?, ?, ?)",
                        (code, token_hash, epoch, vj, 1 if view is not None else 0,
                         json.dumps(poll.to_dict()) if poll else None, poll.id if poll else None,
                         poll.state if poll else None, 1 if poll else 0, now + self.ttl))
            if poll is not None and answers:
                rows = [(code, s, poll.id, "", json.dumps(a.to_dict()))
                        for s, a in list(answers.items())[: self.max_answers] if a.poll_id == poll.id]
                con.executemany("INSERT INTO answers (code, session, poll_id, client, answer) VALUES (?, ?, ?, ?, ?)",
                                rows)
            return RoomState(code, "open", epoch, 1 if view is not None else 0, 1 if poll else 0)

        return self._tx(go, write=True)

    def _lecturer(self, con, code, token_hash, now):
        r = self._room(con, code, now)
        if r is None:
            raise RoomGone(code)
        if not same_hash(r[0], token_hash) or r[1] != "open":
            raise NotLecturer(code)
        return r

    def publish(self, code, token_hash, view):
        vj = view.to_json()

        def go(con):
            now = self.clock()
            r = self._lecturer(con, code, token_hash, now)
            con.execute("UPDATE rooms SET view = ?, view_v = ?, expires = ? WHERE code = ?",
                        (vj, r[4] + 1, now + self.ttl, code))
            return r[4] + 1

        return self._tx(go, write=True)

    def set_poll(self, code, token_hash, poll):
        def go(con):
            now = self.clock()
            r = self._lecturer(con, code, token_hash, now)
            if poll is None or r[6] != poll.id:
                con.execute("DELETE FROM answers WHERE code = ?", (code,))
            con.execute("UPDATE rooms SET poll = ?, poll_id = ?, poll_state = ?, poll_v = ?, expires = ? "
                        "WHERE code = ?", (json.dumps(poll.to_dict()) if poll else None, poll.id if poll else None,
                                           poll.state if poll else None, r[8] + 1, now + self.ttl, code))
            return r[8] + 1

        return self._tx(go, write=True)

    def end(self, code, token_hash):
        def go(con):
            now = self.clock()
            r = self._lecturer(con, code, token_hash, now)
            con.execute("UPDATE rooms SET status = 'ended', poll_v = ?, expires = ? WHERE code = ?",
                        (r[8] + 1, now + self.ended_ttl, code))

        self._tx(go, write=True)

    def keepalive(self, code, token_hash):
        def go(con):
            now = self.clock()
            self._lecturer(con, code, token_hash, now)
            con.execute("UPDATE rooms SET expires = ? WHERE code = ?", (now + self.ttl, code))

        self._tx(go, write=True)

    def set_locked(self, code, token_hash, locked):
        def go(con):
            now = self.clock()
            self._lecturer(con, code, token_hash, now)
            con.execute("UPDATE rooms SET locked = ?, expires = ? WHERE code = ?", (int(bool(locked)), now + self.ttl, code))

        self._tx(go, write=True)

    def seen_by(self, code, window=PRESENCE_WINDOW):
        now = self.clock()
        rows = self._tx(lambda con: con.execute(
            "SELECT s.session, s.at FROM seen s JOIN rooms r ON r.code = s.code "
            "WHERE s.code = ? AND s.at >= ? AND r.expires > ?", (code, now - window, now)).fetchall(), write=False)
        return dict(rows)

    def is_lecturer(self, code, token_hash):
        r = self._tx(lambda con: self._room(con, code, self.clock()), write=False)
        return r is not None and r[1] == "open" and same_hash(r[0], token_hash)

    # -- everyone ----------------------------------------------------------------------------
    def state(self, code, *, seen=None):
        now = self.clock()

        def go(con):
            r = self._room(con, code, now)
            if r is None:
                return None
            if seen:
                con.execute("INSERT INTO seen (code, session, at) VALUES (?, ?, ?) "
                            "ON CONFLICT (code, session) DO UPDATE SET at = excluded.at", (code, seen, now))
                con.execute("DELETE FROM seen WHERE code = ? AND at < ?", (code, now - PRESENCE_KEEP))
                n = con.execute("SELECT count(*) FROM seen WHERE code = ?", (code,)).fetchone()[0]
                if n > self.max_present:
                    con.execute("DELETE FROM seen WHERE code = ? AND session IN (SELECT session FROM seen "
                                "WHERE code = ? ORDER BY at LIMIT ?)", (code, code, n - self.max_present))
            lec = con.execute("SELECT at FROM seen WHERE code = ? AND session = ?", (code, LECTURER_SEEN)).fetchone()
            return RoomState(code, r[1], r[2], r[4], r[8], bool(r[9]), lec[0] if lec else 0.0)

        return self._tx(go, write=bool(seen))

    def view(self, code):
        r = self._tx(lambda con: self._room(con, code, self.clock()), write=False)
        if r is None:
            return None
        return RoomState(code, r[1], r[2], r[4], r[8]), View.from_json(r[3])

    def poll(self, code):
        r = self._tx(lambda con: self._room(con, code, self.clock()), write=False)
        return Poll.from_dict(json.loads(r[5])) if r is not None and r[5] else None

    def answer_status(self, code, poll_id, session, answer, *, client="", max_per_client=None):
        if answer.poll_id != poll_id:
            return "closed"
        aj = json.dumps(answer.to_dict())

        def go(con):
            r = self._room(con, code, self.clock())
            if r is None or r[1] != "open" or r[6] != poll_id or r[7] != "open":
                return "closed"
            had = con.execute("SELECT 1 FROM answers WHERE code = ? AND session = ? AND poll_id = ?",
                              (code, session, poll_id)).fetchone()
            if had is None:
                if con.execute("SELECT count(*) FROM answers WHERE code = ? AND poll_id = ?",
                               (code, poll_id)).fetchone()[0] >= self.max_answers:
                    return "full"
                if max_per_client is not None and con.execute(
                        "SELECT count(*) FROM answers WHERE code = ? AND poll_id = ? AND client = ?",
                        (code, poll_id, client)).fetchone()[0] >= max_per_client:
                    return "client"
            con.execute("INSERT INTO answers (code, session, poll_id, client, answer) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (code, session) DO UPDATE SET poll_id = excluded.poll_id, "
                        "answer = excluded.answer" + ("" if had else ", client = excluded.client"),
                        (code, session, poll_id, client, aj))
            return "ok"

        return self._tx(go, write=True)

    def answers(self, code, poll_id):
        rows = self._tx(lambda con: con.execute(
            "SELECT a.session, a.answer FROM answers a JOIN rooms r ON r.code = a.code "
            "WHERE a.code = ? AND a.poll_id = ? AND r.expires > ?", (code, poll_id, self.clock())).fetchall(),
            write=False)
        return {s: Answer.from_dict(json.loads(a)) for s, a in rows}

    def present(self, code, window=PRESENCE_WINDOW):
        now = self.clock()
        return int(self._tx(lambda con: con.execute(
            "SELECT count(*) FROM seen s JOIN rooms r ON r.code = s.code "
            "WHERE s.code = ? AND s.at >= ? AND r.expires > ?", (code, now - window, now)).fetchone()[0],
            write=False))

    def rooms(self):
        def go(con):
            now = self.clock()
            self._sweep(con, now)
            return con.execute("SELECT count(*) FROM rooms").fetchone()[0]

        return int(self._tx(go, write=True))

    # -- per-client limits -----------------------------------------------------------------------
    def hit(self, key, limit, window, *, record=True):
        def go(con):
            now = self.clock()
            con.execute("DELETE FROM hits WHERE key = ? AND at <= ?", (key, now - window))
            con.execute("DELETE FROM hits WHERE at <= ?", (now - HITS_KEEP,))  # other clients' old hits
            if con.execute("SELECT count(*) FROM hits WHERE key = ?", (key,)).fetchone()[0] >= limit:
                oldest = con.execute("SELECT min(at) FROM hits WHERE key = ?", (key,)).fetchone()[0]
                return max(0.001, oldest + window - now)
            if record:
                con.execute("INSERT INTO hits (key, at) VALUES (?, ?)", (key, now))
            return 0.0

        return float(self._tx(go, write=True))

    def close(self):
        """Close the idle connections (one in use closes when its call gives it back: the pool is
        then empty, and at most POOL_IDLE are kept again)."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for con in idle:
            try:
                con.close()
            except sqlite3.Error:
                pass
